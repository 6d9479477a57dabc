"""The speed runbook end to end: a short run on the session twin (launching the twin lane when it finds it down)
records bands, plots and the provenance it read; a run against a baseline of the same setup whose medians are
higher fails at the baseline step. Dry runs on the real lanes show what would be sent and open no connection.
(An engine that dies mid-bench failing the waves' step is a row of the fault matrix, test_fault_matrix.py.)"""

import json
import subprocess
import sys
from pathlib import Path

import httpx
import nbformat
import pytest
from helpers.lanebook_runs import dry_run_offline, run
from lanebook.base.files import sha256_file
from lanebook.base.paths import RUNBOOKS_DIR
from lanebook.lane.params import lane_path, load_lane
from lanebook.nodes import ssh
from lanebook.speed.bands import bands_from_runs
from lanebook.speed.baseline import baseline_path, load_baseline
from lanebook.twin.standins.docker import IMAGES

SHORT = ("-p", "max_tokens=32", "-p", "workloads=probe")


def outputs_of(record: dict, tmp_path: Path) -> list[dict]:
    notebook = nbformat.read(tmp_path / "outputs" / record["output"], as_version=4)
    return [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]


@pytest.fixture(scope="module")
def short_run(twin, tmp_path_factory):
    """One short run on the twin lane (32-token streams, the probe workload), stored as a baseline file too."""
    tmp_path = tmp_path_factory.mktemp("speed-short")
    saved = tmp_path / "baseline.json"
    record, _ = run(tmp_path, "speed", "twin", *SHORT, "-p", f"save_baseline={saved}", expect_exit=0)
    return record, tmp_path, saved


@pytest.mark.twin
def test_a_short_run_records_bands_and_the_provenance_it_read(short_run):
    record, tmp_path, saved = short_run
    assert record["verdict"] == "pass" and record["twin"] is True, record
    figures = record["figures"]
    assert figures["plan"] == {
        "workloads": ["probe"],
        "levels": [1, 4, 6],
        "trials": 3,
        "max_tokens": 32,
        "tolerance": 0.1,
        "baseline": str(baseline_path("twin")),
    }
    bands = figures["bands"]["probe"]
    assert [(b["concurrency"], b["trials"], b["complete"], b["errors"]) for b in bands] == [
        (1, 3, True, 0),
        (4, 3, True, 0),
        (6, 3, True, 0),
    ]
    assert all(
        b["mean_stream_decode_tok_s"]["min"]
        <= b["mean_stream_decode_tok_s"]["median"]
        <= b["mean_stream_decode_tok_s"]["max"]
        for b in bands
    )
    assert figures["wave_failures"] == {"probe": []}

    prov = figures["provenance"]
    params = load_lane("twin")
    image = str(params.env["DSPARK_VLLM_IMAGE"])
    with ssh.LaneNodes(params) as twin_nodes:  # what the head holds, read here independently of the runbook
        refs_main = twin_nodes.head.run(f"cat {params.weights.hub_dir}/refs/main").stdout.strip()
    version = httpx.get("http://127.0.0.2:8888/version", trust_env=False).json()["version"]
    assert (prov["image"], prov["image_digest"]) == (image, IMAGES[image].digest)
    assert prov["image_id"].startswith("sha256:")
    assert (prov["model"], prov["model_revision"]) == (params.weights.repo, refs_main)
    assert prov["server_version"] == version and "twin" in version
    assert prov["lane_file_sha256"] == sha256_file(lane_path("twin")) and prov["twin"] is True

    # the stored twin baseline is at 256 tokens: shown, not judged
    assert figures["baseline"]["verdict"] == "not judged"
    assert "not comparable: probe: max_tokens 32 here, 256 in the baseline" in figures["baseline"]["reason"]
    outputs = outputs_of(record, tmp_path)
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 1  # one plot per workload, inline
    assert any("TWIN RUN" in "".join(o.get("data", {}).get("text/markdown", "")) for o in outputs)
    assert load_baseline(saved).workloads == ["probe"] and load_baseline(saved).provenance.twin is True


@pytest.mark.twin
def test_slower_than_a_same_setup_baseline_fails_at_the_baseline_step(short_run):
    """The stored run, its rates raised by half: the same setup (every fact equal), so the run is judged and fails."""
    _, tmp_path, saved = short_run
    data = json.loads(saved.read_text())
    for doc in data["documents"]:
        for r in doc["runs"]:
            for key in ("mean_stream_decode_tok_s", "wall_aggregate_tok_s"):
                if r[key] is not None:  # none where a wave's every stream came in one read (a loaded machine)
                    r[key] *= 1.5
        doc["bands"] = bands_from_runs(doc["runs"], doc["workload"])
    faster = tmp_path / "faster.json"
    faster.write_text(json.dumps(data))
    record, _ = run(tmp_path, "speed", "twin", *SHORT, "-p", f"baseline={faster}", expect_exit=1)
    assert (record["verdict"], record["failed_step"]) == ("fail", "3 baseline"), record
    judged = record["figures"]["baseline"]
    assert judged["verdict"] == "fail" and judged["setup"]["status"] == "same"
    assert {c["verdict"] for c in judged["comparison"]["cells"]} == {"worse"}
    assert "diagnose" in record["fix"] and record["figures"]["bands"]["probe"]  # the bands measured are kept


def test_a_dry_run_on_the_real_lane_shows_what_it_would_send_and_opens_no_connection(tmp_path):
    record, done = dry_run_offline(tmp_path, "speed")
    assert record["verdict"] == "dry-run" and record["failed_step"] is None
    lines = [line.strip() for line in done.stdout.splitlines()]
    for workload in ("probe", "code", "prose"):
        assert (
            f"local: speed {workload}: 3 trials x C1/C4/C6 = 33 streamed POST "
            "http://192.168.1.11:8888/v1/chat/completions "
            "(unique prompts, temperature 0, max_tokens 256, usage included); before each wave GET "
            "http://192.168.1.11:8888/metrics until no request runs or waits"
        ) in lines
    assert "head: cat ~/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731/refs/main" in lines
    assert "local: GET http://192.168.1.11:8888/version" in lines
    assert record["figures"]["provenance"]["lane_file_sha256"] == sha256_file(lane_path("anemll-0731"))


def test_papermill_dry_run_on_the_preview_lane(tmp_path):
    out = tmp_path / "speed-1m6.ipynb"
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "papermill"),
            str(RUNBOOKS_DIR / "speed.ipynb"),
            str(out),
            "-p",
            "lane",
            "anemll-1m6",
            "-p",
            "dry_run",
            "True",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    markdown = "".join(
        "".join(o.get("data", {}).get("text/markdown", ""))
        for cell in nbformat.read(out, as_version=4).cells
        for o in cell.get("outputs", [])
    )
    assert (
        '"model": "deepseek-v4-flash-dspark"' in markdown and '"thinking": false' in markdown
    )  # the body it would send
    assert "**DRY RUN**" in markdown and "not observed (dry run)" in markdown


def test_fewer_than_three_trials_fail_the_run_even_dry(tmp_path):
    record, done = run(tmp_path, "speed", "anemll-0731", "--dry-run", "-p", "trials=2", expect_exit=1)
    assert (record["verdict"], record["failed_step"]) == ("fail", "prerequisites"), record
    executed = (tmp_path / "outputs" / record["output"]).read_text()
    assert "trials must be at least 3 (got 2)" in executed
