"""lanebook.ops.lane_import: a lane imported over SSH from the twin's head, read-only: it round-trips byte for byte,
takes the Compose project and checks the live command where the lane serves."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers.recipe_fixtures import COMPOSE
from lanebook.lane.params import load_lane

REPO = Path(__file__).resolve().parents[1]
LANEBOOK = REPO / ".venv" / "bin" / "lanebook"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(LANEBOOK), *args], capture_output=True, text=True, timeout=300)


def user() -> str:
    return subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()


def import_from_twin_head(out: Path) -> dict:
    done = cli(
        "lane", "import", out.stem, "--head", f"{user()}@127.0.0.2", "--ssh-config", "twin",
        "--checkout", "~/ds4-f-mia-anemll-0731", "--out", str(out), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.twin
def test_import_over_ssh_from_the_twin_head_round_trips_byte_for_byte(twin, tmp_path):
    done = cli("run", "env", "--lane", "twin")  # the twin head's checkout as an operator has it: rendered, in use
    assert done.returncode == 0, done.stdout + done.stderr
    head = Path(next(n["root"] for n in twin["nodes"] if n["alias"] == "head"))
    checkout = next(head.glob("home/*/ds4-f-mia-anemll-0731"), None) or next(head.rglob("ds4-f-mia-anemll-0731"))
    before = {n: (checkout / n).read_bytes() for n in (".env.dspark", COMPOSE)}
    out = tmp_path / "twin-mine.yaml"
    report = import_from_twin_head(out)
    assert report["byte_for_byte"] is True and report["mismatches"] == []
    assert {n: (checkout / n).read_bytes() for n in before} == before  # read-only
    params = load_lane(out)
    assert params.twin is True and params.ssh_config == "twin" and params.weights.shards == 48
    assert [(n.host, n.roce_ip) for n in params.nodes] == [("127.0.0.2", "127.0.0.2"), ("127.0.0.3", "127.0.0.3")]
    assert "# the head's HF cache" in out.read_text()


@pytest.mark.twin
def test_a_serving_lane_gives_its_project_and_its_live_command_is_checked(twin, tmp_path):
    launched = cli("run", "launch", "--lane", "twin")
    assert launched.returncode == 0, launched.stdout[-2000:] + launched.stderr[-2000:]
    try:
        report = import_from_twin_head(tmp_path / "twin-serving.yaml")
    finally:
        stopped = cli("run", "stop", "--lane", "twin")
    assert stopped.returncode == 0, stopped.stdout[-2000:]
    assert report["serving"] == "ds4-f-mia-anemll-0731-vllm-dspark-1" and report["live_mismatches"] == []
    params = load_lane(tmp_path / "twin-serving.yaml")
    assert params.launcher.env["PROJECT_NAME"] == "ds4-f-mia-anemll-0731"  # given to the launcher, not in the checkout
    assert "# the running container ds4-f-mia-anemll-0731-vllm-dspark-1" in (tmp_path / "twin-serving.yaml").read_text()
    low, high = params.gates.kv_cache_tokens  # around what the startup log said, within the seeds' band here
    assert 2_200_000 <= (low + high) / 2 <= 2_500_000 and params.gates.kv_cache_line == "GPU KV cache size"
    assert "startup log: " in (tmp_path / "twin-serving.yaml").read_text()


def test_an_unreachable_head_is_one_clear_line(tmp_path):
    done = cli(
        "lane", "import", "x", "--head", "nobody@127.0.0.254:1", "--checkout", "~/c", "--out", str(tmp_path / "x.yaml")
    )
    assert done.returncode == 2 and "cannot read the head's checkout" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "x.yaml").exists()
