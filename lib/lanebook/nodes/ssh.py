"""Acting on the lane's nodes over SSH, in Fabric's spirit: LaneNodes holds a lane's Nodes as a Group does.

Every remote command goes through one place, `Executor.run`: it quotes nothing itself (callers build
commands with `q`/`qpath`), but it logs each command (node, duration, exit), applies a timeout,
redacts secrets from what it records, and in dry-run records the exact command line instead of
opening a connection. `LaneNodes.each` runs one command on several nodes and, as Fabric's Group does,
collects every node's outcome before reporting any failure.
"""

from __future__ import annotations

import logging
import shlex
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

from lanebook.base.checks import NOT_OBSERVED_DRY_RUN
from lanebook.base.errors import LanebookError
from lanebook.base.redact import redact
from lanebook.lane.keys import lane_keys
from lanebook.lane.params import LaneParams, NodeParams
from lanebook.lane.plugins import resolve_ssh_config

log = logging.getLogger("lanebook.nodes.ssh")


def q(value: object) -> str:
    """Shell-quote one value."""
    return shlex.quote(str(value))


def qpath(path: str) -> str:
    """Shell-quote a path but keep a leading ~/ expandable, so ~ means the node's home."""
    if path == "~":
        return "~"
    if path.startswith("~/"):
        rest = path[2:]
        return "~/" + (shlex.quote(rest) if rest else "")
    return shlex.quote(path)


def env_prefix(env: dict[str, object]) -> str:
    """`K=V K2=V2 ` with values quoted, for a command's environment."""
    return "".join(f"{k}={q(v)} " for k, v in env.items())


class NodeError(LanebookError):
    """A node could not be reached or a command on it failed."""


class NodeUnreachable(NodeError):
    pass


class CommandTimeout(NodeError):
    pass


class CommandFailed(NodeError):
    def __init__(self, result: "CommandResult"):
        self.result = result
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        super().__init__(
            f"{result.node}: exit {result.exit_code}: {result.command}" + (f" — {' | '.join(tail)}" if tail else "")
        )


@dataclass
class CommandResult:
    node: str
    command: str  # as recorded: redacted
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class NodesResult(dict):
    """Every node's outcome of one `LaneNodes.each`, by alias: its CommandResult, or the NodeError it raised."""

    @property
    def failed(self) -> dict[str, "CommandResult | NodeError"]:
        """Nodes that raised, or whose command exited non-zero (with check=False)."""
        return {alias: r for alias, r in self.items() if isinstance(r, Exception) or not r.ok}

    @property
    def succeeded(self) -> dict[str, "CommandResult"]:
        return {alias: r for alias, r in self.items() if alias not in self.failed}

    @property
    def dry_run(self) -> bool:
        return any(isinstance(r, CommandResult) and r.dry_run for r in self.values())

    @property
    def ok(self) -> bool:
        """Every node ran the command and it exited 0; a dry run ran nothing, so it is never ok."""
        return bool(self) and not self.dry_run and not self.failed

    def summary(self) -> str:
        """One line: the failures (each names its node), or that every node succeeded."""
        if self.dry_run:
            return NOT_OBSERVED_DRY_RUN
        failed = self.failed
        if not failed:
            return f"ok on {', '.join(self)}"
        lines = [str(r) if isinstance(r, Exception) else f"{alias}: exit {r.exit_code}" for alias, r in failed.items()]
        return " ".join("; ".join(lines).split()) + f" ({len(failed)} of {len(self)} nodes failed)"


class NodesFailed(NodeError):
    """Some nodes of a `LaneNodes.each` raised; `results` holds every node's outcome, the others' included."""

    def __init__(self, results: NodesResult):
        self.results = results
        super().__init__(results.summary())


@dataclass
class Executor:
    """The one place remote commands go through (see module docstring)."""

    dry_run: bool = False
    default_timeout: float = 120.0
    history: list[CommandResult] = field(default_factory=list)
    on_result: Optional[Callable[[CommandResult], None]] = None

    def run(
        self,
        node: "Node",
        command: str,
        *,
        timeout: Optional[float] = None,
        check: bool = True,
        dry_stdout: str = "",
        pty: bool = False,
        stdin: Optional[Path] = None,
        on_line: Optional[Callable[[str], None]] = None,
    ) -> CommandResult:
        """Run one command on a node.

        pty: give the command a terminal, so that a timeout hangs it up (SIGHUP) on the node; without
        one the remote process would run on after we give up. Use it for long commands (rsync,
        launcher, downloads); output then arrives on stdout only.
        stdin: a local file fed to the command (recorded as `command < NAME`), e.g. a probe script
        for `python3 -`, so the recorded line stays readable.
        on_line: called with each (redacted) output line as it arrives, for progress display.
        """
        shown = redact(command) + (f" < {stdin.name}" if stdin else "")
        if self.dry_run:
            result = CommandResult(node.alias, shown, 0, stdout=dry_stdout, dry_run=True)
            return self._record(result)
        timeout = timeout or self.default_timeout
        started = time.monotonic()
        try:
            with ExitStack() as stack:
                streams = {}
                if on_line:
                    streams = {
                        "out_stream": stack.enter_context(_LineStream(on_line)),
                        "err_stream": stack.enter_context(_LineStream(on_line)),
                    }
                in_stream = _WholeText(stdin.read_text()) if stdin else False
                raw = node.connection().run(
                    command, hide=not on_line, warn=True, timeout=timeout, in_stream=in_stream, pty=pty, **streams
                )
        except KeyboardInterrupt:  # Ctrl-C, or a SIGTERM raised as one: the command is hung up, the stop goes on
            self._record(
                CommandResult(node.alias, shown, 130, stderr="interrupted", duration_s=time.monotonic() - started)
            )
            node.close()
            raise
        except Exception as exc:  # noqa: BLE001 - classify transport errors into our two kinds
            duration = time.monotonic() - started
            if type(exc).__name__ == "CommandTimedOut":
                self._timed_out(node, shown, timeout, duration)
            node.close()
            self._record(CommandResult(node.alias, shown, 255, stderr=str(exc), duration_s=duration))
            raise NodeUnreachable(f"{node.alias} ({node.address}) unreachable: {type(exc).__name__}: {exc}") from None
        duration = time.monotonic() - started
        if raw.exited == -1 and duration >= timeout:
            # invoke's timer won the race with the channel closing: no exit status, same meaning.
            self._timed_out(node, shown, timeout, duration)
        stdout = raw.stdout.replace("\r\n", "\n") if pty else raw.stdout
        result = self._record(
            CommandResult(node.alias, shown, raw.exited, redact(stdout), redact(raw.stderr), duration)
        )
        if check and not result.ok:
            raise CommandFailed(result)
        return result

    def record_local(
        self, description: str, *, exit_code: int = 0, duration_s: float = 0.0, detail: str = ""
    ) -> CommandResult:
        """Record a step that runs on the operator's machine (an HTTP wait), so dry-run shows it too."""
        return self._record(
            CommandResult(
                "local",
                redact(description),
                exit_code,
                stdout=redact(detail),
                duration_s=duration_s,
                dry_run=self.dry_run,
            )
        )

    def _timed_out(self, node: "Node", shown: str, timeout: float, duration: float) -> None:
        self._record(
            CommandResult(node.alias, shown, 124, stderr=f"timed out after {timeout:g} s", duration_s=duration)
        )
        node.close()
        raise CommandTimeout(f"{node.alias}: command timed out after {timeout:g} s: {shown}") from None

    def _record(self, result: CommandResult) -> CommandResult:
        self.history.append(result)
        log.info(
            "%s%s [%s] exit=%s %.2fs",
            "DRY-RUN " if result.dry_run else "",
            result.node,
            result.command,
            result.exit_code,
            result.duration_s,
        )
        if self.on_result:
            self.on_result(result)
        return result

    def commands(self) -> list[str]:
        """The command lines sent (or, in dry-run, that would be sent), as `node: command`."""
        return [f"{r.node}: {r.command}" for r in self.history]


def _remote_runner():
    """fabric's Remote runner, except that input a command stopped reading is dropped once the command has ended (as
    invoke drops it for a local process whose pipe closed): a command that refuses before reading its stdin then ends
    with its own exit status and message, not as an unreachable node, however the race with the input goes. And the
    timeout's kill, which runs on invoke's timer thread, finds the connection already closed quietly: the timeout is
    reported once, as CommandTimeout, never as a thread's traceback on the operator's terminal. And a KeyboardInterrupt
    (Ctrl-C, or a SIGTERM a watch raises as one) closes the command's channel and goes on up at once, with or without
    a terminal: invoke would spend it on a ^C sent to the command and carry on as if nothing had been asked."""
    from fabric.runners import Remote

    class InputMayOutliveCommand(Remote):
        def _write_proc_stdin(self, data):
            try:
                super()._write_proc_stdin(data)
            except OSError:
                if not self.process_is_finished:
                    raise

        def kill(self):
            try:
                super().kill()
            except (EOFError, OSError):  # the transport went first: the channel is closed already
                pass

        def send_interrupt(self, interrupt):
            try:
                self.channel.close()  # the node hangs a terminal's command up; the output threads see the end
            except (EOFError, OSError):  # the transport went first: nothing left to hang up
                pass
            raise interrupt

    return InputMayOutliveCommand


class _WholeText:
    """An in_stream that hands Fabric its whole text at once: Fabric reads other streams a byte at a time
    with a 10 ms nap per byte (a 7 kB script would take 70 s)."""

    def __init__(self, text: str):
        self.text = text

    def read(self, _size: int = -1) -> str:
        text, self.text = self.text, ""
        return text

    def isatty(self) -> bool:
        return False


class _LineStream:
    """A write-only stream that hands complete output lines (redacted) to a callback."""

    def __init__(self, on_line: Callable[[str], None]):
        self.on_line = on_line
        self.pending = ""

    def write(self, text: str) -> None:
        self.pending += text.replace("\r\n", "\n")
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self.on_line(redact(line))

    def flush(self) -> None:
        pass

    def __enter__(self) -> "_LineStream":
        return self

    def __exit__(self, *exc) -> None:
        if self.pending:
            self.on_line(redact(self.pending))
            self.pending = ""


class Node:
    """One machine of the lane. Connections are opened lazily: a dry run never opens one."""

    def __init__(
        self, params: NodeParams, executor: Executor, ssh_config: Optional[Path], gateway: Optional["Node"] = None
    ):
        self.params = params
        self.executor = executor
        self.ssh_config = ssh_config
        self.gateway = gateway
        self._connection = None
        self._target: Optional[str] = None  # user@host:port as resolved by Fabric (ssh config included)

    alias = property(lambda self: self.params.alias)
    role = property(lambda self: self.params.role)
    roce_ip = property(lambda self: self.params.roce_ip)

    @property
    def address(self) -> str:
        """Where the node is reached: as resolved once a connection was set up (the ssh config wins), else the
        params."""
        if self._target:
            return self._target
        user = f"{self.params.user}@" if self.params.user else ""
        return f"{user}{self.params.host}:{self.params.port}"

    def connection(self):
        if self.executor.dry_run:
            raise AssertionError("dry-run must never open a connection")
        if self._connection is None:
            from fabric import Config, Connection

            overrides = {"runners": {"remote": _remote_runner()}}
            if self.ssh_config:
                config = Config(runtime_ssh_path=str(self.ssh_config), overrides=overrides)
                config.load_ssh_config()
                self._connection = Connection(self.alias, config=config, connect_timeout=10)
            else:
                self._connection = Connection(
                    self.params.host,
                    user=self.params.user,
                    port=self.params.port,
                    connect_timeout=10,
                    gateway=self.gateway.connection() if self.gateway else None,
                    config=Config(overrides=overrides),
                )
            self._check_host_keys(self._connection)
            self._target = f"{self._connection.user}@{self._connection.host}:{self._connection.port}"
        return self._connection

    @staticmethod
    def _check_host_keys(connection) -> None:
        """Host-key checking on, as `ssh` does with StrictHostKeyChecking: an unknown or changed key refuses.

        Fabric would otherwise add unknown keys silently, and it ignores UserKnownHostsFile, so the
        known_hosts the ssh config names (the twin's own) is loaded here.
        """
        from paramiko import RejectPolicy

        named = connection.ssh_config.get("userknownhostsfile", "").split()
        connection.client.load_system_host_keys()  # /etc/ssh/ssh_known_hosts is read by ssh too
        for path in named or ["~/.ssh/known_hosts", "~/.ssh/known_hosts2"]:  # ssh's defaults when none is named
            known = Path(path).expanduser()
            if known.is_file():
                connection.client.load_host_keys(str(known))
        connection.client.set_missing_host_key_policy(RejectPolicy())

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def run(self, command: str, **kwargs) -> CommandResult:
        """See Executor.run for the keyword arguments (timeout, check, pty, stdin, on_line, dry_stdout)."""
        return self.executor.run(self, command, **kwargs)

    def sudo(self, command: str, **kwargs) -> CommandResult:
        """Run as root without a prompt (sudo -n): a headless run cannot answer one."""
        return self.run(f"sudo -n sh -c {q(command)}", **kwargs)

    def put(self, local: str | Path, remote: str) -> None:
        """Copy one file to the node (SFTP; directories go through rsync)."""
        self._transfer("put", str(local), remote)

    def get(self, remote: str, local: str | Path) -> None:
        self._transfer("get", remote, str(local))

    def _transfer(self, kind: str, src: str, dst: str) -> None:
        shown = f"sftp {kind} {src} {dst}"
        if self.executor.dry_run:
            self.executor._record(CommandResult(self.alias, shown, 0, dry_run=True))
            return
        started = time.monotonic()
        try:
            getattr(self.connection(), kind)(src, dst)
        except (OSError, IOError) as exc:
            self.executor._record(
                CommandResult(self.alias, shown, 1, stderr=str(exc), duration_s=time.monotonic() - started)
            )
            raise NodeError(f"{self.alias}: {shown} failed: {exc}") from None
        self.executor._record(CommandResult(self.alias, shown, 0, duration_s=time.monotonic() - started))

    def __repr__(self) -> str:
        return f"Node({self.alias}, {self.role}, {self.address})"


class LaneNodes:
    """A lane's nodes, bound to one executor (dry-run or real): iterate it for its Nodes, in the lane file's order."""

    def __init__(self, params: LaneParams, *, dry_run: bool = False, executor: Optional[Executor] = None):
        lane_keys(params)  # a keyed lane's keys read and checked before any node is touched, known to the redactor
        self.params = params
        self.executor = executor or Executor(dry_run=dry_run)
        ssh_config = resolve_ssh_config(params.ssh_config) if not self.executor.dry_run else None
        by_alias: dict[str, Node] = {}
        for node_params in sorted(params.nodes, key=lambda n: n.jump is not None):
            gateway = by_alias.get(node_params.jump) if node_params.jump else None
            by_alias[node_params.alias] = Node(node_params, self.executor, ssh_config, gateway)
        self._nodes = [by_alias[n.alias] for n in params.nodes]

    def __iter__(self) -> Iterator[Node]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def head(self) -> Node:
        return next(n for n in self._nodes if n.role == "head")

    @property
    def workers(self) -> list[Node]:
        return [n for n in self._nodes if n.role == "worker"]

    def node(self, alias: str) -> Node:
        for n in self._nodes:
            if n.alias == alias:
                return n
        raise LanebookError(f"lane {self.params.name} has no node '{alias}'")

    def each(self, command: str, only: Optional[Iterable[Node]] = None, **kwargs) -> NodesResult:
        """Run the same command on every node (or `only` those), in order; results by alias.

        A node that fails does not stop the others: every node is tried, then NodesFailed (carrying every
        node's outcome) is raised if any raised. Keyword arguments go to Node.run (check=False keeps a
        non-zero exit a result, listed in `.failed`).
        """
        results = NodesResult()
        for node in only or self._nodes:
            try:
                results[node.alias] = node.run(command, **kwargs)
            except NodeError as exc:
                results[node.alias] = exc
        if any(isinstance(r, Exception) for r in results.values()):
            raise NodesFailed(results)
        return results

    def close(self) -> None:
        for n in self._nodes:
            n.close()

    def __enter__(self) -> "LaneNodes":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
