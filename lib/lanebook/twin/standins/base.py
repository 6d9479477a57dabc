"""What every stand-in shares: the node it runs on, its failures, option parsing and plain tables."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from lanebook.base.errors import LanebookError
from lanebook.base.files import write_atomic

# The twin's clock (1 in real time, 0.01 with --fast): the node session exports it, the stand-ins read it.
TIME_SCALE_VAR = "LANEBOOK_TWIN_TIME_SCALE"
STANDIN_MARK = "# lanebook twin stand-in"  # the second line of every stand-in shim: what tells one from a real program


def fail(message: str, code: int = 1) -> int:
    """Print the tool's error on stderr and return its exit code."""
    print(message, file=sys.stderr)
    return code


# What one node can be made to lack: a file each under its root.
NODE_CONDITIONS = ("docker-denied", "sudo-asks", "disk-full", "no-compose")


def node_condition(name: str) -> bool:
    """Whether this node was given a condition (NODE_ROOT/twin-conditions/NAME exists): its user outside the docker
    group (docker-denied), a sudo that asks for a password (sudo-asks), a disk with no room (disk-full), Docker
    without its Compose v2 plugin (no-compose). control.set_node_conditions sets them."""
    return (node_root() / "twin-conditions" / name).exists()


def node_root() -> Path:
    """The root of the node this stand-in runs on (set by the node session)."""
    root = os.environ.get("LANEBOOK_NODE_ROOT")
    if not root:
        raise LanebookError(
            "this stand-in runs on a twin node (LANEBOOK_NODE_ROOT is not set): ssh -F <twin>/ssh_config head"
        )
    return Path(root)


def read_json(path: Path, default):
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return default


def write_json(path: Path, data) -> None:
    write_atomic(path, json.dumps(data, indent=2) + "\n")


def twin_state() -> dict:
    """The twin's state.json (faults, time scale), as `twin up` wrote it."""
    return read_json(Path(os.environ.get("LANEBOOK_TWIN_DIR", "/nonexistent")) / "state.json", {})


def twin_file(name: str) -> Path | None:
    """A file of the twin's own state (not a node's) that stand-ins share, or None off a twin session."""
    folder = os.environ.get("LANEBOOK_TWIN_DIR")
    return Path(folder) / name if folder else None


def time_scale() -> float:
    """The twin's clock: 1 in real time, 0.01 with --fast."""
    try:
        return float(os.environ.get(TIME_SCALE_VAR, "1"))
    except ValueError:
        return 1.0


def ago(seconds: float) -> str:
    """Docker's human durations: "5 seconds", "About a minute", "3 hours"."""
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{int(seconds // size)} {unit}"
    return "About a minute" if seconds >= 60 else f"{max(int(seconds), 1)} seconds"


def iso(ts: float | None) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts or 0, timezone.utc).isoformat().replace("+00:00", "Z")


def take(args: list[str], *names: str, flag: bool = False, many: bool = False):
    """Pop an option (and its value) from args: --name value, --name=value, -n value."""
    found = []
    i = 0
    while i < len(args):
        name, eq, inline = args[i].partition("=")
        if name in names:
            args.pop(i)
            if flag:
                found.append(True)
            else:
                found.append(inline if eq else (args.pop(i) if i < len(args) else ""))
            continue
        i += 1
    if flag:
        return bool(found)
    return found if many else (found[-1] if found else None)


def table(rows: list[list[str]], header: list[str]) -> str:
    """Columns padded to their widest cell, three spaces apart, as docker and systemctl print them."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("   ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows])
