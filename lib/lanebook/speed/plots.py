"""One workload's bands as a picture: per-stream decode and wall aggregate against concurrency.

The band (min-max over trials) is shaded, its median drawn, every trial shown as a dot, and the baseline's
medians drawn dashed beside it, labelled with whether they were judged (same setup) or only shown. The
picture is PNG bytes, so a notebook embeds it as an image output and the book shows it offline.
"""

from __future__ import annotations

import io
from typing import Optional

PANELS = (("mean_stream_decode_tok_s", "per-stream decode tok/s"), ("wall_aggregate_tok_s", "wall aggregate tok/s"))


def band_series(document: dict, figure: str) -> tuple[list[int], list[float], list[float], list[float]]:
    """(levels, medians, mins, maxes) of one figure over the document's bands; levels without the figure are left
    out."""
    levels, medians, mins, maxes = [], [], [], []
    for band in sorted(document["bands"], key=lambda b: b["concurrency"]):
        stats = band.get(figure)
        if stats:
            levels.append(band["concurrency"])
            medians.append(stats["median"])
            mins.append(stats["min"])
            maxes.append(stats["max"])
    return levels, medians, mins, maxes


def plot_workload(
    document: dict, baseline: Optional[dict] = None, baseline_label: str = "baseline median", title: str = ""
) -> bytes:
    """PNG of one speed document's bands, with the baseline document's medians when given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(10, 3.8), squeeze=False)
    for ax, (figure, label) in zip(axes[0], PANELS):
        levels, medians, mins, maxes = band_series(document, figure)
        ax.fill_between(levels, mins, maxes, alpha=0.25, label="min–max over trials")
        ax.plot(levels, medians, marker="o", label="median")
        trials = [(r["concurrency"], r[figure]) for r in document["runs"] if r.get(figure) is not None]
        ax.scatter([c for c, _ in trials], [v for _, v in trials], s=10, color="black", alpha=0.5, label="trials")
        if baseline is not None:
            b_levels, b_medians, _, _ = band_series(baseline, figure)
            ax.plot(b_levels, b_medians, linestyle="--", marker="x", color="grey", label=baseline_label)
        ax.set_xlabel("concurrent streams (C)")
        ax.set_ylabel(label)
        ax.set_xticks(levels or [1])
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="lower left")
    fig.suptitle(title or f"{document['workload']}: median and min–max over trials", fontsize=10)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=100)
    plt.close(fig)
    return out.getvalue()
