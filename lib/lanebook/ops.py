"""The recipe's node operations (seed 000), built on lanebook.nodes so every command is quoted, bounded, logged
and recorded in dry-run. Each operation takes a nodes.Lane (or a Node) and returns plain results the
runbooks check; failures raise NodeError subclasses or WaitTimeout with one clear line.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

from .compose import COMPOSE_NAME as COMPOSE_FILE
from .errors import LanebookError
from .http import WaitProgress, wait_for
from .metrics import server_root
from .nodes import CommandResult, Executor, Lane, Node, NodeError, env_prefix, q, qpath
from .render import ENV_NAME as ENV_FILE

# Seed 000 "Launch / stop": clean SHM + page cache on both nodes before a launch and after a stop.
DROP_CACHES = "sync; echo 3 > /proc/sys/vm/drop_caches"
SHM_CLEANUP = "rm -rf /dev/shm/*"
# Seed 000 gate: docker logs <container> 2>&1 | grep -E 'BREAKABLE|Breakable CUDA|KV cache size'
GATE_LOG_PATTERNS = ("BREAKABLE", "Breakable CUDA", "KV cache size")
KV_CACHE_RE = re.compile(r"GPU KV cache size:\s*([\d,]+)\s*tokens")
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
LAUNCHER_OUTCOMES = {0: "ok", 1: "failed", 2: "bad config", 3: "already up"}
LAUNCH_MARGIN_S = 120.0


def project_name(lane: Lane) -> str:
    return str(lane.params.launcher.env["PROJECT_NAME"])


def container_name(lane: Lane) -> str:
    """The server container's name as Compose makes it: <project>-<service>-<index>."""
    return f"{project_name(lane)}-vllm-dspark-1"


def _in_checkout(lane: Lane, command: str) -> str:
    return f"cd {qpath(lane.params.checkout)} && {command}"


def _launcher(lane: Lane, script: str, env: Optional[dict] = None) -> str:
    """`cd CHECKOUT && K=V ... ./script.sh`, the seed's launcher line."""
    return _in_checkout(lane, f"{env_prefix(env or {'PROJECT_NAME': project_name(lane)})}{q(script)}")


# --- memory: SHM, page cache, sticky UMA -------------------------------------------------------------

def _running_names(lane: Lane, nodes: Optional[Iterable[Node]] = None) -> dict[str, list[str]]:
    return {alias: r.stdout.split() for alias, r in lane.each("docker ps --format '{{.Names}}'", nodes).items()}


def _ours(lane: Lane, names: list[str]) -> list[str]:
    """The names that belong to this lane's Compose project."""
    prefix = project_name(lane) + "-"
    return [n for n in names if n.startswith(prefix)]


def running_containers(lane: Lane, nodes: Optional[Iterable[Node]] = None) -> dict[str, list[str]]:
    """Names of this lane's running containers (its Compose project's), per node."""
    return {alias: _ours(lane, names) for alias, names in _running_names(lane, nodes).items()}


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


def pair_occupancy(lane: Lane) -> PairOccupancy:
    """One `docker ps` per node: both lanes want the whole pair, so only one may serve at a time (seed 003)."""
    names = _running_names(lane)
    mine = {a: _ours(lane, ns) for a, ns in names.items()}
    return PairOccupancy(mine=mine, others={a: [n for n in ns if "vllm" in n and n not in mine[a]] for a, ns in names.items()})


def clean_memory(lane: Lane) -> dict[str, CommandResult]:
    """Clean /dev/shm and drop the page cache on every node (seed 000; pitfall 4's sticky UMA).

    Refuses while any vLLM container runs on a node (this lane's or another's): pulling SHM from
    under a live TP group kills it.
    """
    busy = {alias: [n for n in names if "vllm" in n] for alias, names in _running_names(lane).items()}
    busy = {alias: names for alias, names in busy.items() if names}
    if busy:
        where = "; ".join(f"{alias}: {', '.join(names)}" for alias, names in busy.items())
        raise NodeError(f"not cleaning memory while the lane runs ({where}): stop it first")
    return {n.alias: n.sudo(f"{SHM_CLEANUP}; {DROP_CACHES}") for n in lane.nodes}


@dataclass
class MemoryFigures:
    total_gib: float
    free_gib: float
    available_gib: float


def memory_figures(node: Node) -> Optional[MemoryFigures]:
    """`free -m` on the node, in GiB (MiB, not `free -g`, whose whole GiB blur a borderline check).

    None in dry-run, where nothing was measured.
    """
    result = node.run("free -m")
    if result.dry_run:
        return None
    lines = result.stdout.splitlines()
    header = lines[0].split() if lines else []
    mem = next((line.split()[1:] for line in lines if line.startswith("Mem:")), None)
    if mem is None or not {"total", "free"} <= set(header):
        raise NodeError(f"{node.alias}: cannot read `free -m` output: {result.stdout.strip()[:200]!r}")
    gib = {name: round(int(value) / 1024, 1) for name, value in zip(header, mem)}
    return MemoryFigures(gib["total"], gib["free"], gib.get("available", gib["free"]))


@dataclass
class UmaCheck:
    """Per node: free GiB, the GiB vLLM will ask for, and whether it fits (pitfall 4: free can stick at ~10–16 GiB)."""

    nodes: dict[str, dict] = field(default_factory=dict)
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        """False in a dry run: nothing was measured."""
        return not self.dry_run and all(n["ok"] for n in self.nodes.values())

    def __bool__(self) -> bool:
        """True when the check passed, so `rb.expect(check, ...)` reads as it should."""
        return self.ok

    @property
    def free_gib(self) -> dict[str, float]:
        return {alias: n["free_gib"] for alias, n in self.nodes.items()}

    def summary(self) -> str:
        if self.dry_run:
            return "not measured (dry run)"
        return ", ".join(f"{a}: {n['free_gib']:g} GiB free, {n['needed_gib']:g} needed" for a, n in self.nodes.items())


def check_sticky_uma(lane: Lane, min_free_gib: Optional[float] = None) -> UmaCheck:
    """Is enough memory free on every node for vLLM to start?

    vLLM refuses to start when free memory is below GPU_MEMORY_UTILIZATION × total; on the Spark's
    unified memory a stopped lane can leave that held as cache until it is dropped. Without
    `min_free_gib` the need is derived from the lane's GPU_MEMORY_UTILIZATION.
    """
    utilization = float(lane.params.env.get("GPU_MEMORY_UTILIZATION", 0.9))  # vLLM's default
    check = UmaCheck(dry_run=lane.executor.dry_run)
    for node in lane.nodes:
        figures = memory_figures(node)
        if figures is None:
            continue
        needed = min_free_gib if min_free_gib is not None else round(utilization * figures.total_gib, 1)
        check.nodes[node.alias] = {"total_gib": figures.total_gib, "free_gib": figures.free_gib,
                                   "available_gib": figures.available_gib, "needed_gib": needed,
                                   "ok": figures.free_gib >= needed}
    return check


# --- legacy units -----------------------------------------------------------------------------------

def mask_legacy_units(lane: Lane) -> dict[str, list[str]]:
    """`systemctl mask --now` the lane's legacy units on every node (pitfall 13); returns the ones that were active.

    Units a node does not have are fine: masking only has to guarantee they cannot start.
    """
    units = list(lane.params.legacy_units)
    if not units:
        return {}
    listed = " ".join(q(u) for u in units)
    probe = f'for u in {listed}; do printf "%s %s\\n" "$u" "$(systemctl is-active "$u")"; done'
    was_active: dict[str, list[str]] = {}
    for node in lane.nodes:
        before = _unit_states(node.run(probe).stdout)
        was_active[node.alias] = [u for u in units if before.get(u) == "active"]
        node.sudo(f"systemctl mask --now {listed}")  # a refused sudo must not pass as "masked"
        still = [u for u, state in _unit_states(node.run(probe).stdout).items() if state == "active"]
        if still:
            raise NodeError(f"{node.alias}: still active after masking: {', '.join(still)}")
    return was_active


def _unit_states(text: str) -> dict[str, str]:
    return dict(line.split(None, 1) for line in text.splitlines() if len(line.split(None, 1)) == 2)


# --- launch, status, stop ---------------------------------------------------------------------------

@dataclass
class LauncherResult:
    exit_code: int
    outcome: str  # ok | failed | bad config | already up | exit N
    output: str
    duration_s: float
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        """False in a dry run: the launcher did not run."""
        return self.exit_code == 0 and not self.dry_run

    def summary(self) -> str:
        if self.dry_run:
            return "launcher not run (dry run)"
        tail = self.output.strip().splitlines()[-1:] if self.output.strip() else []
        return f"launcher {self.outcome} (exit {self.exit_code}, {self.duration_s:.0f} s)" + (f": {tail[0]}" if tail else "")


def _launcher_result(result: CommandResult) -> LauncherResult:
    outcome = LAUNCHER_OUTCOMES.get(result.exit_code, f"exit {result.exit_code}")
    return LauncherResult(result.exit_code, outcome, result.stdout, result.duration_s, result.dry_run)


def start_lane(lane: Lane, on_line: Optional[Callable[[str], None]] = None) -> LauncherResult:
    """Seed 000 "Launch": from the head, `cd CHECKOUT && PROJECT_NAME=… WAIT_ATTEMPTS=… WAIT_SECONDS=… ./start-….sh`.

    Bounded by the launcher's own wait (WAIT_ATTEMPTS × WAIT_SECONDS) plus a margin; exit codes map
    to 0 ok / 1 failed / 2 bad config / 3 already up.
    """
    launcher = lane.params.launcher
    result = lane.head.run(_launcher(lane, launcher.start, dict(launcher.env)), check=False, pty=True,
                           timeout=launcher.wait_budget_s + LAUNCH_MARGIN_S, on_line=on_line)
    return _launcher_result(result)


def lane_status(lane: Lane) -> LauncherResult:
    """The launcher's status script, from the head."""
    return _launcher_result(lane.head.run(_launcher(lane, lane.params.launcher.status), check=False, timeout=60))


@dataclass
class StopResult:
    launcher: LauncherResult
    left_running: dict[str, list[str]]  # containers of the lane still up afterwards, per node

    @property
    def ok(self) -> bool:
        return self.launcher.ok and not any(self.left_running.values())


def stop_lane(lane: Lane, on_line: Optional[Callable[[str], None]] = None) -> StopResult:
    """Seed 000 "stop": the stop script from the head, then a look for containers left behind on any node."""
    result = lane.head.run(_launcher(lane, lane.params.launcher.stop), check=False, pty=True, timeout=300,
                           on_line=on_line)
    return StopResult(_launcher_result(result), running_containers(lane))


def stop_orphaned_workers(lane: Lane) -> dict[str, list[str]]:
    """Pitfall 16: when the head died mid-TP, bring down the lane's compose project on workers still running it."""
    stopped = {}
    for alias, names in running_containers(lane, lane.workers).items():
        if names:
            compose = f"docker compose -p {q(project_name(lane))} --env-file {ENV_FILE} -f {COMPOSE_FILE} down"
            lane.node(alias).run(_in_checkout(lane, compose), pty=True, timeout=300)
            stopped[alias] = names
    return stopped


# --- logs and the live command ----------------------------------------------------------------------

def scan_log(node: Node, container: str, patterns: Iterable[str] = GATE_LOG_PATTERNS) -> dict[str, list[str]]:
    """The seed's gate `docker logs C 2>&1 | grep -E 'A|B|…'`, lines sorted by the pattern they match.

    Docker's "No such container" error is grepped too, so a missing container is an error, not a clean log.
    """
    patterns = list(patterns)
    missing = "No such container"
    result = node.run(f"docker logs {q(container)} 2>&1 | grep -E {q('|'.join(patterns + [missing]))}",
                      check=False, timeout=120)
    if result.exit_code > 1:
        raise NodeError(f"{node.alias}: scanning the log of {container} failed (exit {result.exit_code}): "
                        f"{result.stderr.strip()[:200]}")
    lines = result.stdout.splitlines()
    if any(missing in line and container in line for line in lines):
        raise NodeError(f"{node.alias}: no container named {container}")
    return {p: [line for line in lines if re.search(p, line)] for p in patterns}


def kv_cache_tokens(lines: Iterable[str]) -> Optional[int]:
    """The last "GPU KV cache size: 2,493,464 tokens" figure in the lines (the latest boot), or None."""
    found = [m.group(1) for line in lines for m in [KV_CACHE_RE.search(line)] if m]
    return int(found[-1].replace(",", "")) if found else None


def live_command(node: Node, container: str) -> str:
    """The server's live command line from `docker top` (the `vllm serve` process; all processes if none)."""
    result = node.run(f"docker top {q(container)}", timeout=60)
    lines = result.stdout.splitlines()
    if not lines:
        return ""
    header = lines[0].split()
    if "CMD" not in header:
        raise NodeError(f"{node.alias}: unexpected `docker top` output: {lines[0][:200]!r}")
    before = header.index("CMD")
    commands = [parts[before] for line in lines[1:] for parts in [line.split(None, before)] if len(parts) > before]
    serving = [c for c in commands if re.search(r"\bvllm\S*\s+serve\b", c)]
    # A shell that exec's vllm can show up with the same words: prefer the serving process itself.
    direct = [c for c in serving if not re.match(r"(\S*/)?(ba)?sh\s+-c\b", c)]
    return "\n".join(direct or serving or commands)


def speculative_config(command: str) -> Optional[dict]:
    """The JSON given to --speculative-config in a command line, or None."""
    at = command.find("--speculative-config")
    start = command.find("{", at) if at >= 0 else -1
    if start < 0:
        return None
    try:
        config, _end = json.JSONDecoder().raw_decode(command[start:])
    except json.JSONDecodeError:
        return None
    return config


def schedule_in_live_command(node: Node, container: str) -> bool:
    """Is the batch-size verify schedule in the running server's command (seed 000: confirm after a rollback)?"""
    return SCHEDULE_KEY in live_command(node, container)


# --- HTTP readiness from the operator's machine -----------------------------------------------------

def _wait(url: str, ready, *, what: str, timeout_s: float, interval_s: float,
          progress: Optional[Callable[[WaitProgress], None]], executor: Optional[Executor]):
    """wait_for, recorded in the executor's history; in dry-run only recorded (no HTTP)."""
    description = f"wait for {what}: GET {url} every {interval_s:g} s, bound {timeout_s:g} s"
    if executor is not None and executor.dry_run:
        executor.record_local(description)
        return None
    started = time.monotonic()
    try:
        response = wait_for(url, ready, what=what, timeout_s=timeout_s, interval_s=interval_s, progress=progress)
    except LanebookError as exc:
        if executor is not None:
            executor.record_local(description, exit_code=1, duration_s=time.monotonic() - started, detail=str(exc))
        raise
    if executor is not None:
        executor.record_local(description, duration_s=time.monotonic() - started)
    return response


def wait_health(api: str, timeout_s: float = 900.0, interval_s: float = 5.0,
                progress: Optional[Callable[[WaitProgress], None]] = None, executor: Optional[Executor] = None) -> bool:
    """Poll the server's /health until 200 (vLLM answers 503 when the engine is dead, nothing while it boots)."""
    response = _wait(f"{server_root(api)}/health", lambda r: r.status_code == 200, what="/health",
                     timeout_s=timeout_s, interval_s=interval_s, progress=progress, executor=executor)
    return response is not None


def wait_models(api: str, model: Optional[str] = None, timeout_s: float = 900.0, interval_s: float = 5.0,
                progress: Optional[Callable[[WaitProgress], None]] = None,
                executor: Optional[Executor] = None) -> Optional[list[dict]]:
    """Poll /v1/models until it lists `model` (any model when None); returns the model entries (None in dry-run)."""

    def lists_model(response) -> bool:
        if response.status_code != 200:
            return False
        try:
            ids = [m.get("id") for m in response.json().get("data", [])]
        except ValueError:
            return False
        return bool(ids) and (model is None or model in ids)

    response = _wait(f"{api.rstrip('/')}/models", lists_model, what=f"/v1/models listing {model or 'a model'}",
                     timeout_s=timeout_s, interval_s=interval_s, progress=progress, executor=executor)
    return response.json()["data"] if response is not None else None


def wait_lane_ready(lane: Lane, timeout_s: Optional[float] = None, interval_s: float = 5.0,
                    progress: Optional[Callable[[WaitProgress], None]] = None) -> Optional[list[dict]]:
    """/health then /v1/models listing the lane's served model, within the launcher's wait budget by default."""
    bound = timeout_s if timeout_s is not None else float(lane.params.launcher.wait_budget_s)
    api, executor = lane.params.api, lane.executor
    wait_health(api, bound, interval_s, progress, executor)
    return wait_models(api, lane.params.served_model_name, bound, interval_s, progress, executor)


# --- files and directories --------------------------------------------------------------------------

def _failed_tests(node: Node, tests: list[tuple[str, str]]) -> list[str]:
    """Run `test FLAG PATH` for each pair in one command; returns the paths whose test failed."""
    if not tests:
        return []
    command = "; ".join(f"test {flag} {qpath(path)} || echo {q(path)}" for flag, path in tests)
    result = node.run(command, timeout=60)
    return [line for line in result.stdout.splitlines() if line]


def path_exists(node: Node, path: str) -> bool:
    return not _failed_tests(node, [("-e", path)])


def missing_paths(node: Node, paths: Iterable[str]) -> list[str]:
    """The paths (files or directories, ~ = the node's home) that do not exist on the node, in one round trip."""
    return _failed_tests(node, [("-e", p) for p in paths])


@dataclass
class CheckoutCheck:
    missing: dict[str, list[str]]  # per node: paths absent (or scripts not executable)
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        """False in a dry run: nothing was looked at."""
        return not self.dry_run and not any(self.missing.values())

    def __bool__(self) -> bool:
        """True when the check passed, so `rb.expect(check, ...)` reads as it should."""
        return self.ok


def checkout_files(lane: Lane) -> list[tuple[str, str]]:
    """What a lane checkout needs on every node: compose file and .env.dspark, launcher scripts executable."""
    checkout = lane.params.checkout.rstrip("/")
    launcher = lane.params.launcher
    scripts = [launcher.start, launcher.status, launcher.stop]
    return ([("-f", f"{checkout}/{COMPOSE_FILE}"), ("-f", f"{checkout}/{ENV_FILE}")]
            + [("-x", f"{checkout}/{s.removeprefix('./')}") for s in scripts])


def checkout_ok(lane: Lane) -> CheckoutCheck:
    tests = checkout_files(lane)
    return CheckoutCheck({n.alias: _failed_tests(n, tests) for n in lane.nodes}, lane.executor.dry_run)


# --- rsync head -> workers over the fabric ----------------------------------------------------------

@dataclass
class RsyncStats:
    """The figures rsync's --info=stats2 prints (None when not printed, e.g. in dry-run)."""

    files_transferred: Optional[int] = None
    total_file_size: Optional[int] = None
    transferred_file_size: Optional[int] = None
    literal_data: Optional[int] = None
    matched_data: Optional[int] = None
    duration_s: float = 0.0
    dry_run: bool = False


_STATS = {
    "files_transferred": "Number of regular files transferred",
    "total_file_size": "Total file size",
    "transferred_file_size": "Total transferred file size",
    "literal_data": "Literal data",
    "matched_data": "Matched data",
}


def parse_rsync_stats(text: str, duration_s: float = 0.0, dry_run: bool = False) -> RsyncStats:
    figures = {}
    for key, label in _STATS.items():
        match = re.search(rf"^{label}: ([\d,]+)", text, re.M)
        figures[key] = int(match.group(1).replace(",", "")) if match else None
    return RsyncStats(**figures, duration_s=duration_s, dry_run=dry_run)


def _remote_path(path: str) -> str:
    """A node path as rsync's remote side takes it: relative = the login's home (so ~/x → x)."""
    return path.removeprefix("~/") if path.startswith("~/") else path


def rsync_command(lane: Lane, worker: Node, path: str, bwlimit_kib: Optional[int] = None) -> str:
    """`rsync -aH --partial --info=stats2 ~/PATH/ [user@]FABRIC_IP:PATH/` (never --delete; --partial resumes)."""
    path = path.rstrip("/")
    user = f"{worker.params.user}@" if worker.params.user else ""
    limit = f" --bwlimit={int(bwlimit_kib)}" if bwlimit_kib else ""
    return (f"rsync -aH --partial --info=stats2{limit} {qpath(path)}/ "
            f"{q(f'{user}{worker.fabric_ip}:{_remote_path(path)}/')}")


def rsync_to_workers(lane: Lane, path: str, *, timeout_s: float = 4 * 3600, bwlimit_kib: Optional[int] = None,
                     on_line: Optional[Callable[[str], None]] = None) -> dict[str, RsyncStats]:
    """Copy a directory from the head to every worker over the fabric (seed 000: rsync once, never twice over WAN).

    Runs on the head with a terminal, so hitting `timeout_s` stops rsync; rerunning resumes from the
    partial file (--partial). `bwlimit_kib` throttles (KiB/s) when the fabric is shared.
    """
    stats = {}
    for worker in lane.workers:
        result = lane.head.run(rsync_command(lane, worker, path, bwlimit_kib), pty=True, timeout=timeout_s,
                               on_line=on_line)
        stats[worker.alias] = parse_rsync_stats(result.stdout, result.duration_s, result.dry_run)
    return stats


def sync_checkout(lane: Lane, **kwargs) -> dict[str, RsyncStats]:
    """Seed 000: `rsync -a ~/CHECKOUT/ milo@10.0.0.2:~/CHECKOUT/` after rendering the env on the head."""
    return rsync_to_workers(lane, lane.params.checkout, **kwargs)
