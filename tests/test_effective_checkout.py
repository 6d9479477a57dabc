"""lanebook.recipe.effective.checkout: a checkout's files read from a local directory or from a node over SSH, with the
files
its start script sources."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers.recipe_fixtures import COMPOSE, ENV, EXAMPLE, START, checkout
from lanebook.base.errors import LanebookError
from lanebook.nodes.ssh import CommandResult
from lanebook.recipe.effective.checkout import CheckoutFiles, Location
from lanebook.recipe.effective.config import Effective

SOURCING_START = (
    '#!/bin/bash\nSCRIPT_DIR="$(cd "$(dirname "$0")" && pwd)"\n. '
    '"$SCRIPT_DIR/scripts/lane-env.sh"\napply_memory_profile\n'
)
LANE_ENV = (
    'apply_memory_profile() {\n  if [ "${ENABLE_VL_SIDECAR:-0}" = "1" ]; then\n'
    '    GPU_MEMORY_UTILIZATION="${GPU_MEMORY_UTILIZATION_VISION:-0.80}"\n  else\n'
    '    GPU_MEMORY_UTILIZATION="${GPU_MEMORY_UTILIZATION_TEXT:-0.835}"\n  fi\n}\n'
)


def test_a_launcher_that_lives_partly_in_a_sourced_file_is_read_there(tmp_path):
    directory = checkout(tmp_path, env=ENV)
    (directory / START).write_text(SOURCING_START)
    (directory / "scripts").mkdir()
    (directory / "scripts" / "lane-env.sh").write_text(LANE_ENV)
    files = CheckoutFiles.read(directory)
    assert [f.name for f in files.launcher_files] == [f"{directory}/{START}", f"{directory}/scripts/lane-env.sh"]
    eff = Effective(files)
    setting = eff.setting("GPU_MEMORY_UTILIZATION")
    assert (setting.value, setting.where) == ("0.835", Location(f"{directory}/scripts/lane-env.sh", 5))
    [dead] = eff.dead_lines  # the env file's GPU_MEMORY_UTILIZATION=0.85 never reaches vllm serve
    assert (dead.key, dead.value) == ("GPU_MEMORY_UTILIZATION", "0.85")
    fetched = CheckoutFiles.fetch(LocalNode(tmp_path), "~/checkout")
    assert [f.name for f in fetched.launcher_files] == [
        f"head:~/checkout/{START}",
        "head:~/checkout/scripts/lane-env.sh",
    ]


def test_checkout_files_take_either_example_name_and_the_start_script(tmp_path):
    directory = checkout(tmp_path)
    (directory / ".env.dspark.example").write_text("A=1\n")
    (directory / START).write_text("#!/bin/bash\n")
    files = CheckoutFiles.read(directory)
    assert (files.env, files.example.name, files.start.name) == (
        None,
        f"{directory}/.env.dspark.example",
        f"{directory}/{START}",
    )
    (directory / ".env.dspark.example").unlink()
    (directory / EXAMPLE).write_text("A=2\n")
    assert CheckoutFiles.read(directory).example.text == "A=2\n"
    with pytest.raises(LanebookError, match="checkout directory not found"):
        CheckoutFiles.read(tmp_path / "nowhere")
    (directory / COMPOSE).unlink()
    with pytest.raises(LanebookError, match=f"no {COMPOSE} in"):
        CheckoutFiles.read(directory)


class LocalNode:
    """Runs a node command with bash in a local home directory, as the node's shell would."""

    alias = "head"

    def __init__(self, home: Path):
        self.home = home

    def run(self, command: str, timeout: float = 60) -> CommandResult:
        done = subprocess.run(
            ["bash", "-c", command],
            env={"HOME": str(self.home), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, done.stderr
        return CommandResult(self.alias, command, done.returncode, done.stdout, done.stderr)


def test_fetch_reads_a_node_checkout_in_one_command(tmp_path):
    directory = checkout(tmp_path, env="NOTE=naïve — ok\r\n", example=True)
    files = CheckoutFiles.fetch(LocalNode(tmp_path), "~/checkout")
    assert (
        files.compose.name == f"head:~/checkout/{COMPOSE}" and files.compose.text == (directory / COMPOSE).read_text()
    )
    assert files.env.text == "NOTE=naïve — ok\r\n" and files.example.name == f"head:~/checkout/{EXAMPLE}"
    assert files.start is None and files.directory is None


def test_a_checkout_under_an_unknown_users_home_is_one_clear_error():
    with pytest.raises(LanebookError, match="no such user's home"):
        CheckoutFiles.read("~0")


def test_a_compose_or_env_file_that_is_not_utf8_is_one_clear_error_local_or_on_a_node(tmp_path):
    directory = checkout(tmp_path, env="A=1\n")
    (directory / ".env.dspark").write_bytes(b"A=\xff\n")
    (directory / START).write_bytes(b"#!/bin/bash\n# \xff\n")  # a start script is only read: its bytes are replaced
    with pytest.raises(LanebookError, match=rf"^{directory}/.env.dspark is not UTF-8 text \(byte 2\)$"):
        CheckoutFiles.read(directory)
    with pytest.raises(LanebookError, match=r"^head:~/checkout/.env.dspark is not UTF-8 text \(byte 2\)$"):
        CheckoutFiles.fetch(LocalNode(tmp_path), "~/checkout")
    (directory / ".env.dspark").write_text("A=1\n")
    assert CheckoutFiles.read(directory).start.text == "#!/bin/bash\n# \ufffd\n"
