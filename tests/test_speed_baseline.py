"""Lanes' stored baselines and the judgement of a run against one (lanebook.speed.baseline): judged only on the
same setup and the same max_tokens, failing a median more than the tolerance below the baseline's."""

import json
from dataclasses import replace

import pytest
from lanebook.base.errors import LanebookError
from lanebook.base.files import sha256_file
from lanebook.lane.params import lane_path
from lanebook.speed.bands import BASELINES_DIR, bands_from_runs
from lanebook.speed.baseline import (
    BASELINE_TOLERANCE,
    DEFAULT_WORKLOADS,
    Baseline,
    baseline_json,
    counterpart,
    judge,
    lane_workloads,
    load_baseline,
    stored_baseline,
    write_baseline,
)
from lanebook.speed.provenance import Provenance

TWIN_BASELINES = sorted(
    path.stem for path in BASELINES_DIR.glob("*.json") if stored_baseline(path.stem).provenance.twin
)

SETUP = Provenance(
    lane="twin",
    twin=True,
    lane_file_sha256="ab" * 32,
    image="ghcr.io/anemll/dspark-vllm-gx10:0.1.1",
    image_digest="sha256:" + "a" * 64,
    image_id="sha256:" + "1" * 64,
    model="deepseek-ai/DeepSeek-V4-Flash-0731",
    model_revision="2f" * 20,
    server_version="0.25.2+lanebook.twin",
)


def run(c, trial, stream, aggregate, errors=0):
    return {
        "concurrency": c,
        "trial": trial,
        "requests": c,
        "ok": c - errors,
        "errors": errors,
        "decode_tokens": 255 * (c - errors),
        "wall_s": round(255 * c / aggregate, 4),
        "mean_stream_decode_tok_s": stream,
        "wall_aggregate_tok_s": aggregate,
        "ttft_s_median": 0.25,
        "acceptance_rate": None,
        "mean_acceptance_length": None,
        "tokens_estimated": False,
    }


def doc(workload, scale=1.0, max_tokens=256, trials=3, errors=0):
    runs = []
    for t in range(1, trials + 1):
        runs.append(run(1, t, 82.0 * scale, 76.0 * scale))
        runs.append(run(6, t, 50.0 * scale, 250.0 * scale, errors=errors if t == trials else 0))
    return {
        "api": "http://127.0.0.2:8888/v1",
        "model": "deepseek-v4-flash-0731",
        "workload": workload,
        "max_tokens": max_tokens,
        "twin": True,
        "runs": runs,
        "bands": bands_from_runs(runs, workload),
    }


def stored(*docs, provenance=SETUP):
    return Baseline("twin", "test", provenance, list(docs))


def test_the_shipped_baselines():
    seed = stored_baseline("anemll-1m6")
    assert seed.workloads == ["probe"] and seed.provenance.twin is False
    assert seed.provenance.image == "ghcr.io/anemll/dspark-vllm-gx10:0.1.1" and seed.provenance.model_revision is None
    twin = stored_baseline("twin")
    assert twin.workloads == ["probe", "code"] and twin.provenance.twin is True
    assert all(doc["twin"] and doc["max_tokens"] == 256 for doc in twin.documents)
    assert all(band["complete"] and band["errors"] == 0 for doc in twin.documents for band in doc["bands"])
    assert stored_baseline("anemll-0731") is None


def test_a_lane_runs_its_baselines_workloads_else_the_defaults():
    assert lane_workloads("twin") == ["probe", "code"]
    assert lane_workloads("anemll-1m6") == ["probe"]
    assert lane_workloads("anemll-0731") == list(DEFAULT_WORKLOADS) == ["probe", "code", "prose"]


def test_no_baseline_is_said_so():
    judgement = judge([doc("probe")], SETUP, None)
    assert (judgement.verdict, judgement.judged) == ("no baseline", False)
    assert judgement.summary() == "no baseline: lane twin has no stored baseline"


def test_same_setup_within_tolerance_passes():
    judgement = judge([doc("probe", scale=0.95)], SETUP, stored(doc("probe")))
    assert (judgement.verdict, judgement.tolerance) == ("pass", BASELINE_TOLERANCE)
    assert {c.verdict for c in judgement.comparison.cells} == {"within"}
    assert judgement.setup.same


def test_same_setup_beyond_tolerance_fails_naming_the_cells():
    judgement = judge([doc("probe", scale=0.85)], SETUP, stored(doc("probe")))
    assert judgement.verdict == "fail" and judgement.failed
    worse = [(c.workload, c.concurrency, c.figure, round(c.change, 4)) for c in judgement.comparison.cells]
    assert worse == [
        ("probe", 1, "mean_stream_decode_tok_s", -0.15),
        ("probe", 1, "wall_aggregate_tok_s", -0.15),
        ("probe", 6, "mean_stream_decode_tok_s", -0.15),
        ("probe", 6, "wall_aggregate_tok_s", -0.15),
    ]
    assert "worse: probe C1 mean_stream_decode_tok_s 82.0 -> 69.7 (-15.0%)" in judgement.summary()


def test_failed_requests_fail_a_judged_run():
    assert judge([doc("probe", errors=2)], SETUP, stored(doc("probe"))).verdict == "fail"


def test_a_different_setup_is_shown_not_judged():
    newer = replace(SETUP, server_version="0.26.0")
    judgement = judge([doc("probe", scale=0.5)], newer, stored(doc("probe")))
    assert (judgement.verdict, judgement.judged, judgement.failed) == ("not judged", False, False)
    assert judgement.reason == "different setup: server_version '0.26.0' here, '0.25.2+lanebook.twin' in the baseline"
    assert judgement.comparison.verdict == "fail"  # the figures are still set side by side, for the reader


def test_a_setup_the_baseline_did_not_record_is_not_judged():
    seed = stored_baseline("anemll-1m6")
    real = replace(SETUP, lane="anemll-1m6", twin=False)
    judgement = judge([doc("probe")], real, seed)
    assert judgement.verdict == "not judged"
    assert judgement.reason.startswith(
        "setup not established: unknown on at least one side: lane_file_sha256, model, "
        "model_revision, server_version, image identity"
    )


def test_other_max_tokens_or_no_common_workload_is_not_comparable():
    short = judge([doc("probe", max_tokens=32)], SETUP, stored(doc("probe")))
    assert short.verdict == "not judged" and short.comparison is None
    assert short.reason == "not comparable: probe: max_tokens 32 here, 256 in the baseline"
    other = judge([doc("json")], SETUP, stored(doc("probe")))
    assert other.reason == "not comparable: no workload in common (measured json; the baseline has probe)"


def test_the_counterpart_is_the_same_workload_at_the_same_max_tokens():
    base = stored(doc("probe"))
    assert counterpart(base, doc("probe")) is base.documents[0]
    assert counterpart(base, doc("probe", max_tokens=32)) is None
    assert counterpart(base, doc("code")) is None and counterpart(None, doc("probe")) is None


def test_a_workload_missing_from_the_baseline_leaves_the_judgement_incomplete():
    judgement = judge([doc("probe"), doc("code")], SETUP, stored(doc("probe")))
    assert judgement.verdict == "incomplete"
    assert {c.workload for c in judgement.comparison.cells if c.verdict == "missing"} == {"code"}


def test_a_run_is_stored_and_read_back_with_its_provenance(tmp_path):
    path = write_baseline(tmp_path / "twin.json", [doc("probe"), doc("code")], SETUP, "a test run")
    text = path.read_text()
    assert '"bands"' not in text and len(text.splitlines()) == 16 + 2 * (1 + 6 + 1) + 2  # a line per run; no bands
    back = load_baseline(path)
    assert (back.lane_name, back.source, back.provenance, back.workloads) == (
        "twin",
        "a test run",
        SETUP,
        ["probe", "code"],
    )
    assert back.document("code")["bands"] == doc("code")["bands"]
    write_baseline(path, [doc("probe")], SETUP, "again")
    assert [p.name for p in tmp_path.iterdir() if p.name != "twin.json"] != []  # the earlier file was backed up
    assert load_baseline(path).workloads == ["probe"]


def test_a_poor_run_is_refused_as_a_baseline():
    with pytest.raises(LanebookError, match="requests of workload probe failed"):
        baseline_json([doc("probe", errors=1)], SETUP, "x")
    with pytest.raises(LanebookError, match="fewer than 3 trials"):
        baseline_json([doc("probe", trials=2)], SETUP, "x")
    with pytest.raises(LanebookError, match="twin flag disagrees"):
        baseline_json([doc("probe")], replace(SETUP, twin=False), "x")
    with pytest.raises(LanebookError, match="no speed document"):
        baseline_json([], SETUP, "x")


def test_malformed_baseline_files_are_one_clear_error(tmp_path):
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(doc("probe")))
    with pytest.raises(LanebookError, match="is not a speed baseline"):
        load_baseline(bare)
    no_setup = tmp_path / "no-setup.json"
    no_setup.write_text(json.dumps({"lane": "twin", "documents": [doc("probe")]}))
    with pytest.raises(LanebookError, match="needs its provenance"):
        load_baseline(no_setup)
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps({"provenance": SETUP.to_json(), "documents": [doc("probe"), doc("probe")]}))
    with pytest.raises(LanebookError, match="a workload appears twice"):
        load_baseline(twice)


@pytest.mark.parametrize("lane", TWIN_BASELINES)
def test_each_twin_baseline_was_measured_on_its_lane_file(lane):
    """A stored twin baseline is judged only while its lane file is the file it was measured with: after an edit the
    runbook says "different setup" until the baseline is measured again (save_baseline). The twin lanes that
    promote in the suite (twin-tp4, the fleet's canary, twin-keyed) keep a probe-only baseline: the workloads a lane
    runs are its baseline's, and the suite's promotions prove N-node, fleet and key logic, not the twin's decode
    rates."""
    stored = stored_baseline(lane)
    if stored.provenance.lane_file_sha256 != sha256_file(lane_path(lane)):
        pytest.skip(
            f"params/{lane}.yaml changed since its twin baseline was measured: re-measure it "
            f"(lanebook run speed --lane {lane} -p save_baseline=lib/lanebook/speed/baselines/{lane}.json)"
        )
    assert stored.provenance.twin and stored.provenance.lane == lane
    assert stored.provenance.image_digest and stored.provenance.model_revision and stored.provenance.server_version
