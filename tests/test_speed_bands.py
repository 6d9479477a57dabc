"""Bands, baselines, verdicts, the A/B canary and the plots (lanebook.speed.bands)."""

import json

import pytest
from lanebook.base.errors import LanebookError
from lanebook.speed.bands import (
    ab_canary,
    bands_frame,
    bands_from_runs,
    compare_to_baseline,
    load_speed_document,
    plot_bands,
    plot_history,
)
from lanebook.speed.baseline import stored_baseline


def run(c, trial, stream, aggregate, errors=0, ttft=0.2):
    return {
        "concurrency": c,
        "trial": trial,
        "requests": c,
        "ok": c - errors,
        "errors": errors,
        "decode_tokens": 255 * (c - errors),
        "wall_s": 255 * c / aggregate,
        "mean_stream_decode_tok_s": stream,
        "wall_aggregate_tok_s": aggregate,
        "ttft_s_median": ttft,
        "acceptance_rate": None,
        "mean_acceptance_length": None,
        "tokens_estimated": False,
    }


def doc(workload, runs, max_tokens=256):
    return {
        "api": "http://127.0.0.2:8888/v1",
        "model": "m",
        "workload": workload,
        "max_tokens": max_tokens,
        "twin": True,
        "runs": runs,
        "bands": bands_from_runs(runs, workload),
    }


def three_trials(workload, c1=(80.0, 82.0, 84.0), c4=(58.0, 59.0, 61.0), agg_scale=1.0):
    runs = []
    for trial in range(3):
        runs.append(run(1, trial + 1, c1[trial], c1[trial] * 0.92 * agg_scale))
        runs.append(run(4, trial + 1, c4[trial], c4[trial] * 3.58 * agg_scale))
    return doc(workload, runs)


def test_band_is_median_and_min_max_over_trials():
    bands = three_trials("code")["bands"]
    c1 = bands[0]
    assert (c1["concurrency"], c1["trials"], c1["complete"]) == (1, 3, True)
    assert c1["mean_stream_decode_tok_s"] == {"median": 82.0, "min": 80.0, "max": 84.0}
    assert c1["acceptance_rate"] is None  # no acceptance measured, so no band pretends to one


def test_fewer_than_three_trials_is_incomplete():
    bands = bands_from_runs([run(6, 1, 42.5, 219.2), run(6, 2, 43.0, 221.0, errors=1)], "count")
    assert bands[0]["complete"] is False and bands[0]["trials"] == 2 and bands[0]["errors"] == 1


def test_seed_baseline_is_exact_and_marked_incomplete():
    base = stored_baseline("anemll-1m6").documents[0]  # the seed table: one workload
    for r in base["runs"]:  # the stored aggregates are the seed's token counts over its walls
        assert round(r["decode_tokens"] / r["wall_s"], 1) == r["wall_aggregate_tok_s"]
    assert [b["complete"] for b in base["bands"]] == [False, False, False]
    assert stored_baseline("no-such-lane") is None


def test_baseline_verdicts_with_stated_tolerance():
    base = three_trials("code")
    same = compare_to_baseline([three_trials("code", agg_scale=1.02)], [base], tolerance=0.05)
    assert same.verdict == "pass" and {c.verdict for c in same.cells} == {"within"}
    slower = compare_to_baseline([three_trials("code", c4=(50.0, 51.0, 52.0))], [base], tolerance=0.05)
    assert slower.verdict == "fail"
    worse = [(c.concurrency, c.figure) for c in slower.cells if c.verdict == "worse"]
    assert worse == [(4, "mean_stream_decode_tok_s"), (4, "wall_aggregate_tok_s")]
    assert "±5%" in slower.summary() and "worse: code C4" in slower.summary()


def test_incomplete_bands_never_pass():
    current = doc("code", [run(1, 1, 82.0, 75.0)])
    assert compare_to_baseline([current], [three_trials("code")]).verdict == "incomplete"
    missing = compare_to_baseline([doc("json", [run(1, 1, 60.0, 55.0)] * 3)], [three_trials("code")])
    assert {c.verdict for c in missing.cells} == {"missing"}
    assert missing.verdict == "incomplete"  # no baseline to meet is not a pass


def test_baseline_needs_the_same_max_tokens_and_no_errors():
    import pytest
    from lanebook.base.errors import LanebookError

    base = three_trials("code")
    with pytest.raises(LanebookError, match="max_tokens"):
        compare_to_baseline([doc("code", base["runs"], max_tokens=512)], [base])
    failing = [
        dict(r, errors=1, ok=r["requests"] - 1) if r["concurrency"] == 4 and r["trial"] == 1 else r
        for r in base["runs"]
    ]
    assert compare_to_baseline([doc("code", failing)], [base]).verdict == "fail"


def test_ab_canary_rejects_regressions_and_promotes_gains():
    a = [three_trials("count"), three_trials("code")]
    regressed = [three_trials("count", c1=(76.0, 77.0, 78.0)), three_trials("code")]
    assert ab_canary(a, regressed).verdict == "reject"  # seed 000's batch 8216: regressed count, rejected
    gain = [three_trials("count", agg_scale=1.15), three_trials("code", agg_scale=1.10)]
    result = ab_canary(a, gain)
    assert result.verdict == "promote"
    assert all(c.verdict in ("better", "within") for c in result.cells)
    assert ab_canary(a, [three_trials("count"), three_trials("code")]).verdict == "no gain"
    assert result.to_json()["kind"] == "a/b" and len(result.frame()) == 8


def test_ab_canary_weighs_no_cell_where_both_sides_run_the_same():
    """At C1 the 5/4/3 schedule verifies K=5 as fixed K does: a 14% swing there is the machine's, not the schedule's
    (one loaded run measured exactly that), so with C1 alike neither a gain nor a loss there decides."""
    a = [three_trials("count")]
    swung_up = [three_trials("count", c1=(91.2, 93.5, 95.8))]  # C1 +14%, bands clear of A's
    assert ab_canary(a, swung_up).verdict == "promote"
    judged = ab_canary(a, swung_up, alike=[1])
    assert judged.verdict == "no gain"
    assert [(c.concurrency, c.verdict) for c in judged.cells] == [
        (1, "alike"),
        (1, "alike"),
        (4, "within"),
        (4, "within"),
    ]
    assert judged.cells[0].change == pytest.approx(93.5 / 82.0 - 1)  # still shown: medians 82.0 -> 93.5
    swung_down = [three_trials("count", c1=(68.8, 70.5, 72.2))]  # C1 -14%
    assert ab_canary(a, swung_down).verdict == "reject"
    assert ab_canary(a, swung_down, alike=[1]).verdict == "no gain"
    gain_at_c4 = [three_trials("count", c1=(68.8, 70.5, 72.2), c4=(66.0, 67.0, 68.0))]
    assert ab_canary(a, gain_at_c4, alike=[1]).verdict == "promote"


def test_ab_canary_refuses_unmatched_sides():
    with pytest.raises(LanebookError, match="measured on one side only"):
        ab_canary([three_trials("count")], [three_trials("code")])
    other_tokens = three_trials("count")
    other_tokens["max_tokens"] = 128
    with pytest.raises(LanebookError, match="max_tokens differ"):
        ab_canary([three_trials("count")], [other_tokens])


def test_speed_documents_load_and_recompute_bands(tmp_path):
    path = tmp_path / "speed.json"
    runs = three_trials("prose")["runs"]
    path.write_text(json.dumps({"api": "x", "model": "m", "workload": "prose", "max_tokens": 256, "runs": runs}))
    assert load_speed_document(path)["bands"] == bands_from_runs(runs, "prose")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(LanebookError, match="not a `lanebook speed --json` document"):
        load_speed_document(tmp_path / "bad.json")


def test_plots_are_written(tmp_path):
    docs = [three_trials("count"), three_trials("code"), doc("json", [run(1, 1, 60.0, 55.0)])]
    bands_png = plot_bands(docs, tmp_path / "bands.png", title="twin figures")
    history_png = plot_history(
        [("run 1", docs[:2]), ("run 2", [three_trials("count", agg_scale=1.1)])], tmp_path / "history.png"
    )
    for png in (bands_png, history_png):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert list(bands_frame(docs)["workload"]) == ["count", "count", "code", "code", "json"]
