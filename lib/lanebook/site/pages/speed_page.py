"""The speed page: each lane's latest bands, their history across runs, each run against its baseline.

Input is the speed runs' records (their figures hold each workload's bands, the setup measured and the
judgement against the baseline) and each lane's stored baseline (lanebook.speed.baseline). Each lane has its
own plot, so a twin lane's figures and a real lane's never share an axis; the reference lines on a lane's plot
are its own baseline's medians, which are twin figures for a twin lane and, for a real lane, the figures its
seed published (anemll-1m6's baseline is the canary write-up's streaming table). A baseline whose twin flag is
not its lane's is not drawn. The series are pure functions (`history`, `series`); `plot_history` only draws.
The figures others published (lanebook.speed.references) follow the seeds' tables, each labelled a reference.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Optional

from lanebook.site.pages.markup import badge, md_table, verdict_badge, where_badge, wide
from lanebook.site.pages.runs_page import PublishedRun
from lanebook.site.pages.trail_page import link
from lanebook.speed.baseline import Baseline
from lanebook.speed.plots import PANELS
from lanebook.speed.references import PUBLISHED_FIGURES

Series = dict[
    tuple[str, int], list[tuple[int, float, float, float]]
]  # (workload, C) -> [(run index, median, min, max)]
JUDGEMENT_CLASSES = {
    "pass": "pass",
    "fail": "fail",
    "incomplete": "warning",
    "not judged": "skipped",
    "no baseline": "skipped",
}
PROVENANCE_FACTS = (
    "twin",
    "image",
    "image_digest",
    "image_id",
    "model",
    "model_revision",
    "server_version",
    "lane_file_sha256",
)


def speed_runs(runs: list[PublishedRun]) -> list[PublishedRun]:
    """Speed runs that measured something (a dry run sends nothing), oldest first."""
    found = [
        run
        for run in runs
        if run.record["runbook"] == "speed"
        and not run.record.get("dry_run")
        and (run.record.get("figures") or {}).get("bands")
    ]
    return sorted(found, key=lambda run: run.record["started_at"])


@dataclass(frozen=True)
class LaneSpeed:
    lane_name: str
    twin: bool
    runs: list[PublishedRun]  # oldest first
    baseline: Optional[Baseline]

    @property
    def latest(self) -> Optional[PublishedRun]:
        return self.runs[-1] if self.runs else None

    @property
    def reference(self) -> Optional[Baseline]:
        """The baseline drawn as reference lines: only one measured on the same kind of lane (twin or real)."""
        return self.baseline if self.baseline is not None and self.baseline.provenance.twin == self.twin else None


def series(bands_per_run: list[dict[str, list[dict]]], figure: str) -> Series:
    """A figure's band per (workload, C), run by run: bands_per_run[i] is run i's {workload: bands}."""
    out: Series = {}
    for index, by_workload in enumerate(bands_per_run):
        for workload, bands in by_workload.items():
            for band in bands:
                stats = band.get(figure)
                if stats:
                    out.setdefault((workload, band["concurrency"]), []).append(
                        (index, stats["median"], stats["min"], stats["max"])
                    )
    return dict(sorted(out.items()))


def reference_medians(baseline: Baseline, figure: str) -> dict[tuple[str, int], float]:
    """The baseline's median of a figure per (workload, C)."""
    return {
        (band["workload"], band["concurrency"]): band[figure]["median"]
        for doc in baseline.documents
        for band in doc["bands"]
        if band.get(figure)
    }


def _fmt(stats: Optional[dict], decimals: int = 1) -> str:
    if not stats:
        return "—"
    median = f"{stats['median']:.{decimals}f}"
    if stats["min"] == stats["max"] == stats["median"]:  # one trial (a seed's single run): no band to show
        return median
    return f"{median} ({stats['min']:.{decimals}f}–{stats['max']:.{decimals}f})"


def bands_rows(bands_by_workload: dict[str, list[dict]]) -> list[list[str]]:
    rows = []
    for workload, bands in bands_by_workload.items():
        for band in sorted(bands, key=lambda b: b["concurrency"]):
            rows.append(
                [
                    workload,
                    f"C{band['concurrency']}",
                    str(band["trials"]) + ("" if band["complete"] else " (incomplete)"),
                    _fmt(band.get("mean_stream_decode_tok_s")),
                    _fmt(band.get("wall_aggregate_tok_s")),
                    _fmt(band.get("ttft_s_median"), 3),
                    _fmt(band.get("acceptance_rate"), 3),
                    str(band["errors"]),
                ]
            )
    return rows


BANDS_HEADER = [
    "workload",
    "C",
    "trials",
    "per-stream decode tok/s",
    "wall aggregate tok/s",
    "TTFT s",
    "acceptance",
    "failed requests",
]


def plot_history(speed: LaneSpeed, labels: list[str], bands_per_run: list[dict[str, list[dict]]]) -> bytes:
    """PNG: per figure, each (workload, C)'s median and min–max across the lane's runs, its baseline's medians
    dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kind = "TWIN figures" if speed.twin else "REAL lane figures"
    fig, axes = plt.subplots(1, len(PANELS), figsize=(11, 4.2), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (figure, ylabel) in zip(axes[0], PANELS):
        measured = series(bands_per_run, figure)
        reference = reference_medians(speed.reference, figure) if speed.reference else {}
        cells = sorted(set(measured) | set(reference))
        for n, cell in enumerate(cells):
            colour = colours[n % len(colours)]
            points = measured.get(cell, [])
            if points:
                xs = [p[0] for p in points]
                med = [p[1] for p in points]
                ax.errorbar(
                    xs,
                    med,
                    yerr=[[m - p[2] for m, p in zip(med, points)], [p[3] - m for m, p in zip(med, points)]],
                    marker="o",
                    ms=3,
                    capsize=2,
                    color=colour,
                    label=f"{cell[0]} C{cell[1]}",
                )
            if cell in reference:
                ax.axhline(
                    reference[cell],
                    color=colour,
                    linestyle="--",
                    lw=1,
                    label=f"{cell[0]} C{cell[1]} baseline" if not points else None,
                )
        if labels:
            step = max(1, len(labels) // 12)
            ticks = list(range(0, len(labels), step))
            ax.set_xticks(ticks, [labels[i] for i in ticks], rotation=30, ha="right", fontsize=7)
            ax.set_xlim(-0.5, len(labels) - 0.5)
        else:
            ax.set_xticks([])
            ax.text(0.5, 0.05, "no run recorded: only the baseline", transform=ax.transAxes, ha="center", fontsize=8)
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    handles, names = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, names, fontsize=7, loc="center right")
    ref = "; dashed: the baseline's medians" if speed.reference else ""
    fig.suptitle(f"{speed.lane_name} · {kind} · median and min–max per run{ref}", fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.86, 1))
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=90)
    plt.close(fig)
    return out.getvalue()


def picture_name(lane_name: str) -> str:
    return f"speed-{lane_name}.png"


def _provenance_table(run: Optional[PublishedRun], baseline: Optional[Baseline]) -> str:
    mine = (run.record["figures"].get("provenance") or {}) if run else {}
    theirs = baseline.provenance.to_json() if baseline else {}

    def value(data: dict, key: str) -> str:
        return "unknown" if data.get(key) is None else f"`{data[key]}`"

    rows = [
        [key, value(mine, key) if run else "—", value(theirs, key) if baseline else "—"] for key in PROVENANCE_FACTS
    ]
    return md_table(["fact", "latest run", "baseline"], rows)


def judgement_cell(figures: dict) -> str:
    judgement = figures.get("baseline") or {}
    verdict = judgement.get("verdict")
    if not verdict:
        return "—"
    return badge(verdict, JUDGEMENT_CLASSES.get(verdict, "unknown")) + (
        f" {judgement['reason']}" if judgement.get("reason") else ""
    )


def lane_section(speed: LaneSpeed) -> tuple[str, Optional[bytes]]:
    """The lane's part of the page and its history plot (None when there is nothing to draw)."""
    title = (
        f"## {speed.lane_name}\n\n{where_badge(speed.twin)}"
        + (" Every figure here is a twin figure, never a real lane's." if speed.twin else "")
        + "\n"
    )
    kind = "twin" if speed.baseline and speed.baseline.provenance.twin else "real lane"
    baseline = (
        f"**Baseline:** {speed.baseline.source} ({kind} figures).\n"
        if speed.baseline
        else "**Baseline:** none stored for this lane: its runs are shown, not judged.\n"
    )
    if speed.baseline is not None and speed.reference is None:
        baseline += "Its twin flag is not the lane's, so it is not drawn on this lane's plot.\n"
    if not speed.runs and speed.reference is None:
        return title + "\n" + baseline + "\nNo speed run recorded yet.\n", None
    labels = [f"{run.record['started_at'][:16]} {run.run_id}" for run in speed.runs]
    bands = [run.record["figures"]["bands"] for run in speed.runs]
    picture = plot_history(speed, labels, bands)
    parts = [
        title,
        baseline,
        f"```{{figure}} {picture_name(speed.lane_name)}\n:alt: speed history of {speed.lane_name}\n:width: 100%\n\n"
        f"{speed.lane_name}: per-stream decode and wall aggregate across its speed runs "
        f"({'twin' if speed.twin else 'real lane'} figures "
        f"only){'; dashed lines: its baseline' if speed.reference else ''}.\n```\n",
    ]
    if speed.latest:
        latest = speed.latest
        parts.append(
            f"### Latest bands\n\nRun {link(latest, 'speed')}, {latest.record['started_at']}, verdict "
            f"{verdict_badge(latest.record['verdict'])}. Median (min–max) over trials.\n\n"
            + wide(md_table(BANDS_HEADER, bands_rows(latest.record["figures"]["bands"])))
        )
        parts.append(
            "### Runs against the baseline\n\n"
            + wide(
                md_table(
                    ["started (UTC)", "run", "verdict", "against the baseline", "workloads"],
                    [
                        [
                            run.record["started_at"],
                            link(run, "speed"),
                            verdict_badge(run.record["verdict"]),
                            judgement_cell(run.record["figures"]),
                            ", ".join(run.record["figures"]["bands"]),
                        ]
                        for run in reversed(speed.runs)
                    ],
                )
            )
        )
    parts.append(
        "### Provenance\n\nThe setup measured (latest run) and the baseline's; a baseline is judged only on "
        "the same setup.\n\n" + wide(_provenance_table(speed.latest, speed.baseline))
    )
    return "\n".join(parts), picture


def seed_figures(lanes: list[LaneSpeed], twin_page: bool) -> str:
    """The seeds' published figures: the baselines of real lanes, as their source gives them."""
    rows = []
    for speed in lanes:
        if speed.baseline is None or speed.baseline.provenance.twin:
            continue
        for doc in speed.baseline.documents:
            for band in sorted(doc["bands"], key=lambda b: b["concurrency"]):
                rows.append(
                    [
                        speed.lane_name,
                        doc["workload"],
                        f"C{band['concurrency']}",
                        _fmt(band.get("mean_stream_decode_tok_s")),
                        _fmt(band.get("wall_aggregate_tok_s")),
                        speed.baseline.source,
                    ]
                )
    if not rows:
        return ""
    return (
        "## Published figures of the seeds\n\nThe real lanes' stored baselines: the figures the write-ups published, "
        "drawn as reference lines on those lanes' plots (never on a twin lane's)."
        + (" How close the twin comes to them is on the [twin page](twin.md), fact by fact." if twin_page else "")
        + "\n\n"
        + wide(md_table(["lane", "workload", "C", "per-stream decode tok/s", "wall aggregate tok/s", "source"], rows))
    )


def published_references() -> str:
    """Figures others published (lanebook.speed.references), each labelled a reference with who measured it, its
    conditions and the write-up citing it: beside lanebook's bands, never as its measurements."""
    rows = [
        [f"{badge('reference', 'skipped')} {f.figure}", f"{f.value} {f.unit}", f.measured_by, f.conditions, f.source]
        for f in PUBLISHED_FIGURES
    ]
    return (
        "## Published references\n\nFigures the write-ups cite from other runs and other people: references to read "
        "lanebook's bands against, **not lanebook's measurements**. Their harnesses and conditions differ (single "
        "best runs, other pairs, other workloads), so no run is judged against them.\n\n"
        + wide(md_table(["reference", "figure", "measured by", "conditions", "source (write-up)"], rows))
    )


def speed_page(lanes: list[LaneSpeed], twin_page: bool = False) -> tuple[str, dict[str, bytes]]:
    """The page and its pictures (file name -> PNG); twin_page: the book has the twin's page to link to."""
    pictures: dict[str, bytes] = {}
    sections = []
    for speed in lanes:
        text, picture = lane_section(speed)
        sections.append(text)
        if picture is not None:
            pictures[picture_name(speed.lane_name)] = picture
    head = (
        "# Speed\n\nBands from the speed runbook: per (workload, C), the median and min–max over at least three "
        "trials, "
        "never a single best run. Each lane has its own plot: twin and real figures never share an axis. A run is "
        "judged against its lane's baseline only on the same setup (see each lane's provenance).\n"
    )
    return "\n".join([head, seed_figures(lanes, twin_page), published_references(), *sections]), pictures
