"""The result of a check made on every node of a lane: whether it held, one line to show, and each node's part.

A check holds only where it was observed: a dry run sends nothing, so its check is never ok and says
"not observed (dry run)"; a check that saw no node at all is not ok either.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

NOT_OBSERVED = "not observed (dry run)"


@dataclass(frozen=True)
class NodeResult:
    """One node's part: ok, one line saying what was seen there, and the figures read (free GiB, missing paths…)."""

    ok: bool
    detail: str
    figures: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeCheck:
    """What one check found on each node, by alias, in the lane's node order."""

    nodes: Mapping[str, NodeResult] = field(default_factory=dict)
    dry_run: bool = False

    @classmethod
    def not_observed(cls) -> "NodeCheck":
        """The check of a dry run: nothing was looked at."""
        return cls({}, dry_run=True)

    @property
    def ok(self) -> bool:
        return not self.dry_run and bool(self.nodes) and all(n.ok for n in self.nodes.values())

    def __bool__(self) -> bool:
        """The check held, so `rb.expect(check, ...)` reads as it should."""
        return self.ok

    @property
    def failed(self) -> dict[str, NodeResult]:
        return {alias: n for alias, n in self.nodes.items() if not n.ok}

    def figure(self, name: str) -> dict[str, Any]:
        """One figure from every node that has it, by alias (e.g. free_gib)."""
        return {alias: n.figures[name] for alias, n in self.nodes.items() if name in n.figures}

    def summary(self) -> str:
        """One line: every node's detail, or why nothing holds."""
        if self.dry_run:
            return NOT_OBSERVED
        if not self.nodes:
            return "no node observed"
        return "; ".join(f"{alias}: {n.detail}" for alias, n in self.nodes.items())
