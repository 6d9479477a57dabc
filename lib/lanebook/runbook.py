"""What a runbook notebook calls: a step model that checks each step's expected result.

A notebook stays thin: each step is a few lines calling the library, then `rb.expect(...)`. A failed
expectation raises StepFailed, which papermill records as the failing cell; the runner turns it into
verdict "fail" (any other exception is "error"). The last cell calls `rb.finish()`, which emits the
verdict and figures as a machine-readable output the runner reads back from the executed notebook.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Any, Optional

from .nodes import Lane
from .params import load_lane

VERDICT_MIME = "application/vnd.lanebook.verdict+json"


class StepFailed(Exception):
    """A step's expected result did not hold. The message starts with the step's name."""


def _display(obj: Any = None, markdown: Optional[str] = None, raw: Optional[dict] = None) -> None:
    try:
        from IPython.display import Markdown, display
    except ImportError:  # used outside a kernel (tests): print instead
        print(markdown or obj or raw)
        return
    if raw is not None:
        display(raw, raw=True)
    elif markdown is not None:
        display(Markdown(markdown))
    else:
        display(obj)


class Runbook:
    def __init__(self, name: str, lane: str, *, dry_run: bool = False, twin_fast: bool = True):
        self.name = name
        self.params = load_lane(lane)
        self.dry_run = dry_run
        self.figures: dict[str, Any] = {}
        self.checks: list[tuple[str, str, bool, str]] = []  # (step, what, ok, detail)
        self.current_step = "prerequisites"
        if self.params.twin and not dry_run:
            from .twin import control

            if not control.status()["running"]:
                control.up(faults=[], fast=twin_fast)
        self.lane = Lane(self.params, dry_run=dry_run)
        banner = []
        if self.params.twin:
            banner.append("**TWIN RUN** — this lane is the digital twin; every figure below is a twin figure, not a real lane's.")
        if dry_run:
            banner.append("**DRY RUN** — commands are recorded, not sent; no connection is opened.")
        _display(markdown=f"### {name} on lane `{self.params.name}`\n\n{self.params.description}\n\n" + "\n\n".join(banner))

    @contextmanager
    def step(self, title: str):
        """Mark the step the following checks belong to (the failed_step of the record)."""
        self.current_step = title
        yield self

    def expect(self, ok: bool, what: str, detail: Any = "", *, local: bool = False) -> None:
        """Check one expected result; on failure stop the run with the step named.

        local: the result was computed on this machine (lint, a lane file), so a dry run checks it for
        real; other results come from the lane, which a dry run does not observe.
        """
        detail = "" if detail is None else str(detail)
        observed = True
        if self.dry_run and not ok and not local:
            # A dry run sends nothing, so there is nothing to observe: say so instead of failing.
            ok, observed, detail = True, False, f"not observed in a dry run {detail}".strip()
        self.checks.append((self.current_step, what, bool(ok), detail))
        mark = "⏭️" if not observed else ("✅" if ok else "❌")
        _display(markdown=f"{mark} **{what}**" + (f" — {detail}" if detail else ""))
        if not ok:
            raise StepFailed(f"{self.current_step}: {what}" + (f" ({detail})" if detail else ""))

    def skip(self, what: str, why: str) -> None:
        """A step that has nothing to do this time (e.g. the lane is already up): shown and recorded, not failed."""
        self.checks.append((self.current_step, what, True, f"skipped: {why}"))
        _display(markdown=f"⏭️ **{what}** — skipped: {why}")

    def record(self, **figures: Any) -> None:
        """Figures that go into the run record (twin figures are labelled by the record's twin flag)."""
        self.figures.update(figures)

    def commands(self) -> list[str]:
        return self.lane.executor.commands()

    def show_commands(self) -> None:
        lines = self.commands()
        _display(markdown="```text\n" + ("\n".join(lines) if lines else "(no commands)") + "\n```")

    def finish(self) -> dict:
        verdict = {
            "runbook": self.name,
            "lane": self.params.name,
            "twin": self.params.twin,
            "dry_run": self.dry_run,
            "verdict": "pass" if all(ok for _, _, ok, _ in self.checks) else "fail",
            "checks": [{"step": s, "what": w, "ok": ok, "detail": d} for s, w, ok, d in self.checks],
            "figures": self.figures,
            "commands": self.commands() if self.dry_run else [],
        }
        _display(raw={VERDICT_MIME: verdict, "text/plain": json.dumps({"verdict": verdict["verdict"], "figures": self.figures})})
        self.lane.close()
        return verdict
