"""lanebook.recipe.lane_from_checkout: a lane file from an operator's checkout, proven by rendering it back (round
trip)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.recipe_fixtures import COMPOSE, SHARED, need
from lanebook.lane.params import load_lane
from lanebook.recipe.effective.checkout import CheckoutFiles
from lanebook.recipe.lane_from_checkout import Head, import_lane, local_checkout, round_trip, write_new

REPO = Path(__file__).resolve().parents[1]
LANEBOOK = REPO / ".venv" / "bin" / "lanebook"
CURRENT = SHARED / "fixtures" / "miaai-recipe"
SCRIPTS = SHARED / "fixtures" / "miaai-recipe-scripts"
JULY = SHARED / "fixtures" / "miaai-recipe-0731"
# A pair that is not the write-up's: other names, other RoCE addresses (nothing connects to them: a local import).
PAIR = {
    "WORKER_HOST": "spark-b.lab.example",
    "MASTER_ADDR": "172.31.7.1",
    "VLLM_HOST_IP": "172.31.7.1",
    "WORKER_VLLM_HOST_IP": "172.31.7.2",
}


def operator_checkout(tmp_path: Path, fixture: Path, *, extra: str = "") -> Path:
    """A copy of a recipe checkout whose .env.dspark the operator filled in from the example for PAIR."""
    directory = tmp_path / "ds4-checkout"
    directory.mkdir()
    for source in (need(fixture), SCRIPTS if fixture == CURRENT else fixture):
        for f in need(source).iterdir():
            if f.is_file() and f.name != "vllm-metrics-sample.txt":
                shutil.copy(f, directory / f.name)
    lines = []
    for line in (directory / "env.dspark.example").read_text().splitlines():
        key = line.partition("=")[0]
        lines.append(f"{key}={PAIR[key]}" if key in PAIR else line)
    (directory / ".env.dspark").write_text("\n".join(lines) + "\n" + extra)
    return directory


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(LANEBOOK), *args], capture_output=True, text=True, timeout=120)


def test_current_recipe_round_trips_except_the_listed_speculative_line(tmp_path):
    directory = operator_checkout(tmp_path, CURRENT)
    before = {n: (directory / n).read_bytes() for n in (".env.dspark", COMPOSE)}
    out = tmp_path / "mine.yaml"
    done = cli("lane", "import", "mine", "--checkout", str(directory), "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["byte_for_byte"] is False
    changed = [u for u in report["unexpressed"] if "render writes" in u["reason"]]
    # The one line: upstream's $${DRAFT_SAMPLE_METHOD} indirection, which the lane writes literally.
    assert [(Path(u["file"]).name, u["line"]) for u in changed] == [(COMPOSE, 236)]
    assert "DRAFT_SAMPLE_METHOD" in changed[0]["text"] and "probabilistic" in changed[0]["reason"]
    assert report["mismatches"] == []
    # The operator's files are untouched (read-only), the lane loads and names the pair from the env file.
    assert {n: (directory / n).read_bytes() for n in before} == before
    params = load_lane(out)
    assert (params.head.roce_ip, params.workers[0].host, params.workers[0].roce_ip) == (
        "172.31.7.1",
        "spark-b.lab.example",
        "172.31.7.2",
    )
    assert params.env["GPU_MEMORY_UTILIZATION"] == 0.835 and params.weights.hf_cache == "~/.cache/huggingface"
    assert params.launcher.env["PROJECT_NAME"] == "deepseek-v4-flash"
    text = out.read_text()
    assert "GPU_MEMORY_UTILIZATION_TEXT: 0.835 # .env.dspark:256" in text
    assert "kv_cache_dtype: nvfp4_ds_mla  # docker-compose.dspark.yml:256" in text


def test_july_recipe_round_trips_byte_for_byte(tmp_path):
    directory = operator_checkout(tmp_path, JULY)
    out = tmp_path / "july.yaml"
    done = cli(
        "lane", "import", "july", "--checkout", str(directory), "--out", str(out), "--rollback", "anemll-0731", "--json"
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["byte_for_byte"] is True and report["mismatches"] == []
    assert load_lane(out).rollback == "anemll-0731"
    # Lint names the July example's real pitfalls, 0.80 at 1M context (P07) and an API on every address with no key
    # (S09), and nothing else.
    linted = json.loads(cli("lint", "--lane", str(out), "--checkout", str(directory), "--json").stdout)
    assert [(f["id"], f["severity"]) for f in linted["findings"]] == [("P07", "error"), ("S09", "warning")]
    # Nothing dropped silently: the one env line it does not carry is listed with why.
    assert [(u["line"], u["reason"].split(";")[0]) for u in report["unexpressed"]] == [
        (52, "refers to other variables")
    ]


def test_lint_on_the_imported_lane_shows_only_the_checkouts_own_pitfalls(tmp_path):
    directory = operator_checkout(tmp_path, CURRENT)
    files, path = local_checkout(directory)
    out = tmp_path / "mine.yaml"
    write_new(out, import_lane("mine", files, checkout=path).text)
    done = cli("lint", "--lane", str(out), "--checkout", str(directory), "--json")
    findings = json.loads(done.stdout)["findings"]
    # The recipe's default 0.835 at 1M context is pitfall P07's territory, and the API on 0.0.0.0 without a key S09's;
    # no S04 (a lane value not running).
    assert [f["id"] for f in findings] == ["P07", "S09"], findings


def test_dead_lines_and_secrets_are_listed_never_dropped(tmp_path):
    extra = (
        "MAX_NUM_SEQS=4\nHF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123\nGPU_MEMORY_UTILIZATION=0.9\n"
        "VLLM_API_KEY=sk-abcdefghijklmnopqrstuvwxyz\n"
    )
    directory = operator_checkout(tmp_path, JULY, extra=extra)
    files, path = local_checkout(directory)
    imported = import_lane("mine", files, checkout=path)
    reasons = {u.where.line: u.reason for u in imported.unexpressed}
    lines = (directory / ".env.dspark").read_text().splitlines()
    first, later = [n for n, line in enumerate(lines, 1) if line.startswith("MAX_NUM_SEQS=")]
    assert f"line {later} sets MAX_NUM_SEQS again" in reasons[first]
    token_line = lines.index("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123") + 1
    assert reasons[token_line].startswith("a secret")
    assert "hf_abcdef" not in imported.text and "HF_TOKEN" not in imported.text
    key_line = len(lines)
    assert "auth: {VLLM_API_KEY: {key_file: PATH}}" in reasons[key_line] and "sk-abc" not in imported.text
    assert imported.params.max_num_seqs == 4  # the value that runs: the later line
    out = tmp_path / "mine.yaml"
    write_new(out, imported.text)
    assert round_trip(out, CheckoutFiles.read(directory)) == []


def test_never_overwrites_and_bad_input_is_one_line(tmp_path):
    directory = operator_checkout(tmp_path, JULY)
    out = tmp_path / "taken.yaml"
    out.write_text("mine\n")
    done = cli("lane", "import", "x", "--checkout", str(directory), "--out", str(out))
    assert done.returncode == 2 and "never overwrites" in done.stderr and out.read_text() == "mine\n"
    done = cli("lane", "import", "x", "--checkout", str(tmp_path / "nowhere"), "--out", str(tmp_path / "n.yaml"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    done = cli("lane", "import", "x;rm", "--checkout", str(directory), "--out", str(tmp_path / "n.yaml"))
    assert done.returncode == 2 and "lane name" in done.stderr
    done = cli(
        "lane", "import", "x", "--checkout", str(directory), "--out", str(tmp_path / "r.yaml"), "--rollback", "nope"
    )
    assert done.returncode == 2 and "unknown lane" in done.stderr and not (tmp_path / "r.yaml").exists()
    with pytest.raises(Exception, match="port"):
        Head.parse("me@host:99999")
