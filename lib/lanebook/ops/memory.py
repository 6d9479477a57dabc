"""Memory on every node before a launch: shared memory and page cache cleaned, legacy serving units
masked, enough free memory for vLLM. Each operation reports what it observed after acting, never
the mere return of the command it sent:

- clean_memory (seed 000: "Clean SHM + page-cache both nodes first"): SHM_CLEANUP and DROP_CACHES as
  root on each node, then /dev/shm is listed again (none of the segments it held before may remain)
  and free memory is read back.
- mask_legacy_units (pitfall 13): `systemctl mask --now` the lane's legacy units, then each unit's
  state is read back (it must be inactive and masked).
- check_sticky_uma (pitfall 4): free memory on every node against what vLLM will ask for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

from lanebook.base.checks import NOT_OBSERVED_DRY_RUN, ExpectedResult, NodeResult
from lanebook.nodes.ssh import LaneNodes, Node, NodeError, q
from lanebook.ops.launcher import vllm_containers

if TYPE_CHECKING:
    from lanebook.steps.runbook import Runbook

# Seed 000 "Launch / stop": clean SHM + page cache on both nodes before a launch and after a stop.
SHM_CLEANUP = "rm -rf /dev/shm/*"
DROP_CACHES = "sync; echo 3 > /proc/sys/vm/drop_caches"
SHM_LISTING = "ls -A /dev/shm"
VLLM_DEFAULT_UTILIZATION = 0.9  # vLLM's --gpu-memory-utilization default
CLEANED = "no stale SHM segment left on any node, free memory read back"
UNITS_MASKED = "no legacy unit active: each inactive and masked on every node"


def _on_every_node(nodes: LaneNodes, observe: Callable[[Node], NodeResult], *, what: str) -> ExpectedResult:
    """`observe` on every node; a node that cannot be reached fails its part without stopping the others."""
    found = {}
    for node in nodes:
        try:
            found[node.alias] = observe(node)
        except NodeError as exc:
            found[node.alias] = NodeResult(False, str(exc))
    return ExpectedResult.on_nodes(found, what=what, dry_run=nodes.executor.dry_run)


def cleanup_command() -> str:
    """The cleanup sent as root to each node (read when called, so the one place to change it is here)."""
    return f"{SHM_CLEANUP}; {DROP_CACHES}"


# --- free memory --------------------------------------------------------------------------------


@dataclass
class MemoryFigures:
    total_gib: float
    free_gib: float
    available_gib: float
    cache_gib: float


def parse_free(text: str) -> MemoryFigures:
    """`free -m` output in GiB, to 0.1 (MiB, not `free -g`, whose whole GiB blur a borderline check)."""
    lines = text.splitlines()
    header = lines[0].split() if lines else []
    mem = next((line.split()[1:] for line in lines if line.startswith("Mem:")), None)
    if mem is None or not {"total", "free"} <= set(header):
        raise ValueError(f"cannot read `free -m` output: {text.strip()[:200]!r}")
    gib = {name: round(int(value) / 1024, 1) for name, value in zip(header, mem)}
    return MemoryFigures(
        gib["total"], gib["free"], gib.get("available", gib["free"]), gib.get("buff/cache", gib.get("cache", 0.0))
    )


def memory_figures(node: Node) -> Optional[MemoryFigures]:
    """`free -m` on the node; None in dry-run, where nothing was measured."""
    result = node.run("free -m")
    if result.dry_run:
        return None
    try:
        return parse_free(result.stdout)
    except ValueError as exc:
        raise NodeError(f"{node.alias}: {exc}") from None


# --- shared memory and page cache ---------------------------------------------------------------


def _shm_listing(node: Node) -> tuple[Optional[list[str]], str]:
    """(the names in the node's /dev/shm, "") or (None, why it could not be listed)."""
    result = node.run(SHM_LISTING, check=False)
    if not result.ok:
        return None, (result.stderr or result.stdout).strip()[:200] or f"exit {result.exit_code}"
    return result.stdout.split(), ""


def _cleaned_node(node: Node) -> NodeResult:
    before, _ = _shm_listing(node)
    cleanup = node.sudo(cleanup_command(), check=False)
    after, listing_error = _shm_listing(node)
    figures = memory_figures(node)
    if figures is None:  # a dry run: the commands are recorded, nothing is seen
        return NodeResult(False, NOT_OBSERVED_DRY_RUN)
    left = [name for name in (after or []) if name in (before or [])]
    problems = []
    if not cleanup.ok:
        problems.append(f"cleanup exit {cleanup.exit_code}: {(cleanup.stderr or cleanup.stdout).strip()[:200]}")
    if after is None:
        problems.append(f"cannot list /dev/shm: {listing_error}")
    if left:
        problems.append(f"still in /dev/shm: {', '.join(left)}")
    removed = [name for name in (before or []) if name not in (after or [])]
    seen = f"{len(removed)} segment(s) removed, {figures.free_gib:g} GiB free (page cache {figures.cache_gib:g} GiB)"
    return NodeResult(
        not problems,
        "; ".join(problems) if problems else seen,
        {
            "removed": removed,
            "left": left,
            "free_gib": figures.free_gib,
            "available_gib": figures.available_gib,
            "cache_gib": figures.cache_gib,
            "cleanup_exit": cleanup.exit_code,
        },
    )


def clean_memory(nodes: LaneNodes) -> ExpectedResult:
    """Clean /dev/shm and drop the page cache on every node, then look: is every segment gone, how much is free?

    Refuses while any vLLM container runs on a node (this lane's or another's): pulling SHM from
    under a live TP group kills it. What /dev/shm held before the cleanup, with no vLLM container
    running, are the lane's stale segments; a node passes when none of them is left, the cleanup
    exited 0 and its free memory was read back.
    """
    busy = {alias: names for alias, names in vllm_containers(nodes).items() if names}
    if busy:
        where = "; ".join(f"{alias}: {', '.join(names)}" for alias, names in busy.items())
        raise NodeError(
            f"not cleaning memory while a vLLM server runs on the pair ({where}): "
            "stop that lane first (run `stop` with its --lane)"
        )
    return _on_every_node(nodes, _cleaned_node, what=CLEANED)


def check_sticky_uma(
    nodes: LaneNodes, *, min_free_gib: Optional[float] = None, what: str = "enough free memory on every node"
) -> ExpectedResult:
    """Is enough memory free on every node for vLLM to start?

    vLLM refuses to start when free memory is below GPU_MEMORY_UTILIZATION x total; on the Spark's
    unified memory a stopped lane can leave that held as cache until it is dropped. Without
    `min_free_gib` the need is derived from the lane's GPU_MEMORY_UTILIZATION.
    """
    utilization = float(nodes.params.env.get("GPU_MEMORY_UTILIZATION", VLLM_DEFAULT_UTILIZATION))

    def observe(node: Node) -> NodeResult:
        figures = memory_figures(node)
        if figures is None:
            return NodeResult(False, NOT_OBSERVED_DRY_RUN)
        needed = min_free_gib if min_free_gib is not None else round(utilization * figures.total_gib, 1)
        return NodeResult(
            figures.free_gib >= needed,
            f"{figures.free_gib:g} GiB free, {needed:g} needed",
            {
                "total_gib": figures.total_gib,
                "free_gib": figures.free_gib,
                "available_gib": figures.available_gib,
                "needed_gib": needed,
            },
        )

    return _on_every_node(nodes, observe, what=what)


# --- legacy units -------------------------------------------------------------------------------


def unit_probe(units: list[str]) -> str:
    """One command printing `UNIT ACTIVE ENABLED` per unit, as systemctl reports them."""
    listed = " ".join(q(u) for u in units)
    return (
        f'for u in {listed}; do printf "%s %s %s\\n" "$u" "$(systemctl is-active "$u" 2>/dev/null)" '
        f'"$(systemctl is-enabled "$u" 2>/dev/null)"; done'
    )


def mask_command(units: list[str]) -> str:
    """The legacy units' masking, sent as root (pitfall 13)."""
    return f"systemctl mask --now {' '.join(q(u) for u in units)}"


def sudo_commands(units: list[str]) -> list[str]:
    """Every command lanebook sends with `sudo -n sh -c` (Node.sudo): the cleanup, and the masking where the lane names
    legacy units. The preflight asks sudo for exactly these, and prints the sudoers line allowing them."""
    return [cleanup_command(), *([mask_command(units)] if units else [])]


def parse_unit_states(text: str) -> dict[str, tuple[str, str]]:
    """unit -> (ActiveState, UnitFileState) from unit_probe's output; an empty answer reads "unknown"."""
    states = {}
    for line in text.splitlines():
        parts = line.split()
        if parts:
            states[parts[0]] = ((parts[1:2] or ["unknown"])[0], (parts[2:3] or ["unknown"])[0])
    return states


def _masked_node(node: Node, units: list[str]) -> NodeResult:
    before = parse_unit_states(node.run(unit_probe(units)).stdout)
    masking = node.sudo(mask_command(units), check=False)
    after = parse_unit_states(node.run(unit_probe(units)).stdout)
    was_active = [u for u in units if before.get(u, ("",))[0] == "active"]
    states = {u: after.get(u, ("unknown", "unknown")) for u in units}
    still_active = [u for u, (active, _) in states.items() if active == "active"]
    not_masked = [u for u, (_, enabled) in states.items() if enabled != "masked"]
    problems = (
        [f"mask exit {masking.exit_code}: {(masking.stderr or masking.stdout).strip()[:200]}"] if not masking.ok else []
    )
    problems += [f"still active: {', '.join(still_active)}"] if still_active else []
    problems += [f"not masked: {', '.join(f'{u} ({states[u][1]})' for u in not_masked)}"] if not_masked else []
    shown = ", ".join(
        f"{u} {enabled}, {active}" + (" (was active)" if u in was_active else "")
        for u, (active, enabled) in states.items()
    )
    return NodeResult(
        not problems,
        "; ".join(problems) if problems else shown,
        {"units": {u: {"active": a, "enabled": e} for u, (a, e) in states.items()}, "was_active": was_active},
    )


def mask_legacy_units(nodes: LaneNodes) -> ExpectedResult:
    """`systemctl mask --now` the lane's legacy units on every node (pitfall 13), then read their states back.

    A node passes when every unit is inactive and masked. Units a node does not have are masked too
    (systemctl masks any name): masking only has to guarantee they cannot start.
    """
    units = list(nodes.params.legacy_units)
    if not units:
        return ExpectedResult.on_nodes(
            {node.alias: NodeResult(True, "the lane names no legacy units") for node in nodes},
            what=UNITS_MASKED,
            dry_run=nodes.executor.dry_run,
        )
    return _on_every_node(nodes, lambda node: _masked_node(node, units), what=UNITS_MASKED)


# --- runbook steps (each takes the runbook: it confirms, records and checks) --------------------------------


def clean_step(rb: "Runbook", *, skip_because: Optional[str] = None, confirm: Optional[str] = None) -> None:
    """Clean SHM and the page cache on every node of the runbook's lane, unless a server runs (`skip_because`
    says whose): memory is never cleaned under one. `confirm`: what the operator confirms first."""
    if skip_because is not None:
        rb.skip("SHM and page cache cleaned on every node", f"{skip_because}; memory is never cleaned under a server")
        return
    if confirm is not None:
        rb.confirm(confirm)
    cleaned = clean_memory(rb.nodes)
    rb.record(free_gib_after_cleanup=cleaned.figure("free_gib"))
    rb.expect(cleaned)


def free_memory_step(
    rb: "Runbook",
    *,
    what: str,
    target: Optional[LaneNodes] = None,
    skip_because: Optional[str] = None,
    min_free_gib: Optional[float] = None,
) -> None:
    """Enough free memory on every node for the runbook's lane, or `target` (another lane on its pair) (P04),
    unless a server runs and holds it (`skip_because` says why)."""
    if skip_because is not None:
        rb.skip(what, skip_because)
        return
    free = check_sticky_uma(rb.nodes if target is None else target, min_free_gib=min_free_gib, what=what)
    rb.record(free_gib=free.figure("free_gib"))
    rb.expect(free)
