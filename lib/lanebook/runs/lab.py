"""`lanebook lab`: the interactive walkthrough — JupyterLab on loopback in the runbooks folder, its lane ready.

The runbooks' `lane` parameter defaults to the twin; destructive steps ask with a Confirm/Cancel button and long
waits show a progress bar (lanebook.base.frontend, lanebook.base.progress). JupyterLab listens on 127.0.0.1 only,
on the exact port asked for (one in use is an error), behind a fresh token passed in the environment, not on the
command line other users can read. Autosave is off, so running a runbook leaves the committed notebook clean; it
fetches nothing from the internet. These are setting defaults (overrides.json), so an operator's own settings win;
the walkthrough keeps its own workspaces folder.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional
from urllib.parse import quote

import httpx

from lanebook.base.errors import LanebookError
from lanebook.base.paths import REPO, RUNBOOKS_DIR
from lanebook.lane.params import load_lane
from lanebook.lane.plugins import prepare_lane
from lanebook.nodes.http import direct_client

HOST = "127.0.0.1"
DEFAULT_PORT = 8888
DEFAULT_LANE = "twin"  # what every runbook's `lane` parameter defaults to
STATE_DIR = REPO / ".lab"  # settings defaults, workspaces and the server log of `lanebook lab`
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0

# JupyterLab setting defaults, by plugin id (each key is a setting of that plugin's schema).
SETTING_DEFAULTS = {
    "@jupyterlab/docmanager-extension:plugin": {"autosave": False},
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
}


def write_setting_defaults(app_settings_dir: Path) -> Path:
    """Write SETTING_DEFAULTS as JupyterLab's overrides.json there; returns its path."""
    app_settings_dir.mkdir(parents=True, exist_ok=True)
    path = app_settings_dir / "overrides.json"
    path.write_text(json.dumps(SETTING_DEFAULTS, indent=2) + "\n")
    return path


def lab_command(root: Path, port: int, state_dir: Path, *, as_root: bool) -> list[str]:
    """The JupyterLab server's command line (the token is not on it: see lab_env)."""
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        f"--ServerApp.ip={HOST}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.password=",
        f"--LabApp.app_settings_dir={state_dir / 'app-settings'}",
        f"--LabApp.workspaces_dir={state_dir / 'workspaces'}",
        "--LabApp.news_url=",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
    ]
    return command + (["--allow-root"] if as_root else [])


def lab_env(token: str) -> dict[str, str]:
    """The server's environment (its kernels inherit it): ours, with the token jupyter_server reads."""
    return {**os.environ, "JUPYTER_TOKEN": token}


def lab_url(port: int, token: str, notebook: Optional[str] = None) -> str:
    """The URL that opens the lab (or one notebook, a path under its root) with its token."""
    where = f"/lab/tree/{quote(notebook)}" if notebook else "/lab"
    return f"http://{HOST}:{port}{where}?token={token}"


def port_free(port: int) -> bool:
    """Can a server listen on HOST:port now?"""
    with socket.socket() as s:
        s.setsockopt(
            socket.SOL_SOCKET, socket.SO_REUSEADDR, 1
        )  # as the server binds: a closed port's TIME_WAIT is free
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


@dataclass
class Lab:
    """A running JupyterLab server started by start_lab."""

    process: subprocess.Popen
    root: Path
    port: int
    token: str
    log: Path

    def url(self, notebook: Optional[str] = None) -> str:
        return lab_url(self.port, self.token, notebook)

    def stop(self) -> None:
        """Stop the server (it shuts its kernels down on SIGTERM); kill it if it does not end in time."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _log_tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start_lab(
    root: Path = RUNBOOKS_DIR, port: int = DEFAULT_PORT, state_dir: Path = STATE_DIR, timeout_s: float = START_TIMEOUT_S
) -> Lab:
    """Start JupyterLab on HOST:port in `root` and return once its API answers with our token."""
    if not port_free(port):
        raise LanebookError(f"port {port} on {HOST} is in use: give another with --port N")
    write_setting_defaults(state_dir / "app-settings")
    (state_dir / "workspaces").mkdir(parents=True, exist_ok=True)
    log, token = state_dir / "jupyterlab.log", secrets.token_hex(24)
    with log.open("w") as out:
        process = subprocess.Popen(
            lab_command(Path(root).resolve(), port, state_dir, as_root=os.geteuid() == 0),
            env=lab_env(token),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=root,
            start_new_session=True,
        )  # Ctrl-C reaches us; we stop it
    lab = Lab(process, Path(root).resolve(), port, token, log)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with direct_client(timeout=2) as client:
                status = client.get(f"http://{HOST}:{port}/api/status", headers={"Authorization": f"token {token}"})
            if status.status_code == 200:
                return lab
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    lab.stop()
    raise LanebookError(
        f"JupyterLab did not answer on {HOST}:{port} within {timeout_s:.0f} s; its log ({log}) ends:\n{_log_tail(log)}"
    )


def run_lab(port: int = DEFAULT_PORT) -> int:
    """`lanebook lab`: ready the default lane (the twin comes up), start JupyterLab, print its URL, serve until
    Ctrl-C."""
    if not port_free(port):  # said before the twin is touched
        raise LanebookError(f"port {port} on {HOST} is in use: give another with --port N")
    prepare_lane(load_lane(DEFAULT_LANE))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # a `kill` stops JupyterLab as Ctrl-C does
    lab = start_lab(port=port)
    print(
        f"JupyterLab (lane {DEFAULT_LANE} by default) on the runbooks: {lab.url()}\n"
        f"open launch.ipynb and Run > Run All Cells; a run here keeps no record (use `lanebook run` for one);\n"
        f"Ctrl-C stops JupyterLab (the twin stays up: `lanebook twin down`). Log: {lab.log}",
        flush=True,
    )
    try:
        return lab.process.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        lab.stop()
