"""One workload's bands as a PNG (lanebook.speed.plots), with and without the baseline's medians."""

from lanebook.speed.bands import bands_from_runs
from lanebook.speed.plots import band_series, plot_workload

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(c, trial, stream, aggregate):
    return {
        "concurrency": c,
        "trial": trial,
        "requests": c,
        "ok": c,
        "errors": 0,
        "decode_tokens": 255 * c,
        "wall_s": 255 * c / aggregate,
        "mean_stream_decode_tok_s": stream,
        "wall_aggregate_tok_s": aggregate,
        "ttft_s_median": None,
        "acceptance_rate": None,
        "mean_acceptance_length": None,
        "tokens_estimated": False,
    }


def document():
    runs = [
        run(c, t, s + t, a + 2 * t)
        for t in (1, 2, 3)
        for c, s, a in ((1, 80.0, 74.0), (4, 60.0, 220.0), (6, 48.0, 250.0))
    ]
    return {"workload": "probe", "max_tokens": 256, "runs": runs, "bands": bands_from_runs(runs, "probe")}


def test_band_series_are_median_min_max_by_level():
    assert band_series(document(), "mean_stream_decode_tok_s") == (
        [1, 4, 6],
        [82.0, 62.0, 50.0],
        [81.0, 61.0, 49.0],
        [83.0, 63.0, 51.0],
    )
    assert band_series(document(), "ttft_s_median") == ([], [], [], [])  # no figure, no point


def test_plot_is_a_png_with_or_without_the_baseline():
    alone = plot_workload(document(), title="twin · probe · TWIN figures")
    beside = plot_workload(document(), document(), "baseline median (same setup: judged)")
    assert alone.startswith(PNG_MAGIC) and beside.startswith(PNG_MAGIC)
    assert alone != beside  # the baseline's medians are drawn
