"""`lanebook twin up | down | status | fault`: start the twin's nodes, stop them leaving no process, report them.

`up` lays out fresh node roots (homes, every shipped lane's checkout and weights, HF caches, /dev/shm,
memory and units), starts one sshd per node and waits until both accept ssh; it does not launch the lane (the
launch runbook does, through the launcher). Faults shape the node roots and stand-ins here and reach
the engine through LANEBOOK_TWIN_FAULTS. `status` calls the twin running only when the head's sshd
answers on its address: a twin started in another network namespace has live processes but is not
reachable from here. `reboot` does to one node what a reboot does (processes gone, /dev/shm and caches
emptied, files kept, containers started again as their restart policy says); `private_twin` puts a twin
with its own state dir and ports beside the shared one, for tests and benchmarks that need a fault.
"""

from __future__ import annotations

import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, Optional

from lanebook.base.errors import LanebookError
from lanebook.base.files import write_atomic
from lanebook.lane.keys import key_file_path
from lanebook.lane.params import LaneParams, lane_names, load_lane
from lanebook.twin.nodes import (
    ALIASES,
    HEAD,
    WORKER,
    TwinAddresses,
    TwinLayout,
    client_config,
    ensure_keys,
    read_state,
    start_sshd,
    terminal_problem,
    twin_dir,
    wait_for_ssh,
    write_node,
    write_node_ssh,
    write_state,
)
from lanebook.twin.standins.base import NODE_CONDITIONS
from lanebook.twin.standins.machine import NodeMachine, init_node
from lanebook.twin.standins.runtime import boot_containers, containers, power_off, stop_all_containers
from lanebook.twin.tree import HubModel, blob_name, hub_root, recipe_remote, write_checkout, write_hub_model

FAULTS = {
    "worker-unreachable": "the worker's sshd is not started",
    "head-dies": "engine: the head dies mid-TP, leaving the worker orphaned",
    "health-never": "engine: the engine core dies compiling its first batched decode shape (the launcher's warmup), "
    "so /health never turns healthy while /v1/models still answers",
    "engine-dies-mid-bench": "engine: the server dies during a benchmark",
    "ssh-drop-mid-rsync": "the first rsync push into the worker loses its connection part-way (resume with --partial)",
    "incomplete-shards": "the worker's weights tree holds *.incomplete blobs",
    "missing-shard": "one shard is missing from the worker's weights tree",
    "sticky-uma": "~12 GiB stays used on a node after its container stops, until caches are dropped",
    "legacy-units-active": "aiden-vllm.service runs on the head (holding memory) until masked",
    "prefix-evict": "engine: the prefix cache evicts A after an unrelated B",
    "tp-hang": "engine: the worker rank wedges mid-decode under load; the head waits on it with requests running",
    "drafter-mismatch": "engine: the drafter does not match the target's weights; nearly every draft is rejected",
    "link-degraded": "the worker's RoCE rail roceP2p1s0f0 carries ~13 Gb/s after boot (the ConnectX-7 boot fault, "
    "dgx-spark-playbooks PR 108) until the node is power-cycled",
}
DEGRADED_RAIL, DEGRADED_RAIL_GBPS = "roceP2p1s0f0", 13.2  # PR 108: 12.86 Gb/s TCP, 13.23 Gb/s with ib_write_bw
FAST_TIME_SCALE = 0.003  # --fast: an 8-15 min cold bind takes 1.5-2.7 s; decode rates are never scaled
MISSING_SHARD = 7
INCOMPLETE_SHARDS = (3, 17)
TWIN_LANE = "twin"
SSH_CONFIG_NAME = "twin"  # a lane file's `ssh_config: twin`: the running twin's own ssh config
_started: dict[str, subprocess.Popen] = {}  # sshd processes this process started, reaped at down()


def layout() -> TwinLayout:
    return TwinLayout(twin_dir())


def _say(message: str) -> None:
    print(f"twin: {message}", file=sys.stderr, flush=True)


def validate_faults(faults: Iterable[str]) -> list[str]:
    """Known fault names in their canonical order; an unknown name is a LanebookError listing the known ones."""
    names = set(faults)
    unknown = sorted(names - FAULTS.keys())
    if unknown:
        raise LanebookError(f"unknown fault {', '.join(unknown)} (known: {', '.join(FAULTS)})")
    return [name for name in FAULTS if name in names]


def _proc_stat(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _alive(pid) -> bool:
    stat = _proc_stat(int(pid or 0)) if pid else []
    return bool(stat) and stat[0] not in "ZX"


def _names_dir(cmdline: str, root_text: str) -> bool:
    """The command line names the dir or a path under it, not merely a path starting alike (/tmp/t vs /tmp/t-2)."""
    return f"{root_text}/" in cmdline or root_text in cmdline.split()


def _is_twin_sshd(pid, root: Path) -> bool:
    """A live sshd of this twin (its command line names the twin's config), not a recycled pid."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        return _alive(pid) and _names_dir(cmdline, str(root.resolve()))
    except OSError:
        return False


def _port_taken(ip: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((ip, port))
        except OSError:
            return True
    return False


def _lanes() -> list[LaneParams]:
    """Every shipped lane, the twin lanes last: each shares a real lane's checkout (twin: anemll-0731's, twin-1m6:
    anemll-1m6's, the twin lane's rollback target) and must win there, so that checkout boots the twin lane."""
    lanes = [load_lane(name) for name in lane_names()]
    return sorted(lanes, key=lambda lane: lane.twin)


def ensure_lane_keys(params: LaneParams) -> Optional[Path]:
    """A keyed twin lane's key file, made when it is missing: fresh random keys (two for DSPARK_API_KEYS, one for
    VLLM_API_KEY), mode 0600 in a folder of mode 0700. A file already there is the operator's (or a test's): kept."""
    path = key_file_path(params)
    if path is None or not is_twin_lane(params) or path.exists():
        return None
    count = 2 if params.auth.variable == "DSPARK_API_KEYS" else 1
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomic(path, "".join(f"twin-{secrets.token_urlsafe(18)}\n" for _ in range(count)), mode=0o600)
    _say(f"keys of lane {params.name} in {path} (mode 0600)")
    return path


def recipe_root(lay: TwinLayout) -> Path:
    """Where the twin keeps its recipe remote (lanebook.twin.remote), the origin of every node's checkout."""
    return lay.root / "recipe"


def is_twin_lane(params: LaneParams) -> bool:
    """A lane the twin serves: reached through the twin's ssh config, its nodes the twin's own (alias, address)."""
    return params.twin and params.ssh_config == SSH_CONFIG_NAME


def lane_nodes(params: LaneParams, addresses: TwinAddresses) -> dict[str, str]:
    """The twin nodes (alias -> address) a lane's checkout lives on: a twin lane's own nodes; a real two-node lane's
    checkout on the default pair (the twin lanes share some of them); a real lane of more nodes on none (it runs here
    only as a dry run)."""
    if is_twin_lane(params):
        return {node.alias: node.host for node in params.nodes}
    if len(params.nodes) == 2:
        return {alias: addresses.ip(alias) for alias in ALIASES}
    return {}


def lanes_on(lanes: list[LaneParams], alias: str, addresses: TwinAddresses) -> list[LaneParams]:
    """The lanes whose checkout node ALIAS holds: those whose nodes the twin has, this one among them."""
    held = []
    for lane in lanes:
        nodes = lane_nodes(lane, addresses)
        if alias in nodes and all(dict(addresses.nodes).get(a) == ip for a, ip in nodes.items()):
            held.append(lane)
    return held


def _build_node(
    lay: TwinLayout,
    alias: str,
    addresses: TwinAddresses,
    faults: list[str],
    time_scale: float,
    lanes: list[LaneParams],
    fresh_worker: bool = False,
) -> None:
    """A fresh node root: sshd config, session, shims, checkouts of the LANES it holds (lanes_on; clones of the
    twin's recipe remote), HF cache (faults applied), memory and units. A FRESH_WORKER (a worker added for a lane)
    holds no weights: the lane's head fans them out, as to a new Spark."""
    shutil.rmtree(lay.node(alias), ignore_errors=True)
    write_node(lay, alias, addresses, set(faults), time_scale)
    held = lanes_on(lanes, alias, addresses)
    twin_repo = next(lane.weights.repo for lane in lanes if lane.name == TWIN_LANE)
    home = lay.home(alias)
    for lane in held:
        write_checkout(home, lane, addresses, recipe=recipe_root(lay))
    for repo, shards in {lane.weights.repo: lane.weights.shards for lane in held}.items():
        on_worker = alias == WORKER and repo == twin_repo
        if fresh_worker or (on_worker and "ssh-drop-mid-rsync" in faults):
            continue  # the worker still needs its copy: the weights runbook's rsync brings it (or is cut)
        write_hub_model(
            hub_root(home),
            HubModel(repo, shards),
            missing=[MISSING_SHARD] if on_worker and "missing-shard" in faults else [],
            incomplete=INCOMPLETE_SHARDS if on_worker and "incomplete-shards" in faults else [],
        )
    twin_lane = next(lane for lane in lanes if lane.name == TWIN_LANE)
    machine = init_node(lay.node(alias), twin_lane.legacy_units, alias == HEAD and "legacy-units-active" in faults)
    if alias == WORKER and "link-degraded" in faults:
        machine.degrade_rail(DEGRADED_RAIL, DEGRADED_RAIL_GBPS)


def up(faults: Iterable[str] = (), fast: bool = False) -> dict:
    """Start the twin (idempotent); different faults or speed restart it with fresh node roots."""
    faults = validate_faults(faults)
    lay = layout()
    for lane in _lanes():
        ensure_lane_keys(lane)
    current = status()
    if current["running"]:
        if current["faults"] == faults and current["fast"] == fast:
            return current
        _say(f"restarting with faults [{', '.join(faults)}]{' (fast)' if fast else ''}")
    down()
    addresses = TwinAddresses.from_env()
    for ip, port, what in (
        *((ip, addresses.ssh_port, f"{alias} sshd") for alias, ip in addresses.nodes),
        (addresses.head_ip, addresses.api_port, "the twin API"),
    ):
        if _port_taken(ip, port):
            raise LanebookError(f"{ip}:{port} ({what}) is already in use by another program; stop it first")
    if not shutil.which("rsync"):
        raise LanebookError("the twin needs rsync: apt-get install rsync openssh-server")
    if problem := terminal_problem():
        raise LanebookError(problem)
    time_scale = FAST_TIME_SCALE if fast else 1.0
    _say(f"keys and known_hosts in {lay.keys}")
    ensure_keys(lay, addresses)
    write_atomic(lay.ssh_config, client_config(lay.user_key, lay.known_hosts, addresses))
    lanes = _lanes()  # read once: each node holds the lanes whose nodes the twin has (lanes_on)
    shutil.rmtree(recipe_root(lay), ignore_errors=True)
    shutil.rmtree(lay.root / "nodes", ignore_errors=True)  # nodes a former twin added are gone with it
    for alias in addresses.aliases:
        _say(f"node root {alias}: home, lane checkouts, HF cache")
        _build_node(lay, alias, addresses, faults, time_scale, lanes)
    state = {
        "running": True,
        "faults": faults,
        "fast": fast,
        "time_scale": time_scale,
        "pids": {},
        "addresses": addresses.to_state(),
        "started_at": time.time(),
    }
    write_state(lay, state)
    for alias in addresses.aliases:
        if alias == WORKER and "worker-unreachable" in faults:
            _say("worker sshd not started (fault worker-unreachable)")
            continue
        _say(f"sshd {alias} on {addresses.ip(alias)}:{addresses.ssh_port}")
        _started[alias] = start_sshd(lay, alias)
        state["pids"][alias] = _started[alias].pid
        write_state(lay, state)
    try:
        for alias in state["pids"]:
            wait_for_ssh(lay, alias)
    except LanebookError:
        down()
        raise
    _say(f"up: ssh -F {lay.ssh_config} head")
    return status()


def missing_nodes(params: LaneParams, addresses: TwinAddresses) -> dict[str, str]:
    """The nodes (alias -> address) a twin lane names that the twin lacks; a node the twin has at another address,
    or an address another node holds, is a LanebookError (the lane file and the twin disagree: nothing is started)."""
    known = dict(addresses.nodes)
    owner = {ip: alias for alias, ip in addresses.nodes}
    missing = {}
    for node in params.nodes:
        if node.alias in known and known[node.alias] != node.host:
            raise LanebookError(
                f"lane {params.name} puts twin node {node.alias} at {node.host}, but the running twin has it at "
                f"{known[node.alias]}: one node, one address (give the lane's node another alias)"
            )
        if node.alias not in known and owner.get(node.host, node.alias) != node.alias:
            raise LanebookError(
                f"lane {params.name} puts twin node {node.alias} at {node.host}, where the running twin's node "
                f"{owner[node.host]} listens"
            )
        if node.alias not in known:
            if not node.host.startswith("127."):
                raise LanebookError(
                    f"lane {params.name}: twin node {node.alias} must be a loopback address, got {node.host}"
                )
            missing[node.alias] = node.host
    return missing


@contextmanager
def _twin_lock(lay: TwinLayout, name: str) -> Iterator[None]:
    """One process at a time holds the twin's lock NAME (lanes of a fleet wave start together): `up` to find the twin
    down and start it (a second `up` would begin by taking the first one's nodes down), `nodes` to change its node
    set."""
    import fcntl

    lay.root.mkdir(parents=True, exist_ok=True)
    with open(lay.root / f"{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def add_nodes(params: LaneParams) -> dict:
    """Start the nodes a twin lane names that the running twin lacks (its aliases, at its addresses), without
    restarting the others: each a fresh root with its sshd; every node's ssh config and known_hosts then reach it, and
    the lane's checkout is laid out on every node of it that lacks one. The new workers hold no weights (the weights
    runbook fans them out from the head). The twin's status after."""
    lay = layout()
    with _twin_lock(lay, "nodes"):
        state = read_state(lay)
        if not status()["running"]:
            raise LanebookError("the twin is not running: start it with `lanebook twin up`")
        addresses = TwinAddresses.from_state(state["addresses"])
        missing = missing_nodes(params, addresses)
        if not missing:
            return status()
        for alias, ip in missing.items():
            if _port_taken(ip, addresses.ssh_port):
                raise LanebookError(f"{ip}:{addresses.ssh_port} ({alias} sshd) is already in use by another program")
        addresses = addresses.with_nodes(missing.items())
        ensure_keys(lay, addresses)
        write_atomic(lay.ssh_config, client_config(lay.user_key, lay.known_hosts, addresses))
        lanes = [params, *(other for other in _lanes() if other.name != params.name)]
        head = params.head.alias
        for alias in missing:
            _say(f"node root {alias} for lane {params.name}: home, lane checkouts")
            _build_node(lay, alias, addresses, [], state["time_scale"], lanes, fresh_worker=alias != head)
        for alias in addresses.aliases:
            if alias not in missing:
                write_node_ssh(lay, alias, addresses)
        for alias in lane_nodes(params, addresses):
            if not (lay.home(alias) / params.checkout.removeprefix("~/")).exists():
                write_checkout(lay.home(alias), params, addresses, recipe=recipe_root(lay))
        state["addresses"] = addresses.to_state()
        write_state(lay, state)
        for alias, ip in missing.items():
            _say(f"sshd {alias} on {ip}:{addresses.ssh_port}")
            _started[alias] = start_sshd(lay, alias)
            state["pids"][alias] = _started[alias].pid
            write_state(lay, state)
        for alias in missing:
            wait_for_ssh(lay, alias)
    return status()


def bring_up(params: LaneParams) -> None:
    """A twin lane finds its twin up (fast: cold-bind and JIT waits shortened, decode rates never) with every node it
    names; a real lane is left alone."""
    if not is_twin_lane(params):
        return
    with _twin_lock(layout(), "up"):
        if not status()["running"]:
            up(faults=[], fast=True)
    if missing_nodes(params, TwinAddresses.from_state(read_state(layout())["addresses"])):
        add_nodes(params)


def engine_faults() -> list[str]:
    """The faults that reach the engine when a container starts (their description says `engine:`)."""
    return [name for name, what in FAULTS.items() if what.startswith("engine:")]


def switch_engine_faults(faults: Iterable[str]) -> dict:
    """Set the running twin's engine faults, from the next container start on (a launch meets them; what runs keeps
    its own): a fault injected into one launch, where `up` would lay out fresh nodes. The twin's status after."""
    faults = validate_faults(faults)
    other = sorted(set(faults) - set(engine_faults()))
    if other:
        raise LanebookError(f"only engine faults switch on a running twin ({', '.join(engine_faults())}): {other}")
    lay = layout()
    if not status()["running"]:
        raise LanebookError("the twin is not running: start it with `lanebook twin up`")
    state = read_state(lay)
    kept = [name for name in state.get("faults", []) if name not in engine_faults()]
    write_state(lay, {**state, "faults": validate_faults([*kept, *faults])})
    return status()


LANE_NODE_FAULTS = ("worker-unreachable", "missing-shard")  # node faults that can be set on one lane's nodes


def lane_scoped_faults() -> list[str]:
    """The fault matrix's rows that can be set on one lane (set_lane_faults): every engine fault, which reaches the
    containers of that lane's Compose project on its nodes, and the node faults that act on the lane's first worker
    (rank 1). The others shape a node root when `twin up` lays it out, or another lane's checkout: twin-wide only."""
    return [name for name in FAULTS if name in engine_faults() or name in LANE_NODE_FAULTS]


def _remove_shard(lay: TwinLayout, alias: str, params: LaneParams) -> None:
    """Fault missing-shard on one node: shard MISSING_SHARD of the lane's weights gone from its hub tree (blob and
    snapshot link), as a download that never finished it leaves it."""
    model = HubModel(params.weights.repo, params.weights.shards)
    name = model.shard_name(MISSING_SHARD)
    repo_dir = hub_root(lay.home(alias)) / model.dir_name
    (repo_dir / "blobs" / blob_name(name, model.shard_bytes(MISSING_SHARD))).unlink(missing_ok=True)
    (repo_dir / "snapshots" / model.revision / name).unlink(missing_ok=True)


def set_lane_faults(params: LaneParams | str, faults: Iterable[str]) -> dict:
    """Set the faults of one twin lane (its name or params), replacing those it had, from the next action on: engine
    faults reach the containers its Compose project starts on its nodes (what runs keeps its own); worker-unreachable
    stops the sshd of its first worker (cleared: started again); missing-shard removes a shard from its first worker's
    weights (cleared: the weights runbook brings it back, as on a real node). Other lanes are untouched. A fault that
    cannot be scoped (lane_scoped_faults) is refused. The twin's status after."""
    params = params if isinstance(params, LaneParams) else load_lane(params)
    faults = validate_faults(faults)
    refused = [name for name in faults if name not in lane_scoped_faults()]
    if refused:
        raise LanebookError(
            f"fault {', '.join(refused)} is twin-wide only (`lanebook twin up --faults`); on one lane: "
            f"{', '.join(lane_scoped_faults())}"
        )
    if not is_twin_lane(params):
        raise LanebookError(f"lane {params.name} is not a twin lane (twin: true, ssh_config: twin): no fault to set")
    if not status()["running"]:
        raise LanebookError("the twin is not running: start it with `lanebook twin up`")
    bring_up(params)
    lay = layout()
    with _twin_lock(lay, "nodes"):
        state = read_state(lay)
        scoped = state.get("lane_faults", {})
        before = set(scoped.get(params.name, {}).get("faults", []))
        first_worker = params.workers[0].alias
        if "worker-unreachable" in set(faults) - before and first_worker in state["pids"]:
            _say(f"{first_worker} sshd stopped (fault worker-unreachable on lane {params.name})")
            _kill({int(state["pids"].pop(first_worker))}, signal.SIGTERM)
            if first_worker in _started:
                _started.pop(first_worker).wait(timeout=10)  # reaped here when this process started it
        if "worker-unreachable" in before - set(faults) and first_worker not in state["pids"]:
            _started[first_worker] = start_sshd(lay, first_worker)
            state["pids"][first_worker] = _started[first_worker].pid
        if "missing-shard" in set(faults) - before:
            _remove_shard(lay, first_worker, params)
        if faults:
            project = params.launcher.env.get("PROJECT_NAME", "")
            scoped[params.name] = {"nodes": [node.alias for node in params.nodes], "project": project, "faults": faults}
        else:
            scoped.pop(params.name, None)
        write_state(lay, {**state, "lane_faults": scoped})
    if "worker-unreachable" in before - set(faults):
        wait_for_ssh(lay, first_worker)
    return status()


def set_node_conditions(alias: str, conditions: Iterable[str]) -> list[str]:
    """Give one running twin node the conditions (standins.base.NODE_CONDITIONS), replacing those it had: its user
    outside the docker group, a sudo that asks, a full disk. What a preflight must name; its stand-ins read them on
    their next call. The node's conditions after."""
    conditions = list(conditions)
    unknown = [c for c in conditions if c not in NODE_CONDITIONS]
    if unknown:
        raise LanebookError(f"unknown node condition {', '.join(unknown)} (known: {', '.join(NODE_CONDITIONS)})")
    root = layout().node(alias)
    if not root.is_dir():
        raise LanebookError(f"no twin node {alias!r}: is the twin up (`lanebook twin up`)?")
    folder = root / "twin-conditions"
    folder.mkdir(exist_ok=True)
    for name in NODE_CONDITIONS:
        flag = folder / name
        if name in conditions:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)
    return sorted(p.name for p in folder.iterdir())


def lay_out_checkout(params: LaneParams, shape: str) -> str:
    """The lane's checkout on every node of it in the running twin made again as a clone of the recipe remote at SHAPE's
    commit (lanebook.twin.remote: JUL31, AUG22), the lane rendered into it: a lane whose operator cloned the recipe
    on that day. Its commit's sha."""
    lay = layout()
    current = status()
    if not current["running"]:
        raise LanebookError("the twin is not running: start it with `lanebook twin up`")
    addresses = TwinAddresses.from_state(read_state(lay)["addresses"])
    for alias in lane_nodes(params, addresses):
        write_checkout(lay.home(alias), params, addresses, shape, recipe=recipe_root(lay))
    return recipe_shas(lay)[shape]


def recipe_shas(lay: Optional[TwinLayout] = None) -> dict[str, str]:
    """The recipe remote's commits by shape name, as the running twin laid them out."""
    return recipe_remote(recipe_root(lay or layout()))[1]


def free_ports(count: int) -> list[int]:
    """Unprivileged ports free on both nodes' addresses, for a private twin."""
    addresses = TwinAddresses()
    ports: list[int] = []
    while len(ports) < count:
        port = random.randint(30000, 60000)
        if port not in ports and not any(_port_taken(ip, port) for ip in (addresses.head_ip, addresses.worker_ip)):
            ports.append(port)
    return ports


_private_ports: list[int] = []  # the ports of the last private twin this process brought up


def private_ports() -> list[int]:
    """Ports for a private twin (ssh, API, master): the last private twin's of this process when it is down and they
    are free again, so the lanes it renders into its checkouts (twin addresses, tree._rendered) are rendered once per
    process; else free ones."""
    addresses = TwinAddresses()
    if not _private_ports or any(
        _port_taken(ip, port) for port in _private_ports for ip in (addresses.head_ip, addresses.worker_ip)
    ):
        _private_ports[:] = free_ports(3)
    return list(_private_ports)


PRIVATE_TWIN_VARIABLES = (
    "LANEBOOK_TWIN_DIR",
    "LANEBOOK_TWIN_SSH_PORT",
    "LANEBOOK_TWIN_API_PORT",
    "LANEBOOK_TWIN_MASTER_PORT",
)


@contextmanager
def private_twin(state_dir: Path, faults: Iterable[str]) -> Iterator[dict]:
    """A fast twin with `faults`, its own state dir and ports, beside the shared one (which stays untouched):
    faults are fixed when a twin comes up, and restarting the shared twin would pull it from under its users.
    This process points lanebook (and the runs it starts) at it until it is taken down, always, after."""
    env = dict(zip(PRIVATE_TWIN_VARIABLES, [str(state_dir), *map(str, private_ports())]))
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield up(faults=faults, fast=True)
    finally:
        try:
            down()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _process_table() -> dict[int, int]:
    """pid -> parent pid of every live process."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _proc_stat(int(entry.name))
            if stat and stat[0] not in "ZX":
                table[int(entry.name)] = int(stat[1])
    return table


def _descendants(pid: int, table: dict[int, int]) -> set[int]:
    found, frontier = set(), {pid}
    while frontier:
        children = {child for child, parent in table.items() if parent in frontier} - found
        found |= children
        frontier = children
    return found


def _ancestors(pid: int, table: dict[int, int]) -> set[int]:
    found = set()
    while pid in table and pid not in found:
        found.add(pid)
        pid = table[pid]
    return found


def twin_processes(root: Path) -> set[int]:
    """Processes that belong to the twin: cmdline or cwd under its dir, or started by a node session."""
    root_text = str(root.resolve())
    marker = f"LANEBOOK_NODE_ROOT={root_text}/".encode()
    table = _process_table()
    mine = _ancestors(os.getpid(), table)
    found = set()
    for pid in table.keys() - mine:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(f"/proc/{pid}/cwd")
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if _names_dir(cmdline, root_text) or cwd == root_text or cwd.startswith(root_text + "/") or marker in environ:
            found.add(pid)
    return found


def _kill(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def down() -> None:
    """Stop the lane containers on both nodes, both sshd and every other twin process; verify none remains."""
    lay = layout()
    state = read_state(lay)
    for node in sorted((lay.root / "nodes").glob("*/var")):
        stop_all_containers(node.parent)
    table = _process_table()
    sshd = {int(pid) for pid in state.get("pids", {}).values() if _is_twin_sshd(pid, lay.root)}
    # Connection handlers of sshd rename themselves ("sshd: user@notty"): found as its descendants.
    targets = set().union(sshd, *(_descendants(pid, table) for pid in sshd)) | twin_processes(lay.root)
    for sig, wait_s in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        _kill(targets, sig)
        deadline = time.monotonic() + wait_s
        while (targets := {pid for pid in targets if _alive(pid)}) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not targets:
            break
    for alias, proc in list(_started.items()):
        proc.poll()  # reap the sshd this process started
        _started.pop(alias)
    remaining = twin_processes(lay.root)
    if remaining:
        raise LanebookError(f"twin down: processes still running: {', '.join(map(str, sorted(remaining)))}")
    if state:
        write_state(lay, {**state, "running": False, "pids": {}})


def node_processes(alias: str) -> set[int]:
    """Processes running on one node: its sshd and every session under it, and what they started (their
    environment names the node's root), containers included."""
    lay = layout()
    roots = {str(lay.node(alias)), str(lay.node(alias).resolve())}
    markers = {f"LANEBOOK_NODE_ROOT={root}\0".encode() for root in roots}
    table = _process_table()
    sshd = read_state(lay).get("pids", {}).get(alias)
    found = ({int(sshd)} | _descendants(int(sshd), table)) if sshd and _is_twin_sshd(sshd, lay.root) else set()
    for pid in table.keys() - _ancestors(os.getpid(), table):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if any(marker in environ for marker in markers):
            found.add(pid)
    return found


def reboot(alias: str) -> dict:
    """The node reboots: its processes end at once (the lane's containers without their clean-up, its ssh
    sessions), /dev/shm and the page cache are emptied, enabled units run again, its files stay; dockerd
    starts again the containers their restart policy names (the recipe's `unless-stopped`: those that were
    running, each its command again as a new process); its sshd comes back (unless it was not running, fault
    worker-unreachable). The twin's status after."""
    lay = layout()
    state = read_state(lay)
    TwinAddresses.from_state(state.get("addresses", {})).ip(alias)  # an unknown node is a clear error
    if not status()["running"]:
        raise LanebookError("the twin is not running: start it with `lanebook twin up`")
    _say(f"rebooting {alias}")
    had_sshd = alias in state.get("pids", {})
    power_off(lay.node(alias))
    targets = node_processes(alias)
    _kill(targets, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while (targets := {pid for pid in targets if _alive(pid)}) and time.monotonic() < deadline:
        time.sleep(0.05)
    if targets:
        raise LanebookError(f"twin reboot {alias}: processes still running: {', '.join(map(str, sorted(targets)))}")
    if alias in _started:
        _started.pop(alias).poll()
    NodeMachine(lay.node(alias)).boot()
    boot_containers(lay.node(alias))
    if had_sshd:
        _started[alias] = start_sshd(lay, alias)
        state["pids"][alias] = _started[alias].pid
        write_state(lay, state)
        wait_for_ssh(lay, alias)
    return status()


def answers_ssh(ip: str, port: int, timeout_s: float = 10.0) -> bool:
    """Something at ip:port greets as an SSH server does ("SSH-2.0-..."), from this network namespace. The wait is
    long because sshd forks and re-executes itself before it greets: on two busy cores (a real vLLM booting beside
    the suite) that took over 2 s, and a twin that was up read as down. Where nothing listens, the refusal is
    immediate."""
    try:
        with socket.create_connection((ip, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            return sock.recv(8).startswith(b"SSH-")
    except OSError:
        return False


def status() -> dict:
    """The status `lanebook twin status --json` prints (running, ssh_config, nodes, api, faults), plus fast, time_scale,
    lane and per-node detail.

    `running` means reachable: the state says up, the head's sshd process lives and its address answers
    here. Per node, `sshd` is the process alive and `reachable` its port answering.
    """
    lay = layout()
    state = read_state(lay)
    addresses = TwinAddresses.from_state(state["addresses"]) if state.get("addresses") else TwinAddresses.from_env()
    pids = state.get("pids", {})
    aliases = addresses.aliases
    sshd_up = {alias: _is_twin_sshd(pids.get(alias), lay.root) for alias in aliases}
    reachable = {alias: sshd_up[alias] and answers_ssh(addresses.ip(alias), addresses.ssh_port) for alias in aliases}
    running = bool(state.get("running")) and reachable[HEAD]
    return {
        "running": running,
        "ssh_config": str(lay.ssh_config),
        "nodes": [
            {
                "alias": alias,
                "host": addresses.ip(alias),
                "port": addresses.ssh_port,
                "root": str(lay.node(alias)),
                "home": str(lay.home(alias)),
                "sshd": sshd_up[alias],
                "reachable": reachable[alias],
                "containers": [c.name for c in containers(lay.node(alias)) if c.running],
            }
            for alias in aliases
        ],
        "api": addresses.api,
        "faults": state.get("faults", []) if running else [],
        "lane_faults": {name: scoped["faults"] for name, scoped in state.get("lane_faults", {}).items()}
        if running
        else {},
        "fast": bool(state.get("fast")) if running else False,
        "time_scale": state.get("time_scale", 1.0) if running else 1.0,
        "lane": TWIN_LANE,
        "twin_dir": str(lay.root),
        "known_faults": list(FAULTS),
    }


def print_status(status: dict) -> None:
    """A table of the nodes, then the API, faults and how to reach the nodes."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    state = "[green]running[/green]" if status["running"] else "[red]down[/red]"
    table = Table(title=f"lanebook twin: {state}{' (fast)' if status['fast'] else ''}")
    for column in ("node", "address", "sshd", "containers", "root"):
        table.add_column(column)
    for node in status["nodes"]:
        sshd = (
            "up"
            if node["reachable"]
            else ("not answering here (another network namespace?)" if node["sshd"] else "down")
        )
        table.add_row(
            node["alias"], f"{node['host']}:{node['port']}", sshd, ", ".join(node["containers"]) or "-", node["root"]
        )
    console.print(table)
    console.print(f"api: {status['api']}   lane: {status['lane']}   ssh: ssh -F {status['ssh_config']} head")
    for name in status["faults"]:
        console.print(f"fault {name}: {FAULTS[name]}")
    for lane, names in status.get("lane_faults", {}).items():
        console.print(f"faults on lane {lane} only: {', '.join(names)}")
    if not status["faults"]:
        console.print(f"faults: none (known: {', '.join(status['known_faults'])})")
