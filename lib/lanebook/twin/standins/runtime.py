"""The twin's container runtime: what dockerd would do on a node, with the engine as the container's process.

A container is a directory under the node's var/containers/NAME: spec.json (what Compose asked
for), process.json (the command and environment it runs, fixed when it is created, as docker keeps a
container's config), record.json (pid, creation, start and finish times), log (its stdout and stderr:
`docker logs`, appended to by every start) and exitcode. Its process is the twin's vLLM-compatible
engine, started detached in its own session under a small supervisor named after the container, so
`docker top` and `docker stop` find every process of it. With the host IPC namespace (the compose file's `ipc: host`)
the serving stack's
shared-memory segments live in the node's /dev/shm: created when the container starts, unlinked
when it stops cleanly, left behind when it is killed (SIGKILL skips the clean-up, as NCCL's does).
When the node boots, dockerd starts again the containers their restart policy names (boot_containers).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from lanebook.base.processes import process_alive, process_start, session_processes
from lanebook.twin.standins.base import TIME_SCALE_VAR, ago, iso, read_json, twin_state, write_json
from lanebook.twin.standins.machine import NodeMachine

KILLED = 137  # 128 + SIGKILL
TERMINATED = 143  # 128 + SIGTERM


class Container:
    """A container on a node, kept in its directory (DIR: ROOT/var/containers/NAME)."""

    __slots__ = ("dir",)

    def __init__(self, dir: Path):
        self.dir = dir

    def __eq__(self, other: object) -> bool:
        return self.dir == other.dir if isinstance(other, Container) else NotImplemented

    def __repr__(self) -> str:
        return f"Container(dir={self.dir!r})"

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def node_root(self) -> Path:
        return self.dir.parents[2]  # ROOT/var/containers/NAME

    @property
    def spec(self) -> dict:
        return read_json(self.dir / "spec.json", {})

    @property
    def record(self) -> dict:
        return read_json(self.dir / "record.json", {})

    @property
    def log(self) -> Path:
        return self.dir / "log"

    @property
    def pid(self) -> int:
        return int(self.record.get("pid", 0))

    @property
    def created_at(self) -> float | None:
        record = self.record
        return record.get("created_at", record.get("started_at"))

    @property
    def id(self) -> str:
        import hashlib

        return hashlib.sha256(f"{self.name}:{self.created_at}".encode()).hexdigest()

    @property
    def restart_policy(self) -> str:
        return self.spec.get("restart", "no")

    def session_pids(self) -> list[int]:
        """Every process of the container: those in the session its supervisor leads."""
        return session_processes(self.pid) if self.pid else []

    @property
    def running(self) -> bool:
        """Its supervisor is alive and has not written an exit code. The process is known by its pid and its start
        time, both recorded when it started: a pid alone can be another process's after a wrap."""
        if self._written_exit_code() is not None:
            return False
        record = self.record
        return process_alive(record.get("pid", 0), record.get("process_start"))

    @property
    def exit_code(self) -> int | None:
        """What the supervisor wrote when the process ended; None while it runs; the code its stop recorded (137
        when none did) for a process killed before it could write one."""
        written = self._written_exit_code()
        if written is not None:
            return written
        if self.running:
            return None
        return self.record.get("exit_code", KILLED)

    def _written_exit_code(self) -> int | None:
        try:
            code = (self.dir / "exitcode").read_text().strip()
        except FileNotFoundError:
            return None
        return int(code) if code.lstrip("-").isdigit() else None

    def state(self) -> str:
        return "running" if self.running else "exited"

    def status(self) -> str:
        now = time.time()
        if self.running:
            return f"Up {ago(now - self.record.get('started_at', now))}"
        finished = self.record.get("finished_at")
        if finished is None and (self.dir / "exitcode").exists():
            finished = (self.dir / "exitcode").stat().st_mtime
        return f"Exited ({self.exit_code}) {ago(now - (finished or now))} ago"

    def summary(self) -> dict:
        """The fields `docker ps --format` templates read."""
        spec = self.spec
        return {
            "ID": self.id[:12],
            "Names": self.name,
            "Name": self.name,
            "Image": spec.get("image", ""),
            "Command": '"bash -lc \'export P…"',
            "State": self.state(),
            "Status": self.status(),
            "Service": spec.get("service", ""),
            "Project": spec.get("project", ""),
            "ExitCode": self.exit_code or 0,
            "CreatedAt": iso(self.created_at),
            "Ports": "",
            "Labels": f"com.docker.compose.project={spec.get('project', '')}",
            "RunningFor": ago(time.time() - (self.created_at or time.time())),
        }

    def shm_segments(self) -> list[Path]:
        """The shared-memory segments this container's processes created in the node's /dev/shm."""
        shm = NodeMachine(self.node_root).shm
        return [shm / name for name in self.record.get("shm_segments", [])]

    def stop(self, signal_first: int = signal.SIGTERM, grace_s: float | None = None) -> None:
        """Stop as docker does: the signal to the container's processes, SIGKILL after the grace period."""
        if not self.running:
            return
        grace = self.spec.get("stop_grace_s", 10.0) if grace_s is None else grace_s
        code = TERMINATED if signal_first == signal.SIGTERM else KILLED
        signal_group(self.pid, signal_first)
        deadline = time.monotonic() + grace
        while self.session_pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.session_pids():
            signal_group(self.pid, signal.SIGKILL)
            code = KILLED
            while self.session_pids() and time.monotonic() < deadline + 5:
                time.sleep(0.05)
        record = self.record
        if not (self.dir / "exitcode").exists():
            record["exit_code"] = code
        record["finished_at"] = time.time()
        write_json(self.dir / "record.json", record)
        if code != KILLED:
            for segment in self.shm_segments():
                segment.unlink(missing_ok=True)
        if "sticky-uma" in twin_state().get("faults", []):
            NodeMachine(self.node_root).hold_sticky()


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def containers(root: Path) -> list[Container]:
    base = root / "var" / "containers"
    return sorted((Container(d) for d in base.iterdir() if d.is_dir()), key=lambda c: c.name) if base.is_dir() else []


def find_container(root: Path, ref: str) -> Container | None:
    """By name, or by an ID prefix of at least 3 characters."""
    return next((c for c in containers(root) if ref in (c.name, c.id[: len(ref)]) and len(ref) >= 3), None)


def engine_command() -> list[str]:
    """The container's process: the twin's vLLM-compatible engine (LANEBOOK_TWIN_ENGINE overrides, for tests)."""
    import shlex

    override = os.environ.get("LANEBOOK_TWIN_ENGINE")
    return shlex.split(override) if override else [sys.executable, "-m", "lanebook.twin.vllm"]


def container_faults(state: dict, node: str, project: str) -> list[str]:
    """The faults a container meets: the twin's, and those set on the lane it belongs to (`twin fault --lane`: its
    node among the lane's, its Compose project the lane's)."""
    faults = list(state.get("faults", []))
    for scoped in state.get("lane_faults", {}).values():
        if node in scoped["nodes"] and project == scoped["project"]:
            faults += [name for name in scoped["faults"] if name not in faults]
    return faults


def start_container(root: Path, spec) -> Container:
    """Create and start a container: the engine with the container env, detached, its output in the log."""
    container = Container(root / "var" / "containers" / spec.name)
    container.dir.mkdir(parents=True, exist_ok=True)
    for stale in ("exitcode", "log"):
        (container.dir / stale).unlink(missing_ok=True)
    write_json(container.dir / "spec.json", spec.to_json())
    state = twin_state()
    env = {
        **spec.environment,
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),  # the node session's: the controller's lanebook
        "HOME": str(root / "home"),
        "LANEBOOK_NODE": os.environ.get("LANEBOOK_NODE", root.name),
        "LANEBOOK_NODE_ROOT": str(root),
        TIME_SCALE_VAR: os.environ.get(TIME_SCALE_VAR, str(state.get("time_scale", 1))),
        "LANEBOOK_TWIN_FAULTS": ",".join(container_faults(state, os.environ.get("LANEBOOK_NODE", ""), spec.project)),
        "LANEBOOK_TWIN_VOLUMES": json.dumps({container_path: host for host, container_path in spec.volumes}),
    }
    if spec.entrypoint_error:  # the image's entrypoint refuses the configuration before exec
        code, message = spec.entrypoint_error
        command = ["sh", "-c", 'printf "%s\\n" "$0" >&2; exit "$1"', message, str(code)]
    else:
        command = [*engine_command(), *spec.argv]
    write_json(container.dir / "process.json", {"command": command, "env": env})
    _run(container, {"created_at": time.time()})
    return container


def _run(container: Container, record: dict) -> None:
    """Start the container's process (again): its command and environment as created, the memory the node holds
    now, its output appended to the log; RECORD is what the container keeps from before (its creation time)."""
    import hashlib
    import subprocess

    machine = NodeMachine(container.node_root)
    process = read_json(container.dir / "process.json", {})
    env = {**process["env"], "LANEBOOK_TWIN_STICKY_GIB": f"{machine.held_gib():g}"}
    name = container.name
    (container.dir / "exitcode").unlink(missing_ok=True)
    supervisor = [
        "sh",
        "-c",
        '"$@"; code=$?; echo "$code" > exitcode.new; mv exitcode.new exitcode; exit "$code"',
        f"lanebook-container:{name}",
        *process["command"],
    ]
    with open(container.log, "ab") as log:
        proc = subprocess.Popen(
            supervisor,
            cwd=container.dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    tag = hashlib.sha256(f"{name}:{proc.pid}:{time.time()}".encode()).hexdigest()
    # vLLM's shm broadcast ring and NCCL's shm transport; a refused entrypoint never got that far.
    segments = [] if container.spec.get("entrypoint_error") else [f"psm_{tag[:8]}", f"nccl-{tag[8:14]}"]
    machine.shm.mkdir(parents=True, exist_ok=True)
    for segment in segments:
        (machine.shm / segment).write_bytes(b"\0" * 4096)
    write_json(
        container.dir / "record.json",
        {
            **record,
            "pid": proc.pid,
            "process_start": process_start(proc.pid),  # not yet reaped: readable even if it ended
            "started_at": time.time(),
            "shm_segments": segments,
        },
    )


def remove_container(container: Container) -> None:
    container.stop()
    for entry in container.dir.iterdir():
        entry.unlink()
    container.dir.rmdir()


def power_off(root: Path) -> list[str]:
    """The node loses power or reboots: every running container's processes end at once, with no clean-up and
    no exit code of their own (docker then shows them exited, 137). The names of those that were running.

    dockerd never sees them stop: they are still the containers that were running, which decides what an
    `unless-stopped` policy does at the next boot (boot_containers)."""
    stopped = []
    for container in containers(root):
        if container.running:
            signal_group(container.pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
            while container.session_pids() and time.monotonic() < deadline:
                time.sleep(0.05)
            write_json(
                container.dir / "record.json",
                {**container.record, "finished_at": time.time(), "running_at_power_off": True},
            )
            stopped.append(container.name)
    return stopped


def starts_at_daemon_start(policy: str, running_at_power_off: bool) -> bool:
    """Whether dockerd starts a container when it starts (at boot), by the container's restart policy, as
    Docker documents it: `always` whatever state it was left in, even stopped with `docker stop`;
    `unless-stopped` only when it had not been put in a stopped state, that is when it was running as power
    was lost; `on-failure` and `no` never at daemon start."""
    name = policy.partition(":")[0]
    return name == "always" or (name == "unless-stopped" and running_at_power_off)


def boot_containers(root: Path) -> list[str]:
    """dockerd at boot: start again the containers whose restart policy says so (starts_at_daemon_start), each
    running the command it was created with as a new process, its output appended to its log, with a fresh
    start time; the others keep their exit. The names of those started."""
    started = []
    for container in containers(root):
        record = container.record
        was_running = bool(record.pop("running_at_power_off", False))
        if not container.running and starts_at_daemon_start(container.restart_policy, was_running):
            kept = {key: record[key] for key in ("finished_at",) if key in record}  # docker keeps the last finish
            _run(container, {"created_at": container.created_at, **kept})
            started.append(container.name)
        else:
            write_json(container.dir / "record.json", record)
    return started


def stop_all_containers(root: Path, grace_s: float = 5.0) -> None:
    """`twin down`: stop and remove every container on a node."""
    for container in containers(root):
        container.stop(grace_s=grace_s)
        remove_container(container)
