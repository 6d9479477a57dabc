"""`lanebook watch install | uninstall`: the watcher as a systemd unit on the lane's head, so it outlives a reboot.

The unit (`unit_text`) runs `lanebook watch --lane LANE_FILE` and restarts it when it dies (never when it refused
its input: exit 2), with lanebook's own settings (the LANEBOOK_* variables of this process: where outputs go, ...)
carried over. It is written on the head through the lane's one executor: by default a user unit
(~/.config/systemd/user/UNIT) with lingering enabled (`loginctl enable-linger`, so it starts at boot without a
login), else (`system=True`) a system unit in /etc/systemd/system through `sudo -n`, the narrow sudo line
`lanebook check` prints. Then `daemon-reload`, `enable --now`, and `is-enabled` read back; uninstall is
`disable --now` and the file removed. The suite checks the unit with `systemd-analyze verify`.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from lanebook.base.errors import LanebookError
from lanebook.lane.params import LaneParams
from lanebook.nodes.ssh import LaneNodes, q

USER_DIR = "~/.config/systemd/user"
SYSTEM_DIR = "/etc/systemd/system"


def unit_name(lane_name: str) -> str:
    return f"lanebook-watch-{lane_name}.service"


def lanebook_command() -> str:
    """This lanebook's executable: the one beside this interpreter (a venv's), else `lanebook` on PATH."""
    beside = Path(sys.executable).parent / "lanebook"
    if beside.is_file():
        return str(beside)
    import shutil

    found = shutil.which("lanebook")
    if not found:
        raise LanebookError("cannot find the lanebook executable to run in the unit: give --lanebook PATH")
    return found


def _quoted(value: str) -> str:
    """A value in a unit file's command line or Environment= (systemd's C-style double quotes)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def unit_text(
    params: LaneParams, *, lanebook: str, system: bool = False, environ: Optional[dict[str, str]] = None
) -> str:
    """The unit file's text (module docstring)."""
    if params.file is None:
        raise LanebookError(f"lane {params.name} was built in memory: the unit needs the lane's file")
    environ = os.environ if environ is None else environ
    settings = sorted((k, v) for k, v in environ.items() if k.startswith("LANEBOOK_") and "\n" not in v)
    lines = [
        "[Unit]",
        f"Description=lanebook watch of lane {params.name}: probes, bounded repair and pages",
        "After=network-online.target" if system else "After=default.target",
        "",
        "[Service]",
        "Type=simple",
        f"ExecStart={_quoted(lanebook)} watch --lane {_quoted(str(params.file))}",
        *[f"Environment={_quoted(f'{k}={v}')}" for k, v in settings],
        "Restart=on-failure",
        "RestartSec=30",
        "RestartPreventExitStatus=2",
        "",
        "[Install]",
        f"WantedBy={'multi-user.target' if system else 'default.target'}",
        "",
    ]
    if system:
        lines.insert(lines.index("Type=simple") + 1, f"User={os.environ.get('USER') or 'root'}")
        lines.insert(2, "Wants=network-online.target")
    return "\n".join(lines)


@dataclass
class Installed:
    unit: str
    path: str
    enabled: str  # what `systemctl is-enabled` read back
    system: bool

    def to_json(self) -> dict:
        return {"unit": self.unit, "path": self.path, "enabled": self.enabled, "system": self.system}


def _systemctl(system: bool) -> str:
    return "sudo -n systemctl" if system else "systemctl --user"


def install(nodes: LaneNodes, *, lanebook: Optional[str] = None, system: bool = False) -> Installed:
    """Write the unit on the head, enable lingering (a user unit), reload, enable and start it; read back."""
    params, head = nodes.params, nodes.head
    unit = unit_name(params.name)
    text = unit_text(params, lanebook=lanebook or lanebook_command(), system=system)
    folder = SYSTEM_DIR if system else USER_DIR
    path = f"{folder}/{unit}"
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / unit
        local.write_text(text)
        if system:
            head.run(f"sudo -n tee {q(path)} > /dev/null", stdin=local, timeout=60)
        else:
            head.run(f"mkdir -p {folder} && cat > {folder}/{q(unit)}", stdin=local, timeout=60)
            head.run('loginctl enable-linger "$(id -un)"', timeout=60)
    systemctl = _systemctl(system)
    head.run(f"{systemctl} daemon-reload && {systemctl} enable --now {q(unit)}", timeout=120)
    enabled = head.run(f"{systemctl} is-enabled {q(unit)}", check=False, timeout=60).stdout.strip()
    return Installed(unit, path, enabled or "unknown", system)


def uninstall(nodes: LaneNodes, *, system: bool = False) -> Installed:
    """Disable and stop the unit, remove its file, reload."""
    unit = unit_name(nodes.params.name)
    folder = SYSTEM_DIR if system else USER_DIR
    systemctl = _systemctl(system)
    head = nodes.head
    head.run(f"{systemctl} disable --now {q(unit)}", check=False, timeout=120)
    remove = f"sudo -n rm -f {q(f'{folder}/{unit}')}" if system else f"rm -f {folder}/{q(unit)}"
    head.run(f"{remove} && {systemctl} daemon-reload", timeout=60)
    enabled = head.run(f"{systemctl} is-enabled {q(unit)}", check=False, timeout=60).stdout.strip()
    return Installed(unit, f"{folder}/{unit}", enabled or "not-found", system)


def verify_command(path: Path) -> list[str]:
    """How the suite (and an operator) checks a unit file: systemd-analyze verify, user units as the user's."""
    return ["systemd-analyze", "verify", str(path)]
