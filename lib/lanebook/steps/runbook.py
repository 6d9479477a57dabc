"""What a runbook notebook calls: a step model that checks each step's expected result.

A notebook stays thin: each step is a few lines calling the library, then `rb.expect(...)`. A failed expectation
raises StepFailed (verdict "fail", lanebook.runs.execute); a LanebookError in a step is that step's failure too;
any other exception is a bug (verdict "error"). `rb.finish()` in the last cell emits the verdict and figures for
lanebook.runs.execute to read back; a run that stops early emits them in the failing cell, keeping the figures
measured before it. A step's `fix=` (usually the repairing runbook) is shown under its failure and recorded.
A dry run sends nothing to the lane: what the lane would show is "not observed" and the verdict "dry-run", never
"pass"; checks made on this machine (lint, the lane file, parameters) are real and still fail it.
"""

from __future__ import annotations

import getpass
import json
import socket
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Iterable, Mapping, Optional, Union

from lanebook.base import frontend
from lanebook.base.checks import FAIL, MARKS, NOT_OBSERVED, NOT_OBSERVED_DRY_RUN, PASS, SKIPPED, WARNING, ExpectedResult
from lanebook.base.errors import LanebookError
from lanebook.lane.params import load_lane
from lanebook.lane.plugins import prepare_lane
from lanebook.nodes.ssh import LaneNodes

VERDICT_MIME = "application/vnd.lanebook.verdict+json"


class StepFailed(Exception):
    """A step's expected result did not hold. The message starts with the step's name."""


def verdict_of(checks: Iterable[ExpectedResult], dry_run: bool) -> str:
    """fail if any expected result failed; otherwise dry-run for a dry run (it observed nothing), else pass."""
    if any(c.outcome == FAIL for c in checks):
        return "fail"
    return "dry-run" if dry_run else "pass"


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
    def __init__(self, name: str, lane_name: str, *, dry_run: bool = False, confirm: Optional[bool] = None):
        self.name = name
        self.params = load_lane(lane_name)
        self.dry_run = dry_run
        # The notebook's `confirm` parameter: may destructive steps go ahead? None lets the lane's policy decide:
        # confirmed where its changes need no yes (policy.confirm_changes false, as `lanebook run` does), refused
        # elsewhere. Left unset in a JupyterLab that renders widgets, each destructive step asks with a button.
        self.confirm_parameter = confirm
        self.confirmed = not self.params.policy.confirm_changes if confirm is None else confirm
        self.confirmations: list[dict] = []
        self.figures: dict[str, Any] = {}
        self.checks: list[ExpectedResult] = []
        self.current_step = "prerequisites"
        self.current_fix: Optional[str] = None
        self.failure: Optional[dict] = None  # the failed step and what to do next, once a step failed
        if not dry_run:
            prepare_lane(self.params)  # e.g. the twin starts itself for a twin lane
        self.nodes = LaneNodes(self.params, dry_run=dry_run)
        banner = []
        if self.params.twin:
            banner.append(
                "**TWIN RUN** — this lane is the digital twin; every figure below is a twin figure, not a real lane's."
            )
        if dry_run:
            banner.append(
                "**DRY RUN** — commands are recorded, not sent; no connection is opened. Nothing on the lane is "
                "observed, so the verdict is `dry-run`, never pass; checks made on this machine still count."
            )
        _display(
            markdown=f"### {name} on lane `{self.params.name}`\n\n{self.params.description}\n\n" + "\n\n".join(banner)
        )

    @contextmanager
    def step(self, title: str, fix: Optional[str] = None):
        """Mark the step the following checks belong to (the failed_step of the record).

        fix: what the operator does when this step fails, naming the runbook that repairs it
        ("run `weights`, then launch again"). A LanebookError inside the step fails the step with its message.
        """
        self.current_step, self.current_fix = title, fix
        try:
            yield self
        except StepFailed:
            raise
        except LanebookError as exc:
            self._fail(ExpectedResult(title, "step completed", FAIL, str(exc), fix))
        except Exception:
            self._emit("error")  # a bug: the record still keeps what was measured before it
            raise

    def expect(
        self,
        result: Union[bool, ExpectedResult, Iterable[ExpectedResult]],
        *,
        what: Optional[str] = None,
        detail: Any = None,
        local: bool = False,
    ) -> None:
        """Record expected results in the current step; stop the run at the first that failed, naming the step.

        One form per call: an ExpectedResult the library judged, an iterable of them (gates, the warmup's, a
        log's), or a plain bool with `what=` naming what was expected and optionally `detail=` (what was seen)
        and `local=` (computed on this machine: lint, a lane file, parameters; a dry run checks it for real).
        A dry run observed nothing that is not local. A fail-open result that did not hold is a warning: the
        step failed, the lane did not. On a real run anything else that did not pass is a fail.
        """
        if isinstance(result, bool):
            if not isinstance(what, str) or not what:
                raise TypeError("rb.expect(ok, what=...): a bool needs what= naming what was expected")
            text = "" if detail is None else str(detail)
            results: list[ExpectedResult] = [
                ExpectedResult(self.current_step, what, PASS if result else FAIL, text, local=local)
            ]
        elif what is not None or detail is not None or local:
            raise TypeError(
                "rb.expect(result): what=, detail= and local= go with a plain bool only; an ExpectedResult "
                f"names its own (got {type(result).__name__})"
            )
        elif isinstance(result, ExpectedResult):
            results = [result]
        elif isinstance(result, Iterable) and not isinstance(result, (str, bytes, Mapping)):
            results = list(result)
            wrong = [type(r).__name__ for r in results if not isinstance(r, ExpectedResult)]
            if wrong:
                raise TypeError(f"rb.expect(results): every item must be an ExpectedResult, got {', '.join(wrong)}")
        else:
            raise TypeError(
                "rb.expect takes an ExpectedResult, an iterable of them, or a bool with what=; "
                f"got {type(result).__name__}"
            )
        for one in results:
            self._judge(one)

    def _judge(self, result: ExpectedResult) -> None:
        if self.dry_run and not result.local:
            outcome, detail = NOT_OBSERVED, NOT_OBSERVED_DRY_RUN
        elif result.ok:
            outcome, detail = PASS, result.detail
        else:
            outcome, detail = WARNING if result.fail_open and result.outcome == FAIL else FAIL, result.detail
        recorded = replace(result, step=self.current_step, outcome=outcome, detail=detail, fix=self.current_fix)
        if outcome == FAIL:
            self._fail(recorded)
        self._add(recorded)

    def _fail(self, result: ExpectedResult, message: Optional[str] = None) -> None:
        """Record a failed expected result, say what to do next, emit the verdict so far, and stop the run."""
        self._add(result)
        self.failure = {"step": result.step, "fix": result.fix}
        if result.fix:
            _display(markdown=f"**What to do next:** {result.fix}")
        self._emit(FAIL)
        raise StepFailed(message or f"{result.step}: {result.title}" + (f" ({result.detail})" if result.detail else ""))

    def skip(self, what: str, why: str) -> None:
        """A step that has nothing to do this time (e.g. the lane is already up): shown and recorded, not failed."""
        self._add(ExpectedResult(self.current_step, what, SKIPPED, f"skipped: {why}", self.current_fix))

    def _add(self, result: ExpectedResult) -> None:
        self.checks.append(result)
        _display(
            markdown=f"{MARKS[result.outcome]} **{result.title}**" + (f" — {result.detail}" if result.detail else "")
        )

    def confirm(self, what: str) -> None:
        """Let a destructive step (stop, cache drop, rsync, restore, rollback) go ahead, or stop the run.

        An explicit `confirm` parameter always decides: `lanebook run ... --yes` or `-p confirm=True` (False
        refuses). Left unset (None), a JupyterLab that renders widgets shows "Confirm: WHAT" / "Cancel" and
        the cell waits for the click, on the twin too: the walkthrough shows the step exactly where a real
        lane asks. Headless (papermill, nbclient: nothing renders the buttons, seen within a short bound) it
        never waits: unset is confirmed only where the lane's policy.confirm_changes is false. Cancel, or no
        confirmation, fails the step naming the flag. A dry run sends nothing, so it asks nothing. Who
        confirmed (user@host) and how is recorded.
        """
        if self.dry_run:
            return
        clicked = frontend.ask(what) if self.confirm_parameter is None else None
        if clicked is not None:
            confirmed, how = clicked, "button"
        else:
            confirmed, how = (
                self.confirmed,
                "parameter" if self.confirm_parameter is not None else "lane policy, confirm unset",
            )
        if not confirmed:
            self._fail(
                ExpectedResult(
                    self.current_step,
                    f"confirmed: {what}",
                    FAIL,
                    ("cancelled at the button; " if clicked is False else "not confirmed: ")
                    + "rerun with --yes (or -p confirm=True) to let this step change the lane",
                    self.current_fix,
                ),
                f"{self.current_step}: {what} needs confirmation (--yes or -p confirm=True)",
            )
        by = f"{getpass.getuser()}@{socket.gethostname()}"
        self.confirmations.append({"step": self.current_step, "what": what, "by": by, "how": how})
        _display(markdown=f"**confirmed** by `{by}` ({how}): {what}")

    def record(self, **figures: Any) -> None:
        """Figures that go into the run record (twin figures are labelled by the record's twin flag)."""
        self.figures.update(figures)

    def show(self, obj: Any = None, *, markdown: Optional[str] = None) -> None:
        """Show a table or figure in the notebook (printed outside a kernel): what a step displays beside its checks."""
        _display(obj, markdown=markdown)

    def commands(self) -> list[str]:
        return self.nodes.executor.commands()

    def show_commands(self) -> None:
        lines = self.commands()
        _display(markdown="```text\n" + ("\n".join(lines) if lines else "(no commands)") + "\n```")

    def _emit(self, verdict: str) -> dict:
        """Display the verdict, checks and figures as the machine-readable output lanebook.runs.execute reads."""
        emitted = {
            "runbook": self.name,
            "lane": self.params.name,
            "twin": self.params.twin,
            "dry_run": self.dry_run,
            "verdict": verdict,
            "failure": self.failure,
            "checks": [c.record() for c in self.checks],
            "figures": self.figures,
            "confirmations": self.confirmations,
            "commands": self.commands() if self.dry_run else [],
        }
        _display(raw={VERDICT_MIME: emitted, "text/plain": json.dumps({"verdict": verdict, "figures": self.figures})})
        return emitted

    def finish(self) -> dict:
        verdict = self._emit(verdict_of(self.checks, self.dry_run))
        self.nodes.close()
        return verdict
