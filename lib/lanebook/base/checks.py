"""Expected results: the one type a runbook step, a check made on every node, a gate and the warmup each give
back, and the one spelling of each outcome.

A result holds only where it was observed: a dry run sends nothing, so what the lane would have shown is
NOT_OBSERVED (detail: NOT_OBSERVED_DRY_RUN), never a pass; a check that saw no node at all fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

# What one expected result came to; only FAIL fails a run.
PASS, FAIL, NOT_OBSERVED, SKIPPED, WARNING = "pass", "fail", "not observed", "skipped", "warning"
OUTCOMES = (PASS, FAIL, NOT_OBSERVED, SKIPPED, WARNING)
# Plain words in code spans, not emoji: they render in any browser and terminal, with or without an emoji font.
MARKS = {outcome: f"`{outcome.upper()}`" for outcome in OUTCOMES}
# What a dry run shows where the lane's answer would be.
NOT_OBSERVED_DRY_RUN = f"{NOT_OBSERVED} (dry run)"


@dataclass(frozen=True)
class NodeResult:
    """One node's part: ok, one line saying what was seen there, and the figures read (free GiB, missing paths…)."""

    ok: bool
    detail: str
    figures: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ExpectedResult:
    """One expected result: the step or gate it belongs to (step, given by the runbook when the library cannot
    know it), what was expected, its outcome, the detail seen, and what to do when it fails. The fields are
    spelt as the run record's keys (record()).

    pitfall: the pitfall it guards against (a gate's); local: judged on this machine (lint, the lane file), so a
    dry run checks it for real; fail_open: when it does not hold, the step failed but the lane did not, so the
    runbook records a warning (the warmup's); nodes: each node's part, for a check made on every node.
    """

    step: str
    what: str
    outcome: str
    detail: str = ""
    fix: Optional[str] = None
    pitfall: Optional[str] = None
    local: bool = False
    fail_open: bool = False
    nodes: Mapping[str, NodeResult] = field(default_factory=dict)

    @classmethod
    def judged(
        cls,
        step: str,
        what: str,
        ok: Optional[bool],
        detail: str = "",
        pitfall: Optional[str] = None,
        *,
        local: bool = False,
        fail_open: bool = False,
    ) -> "ExpectedResult":
        """Pass or fail as ok says; None: not observed (a dry run asked the lane nothing)."""
        outcome = NOT_OBSERVED if ok is None else PASS if ok else FAIL
        return cls(step, what, outcome, detail, pitfall=pitfall, local=local, fail_open=fail_open)

    @classmethod
    def on_nodes(cls, nodes: Mapping[str, NodeResult], *, what: str = "", dry_run: bool = False) -> "ExpectedResult":
        """What one check found on each node, by alias, in the lane's node order: it holds where every node's part
        does; detail is every node's, or why nothing holds. A dry run observed no node, so it keeps none.
        what: what was expected (the runbook's step fills in the step)."""
        if dry_run:
            outcome, detail, nodes = NOT_OBSERVED, NOT_OBSERVED_DRY_RUN, {}
        elif not nodes:
            outcome, detail = FAIL, "no node observed"
        else:
            outcome = PASS if all(n.ok for n in nodes.values()) else FAIL
            detail = "; ".join(f"{alias}: {n.detail}" for alias, n in nodes.items())
        return cls("", what, outcome, detail, nodes=dict(nodes))

    @classmethod
    def per_node(
        cls, found: Mapping[str, tuple[bool, Any]], what: str, *, local: bool = False
    ) -> list["ExpectedResult"]:
        """One result per node ({alias: (ok, detail)}), `what` naming each with `{}` in place of its alias:
        one call records them all while each stays its own check."""
        return [
            cls.judged("", what.format(alias), ok, str(detail), local=local) for alias, (ok, detail) in found.items()
        ]

    @property
    def ok(self) -> bool:
        return self.outcome == PASS

    @property
    def title(self) -> str:
        """What was expected, naming the pitfall it guards against."""
        return f"{self.what} ({self.pitfall})" if self.pitfall else self.what

    @property
    def failed_nodes(self) -> dict[str, NodeResult]:
        return {alias: n for alias, n in self.nodes.items() if not n.ok}

    def figure(self, name: str) -> dict[str, Any]:
        """One figure from every node that has it, by alias (e.g. free_gib)."""
        return {alias: n.figures[name] for alias, n in self.nodes.items() if name in n.figures}

    def record(self) -> dict:
        """The result as a run record keeps it (the keys every stored record and the book use)."""
        return {"step": self.step, "what": self.title, "outcome": self.outcome, "detail": self.detail}
