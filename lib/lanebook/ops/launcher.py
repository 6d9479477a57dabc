"""Starting, watching and stopping a lane with its checkout's own scripts, and reading what they say.

A lane starts one way: the recipe's launcher, run from the head as seed 000 runs it
(`cd CHECKOUT && PROJECT_NAME=… WAIT_ATTEMPTS=… WAIT_SECONDS=… ./start-deepseek-v4-flash-dspark.sh`).
Its exit code and messages are read into one outcome (`launcher_outcome`, which lists them), the same on the twin
as on a real pair, so an operator's first real launch is not the first time a failure path is read. There is no
"already up" outcome (the launcher has none): the launch runbook finds an up lane (pair_occupancy) before it
starts one.
"""

from __future__ import annotations

import re
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Optional

from lanebook.base.checks import NOT_OBSERVED_DRY_RUN
from lanebook.base.errors import LanebookError
from lanebook.base.progress import Progress
from lanebook.nodes.ssh import CommandResult, LaneNodes, Node, env_prefix, q, qpath
from lanebook.ops.logs import check_startup_log, live_command
from lanebook.ops.readiness import ReadinessWatch, wait_health, wait_models
from lanebook.recipe.compose import COMPOSE_NAME as COMPOSE_FILE
from lanebook.recipe.effective.mismatches import live_mismatches
from lanebook.recipe.render import ENV_NAME as ENV_FILE

if TYPE_CHECKING:
    from lanebook.steps.runbook import Runbook

LAUNCH_MARGIN_S = 120.0  # beyond the launcher's own WAIT_ATTEMPTS x WAIT_SECONDS
INTERRUPTED_CODES = {129: "HUP", 130: "INT", 143: "TERM"}
# (outcome, what the recipe's launcher prints for it). On a non-zero exit the first line of the output that
# matches one decides: the launcher's own line comes before the container logs it prints after it.
LAUNCHER_MESSAGES = (
    ("missing env file", re.compile(r"Copy \.env\.dspark\.example to \.env\.dspark")),
    (
        "refused configuration",
        re.compile(
            r"must be set in |^Unknown (option|argument): |requires a value\.|"
            r"must be (one of|an integer|between|a positive integer)"
        ),
    ),
    ("worker unreachable", re.compile(r"Cannot reach worker with passwordless SSH")),
    ("image missing", re.compile(r"Missing (local|worker) Docker image")),
    ("health timeout", re.compile(r"Timed out waiting for DSpark API")),
)

# Seed 000: the production launcher runs the post-readiness warmup hook after /health and its chat smoke, and says
# how it went. Only "ok" means the lane is warm; "SKIPPED", a failed (fail-open) hook or no hook at all do not.
HOOK_WARMED = re.compile(r"^\s*Post-readiness warmup: ok\b[^\r\n]*", re.M)


def launcher_outcome(exit_code: int, output: str) -> tuple[str, str]:
    """(outcome, the line that says so) for a launcher exit code and its output:

    ok                     exit 0: /v1/models answered and a minimal chat request succeeded
    refused configuration  exit 2 (a bad option or value), or exit 1 with "KEY must be set in .env.dspark"
                           (the launcher's ${KEY:?} check exits as bash does, with 1)
    missing env file       "Copy .env.dspark.example to .env.dspark and edit node-specific values."
    worker unreachable     "Cannot reach worker with passwordless SSH: HOST"
    image missing          "Missing local Docker image …" / "Missing worker Docker image …"
    health timeout         "Timed out waiting for DSpark API." (the last 120 log lines of both ranks follow)
    interrupted            exit 129, 130 or 143 (HUP, INT, TERM)
    failed                 any other exit; the launcher's last line says why
    """
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if exit_code == 0:
        return "ok", lines[-1] if lines else ""
    if exit_code in INTERRUPTED_CODES:
        return "interrupted", f"SIG{INTERRUPTED_CODES[exit_code]}"
    for line in lines:
        for outcome, pattern in LAUNCHER_MESSAGES:
            if pattern.search(line):
                return outcome, line
    if exit_code == 2:
        return "refused configuration", lines[-1] if lines else ""
    # "Startup failed." follows the failing step's own line, and the logs follow it.
    failed_at = next((i for i, line in enumerate(lines) if line.startswith("Startup failed.")), None)
    if failed_at:
        return "failed", lines[failed_at - 1]
    return "failed", lines[-1] if lines else ""


def project_name(nodes: LaneNodes) -> str:
    return str(nodes.params.launcher.env["PROJECT_NAME"])


def container_name(nodes: LaneNodes) -> str:
    """The server container's name as Compose makes it: <project>-<service>-<index>."""
    return f"{project_name(nodes)}-vllm-dspark-1"


def in_checkout(nodes: LaneNodes, command: str) -> str:
    return f"cd {qpath(nodes.params.checkout)} && {command}"


def launcher_command(nodes: LaneNodes, script: str, env: Optional[dict] = None) -> str:
    """`cd CHECKOUT && K=V ... ./script.sh`, the seed's launcher line."""
    return in_checkout(nodes, f"{env_prefix(env or {'PROJECT_NAME': project_name(nodes)})}{q(script)}")


@dataclass
class LauncherResult:
    """What one of the checkout's scripts said: its exit code, the outcome read from it, and the line why."""

    exit_code: int
    outcome: str
    reason: str
    output: str
    duration_s: float
    dry_run: bool = False
    ready_seen_at: Optional[float] = None  # start: when lanebook saw the server list its model (time.time())
    finished_at: Optional[float] = None  # start: when the launcher exited (time.time())

    @property
    def seen_ready_before_exit_s(self) -> Optional[float]:
        """How long before the launcher's exit lanebook saw the server ready (its poll's wait, and its chat smoke)."""
        if self.ready_seen_at is None or self.finished_at is None:
            return None
        return round(self.finished_at - self.ready_seen_at, 2)

    @property
    def ok(self) -> bool:
        """False in a dry run: the script did not run."""
        return self.outcome == "ok" and not self.dry_run

    @property
    def hook_warmed(self) -> Optional[str]:
        """The launcher's line saying its own post-readiness warmup passed, None when it did not say so."""
        found = HOOK_WARMED.search(self.output) if self.ok else None
        return found.group(0).strip() if found else None

    def summary(self) -> str:
        if self.dry_run:
            return "launcher not run (dry run)"
        return f"launcher {self.outcome} (exit {self.exit_code}, {self.duration_s:.0f} s)" + (
            f": {self.reason}" if self.reason else ""
        )


def launcher_result(result: CommandResult) -> LauncherResult:
    outcome, reason = ("not run", "") if result.dry_run else launcher_outcome(result.exit_code, result.stdout)
    return LauncherResult(result.exit_code, outcome, reason, result.stdout, result.duration_s, result.dry_run)


def start_lane(nodes: LaneNodes, on_line: Optional[Callable[[str], None]] = None) -> LauncherResult:
    """Seed 000 "Launch": the launcher from the head, bounded by its own wait (WAIT_ATTEMPTS x WAIT_SECONDS) plus a
    margin.

    Run with a terminal, so stopping at the bound hangs the launcher up (it exits 129) instead of
    leaving it running on the head. Its output is followed as it streams: elapsed time against the bound
    and the launcher's last line (it prints one per WAIT_SECONDS wait) are shown, then passed to `on_line`.
    Readiness is followed as it happens too: lanebook polls /v1/models itself, shows the moment the server
    lists the lane's model and records it (`ready_seen_at`); the launcher's own poll confirms it later.
    """
    launcher = nodes.params.launcher
    bound = launcher.wait_budget_s + LAUNCH_MARGIN_S
    shown, started = Progress("launcher", bound), time.monotonic()

    def follow(line: str) -> None:
        if line.strip():
            shown.update(time.monotonic() - started, line.strip()[:160])
        if on_line:
            on_line(line)

    def seen(_: float) -> None:
        shown.update(
            time.monotonic() - started,
            f"server ready: /v1/models lists {nodes.params.served_model_name} (the launcher confirms at its next poll)",
        )

    watch = (
        None
        if nodes.executor.dry_run
        else ReadinessWatch(nodes.params.api, nodes.params.served_model_name, on_seen=seen)
    )
    try:
        with watch or nullcontext():
            result = nodes.head.run(
                launcher_command(nodes, launcher.start, dict(launcher.env)),
                check=False,
                pty=True,
                timeout=bound,
                on_line=follow,
            )
    except LanebookError as exc:
        shown.finish(time.monotonic() - started, str(exc), ok=False)
        raise
    outcome = replace(launcher_result(result), ready_seen_at=watch and watch.seen_at, finished_at=time.time())
    shown.finish(time.monotonic() - started, outcome.summary(), ok=outcome.ok)
    return outcome


def run_status_script(nodes: LaneNodes) -> LauncherResult:
    """The checkout's status script, from the head. The recipe's script shows and does not judge: it exits 0 whether
    the lane is up or down (every probe ends `|| true`), 1 or 2 only when it refuses its configuration; so the lane's
    state is what lanebook observes (containers, API), never this exit code."""
    return launcher_result(
        nodes.head.run(launcher_command(nodes, nodes.params.launcher.status), check=False, timeout=60)
    )


# --- the lane's containers ------------------------------------------------------------------------


def _running_names(nodes: LaneNodes, only: Optional[Iterable[Node]] = None) -> dict[str, list[str]]:
    return {alias: r.stdout.split() for alias, r in nodes.each("docker ps --format '{{.Names}}'", only).items()}


def _ours(nodes: LaneNodes, names: list[str]) -> list[str]:
    """The names that belong to this lane's Compose project."""
    prefix = project_name(nodes) + "-"
    return [n for n in names if n.startswith(prefix)]


def running_containers(nodes: LaneNodes, only: Optional[Iterable[Node]] = None) -> dict[str, list[str]]:
    """Names of this lane's running containers (its Compose project's), per node (every node, or `only` these)."""
    return {alias: _ours(nodes, names) for alias, names in _running_names(nodes, only).items()}


def vllm_containers(nodes: LaneNodes) -> dict[str, list[str]]:
    """Every running vLLM container, any lane's, per node (memory is never cleaned under one)."""
    return {alias: [n for n in names if "vllm" in n] for alias, names in _running_names(nodes).items()}


@dataclass
class PairOccupancy:
    """Who is serving on the pair: this lane's containers and other lanes' vLLM containers, per node."""

    mine: dict[str, list[str]]
    others: dict[str, list[str]]

    @property
    def this_lane_up(self) -> bool:
        return any(self.mine.values())

    @property
    def other_lane_up(self) -> bool:
        return any(self.others.values())

    def others_found(self) -> dict[str, list[str]]:
        """Other lanes' containers on the nodes that run any (a check's detail)."""
        return {alias: names for alias, names in self.others.items() if names}


def occupancy_of(names: Mapping[str, list[str]], mine: str, also: Iterable[str] = ()) -> PairOccupancy:
    """Who serves, from each node's running names: `mine` is this lane's Compose prefix; vLLM containers of
    any prefix in `also` (a lane's rollback lane, on the same pair by design) are not another lane's."""
    ours = {a: [n for n in ns if n.startswith(mine)] for a, ns in names.items()}
    known = (mine, *also)
    return PairOccupancy(
        mine=ours, others={a: [n for n in ns if "vllm" in n and not n.startswith(known)] for a, ns in names.items()}
    )


def pair_occupancy(nodes: LaneNodes, also: Iterable[LaneNodes] = ()) -> PairOccupancy:
    """One `docker ps` per node: both lanes want the whole pair, so only one may serve at a time (seed 003).
    The containers of the lanes in `also` are neither this lane's nor another's (rollback: its rollback lane)."""
    return occupancy_of(_running_names(nodes), project_name(nodes) + "-", [project_name(o) + "-" for o in also])


# --- the lane's state, as its containers and its API show it -------------------------------------

LANE_UP, LANE_DOWN = "up", "down"
ORPHANED_WORKER = "orphaned worker"  # pitfall 16: the head's rank is gone, a worker's still holds its GPU
HEAD_ALONE = "head without its workers"


def state_from_containers(running: Mapping[str, list[str]], head: str) -> str:
    """What the lane's running containers (per node, `head` the head's alias) say about it.

    up: every node runs one; down: none does; orphaned worker: the head runs none while a worker still
    does; head without its workers: the head runs one and some worker none. The last two are not a
    lane: a TP group needs every rank.
    """
    head_up = bool(running.get(head))
    workers_up = [bool(names) for alias, names in running.items() if alias != head]
    if head_up and all(workers_up):
        return LANE_UP
    if not head_up and not any(workers_up):
        return LANE_DOWN
    return HEAD_ALONE if head_up else ORPHANED_WORKER


def orphaned_workers(running: Mapping[str, list[str]], head: str) -> dict[str, list[str]]:
    """The workers still running the lane's containers while the head runs none (pitfall 16), with those names."""
    if running.get(head):
        return {}
    return {alias: list(names) for alias, names in running.items() if alias != head and names}


@dataclass
class LaneContainers:
    """This lane's running containers per node, as `docker ps` showed them (nothing in a dry run)."""

    running: dict[str, list[str]]
    head: str
    dry_run: bool = False

    @property
    def state(self) -> str:
        return NOT_OBSERVED_DRY_RUN if self.dry_run else state_from_containers(self.running, self.head)

    @property
    def orphaned(self) -> dict[str, list[str]]:
        return {} if self.dry_run else orphaned_workers(self.running, self.head)

    @property
    def left(self) -> dict[str, list[str]]:
        """The nodes still running one of the lane's containers."""
        return {alias: names for alias, names in self.running.items() if names}

    def summary(self) -> str:
        if self.dry_run:
            return NOT_OBSERVED_DRY_RUN
        return "; ".join(f"{alias}: {', '.join(names) or 'none'}" for alias, names in self.running.items())


def lane_containers(nodes: LaneNodes) -> LaneContainers:
    return LaneContainers(running_containers(nodes), nodes.head.alias, nodes.executor.dry_run)


@dataclass
class ApiAnswer:
    """What the lane's API said to the operator's machine: /health, then /v1/models (None: not asked, or a dry run)."""

    healthy: Optional[bool]
    models: Optional[list[dict]]
    detail: str

    @property
    def model_ids(self) -> list[str]:
        return [str(m.get("id")) for m in self.models or []]


def ask_api(nodes: LaneNodes, timeout_s: float = 5.0) -> ApiAnswer:
    """One short look at /health, then /v1/models (any model, so what else serves is seen), from this machine.

    Short: status reports what it finds and does not wait for a booting server. A dry run only records both.
    """
    api, executor = nodes.params.api, nodes.executor
    try:
        wait_health(api, timeout_s, 1.0, executor=executor)
    except LanebookError as exc:
        return ApiAnswer(False, None, str(exc))
    try:
        models = wait_models(api, None, timeout_s, 1.0, executor=executor)
    except LanebookError as exc:
        return ApiAnswer(True, None, str(exc))
    if executor.dry_run:
        return ApiAnswer(None, None, NOT_OBSERVED_DRY_RUN)
    return ApiAnswer(True, models, "/health 200; /v1/models lists " + ", ".join(str(m.get("id")) for m in models or []))


# --- stop ------------------------------------------------------------------------------------------


@dataclass
class StopResult:
    launcher: LauncherResult
    left_running: dict[str, list[str]]  # containers of the lane still up afterwards, per node (observed)

    @property
    def ok(self) -> bool:
        return self.launcher.ok and not any(self.left_running.values())

    def summary(self) -> str:
        left = {alias: names for alias, names in self.left_running.items() if names}
        return self.launcher.summary() + (f"; still running: {left}" if left else "")


def stop_lane(nodes: LaneNodes, on_line: Optional[Callable[[str], None]] = None) -> StopResult:
    """Seed 000 "stop": the stop script from the head, then a look for containers left behind on any node."""
    result = nodes.head.run(
        launcher_command(nodes, nodes.params.launcher.stop), check=False, pty=True, timeout=300, on_line=on_line
    )
    return StopResult(launcher_result(result), running_containers(nodes))


def stop_orphaned_workers(nodes: LaneNodes) -> dict[str, list[str]]:
    """Pitfall 16: when the head died mid-TP, bring down the lane's compose project on workers still running it."""
    stopped = {}
    for alias, names in running_containers(nodes, nodes.workers).items():
        if names:
            compose = f"docker compose -p {q(project_name(nodes))} --env-file {ENV_FILE} -f {COMPOSE_FILE} down"
            nodes.node(alias).run(in_checkout(nodes, compose), pty=True, timeout=300)
            stopped[alias] = names
    return stopped


# --- runbook steps (each takes the runbook: it confirms, records and checks) --------------------------------


def start_step(
    rb: "Runbook",
    *,
    target: Optional[LaneNodes] = None,
    what: str = "launcher reports the lane up",
    skip_because: Optional[str] = None,
    skipped: Optional[str] = None,
    confirm: Optional[str] = None,
    timing: bool = False,
) -> Optional[LauncherResult]:
    """Start the runbook's lane (or `target`, another lane on its pair) with its launcher; the launcher's result.

    skip_because: why it is not started (it already serves: verified, not restarted), None when skipped;
    `skipped`: what the skip names (`what` when not given); `confirm`: what the operator confirms first;
    `timing`: also record how long before the launcher's exit the server was seen ready."""
    if skip_because is not None:
        rb.skip(skipped or what, skip_because)
        return None
    if confirm is not None:
        rb.confirm(confirm)
    started = start_lane(rb.nodes if target is None else target)
    rb.record(launcher_outcome=started.outcome)
    if timing:
        rb.record(seen_ready_before_launcher_exit_s=started.seen_ready_before_exit_s)
    rb.expect(started.ok, what=what, detail=started.summary())
    return started


def containers_step(rb: "Runbook") -> str:
    """The status runbook's containers step: no orphaned worker (P16), no head without its workers, and a lane
    the lane's state."""
    containers = lane_containers(rb.nodes)
    state = containers.state
    rb.record(state=state, containers=containers.running)
    rb.expect(
        not containers.orphaned,
        what="no orphaned worker (P16: the head's container is gone while a worker's runs)",
        detail=f"orphaned: {containers.orphaned}; "
        "run the `stop` runbook now (it stops each orphaned worker, cleans memory)"
        if containers.orphaned
        else containers.summary(),
    )
    rb.expect(
        state != HEAD_ALONE,
        what="the head does not run without its workers",
        detail=f"{containers.summary()}; run `stop`, then `launch`" if state == HEAD_ALONE else "",
    )
    return state


def status_api_step(rb: "Runbook", state: str) -> None:
    """The status runbook's API step: /health and /v1/models answer; nothing to ask of a lane that is cleanly down."""
    if state == LANE_DOWN:
        rb.skip("the API answers with the lane's model", "the lane is cleanly down")
        return
    api = ask_api(rb.nodes)
    rb.record(models=api.model_ids)
    rb.expect(
        api.healthy is True,
        what="/health answers 200",
        detail=api.detail
        if api.healthy
        else f"{api.detail}; if a launch is in progress (cold bind 8–15 min, P11) wait and run status again, "
        "otherwise read the status script's log lines above, or run `stop` and `launch`",
    )
    name = rb.params.served_model_name
    rb.expect(name in api.model_ids, what=f"/v1/models lists {name}", detail=api.detail)


def startup_log_step(rb: "Runbook", *, skip_because: Optional[str] = None) -> Optional[int]:
    """The startup log's expected lines (logs.check_startup_log) on the head's container of the runbook's lane,
    unless `skip_because` says why there is none to read; the KV cache size it reports, recorded."""
    if skip_because is not None:
        rb.skip("the startup log is clean", skip_because)
        return None
    expectations, kv = check_startup_log(rb.nodes.head, container_name(rb.nodes), rb.params.gates)
    rb.record(kv_cache_tokens=kv)
    rb.expect(expectations)
    return kv


def live_command_step(
    rb: "Runbook",
    *,
    target: Optional[LaneNodes] = None,
    what: str = "the live command carries every value the lane sets",
) -> None:
    """The head's live `vllm serve` command carries every value the runbook's lane (or `target`) sets; each one it
    does not carry is named with both values."""
    nodes = rb.nodes if target is None else target
    mismatches = live_mismatches(nodes.params, live_command(nodes.head, container_name(nodes)))
    rb.expect(not mismatches, what=what, detail="; ".join(map(str, mismatches)))
