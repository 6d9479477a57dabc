"""A one-axis canary on a live lane: relaunch it with a variant's values, measure, and put the lane's value back.

A relaunch is the recipe's own sequence: render the values into the head's checkout (each changed file backed
up, written atomically: lanebook.checkout_env), copy the checkout to the workers over the fabric, stop the
lane from the head (and any orphaned worker), clean SHM and page cache on every node, check free memory,
start it from the head, then read the live `vllm serve` command against the values rendered. A variant that
fails anywhere (it does not come up, does not carry its value, or a measurement raises) is replaced by the
lane's own values at once, so a failed canary never leaves the lane on the variant.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from .checkout_env import render_on_head
from .checks import ExpectedResult
from .effective.checkout import ENV_NAME, read_node_files
from .effective.mismatches import LiveMismatch, live_mismatches
from .envfile import env_map, parse_env_text
from .errors import LanebookError
from .launcher import LauncherResult, StopResult, container_name, start_lane, stop_lane, stop_orphaned_workers
from .logs import live_command
from .memory import check_sticky_uma, clean_memory
from .nodes import Lane
from .params import LaneParams
from .render import RenderResult
from .transfers import RsyncStats, sync_checkout


@dataclass
class Relaunch:
    """What relaunching the lane with some values did, step by step (None: the step was not reached)."""

    params: LaneParams
    change: Optional[RenderResult] = None
    synced: dict[str, RsyncStats] = field(default_factory=dict)
    stopped: Optional[StopResult] = None
    orphans: dict[str, list[str]] = field(default_factory=dict)
    cleaned: Optional[ExpectedResult] = None
    free: Optional[ExpectedResult] = None
    started: Optional[LauncherResult] = None
    live: Optional[list[LiveMismatch]] = None  # what the live command does not carry of params
    error: Optional[str] = None  # a LanebookError that stopped the relaunch

    @property
    def ok(self) -> bool:
        """Up and carrying every value rendered (never in a dry run: nothing was observed)."""
        return self.error is None and self.started is not None and self.started.ok and self.live == []

    def summary(self) -> str:
        if self.error:
            return f"relaunch stopped: {self.error}"
        parts = [f"rendered {', '.join(self.change.changed) or 'nothing (already those values)'}" if self.change else "",
                 f"copied to {', '.join(self.synced)}" if self.synced else "",
                 f"memory still held, not started: {self.free.seen}" if self.free is not None and not self.free.ok
                 and self.started is None else "",
                 self.started.summary() if self.started else "",
                 ("live command carries the values" if self.live == [] else
                  "live command: " + "; ".join(map(str, self.live))) if self.live is not None else ""]
        return "; ".join(part for part in parts if part)

    def figures(self) -> dict[str, Any]:
        return {"changed": self.change.changed if self.change else [],
                "backups": [b.to_json() for b in self.change.backups] if self.change else [],
                "stop": self.stopped.launcher.outcome if self.stopped else None,
                "orphaned_workers_stopped": self.orphans,
                "free_gib": self.free.figure("free_gib") if self.free else None,
                "launcher": self.started.outcome if self.started else None,
                "live_mismatches": None if self.live is None else [str(m) for m in self.live],
                "error": self.error}


def relaunch_with(lane: Lane, params: LaneParams) -> Relaunch:
    """Render PARAMS on the head, copy the checkout to the workers, stop, clean memory, start, read the live command.

    Memory still held after the cleanup (sticky UMA) ends the relaunch before the start; a LanebookError (a
    container left running, an unreachable node) is recorded as the relaunch's error rather than raised, so
    the caller can still restore."""
    relaunch = Relaunch(params)
    try:
        relaunch.change = render_on_head(lane, params)
        relaunch.synced = sync_checkout(lane, timeout_s=600)
        relaunch.stopped = stop_lane(lane)
        relaunch.orphans = stop_orphaned_workers(lane)
        relaunch.cleaned = clean_memory(lane)  # refuses while any vLLM container still runs
        relaunch.free = check_sticky_uma(lane)
        if relaunch.free.ok or lane.executor.dry_run:
            relaunch.started = start_lane(lane)
            if relaunch.started.ok or lane.executor.dry_run:
                relaunch.live = live_mismatches(params, live_command(lane.head, container_name(lane)))
    except LanebookError as exc:
        relaunch.error = str(exc)
    if lane.executor.dry_run:
        relaunch.live = None  # a dry run observed no command
    return relaunch


@dataclass
class VariantTrial:
    """The variant relaunched and measured; restored: the lane's own values relaunched because the variant failed."""

    relaunch: Relaunch
    documents: Optional[list[dict]] = None
    error: Optional[str] = None  # a LanebookError while measuring
    restored: Optional[Relaunch] = None

    @property
    def failed(self) -> bool:
        return not self.relaunch.ok or self.error is not None

    def figures(self) -> dict[str, Any]:
        return {"relaunch": self.relaunch.figures(), "error": self.error,
                "restored_after_failure": self.restored.figures() if self.restored else None}


def try_variant(lane: Lane, variant: LaneParams, measure: Callable[[], Optional[list[dict]]]) -> VariantTrial:
    """Relaunch with the variant and measure it; on any failure relaunch with the lane's own values (lane.params).

    In a dry run every step is recorded, measuring included, and nothing is restored (nothing changed)."""
    trial = VariantTrial(relaunch_with(lane, variant))
    if trial.relaunch.ok or lane.executor.dry_run:
        try:
            trial.documents = measure()
        except LanebookError as exc:
            trial.error = str(exc)
    if trial.failed and not lane.executor.dry_run:
        trial.restored = relaunch_with(lane, lane.params)
    return trial


def head_env_value(lane: Lane, key: str) -> Optional[str]:
    """What the head's env file sets KEY to now (its last line for KEY; None without one, or in a dry run)."""
    data = read_node_files(lane.head, [f"{lane.params.checkout.rstrip('/')}/{ENV_NAME}"])[0]
    if data is None:
        return None
    return env_map(parse_env_text(data.decode("utf-8", errors="replace"))).get(key)
