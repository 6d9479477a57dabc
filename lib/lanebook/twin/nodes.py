"""The twin's real sshd nodes: keys, known_hosts, sshd configs, the client ssh_config and each node's session.

A twin node is an alias and a loopback address (TwinAddresses.nodes): `twin up` starts the default pair (head
127.0.0.2, worker 127.0.0.3), and a lane naming more nodes (a four-node lane's worker2 and worker3, a fleet lane's own
pair) gets them added. Each node is an unprivileged `sshd -D` on its own loopback address. Its ForceCommand
(node-session) gives every login the node's own HOME, PATH (stand-in shims first) and state, maps the node's system
paths (/dev/shm, drop_caches, the systemd unit directory) into its root (lanebook.twin.session), then
runs what the client asked for, so ssh, sftp (Fabric put/get) and rsync's remote side all work
relative to the node's home. Host-key checking stays on: clients use the twin's own known_hosts.
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from lanebook.base.errors import LanebookError
from lanebook.base.files import write_atomic
from lanebook.base.paths import REPO
from lanebook.twin.real_engine import KNOB as REAL_ENGINE_KNOB
from lanebook.twin.session import NODE_PATHS, mapped_root, perl_mapping
from lanebook.twin.standins.base import STANDIN_MARK, TIME_SCALE_VAR

HEAD, WORKER = "head", "worker"
DEFAULT_NODES = ((HEAD, "127.0.0.2"), (WORKER, "127.0.0.3"))  # what `twin up` starts: the two-node lanes' pair
ALIASES = tuple(alias for alias, _ in DEFAULT_NODES)
SSHD = "/usr/sbin/sshd"
SFTP_SERVERS = ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server", "/usr/libexec/sftp-server")
STANDINS = (
    "docker",
    "hf",
    "sudo",
    "systemctl",
    "loginctl",
    "sysctl",
    "free",
    "df",
    "dmesg",
    "journalctl",
    "ip",
    "rdma",
    "ib_write_bw",
)
LIB_DIR = Path(__file__).resolve().parents[2]  # the lib/ holding this lanebook package
RSYNC_DROP_BYTES = 3 * 1024 * 1024  # ssh-drop-mid-rsync: the first push to the worker dies after this much


@dataclass(frozen=True)
class TwinAddresses:
    """Where the twin listens: its nodes (alias, loopback address) in the order they were added, and the ports every
    node shares (moved by env, so a private test twin can run beside the shared one). `twin up` starts the default
    pair; a lane that names more nodes gets them added (lanebook.twin.control.add_nodes)."""

    nodes: tuple[tuple[str, str], ...] = DEFAULT_NODES
    ssh_port: int = 2222
    api_port: int = 8888
    master_port: int = 25000

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple((str(alias), str(ip)) for alias, ip in self.nodes))  # JSON lists

    @classmethod
    def from_env(cls) -> "TwinAddresses":
        def port(name: str, default: int) -> int:
            value = os.environ.get(name, str(default))
            if not value.isdigit() or not 1024 < int(value) < 65536:
                raise LanebookError(f"{name} must be a port number above 1024 (got {value!r})")
            return int(value)

        return cls(
            ssh_port=port("LANEBOOK_TWIN_SSH_PORT", 2222),
            api_port=port("LANEBOOK_TWIN_API_PORT", 8888),
            master_port=port("LANEBOOK_TWIN_MASTER_PORT", 25000),
        )

    @classmethod
    def from_state(cls, saved: dict) -> "TwinAddresses":
        """As state.json keeps them (`asdict`); a state written before nodes were a set names only the pair."""
        if "nodes" not in saved:
            saved = {key: value for key, value in saved.items() if key not in ("head_ip", "worker_ip")}
        return cls(**saved)

    def to_state(self) -> dict:
        return {"nodes": [list(node) for node in self.nodes], **{k: getattr(self, k) for k in PORT_FIELDS}}

    @property
    def aliases(self) -> tuple[str, ...]:
        return tuple(alias for alias, _ in self.nodes)

    def ip(self, alias: str) -> str:
        found = dict(self.nodes).get(alias)
        if found is None:
            raise LanebookError(f"unknown twin node {alias} (known: {', '.join(self.aliases)})")
        return found

    @property
    def head_ip(self) -> str:
        """The default head's address: the API `twin status` names (a lane's own head serves its own API)."""
        return self.ip(HEAD)

    @property
    def worker_ip(self) -> str:
        return self.ip(WORKER)

    def with_nodes(self, more: Iterable[tuple[str, str]]) -> "TwinAddresses":
        """These addresses and MORE nodes after them (each new alias once)."""
        added = [node for node in dict(more).items() if node[0] not in self.aliases]
        return dataclasses.replace(self, nodes=(*self.nodes, *added))

    @property
    def api(self) -> str:
        return f"http://{self.head_ip}:{self.api_port}/v1"


PORT_FIELDS = ("ssh_port", "api_port", "master_port")


def twin_dir() -> Path:
    """The twin's state: node roots, keys, sshd configs, logs (override with LANEBOOK_TWIN_DIR)."""
    return Path(os.environ.get("LANEBOOK_TWIN_DIR", REPO / ".twin"))


@dataclass(frozen=True)
class TwinLayout:
    """The twin's state directory (twin_dir()) and where each piece lives in it."""

    root: Path

    @property
    def keys(self) -> Path:
        return self.root / "keys"

    @property
    def user_key(self) -> Path:
        return self.keys / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.keys / "known_hosts"

    @property
    def authorized_keys(self) -> Path:
        return self.keys / "authorized_keys"

    @property
    def ssh_config(self) -> Path:
        return self.root / "ssh_config"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    def host_key(self, alias: str) -> Path:
        return self.keys / f"ssh_host_{alias}_ed25519"

    def node(self, alias: str) -> Path:
        return self.root / "nodes" / alias

    def home(self, alias: str) -> Path:
        return self.node(alias) / "home"

    def bin(self, alias: str) -> Path:
        return self.node(alias) / "bin"

    def var(self, alias: str) -> Path:
        return self.node(alias) / "var"

    def sshd_config(self, alias: str) -> Path:
        return self.node(alias) / "sshd_config"

    def sshd_log(self, alias: str) -> Path:
        return self.var(alias) / "sshd.log"

    def command_log(self, alias: str) -> Path:
        """Every command line the node's sshd was given (NUL-terminated, as received), for tests to prove what ran."""
        return self.var(alias) / "commands.log"


def _conf_path(path: Path) -> str:
    """A path for an ssh/sshd config line: quoted only when it must be (paramiko reads these files too)."""
    return f'"{path}"' if any(c.isspace() for c in str(path)) else str(path)


def _keygen(path: Path, comment: str) -> None:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
            check=True,
            capture_output=True,
        )


def ensure_keys(layout: TwinLayout, addresses: TwinAddresses) -> None:
    """User key, one host key per node, authorized_keys and the known_hosts the lane checks against."""
    _keygen(layout.user_key, "lanebook-twin-user")
    known = []
    for alias in addresses.aliases:
        _keygen(layout.host_key(alias), f"lanebook-twin-{alias}")
        key_type, key = layout.host_key(alias).with_suffix(".pub").read_text().split()[:2]
        port = addresses.ssh_port
        known.append(f"[{addresses.ip(alias)}]:{port},[{alias}]:{port} {key_type} {key}")
    write_atomic(layout.known_hosts, "\n".join(known) + "\n")
    write_atomic(layout.authorized_keys, layout.user_key.with_suffix(".pub").read_text(), 0o600)


def client_config(identity: Path, known_hosts: Path, addresses: TwinAddresses) -> str:
    """An ssh_config reaching every node by alias or address, with strict host-key checking."""
    user = getpass.getuser()
    lines = [f"# lanebook twin nodes: ssh -F THIS_FILE {'|'.join(addresses.aliases)} (written by `lanebook twin up`)"]
    for alias, ip in addresses.nodes:
        lines += [f"Host {alias}", f"  HostName {ip}"]
    return "\n".join(
        [
            *lines,
            f"Host {' '.join(addresses.aliases)} {' '.join(ip for _, ip in addresses.nodes)}",
            f"  Port {addresses.ssh_port}",
            f"  User {user}",
            f"  IdentityFile {_conf_path(identity)}",
            "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {_conf_path(known_hosts)}",
            "  GlobalKnownHostsFile /dev/null",
            "  StrictHostKeyChecking yes",
            "  CheckHostIP no",
            "  BatchMode yes",
            "  ConnectTimeout 5",
            "  LogLevel ERROR",
            "",
        ]
    )


def sftp_server() -> str:
    found = next((p for p in SFTP_SERVERS if os.path.exists(p)), None)
    if not found:
        raise LanebookError("the twin needs openssh-server's sftp-server (apt-get install openssh-server)")
    return found


def sshd_config(layout: TwinLayout, alias: str, addresses: TwinAddresses) -> str:
    q = lambda p: f'"{p}"'  # noqa: E731 - sshd accepts quoted paths
    return "\n".join(
        [
            f"# lanebook twin node {alias} (written by `lanebook twin up`)",
            f"Port {addresses.ssh_port}",
            f"ListenAddress {addresses.ip(alias)}",
            f"HostKey {q(layout.host_key(alias))}",
            f"PidFile {q(layout.var(alias) / 'sshd.pid')}",
            f"AuthorizedKeysFile {q(layout.authorized_keys)}",
            f"AllowUsers {getpass.getuser()}",
            "# the node's own home from the first shell on: the login shell that runs ForceCommand reads ~/.bashrc",
            "# (Debian's bash does under sshd), and the controller's own (pyenv init, conda, ...) is not the node's",
            f"SetEnv HOME={q(layout.home(alias))}",
            "PermitUserRC no",
            "PermitUserEnvironment no",
            "# only the twin's own key: no password, keyboard-interactive or host-based login, no agent or tunnels",
            "AuthenticationMethods publickey",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "HostbasedAuthentication no",
            "PermitEmptyPasswords no",
            "PermitRootLogin prohibit-password",
            "AllowAgentForwarding no",
            "AllowTcpForwarding no",
            "PermitTunnel no",
            "# key exchange by X25519 alone: OpenSSH 9's default hybrid with sntrup761 costs about 70 ms of CPU on",
            "# each side of every connection, and a twin launch opens dozens (the launcher's ssh to the worker, rsync)",
            "KexAlgorithms curve25519-sha256,curve25519-sha256@libssh.org",
            "UsePAM no",
            "StrictModes no",
            "UseDNS no",
            "PrintMotd no",
            "PrintLastLog no",
            "X11Forwarding no",
            "MaxStartups 64:30:128",
            "MaxSessions 64",
            f"Subsystem sftp {sftp_server()}",
            f"ForceCommand {shlex.quote(str(layout.bin(alias) / 'node-session'))}",
            "",
        ]
    )


def node_session(layout: TwinLayout, alias: str, faults: set[str], time_scale: float) -> str:
    """The node's ForceCommand: its own HOME/PATH/state, the node's paths mapped, then the client's command (or a
    shell)."""
    q = shlex.quote
    path = ":".join([str(layout.bin(alias)), str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])
    patterns = "|".join(f"*{p}*" for p in NODE_PATHS)
    lines = [
        "#!/bin/bash",
        f"# lanebook twin node {alias}: every ssh, sftp and rsync session starts here (sshd ForceCommand).",
        f"export HOME={q(str(layout.home(alias)))} PATH={q(path)}",
        (
            f"export LANEBOOK_NODE={alias} LANEBOOK_NODE_ROOT={q(str(layout.node(alias)))} "
            f"LANEBOOK_TWIN_DIR={q(str(layout.root))}"
        ),
        f"export LANEBOOK_NODE_MAPPED_ROOT={q(mapped_root(layout.node(alias)))}",
        f"export {TIME_SCALE_VAR}={time_scale:g}",
        "# the stand-ins and the engine run the same lanebook code as the controller that wrote this node",
        f"export PYTHONPATH={q(str(LIB_DIR))}",
        'cd "$HOME" || exit 1',
        "# the node's command log: each session's command line exactly as the client sent it",
        f"printf '%s\\0' \"${{SSH_ORIGINAL_COMMAND:-}}\" >> {q(str(layout.command_log(alias)))}",
        "# /dev/shm, drop_caches and the unit directory are this node's own (lanebook.twin.session)",
        'case "${SSH_ORIGINAL_COMMAND:-}" in',
        (
            f"  {patterns}) SSH_ORIGINAL_COMMAND=$(perl -e {q(perl_mapping())} "
            '"$LANEBOOK_NODE_MAPPED_ROOT" "$SSH_ORIGINAL_COMMAND") || exit 1 ;;'
        ),
        "esac",
    ]
    if alias == WORKER and "ssh-drop-mid-rsync" in faults:
        lines += [
            "# fault ssh-drop-mid-rsync: the first rsync push into this node loses its connection part-way.",
            (
                'if [[ "${SSH_ORIGINAL_COMMAND:-}" == "rsync --server "* '
                '&& " $SSH_ORIGINAL_COMMAND " != *" --sender "* ]] \\'
            ),
            '   && mkdir "$LANEBOOK_NODE_ROOT/var/ssh-drop-mid-rsync.fired" 2>/dev/null; then',
            (
                f'  echo "$(date -u +%FT%TZ) dropped rsync push after {RSYNC_DROP_BYTES} bytes" >> '
                '"$LANEBOOK_NODE_ROOT/var/faults.log"'
            ),
            (
                "  # Only the relay reads the connection; when it stops, the server sees the stream end and the "
                "session closes."
            ),
            (
                f'  bash -c "$SSH_ORIGINAL_COMMAND" < <(dd iflag=count_bytes count={RSYNC_DROP_BYTES} bs=64K '
                "status=none 2>/dev/null)"
            ),
            "  exit 255",
            "fi",
        ]
    lines += [
        'if [ -z "${SSH_ORIGINAL_COMMAND:-}" ]; then exec bash -i; fi',
        'exec bash -c "$SSH_ORIGINAL_COMMAND"',
        "",
    ]
    return "\n".join(lines)


def sleep_shim(python: str) -> str:
    """bin/sleep on a --fast node. The launcher polls with `sleep $WAIT_SECONDS` many times a launch, so plain seconds
    are scaled here, by the clock the stand-in reads (the node's LANEBOOK_TWIN_TIME_SCALE), and slept by the real
    sleep (/bin/sleep, where the FHS puts it) without starting Python. Anything else goes to the stand-in as it is:
    a suffix, an option, an invalid interval (coreutils' message), no operand, a clock that is not a plain number, or
    a launcher whose env file names the real engine (its boot runs in real time; the stand-in reads the knob)."""
    seconds = "^[0-9]+([.][0-9]+)?$"  # what the fast path takes: a plain number, no suffix
    clock = "^[0-9]+([.][0-9]+)?(e[-+]?[0-9]+)?$"  # the scale as node_session writes it ({time_scale:g})
    return "\n".join(
        [
            "#!/bin/sh",
            "# --fast: the twin's waits are scaled (lanebook.twin.nodes.sleep_shim says how)",
            f'if [ "$#" -gt 0 ] && [ -z "${{{REAL_ENGINE_KNOB}:-}}" ]; then',
            "  seconds=$(LC_ALL=C awk 'BEGIN {",
            f'    scale = ("{TIME_SCALE_VAR}" in ENVIRON) ? ENVIRON["{TIME_SCALE_VAR}"] : "1"',
            f"    if (scale !~ /{clock}/) exit 1",
            f"    for (i = 1; i < ARGC; i++) {{ if (ARGV[i] !~ /{seconds}/) exit 1; total += ARGV[i] }}",
            '    printf "%.9f", total * scale',
            '  }\' "$@" 2>/dev/null) && exec /bin/sleep "$seconds"',
            "fi",
            f'exec {python} -m lanebook.twin.standins sleep "$@"',
            "",
        ]
    )


def write_node(layout: TwinLayout, alias: str, addresses: TwinAddresses, faults: set[str], time_scale: float) -> None:
    """The node's sshd config, session script, stand-in shims and the home's own ~/.ssh (to reach the other node)."""
    python = shlex.quote(sys.executable)
    bin_dir = layout.bin(alias)
    write_atomic(layout.sshd_config(alias), sshd_config(layout, alias, addresses))
    write_atomic(bin_dir / "node-session", node_session(layout, alias, faults, time_scale), 0o755)
    for name in STANDINS:
        write_atomic(
            bin_dir / name,
            f'#!/bin/sh\n{STANDIN_MARK}\nexec {python} -m lanebook.twin.standins {name} "$@"\n',
            0o755,
        )
    # ssh reads ~/.ssh from the passwd home, not $HOME: the shim points it at the node's own, and puts
    # this node's mapped paths back to the real ones in a command bound for another node.
    write_atomic(
        bin_dir / "ssh",
        "\n".join(
            [
                "#!/bin/sh",
                'case "$*" in *"$LANEBOOK_NODE_MAPPED_ROOT"/*) [ -n "$LANEBOOK_NODE_MAPPED_ROOT" ] && '
                f'exec {python} -m lanebook.twin.session ssh "$@" ;; esac',
                'exec /usr/bin/ssh -F "$HOME/.ssh/config" "$@"',
                "",
            ]
        ),
        0o755,
    )
    if time_scale != 1:
        write_atomic(bin_dir / "sleep", sleep_shim(python), 0o755)
    write_node_ssh(layout, alias, addresses)
    layout.var(alias).mkdir(parents=True, exist_ok=True)


def write_node_ssh(layout: TwinLayout, alias: str, addresses: TwinAddresses) -> None:
    """The node home's own ~/.ssh: the key, known_hosts and config reaching every other node (written again on every
    node when nodes are added, so the head's launcher reaches a new worker)."""
    dot_ssh = layout.home(alias) / ".ssh"
    dot_ssh.mkdir(parents=True, exist_ok=True)
    shutil.copy(layout.user_key, dot_ssh / "id_ed25519")
    (dot_ssh / "id_ed25519").chmod(0o600)
    write_atomic(dot_ssh / "known_hosts", layout.known_hosts.read_text())
    write_atomic(dot_ssh / "config", client_config(dot_ssh / "id_ed25519", dot_ssh / "known_hosts", addresses))


def terminal_problem() -> str | None:
    """Why the twin's sshd, run by this user, could not give a session a terminal; None where it can.

    sshd makes each terminal its user's and group tty's, and ends the connection when it cannot: run by a plain user,
    that works where /dev/pts gives new terminals group tty (hosts mount it with gid=5) or the user is in group tty.
    The same chown is tried here on a terminal of our own, so a lane's commands that want one never meet a dropped
    connection instead."""
    import grp

    if os.geteuid() == 0:
        return None
    try:
        tty_gid = grp.getgrnam("tty").gr_gid
    except KeyError:
        return None  # no tty group: sshd leaves the terminal with the user's own group
    main, other = os.openpty()
    try:
        status = os.fstat(other)
        if status.st_gid == tty_gid:
            return None
        os.fchown(other, os.geteuid(), tty_gid)
        return None
    except PermissionError:
        user = getpass.getuser()
        return (
            f"the twin's sshd runs as {user} and cannot hand its sessions a terminal: new terminals here are not "
            f"group tty (/dev/pts is mounted without gid={tty_gid}, as in some containers) and {user} is not in group "
            f"tty, so sshd would drop every connection that asks for one. Fix: sudo usermod -aG tty {user}, then log "
            "in again (or run as root)"
        )
    finally:
        os.close(main)
        os.close(other)


def start_sshd(layout: TwinLayout, alias: str) -> subprocess.Popen:
    """Start the node's sshd in the foreground mode (-D) in its own session; configuration errors are one line."""
    if not os.path.exists(SSHD):
        raise LanebookError("the twin needs openssh-server (/usr/sbin/sshd): apt-get install openssh-server rsync")
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation dir sshd insists on as root
    config = str(layout.sshd_config(alias))
    check = subprocess.run([SSHD, "-t", "-f", config], capture_output=True, text=True)
    if check.returncode != 0:
        raise LanebookError(f"sshd rejects {config}: {check.stderr.strip().splitlines()[-1]}")
    log = layout.sshd_log(alias)
    log.write_text("")
    return subprocess.Popen(
        [SSHD, "-D", "-f", config, "-E", str(log)],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_for_ssh(layout: TwinLayout, alias: str, timeout_s: float = 15.0) -> None:
    """Bounded wait until `ssh -F ssh_config ALIAS true` succeeds."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        result = subprocess.run(
            ["ssh", "-F", str(layout.ssh_config), alias, "true"], capture_output=True, text=True, timeout=timeout_s
        )
        if result.returncode == 0:
            return
        last = result.stderr.strip()
        time.sleep(0.2)
    log_tail = layout.sshd_log(alias).read_text().strip().splitlines()[-1:] if layout.sshd_log(alias).exists() else []
    raise LanebookError(
        f"twin node {alias} does not accept ssh after {timeout_s:.0f}s: {last or 'no answer'}"
        + (f" (sshd: {log_tail[0]})" if log_tail else "")
    )


def read_state(layout: TwinLayout) -> dict:
    """state.json: running, faults, fast, time scale, addresses, sshd pids ({} when the twin never ran)."""
    try:
        return json.loads(layout.state_file.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def write_state(layout: TwinLayout, state: dict) -> None:
    write_atomic(layout.state_file, json.dumps(state, indent=2) + "\n")
