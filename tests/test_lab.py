"""`lanebook lab`'s server set-up, checked without starting it: loopback only, the exact port, the token kept off the
command line, autosave off and nothing fetched from the internet, as JupyterLab setting defaults its own schemas
know. The server itself runs in tests/test_walkthrough.py."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from lanebook.base.errors import LanebookError
from lanebook.runs import lab

LANEBOOK = str(Path(sys.executable).parent / "lanebook")
SCHEMAS = Path(sys.prefix) / "share" / "jupyter" / "lab" / "schemas"


def test_the_server_listens_on_loopback_at_the_port_asked_for_with_no_token_on_its_command_line(tmp_path):
    command = lab.lab_command(tmp_path / "runbooks", 8890, tmp_path / "state", as_root=False)
    assert command[:3] == [sys.executable, "-m", "jupyterlab"]
    for option in (
        "--ServerApp.ip=127.0.0.1",
        "--ServerApp.port=8890",
        "--ServerApp.port_retries=0",
        "--no-browser",
        f"--ServerApp.root_dir={tmp_path / 'runbooks'}",
        f"--LabApp.app_settings_dir={tmp_path / 'state' / 'app-settings'}",
        f"--LabApp.workspaces_dir={tmp_path / 'state' / 'workspaces'}",
        "--LabApp.news_url=",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
    ):
        assert option in command, option
    assert "--allow-root" not in command and "--allow-root" in lab.lab_command(tmp_path, 8890, tmp_path, as_root=True)
    assert not any("token" in part.lower() for part in command)
    assert lab.lab_env("abc123")["JUPYTER_TOKEN"] == "abc123"


def test_the_url_opens_the_lab_or_one_runbook_with_the_token():
    assert lab.lab_url(8890, "t0k") == "http://127.0.0.1:8890/lab?token=t0k"
    assert lab.lab_url(8890, "t0k", "launch.ipynb") == "http://127.0.0.1:8890/lab/tree/launch.ipynb?token=t0k"
    assert lab.lab_url(8890, "t0k", "my runbook.ipynb") == "http://127.0.0.1:8890/lab/tree/my%20runbook.ipynb?token=t0k"


def test_setting_defaults_turn_autosave_off_and_fetch_nothing_in_jupyterlabs_own_terms(tmp_path):
    path = lab.write_setting_defaults(tmp_path / "app-settings")
    written = json.loads(path.read_text())
    assert path.name == "overrides.json" and written == lab.SETTING_DEFAULTS
    assert written["@jupyterlab/docmanager-extension:plugin"]["autosave"] is False
    assert written["@jupyterlab/apputils-extension:notification"] == {"fetchNews": "false", "checkForUpdates": False}
    for plugin, values in written.items():  # a key the schema lacks would be ignored without a word
        package, name = plugin.split(":")
        schema = json.loads((SCHEMAS / package / f"{name}.json").read_text())
        assert set(values) <= set(schema["properties"]), (plugin, values)


def test_a_port_in_use_is_refused_naming_it_before_anything_starts(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert not lab.port_free(port)
        with pytest.raises(LanebookError, match=f"port {port} on 127.0.0.1 is in use"):
            lab.start_lab(tmp_path, port=port, state_dir=tmp_path / "state")
        assert not (tmp_path / "state").exists()
        done = subprocess.run([LANEBOOK, "lab", "--port", str(port)], capture_output=True, text=True, timeout=60)
    assert (
        done.returncode == 2
        and done.stderr.strip() == f"lanebook: port {port} on 127.0.0.1 is in use: give another with --port N"
    )
    assert lab.port_free(port)
