"""Stand-ins on the twin nodes' PATH for what cannot exist here: docker, hf, sudo, systemctl, free, sleep.

Each accepts the command lines the real lanes get and acts on the node's own state under
$LANEBOOK_NODE_ROOT/var (containers, memory, units), never on this machine's. The node's bin/ holds
thin shims: `exec python -m lanebook.twin.standins NAME "$@"`. Figures they print are twin figures.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Optional

from ..errors import LanebookError
from ..files import write_atomic

GIB = 1024 ** 3
TOTAL_BYTES = 128 * 10 ** 9  # DGX Spark: 128 GB unified memory shared by CPU and GPU
OS_USED_GIB = 4.5
PAGE_CACHE_GIB = 6.0
STICKY_GIB = 12.0  # seed 000 pitfall 4: ~10-16 Gi stays used after stop until caches are dropped
LEGACY_UNIT_GIB = 40.0  # memory an active legacy serving unit holds (twin assumption)
IMAGES = {  # what `docker image ls` shows on every node (twin: the lanes' images are present)
    "ghcr.io/anemll/dspark-vllm-gx10:0.1.1": "21.4GB",
    "ds4-f/patch3:local": "19.8GB",
}
DROP_CACHES = "/proc/sys/vm/drop_caches"


def _fail(message: str, code: int = 1) -> int:
    print(message, file=sys.stderr)
    return code


def _node_root() -> Path:
    root = os.environ.get("LANEBOOK_NODE_ROOT")
    if not root:
        raise LanebookError("this stand-in runs on a twin node (LANEBOOK_NODE_ROOT is not set): ssh -F <twin>/ssh_config head")
    return Path(root)


def _read_json(path: Path, default):
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return default


def _write_json(path: Path, data) -> None:
    write_atomic(path, json.dumps(data, indent=2) + "\n")


def _twin_state() -> dict:
    return _read_json(Path(os.environ.get("LANEBOOK_TWIN_DIR", "/nonexistent")) / "state.json", {})


def _time_scale() -> float:
    try:
        return float(os.environ.get("LANEBOOK_TWIN_TIME_SCALE", "1"))
    except ValueError:
        return 1.0


def _ago(seconds: float) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{int(seconds // size)} {unit}"
    return "About a minute" if seconds >= 60 else f"{max(int(seconds), 1)} seconds"


def _iso(ts: Optional[float]) -> str:
    return datetime.fromtimestamp(ts or 0, timezone.utc).isoformat().replace("+00:00", "Z")


# --- node state: memory and units -------------------------------------------------------------

@dataclass
class NodeState:
    root: Path

    @property
    def var(self) -> Path:
        return self.root / "var"

    @property
    def shm(self) -> Path:
        return self.var / "shm"

    def memory(self) -> dict:
        return _read_json(self.var / "memory.json", {"sticky_gib": 0.0, "cache_gib": PAGE_CACHE_GIB})

    def set_memory(self, **changes: float) -> None:
        _write_json(self.var / "memory.json", {**self.memory(), **changes})

    def units(self) -> dict:
        return _read_json(self.var / "units.json", {})

    def set_units(self, units: dict) -> None:
        _write_json(self.var / "units.json", units)

    def held_gib(self) -> float:
        """Memory held outside any container: sticky residue plus active legacy units."""
        legacy = sum(LEGACY_UNIT_GIB for u in self.units().values() if u.get("active") and u.get("holds_gpu"))
        return self.memory()["sticky_gib"] + legacy

    def drop_caches(self) -> None:
        self.set_memory(sticky_gib=0.0, cache_gib=0.3)

    def clean_shm(self) -> None:
        for entry in self.shm.glob("*"):
            entry.unlink(missing_ok=True)


def init_node_state(root: Path, legacy_units: list[str], legacy_active: bool) -> None:
    """Fresh memory and unit state for a node at `twin up` (legacy units active only with the fault)."""
    state = NodeState(root)
    state.shm.mkdir(parents=True, exist_ok=True)
    _write_json(state.var / "memory.json", {"sticky_gib": 0.0, "cache_gib": PAGE_CACHE_GIB})
    state.set_units({unit: {"active": legacy_active, "enabled": "enabled" if legacy_active else "disabled",
                            "holds_gpu": True, "description": "legacy vLLM serving stack"} for unit in legacy_units})


# --- containers -------------------------------------------------------------------------------

@dataclass
class Container:
    dir: Path

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def spec(self) -> dict:
        return _read_json(self.dir / "spec.json", {})

    @property
    def record(self) -> dict:
        return _read_json(self.dir / "record.json", {})

    @property
    def log(self) -> Path:
        return self.dir / "log"

    @property
    def pid(self) -> int:
        return int(self.record.get("pid", 0))

    def session_pids(self) -> list[int]:
        """Every process of the container: those in the session its supervisor leads."""
        if not self.pid:
            return []
        pids = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == self.pid and fields[0] not in "ZX":
                pids.append(int(stat.parent.name))
        return pids

    @property
    def running(self) -> bool:
        try:
            cmdline = Path(f"/proc/{self.pid}/cmdline").read_bytes()
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state not in "ZX" and f"lanebook-container:{self.name}".encode() in cmdline

    @property
    def exit_code(self) -> Optional[int]:
        if self.running:
            return None
        code = (self.dir / "exitcode").read_text().strip() if (self.dir / "exitcode").exists() else ""
        return int(code) if code.lstrip("-").isdigit() else self.record.get("exit_code", 137)

    def state(self) -> str:
        return "running" if self.running else "exited"

    def status(self) -> str:
        now = time.time()
        if self.running:
            return f"Up {_ago(now - self.record.get('started_at', now))}"
        finished = self.record.get("finished_at")
        if finished is None and (self.dir / "exitcode").exists():
            finished = (self.dir / "exitcode").stat().st_mtime
        return f"Exited ({self.exit_code}) {_ago(now - (finished or now))} ago"

    @property
    def id(self) -> str:
        return hashlib.sha256(f"{self.name}:{self.record.get('started_at')}".encode()).hexdigest()

    def summary(self) -> dict:
        spec = self.spec
        return {"ID": self.id[:12], "Names": self.name, "Name": self.name, "Image": spec.get("image", ""),
                "Command": '"bash -lc \'export P…"', "State": self.state(), "Status": self.status(),
                "Service": spec.get("service", ""), "Project": spec.get("project", ""), "ExitCode": self.exit_code or 0,
                "CreatedAt": _iso(self.record.get("started_at")), "Ports": "", "Labels": f"com.docker.compose.project={spec.get('project', '')}",
                "RunningFor": _ago(time.time() - self.record.get("started_at", time.time()))}

    def stop(self, signal_first: int = signal.SIGTERM, grace_s: Optional[float] = None) -> None:
        """Stop as docker does: SIGTERM to the container's processes, SIGKILL after the grace period."""
        if not self.running:
            return
        grace = self.spec.get("stop_grace_s", 10.0) if grace_s is None else grace_s
        code = 143 if signal_first == signal.SIGTERM else 137
        _signal_group(self.pid, signal_first)
        deadline = time.monotonic() + grace
        while self.session_pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.session_pids():
            _signal_group(self.pid, signal.SIGKILL)
            code = 137
            while self.session_pids() and time.monotonic() < deadline + 5:
                time.sleep(0.05)
        record = self.record
        if not (self.dir / "exitcode").exists():
            record["exit_code"] = code
        record["finished_at"] = time.time()
        _write_json(self.dir / "record.json", record)
        if "sticky-uma" in _twin_state().get("faults", []):
            node = NodeState(self.dir.parents[2])
            node.set_memory(sticky_gib=max(node.memory()["sticky_gib"], STICKY_GIB))


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def containers(root: Path) -> list[Container]:
    base = root / "var" / "containers"
    return sorted((Container(d) for d in base.iterdir() if d.is_dir()), key=lambda c: c.name) if base.is_dir() else []


def find_container(root: Path, ref: str) -> Optional[Container]:
    return next((c for c in containers(root) if ref in (c.name, c.id[: len(ref)]) and len(ref) >= 3), None)


def _engine_command() -> list[str]:
    """The container's process: the twin's vLLM-compatible engine (LANEBOOK_TWIN_ENGINE overrides, for tests)."""
    override = os.environ.get("LANEBOOK_TWIN_ENGINE")
    return shlex.split(override) if override else [sys.executable, "-m", "lanebook.twin.vllm"]


def start_container(root: Path, spec) -> Container:
    """Create and start a container: the engine with the container env, detached, its output in the log."""
    node = NodeState(root)
    container = Container(root / "var" / "containers" / spec.name)
    container.dir.mkdir(parents=True, exist_ok=True)
    for stale in ("exitcode", "log"):
        (container.dir / stale).unlink(missing_ok=True)
    _write_json(container.dir / "spec.json", spec.to_json())
    state = _twin_state()
    env = {
        **spec.environment,
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),  # the node session's: the controller's lanebook
        "HOME": str(root / "home"),
        "LANEBOOK_NODE": os.environ.get("LANEBOOK_NODE", root.name),
        "LANEBOOK_NODE_ROOT": str(root),
        "LANEBOOK_TWIN_TIME_SCALE": os.environ.get("LANEBOOK_TWIN_TIME_SCALE", str(state.get("time_scale", 1))),
        "LANEBOOK_TWIN_FAULTS": ",".join(state.get("faults", [])),
        "LANEBOOK_TWIN_STICKY_GIB": f"{node.held_gib():g}",
        "LANEBOOK_TWIN_VOLUMES": json.dumps({container_path: host for host, container_path in spec.volumes}),
    }
    if spec.entrypoint_error:  # the image's entrypoint refuses the configuration before exec
        code, message = spec.entrypoint_error
        command = ["sh", "-c", 'printf "%s\\n" "$0" >&2; exit "$1"', message, str(code)]
    else:
        command = [*_engine_command(), *spec.argv]
    supervisor = ["sh", "-c", '"$@"; code=$?; echo "$code" > exitcode; exit "$code"', f"lanebook-container:{spec.name}", *command]
    with open(container.log, "ab") as log:
        proc = subprocess.Popen(supervisor, cwd=container.dir, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    _write_json(container.dir / "record.json", {"pid": proc.pid, "started_at": time.time()})
    return container


def remove_container(container: Container) -> None:
    container.stop()
    for entry in container.dir.iterdir():
        entry.unlink()
    container.dir.rmdir()


def stop_all_containers(root: Path, grace_s: float = 5.0) -> None:
    """`twin down`: stop and remove every container on a node."""
    for container in containers(root):
        container.stop(grace_s=grace_s)
        remove_container(container)


# --- docker -------------------------------------------------------------------------------------

_TEMPLATE_RE = re.compile(r"\{\{\s*(json\s+)?\.([A-Za-z0-9_.]*)\s*\}\}")


def render_template(template: str, data: dict) -> str:
    """The subset of Go templates operators use with --format: {{.Field}}, {{.A.B}}, {{json .X}}, {{json .}}."""
    template = template.replace("\\t", "\t").removeprefix("table ")

    def value(match: re.Match) -> str:
        current = data
        for part in filter(None, match.group(2).split(".")):
            current = current.get(part, "") if isinstance(current, dict) else ""
        if match.group(1):
            return json.dumps(current, separators=(",", ":"))
        return json.dumps(current) if isinstance(current, (dict, list)) else str(current)

    return _TEMPLATE_RE.sub(value, template)


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("   ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows])


def _take(args: list[str], *names: str, flag: bool = False, many: bool = False):
    """Pop an option (and its value) from args: --name value, --name=value, -n value."""
    found = []
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, inline = arg.partition("=")
        if name in names:
            if flag:
                args.pop(i)
                found.append(True)
                continue
            args.pop(i)
            found.append(inline if eq else (args.pop(i) if i < len(args) else ""))
            continue
        i += 1
    if flag:
        return bool(found)
    return found if many else (found[-1] if found else None)


def _filters_match(container: Container, filters: list[str]) -> bool:
    summary = container.summary()
    for item in filters:
        key, _, value = item.partition("=")
        if key == "name" and not re.search(value, container.name):
            return False
        if key == "status" and summary["State"] != value:
            return False
        if key == "label" and value not in (summary["Labels"], "com.docker.compose.project"):
            return False
    return True


def _print_containers(items: list[Container], fmt: Optional[str], quiet: bool) -> None:
    if quiet:
        print("\n".join(c.id[:12] for c in items))
    elif fmt:
        for c in items:
            print(render_template(fmt, c.summary()))
    else:
        rows = [[s["ID"], s["Image"], s["Command"], s["RunningFor"] + " ago", s["Status"], "", s["Names"]]
                for s in (c.summary() for c in items)]
        print(_table(rows, ["CONTAINER ID", "IMAGE", "COMMAND", "CREATED", "STATUS", "PORTS", "NAMES"]))


def docker_ps(root: Path, args: list[str]) -> int:
    show_all = _take(args, "-a", "--all", flag=True)
    quiet = _take(args, "-q", "--quiet", flag=True)
    _take(args, "--no-trunc", flag=True)
    fmt = _take(args, "--format")
    filters = _take(args, "-f", "--filter", many=True)
    items = [c for c in containers(root) if (show_all or c.running) and _filters_match(c, filters)]
    _print_containers(items, fmt, quiet)
    return 0


def _print_log(container: Container, tail: Optional[str], follow: bool, prefix: str = "") -> None:
    lines = container.log.read_text(errors="replace").splitlines(keepends=True) if container.log.exists() else []
    if tail not in (None, "all"):
        lines = lines[-int(tail):] if int(tail) > 0 else []
    sys.stdout.write("".join(prefix + line for line in lines))
    sys.stdout.flush()
    if not follow:
        return
    position = container.log.stat().st_size if container.log.exists() else 0
    while True:
        with open(container.log, "rb") as handle:
            handle.seek(position)
            chunk = handle.read()
        if chunk:
            position += len(chunk)
            sys.stdout.write("".join(prefix + line for line in chunk.decode(errors="replace").splitlines(keepends=True)))
            sys.stdout.flush()
        elif not container.running:
            return
        time.sleep(0.2)


def docker_logs(root: Path, args: list[str]) -> int:
    follow = _take(args, "-f", "--follow", flag=True)
    tail = _take(args, "-n", "--tail")
    _take(args, "-t", "--timestamps", flag=True)
    _take(args, "--since", "--until")
    if len(args) != 1:
        return _fail('"docker logs" requires exactly 1 argument.')
    container = find_container(root, args[0])
    if not container:
        return _fail(f"Error response from daemon: No such container: {args[0]}")
    _print_log(container, tail, follow)
    return 0


def docker_top(root: Path, args: list[str]) -> int:
    if not args:
        return _fail('"docker top" requires at least 1 argument.')
    container = find_container(root, args[0])
    if not container or not container.running:
        return _fail(f"Error response from daemon: container {args[0]} is not running" if container else
                     f"Error response from daemon: No such container: {args[0]}")
    ps_args = args[1:] or ["-f"]
    pids = ",".join(map(str, container.session_pids()))
    return subprocess.run(["ps", *ps_args, "-p", pids]).returncode


def _inspect(container: Container) -> dict:
    spec, record = container.spec, container.record
    return {
        "Id": container.id,
        "Name": "/" + container.name,
        "Created": _iso(record.get("started_at")),
        "State": {"Status": container.state(), "Running": container.running, "Pid": container.pid if container.running else 0,
                  "ExitCode": container.exit_code or 0, "StartedAt": _iso(record.get("started_at")),
                  "FinishedAt": _iso(record.get("finished_at"))},
        "Config": {"Image": spec.get("image", ""), "Env": [f"{k}={v}" for k, v in spec.get("environment", {}).items()],
                   "Cmd": ["/usr/local/bin/vllm", *spec.get("argv", [])],
                   "Labels": {"com.docker.compose.project": spec.get("project", ""), "com.docker.compose.service": spec.get("service", "")}},
        "HostConfig": {"NetworkMode": "host", "IpcMode": "host"},
        "Mounts": [{"Type": "bind", "Source": host, "Destination": dest} for host, dest in spec.get("volumes", [])],
    }


def docker_inspect(root: Path, args: list[str]) -> int:
    fmt = _take(args, "-f", "--format")
    _take(args, "--type")
    found, code = [], 0
    for ref in args:
        container = find_container(root, ref)
        if container:
            found.append(_inspect(container))
        else:
            code = _fail(f"Error: No such object: {ref}")
    if fmt:
        for item in found:
            print(render_template(fmt, item))
    else:
        print(json.dumps(found, indent=4))
    return code


def docker_images(args: list[str]) -> int:
    fmt = _take(args, "--format")
    rows = []
    for ref, size in IMAGES.items():
        repo, _, tag = ref.rpartition(":")
        rows.append({"Repository": repo, "Tag": tag, "ID": hashlib.sha256(ref.encode()).hexdigest()[:12],
                     "CreatedSince": "4 weeks ago", "Size": size})
    if fmt:
        print("\n".join(render_template(fmt, r) for r in rows))
    else:
        print(_table([[r["Repository"], r["Tag"], r["ID"], r["CreatedSince"], r["Size"]] for r in rows],
                     ["REPOSITORY", "TAG", "IMAGE ID", "CREATED", "SIZE"]))
    return 0


def image_present(image: str) -> bool:
    return image.split("@", 1)[0] in IMAGES


def docker_compose(root: Path, args: list[str]) -> int:
    from ..effective import container_spec

    project = _take(args, "-p", "--project-name")
    files = _take(args, "-f", "--file", many=True)
    env_file = _take(args, "--env-file")
    directory = Path(_take(args, "--project-directory") or ".").resolve()
    _take(args, "--ansi", "--progress", "--profile", many=True)
    if not args:
        return _fail("Usage:  docker compose [OPTIONS] COMMAND")
    command, rest = args[0], args[1:]
    compose_file = Path(files[0]) if files else next((directory / n for n in ("compose.yaml", "compose.yml", "docker-compose.yml", "docker-compose.yaml") if (directory / n).exists()), None)
    if compose_file is None:
        return _fail("no configuration file provided: not found")
    compose_file = compose_file if compose_file.is_absolute() else directory / compose_file
    project = (project or compose_file.resolve().parent.name).lower()
    ours = [c for c in containers(root) if c.spec.get("project") == project]

    if command == "up":
        detach = _take(rest, "-d", "--detach", flag=True)
        force = _take(rest, "--force-recreate", flag=True)
        if not detach:
            return _fail("the twin's docker runs containers detached only: use `docker compose up -d`")
        if env_file is None and (directory / ".env").exists():
            env_file = str(directory / ".env")
        try:
            spec = container_spec(compose_file, env_file, project, os.environ)
        except LanebookError as exc:
            return _fail(f"error: {exc}")
        for warning in spec.warnings:
            print(f"WARN[0000] {warning}", file=sys.stderr)
        if not image_present(spec.image):
            return _fail(f"Error response from daemon: pull access denied for {spec.image.split('@')[0]}: "
                         "the twin's nodes hold only the lane images (docker image ls)")
        existing = find_container(root, spec.name)
        if existing and existing.running and not force and existing.spec == json.loads(json.dumps(spec.to_json())):
            print(f" Container {spec.name}  Running", file=sys.stderr)
            return 0
        if existing:
            print(f" Container {spec.name}  Recreate", file=sys.stderr)
            remove_container(existing)
        print(f" Container {spec.name}  Created", file=sys.stderr)
        start_container(root, spec)
        print(f" Container {spec.name}  Started", file=sys.stderr)
        return 0
    if command in ("down", "stop", "rm"):
        _take(rest, "-t", "--timeout")
        _take(rest, "--remove-orphans", "-v", "--volumes", "-f", "--force", "-s", "--stop", flag=True)
        for container in ours:
            print(f" Container {container.name}  Stopping", file=sys.stderr)
            container.stop()
            print(f" Container {container.name}  Stopped", file=sys.stderr)
            if command != "stop":
                remove_container(container)
                print(f" Container {container.name}  Removed", file=sys.stderr)
        return 0
    if command == "ps":
        show_all = _take(rest, "-a", "--all", flag=True)
        quiet = _take(rest, "-q", "--quiet", flag=True)
        fmt = _take(rest, "--format")
        items = [c for c in ours if show_all or c.running]
        if fmt == "json":
            print("\n".join(json.dumps(c.summary()) for c in items))
        elif fmt or quiet:
            _print_containers(items, fmt, quiet)
        else:
            rows = [[s["Name"], s["Image"], s["Command"], s["Service"], s["RunningFor"] + " ago", s["Status"], ""]
                    for s in (c.summary() for c in items)]
            print(_table(rows, ["NAME", "IMAGE", "COMMAND", "SERVICE", "CREATED", "STATUS", "PORTS"]))
        return 0
    if command == "logs":
        follow = _take(rest, "-f", "--follow", flag=True)
        tail = _take(rest, "-n", "--tail")
        no_prefix = _take(rest, "--no-log-prefix", flag=True)
        _take(rest, "-t", "--timestamps", "--no-color", flag=True)
        for container in ours:
            prefix = "" if no_prefix else f"{container.spec.get('service')}-1  | "
            _print_log(container, tail, follow, prefix)
        return 0
    return _fail(f"the twin's docker compose does not implement '{command}' (up -d, down, stop, rm, ps, logs)")


def docker_container_op(root: Path, op: str, args: list[str]) -> int:
    force = _take(args, "-f", "--force", flag=True)
    _take(args, "-t", "--time", "--timeout")
    code = 0
    for ref in args:
        container = find_container(root, ref)
        if not container:
            code = _fail(f"Error response from daemon: No such container: {ref}")
            continue
        if op == "rm" and container.running and not force:
            code = _fail(f"Error response from daemon: cannot remove container \"/{container.name}\": container is running: stop the container before removing or force remove")
            continue
        if op == "kill":
            container.stop(signal.SIGKILL, grace_s=1)
        elif op == "rm":
            remove_container(container)
        else:
            container.stop()
        print(ref)
    return code


def docker(args: list[str]) -> int:
    if not args:
        return _fail("Usage:  docker [OPTIONS] COMMAND")
    command, rest = args[0], args[1:]
    if command == "system" and rest[:1] == ["prune"]:
        return _fail("lanebook twin: refusing `docker system prune`: it would wipe the Anemll image "
                     "ghcr.io/anemll/dspark-vllm-gx10:0.1.1 (seed 000 pitfall 4). Free sticky memory with drop_caches instead.")
    if command in ("images",) or (command == "image" and rest[:1] in (["ls"], ["list"])):
        return docker_images(rest[1:] if command == "image" else rest)
    root = _node_root()
    if command == "compose":
        return docker_compose(root, rest)
    if command == "ps" or (command == "container" and rest[:1] == ["ls"]):
        return docker_ps(root, rest if command == "ps" else rest[1:])
    handlers: dict[str, Callable[[Path, list[str]], int]] = {"logs": docker_logs, "top": docker_top, "inspect": docker_inspect}
    if command in handlers:
        return handlers[command](root, rest)
    if command in ("stop", "rm", "kill"):
        return docker_container_op(root, command, rest)
    return _fail(f"docker: '{command}' is not a docker command (the twin's docker stand-in: compose, ps, logs, top, inspect, image ls, stop, rm, kill)")


# --- hf ---------------------------------------------------------------------------------------

def _hub_models() -> dict:
    from ..params import lane_names, load_lane
    from .tree import HubModel

    models = {}
    for name in lane_names():
        weights = load_lane(name).weights
        models[weights.repo] = HubModel(weights.repo, weights.shards)
    return models


def _truthy(value: Optional[str]) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def hf(args: list[str]) -> int:
    """`hf download REPO [--revision R] [--max-workers N] [--cache-dir D]`: the twin's hub writes the model tree."""
    from .tree import write_hub_model

    if args[:1] != ["download"]:
        return _fail("the twin's hf stand-in implements `hf download REPO` only", 2)
    rest = args[1:]
    revision = _take(rest, "--revision")
    cache_dir = _take(rest, "--cache-dir")
    _take(rest, "--max-workers", "--token", "--repo-type", "--include", "--exclude", many=True)
    quiet = _take(rest, "--quiet", flag=True)
    if len(rest) != 1:
        return _fail("usage: hf download REPO_ID [--revision R] [--max-workers N] [--cache-dir DIR]", 2)
    repo = rest[0]
    home = Path(os.environ.get("HOME", "~")).expanduser()
    hub = Path(cache_dir) if cache_dir else Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME") or home / ".cache/huggingface") / "hub")
    model = _hub_models().get(repo)
    offline = _truthy(os.environ.get("HF_HUB_OFFLINE"))
    snapshot = hub / (model.dir_name if model else "models--" + repo.replace("/", "--")) / "snapshots" / (model.revision if model else "")
    if offline:
        complete = model and all((snapshot / name).exists() for name, _ in model.files())
        if complete:
            print(snapshot)
            return 0
        return _fail("Cannot find an appropriate cached snapshot folder for the specified revision on the local disk and "
                     "outgoing traffic has been disabled. To enable repo look-ups and downloads online, set 'HF_HUB_OFFLINE=0' as environment variable.")
    if model is None:
        return _fail(f"Repository Not Found for url: https://huggingface.co/api/models/{repo}/revision/main.")
    if revision not in (None, "main", model.revision):
        return _fail(f"Revision Not Found for url: https://huggingface.co/api/models/{repo}/revision/{revision}.")
    total = len(model.files())
    written = [0]

    def progress() -> None:
        written[0] += 1
        if not quiet and (written[0] % 8 == 0 or written[0] == total):
            print(f"Fetching {total} files: {written[0]}/{total}", file=sys.stderr, flush=True)
        time.sleep(0.02)  # the twin hub's pace: an interrupted download leaves *.incomplete behind

    write_hub_model(hub, model, pace=progress)
    print(snapshot)
    return 0


# --- sudo, systemctl, free, sleep -----------------------------------------------------------------

def _node_shm_path(arg: str, node: NodeState) -> str:
    """/dev/shm/... on a node means the node's own shm directory, never this machine's."""
    if arg == "/dev/shm" or arg.startswith("/dev/shm/"):
        return str(node.shm) + arg[len("/dev/shm"):]
    return arg


def sudo(args: list[str]) -> int:
    """Privileged node operations act on the node's state: cache drop, SHM cleanup, units; the rest runs as is."""
    while args and args[0].startswith("-"):
        option = args.pop(0)
        if option in ("-u", "-g", "-C", "-h", "-p") and args:
            args.pop(0)
    if not args:
        return _fail("usage: sudo COMMAND")
    node = NodeState(_node_root())
    program = os.path.basename(args[0])
    if program in ("sh", "bash") and len(args) >= 3 and args[1] in ("-c", "-lc"):
        script = args[2]
        if DROP_CACHES in script or "/dev/shm" in script:
            if "/dev/shm" in script:
                node.clean_shm()
            if DROP_CACHES in script:
                node.drop_caches()
            return 0
    if program == "tee" and DROP_CACHES in args:
        sys.stdout.write(sys.stdin.read())
        node.drop_caches()
        return 0
    if program == "sysctl" and any(a.startswith("vm.drop_caches=") for a in args):
        node.drop_caches()
        print("vm.drop_caches = 3")
        return 0
    if program in ("systemctl", "docker", "free"):
        return main([program, *args[1:]])
    command = [_node_shm_path(a, node) for a in args]
    os.execvp(command[0], command)
    return 127  # not reached


def systemctl(args: list[str]) -> int:
    """Units on the node (legacy serving stacks): mask/unmask/stop/start/disable/enable/is-active/is-enabled/status/list-units."""
    node = NodeState(_node_root())
    units = node.units()
    now = _take(args, "--now", flag=True)
    _take(args, "--no-pager", "--all", "-a", "--quiet", "-q", "--plain", "--no-legend", flag=True)
    _take(args, "--type", "-t", "--state")
    if not args:
        args = ["list-units"]
    command, names = args[0], args[1:]
    default = {"active": False, "enabled": "disabled", "holds_gpu": False, "description": ""}
    if command in ("mask", "unmask", "stop", "start", "disable", "enable", "restart"):
        for name in names:
            unit = units.setdefault(name, dict(default))
            if command in ("start", "restart") and unit["enabled"] == "masked":
                node.set_units(units)
                return _fail(f"Failed to start {name}: Unit {name} is masked.")
            if command == "mask":
                unit["enabled"] = "masked"
                print(f"Created symlink /etc/systemd/system/{name} → /dev/null.", file=sys.stderr)
            elif command == "unmask":
                unit["enabled"] = "disabled"
            elif command in ("disable", "enable"):
                unit["enabled"] = command + "d"
            if command in ("stop",) or (now and command in ("mask", "disable")):
                unit["active"] = False
            if command in ("start", "restart") or (now and command == "enable"):
                unit["active"] = True
        node.set_units(units)
        return 0
    if command == "is-active":
        states = ["active" if units.get(n, {}).get("active") else "inactive" for n in names]
        print("\n".join(states))
        return 0 if states and all(s == "active" for s in states) else 3
    if command == "is-enabled":
        states = [units.get(n, {}).get("enabled", "not-found") for n in names]
        print("\n".join(states))
        return 0 if states and all(s == "enabled" for s in states) else 1
    if command == "status":
        code = 0
        for name in names:
            unit = units.get(name)
            if unit is None:
                print(f"Unit {name} could not be found.", file=sys.stderr)
                code = 4
                continue
            active = "active (running)" if unit["active"] else "inactive (dead)"
            print(f"● {name} - {unit.get('description', '')}\n     Loaded: loaded ({unit['enabled']})\n     Active: {active}")
            code = code or (0 if unit["active"] else 3)
        return code
    if command in ("list-units", "list-unit-files"):
        rows = [[n, "loaded" if u["enabled"] != "masked" else "masked", "active" if u["active"] else "inactive",
                 "running" if u["active"] else "dead", u.get("description", "")]
                for n, u in sorted(units.items()) if not names or any(re.fullmatch(p.replace("*", ".*"), n) for p in names)]
        print(_table(rows, ["UNIT", "LOAD", "ACTIVE", "SUB", "DESCRIPTION"]))
        return 0
    if command == "daemon-reload":
        return 0
    return _fail(f"the twin's systemctl does not implement '{command}'")


def free(args: list[str]) -> int:
    """Memory as a DGX Spark reports it: 128 GB unified; engines, sticky residue and legacy units count as used."""
    root = _node_root()
    node = NodeState(root)
    units = {"-b": (1, "B"), "--bytes": (1, "B"), "-k": (1024, ""), "--kibi": (1024, ""), "-m": (1024 ** 2, ""),
             "--mebi": (1024 ** 2, ""), "-g": (GIB, ""), "--gibi": (GIB, ""), "-h": (None, ""), "--human": (None, "")}
    divisor = next((units[a][0] for a in args if a in units), 1024)
    engines = 0.0
    for container in containers(root):
        if container.running:
            util = next((float(v) for k, v in zip(container.spec.get("argv", []), container.spec.get("argv", [])[1:])
                         if k == "--gpu-memory-utilization"), 0.0)
            engines += util * TOTAL_BYTES
    memory = node.memory()
    used = OS_USED_GIB * GIB + engines + node.held_gib() * GIB
    cache = memory["cache_gib"] * GIB
    free_bytes = max(TOTAL_BYTES - used - cache, 0)
    available = max(TOTAL_BYTES - used, 0)

    def fmt(value: float) -> str:
        if divisor is None:
            for unit, size in (("Gi", GIB), ("Mi", 1024 ** 2), ("Ki", 1024)):
                if value >= size:
                    return f"{value / size:.1f}{unit}"
            return f"{int(value)}B"
        return str(int(value // divisor))

    print(f"{'':15}{'total':>12}{'used':>12}{'free':>12}{'shared':>12}{'buff/cache':>12}{'available':>12}")
    print(f"{'Mem:':15}{fmt(TOTAL_BYTES):>12}{fmt(used):>12}{fmt(free_bytes):>12}{fmt(0):>12}{fmt(cache):>12}{fmt(available):>12}")
    print(f"{'Swap:':15}{fmt(0):>12}{fmt(0):>12}{fmt(0):>12}")
    return 0


def sleep(args: list[str]) -> int:
    """`sleep N` on a node runs on the twin's clock: --fast scales every wait."""
    scale = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    total = 0.0
    for arg in args:
        match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd]?)", arg)
        if not match:
            return _fail(f"sleep: invalid time interval '{arg}'")
        total += float(match.group(1)) * scale[match.group(2) or "s"]
    time.sleep(total * _time_scale())
    return 0


COMMANDS: dict[str, Callable[[list[str]], int]] = {"docker": docker, "hf": hf, "sudo": sudo, "systemctl": systemctl,
                                                   "free": free, "sleep": sleep}


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        return _fail(f"usage: python -m lanebook.twin.standins {{{','.join(COMMANDS)}}} ARGS...", 2)
    try:
        return COMMANDS[argv[0]](argv[1:])
    except LanebookError as exc:
        return _fail(f"{argv[0]}: {exc}")
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
