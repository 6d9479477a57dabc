"""Bands, baselines and verdicts: what operators decide promotions and rollbacks on.

A band is the median and min-max of a figure over the trials of one (workload, C) cell; fewer than
MIN_TRIALS trials make it incomplete, and every table and verdict says so. Verdicts compare medians
with a stated relative tolerance. Inputs are speed documents: the JSON `lanebook speed --json` writes
(runs and bands), so an earlier run, a lane's stored bands and a fresh run are compared alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Collection, Iterable, Optional

import pandas as pd

from lanebook.base.errors import LanebookError

MIN_TRIALS = 3
DEFAULT_TOLERANCE = 0.05
BAND_FIGURES = (
    "mean_stream_decode_tok_s",
    "wall_aggregate_tok_s",
    "ttft_s_median",
    "acceptance_rate",
    "mean_acceptance_length",
)
VERDICT_FIGURES = ("mean_stream_decode_tok_s", "wall_aggregate_tok_s")  # higher is better for both
BASELINES_DIR = Path(__file__).resolve().parent / "baselines"
Cell = tuple[str, int]  # (workload, concurrency)


def bands_from_runs(runs: list[dict], workload: str) -> list[dict]:
    """One band per concurrency level: trials, errors, and {median, min, max} of each figure (null if none)."""
    if not runs:
        return []
    frame = pd.DataFrame(runs)
    bands = []
    for concurrency, group in frame.groupby("concurrency", sort=True):
        band = {
            "workload": workload,
            "concurrency": int(concurrency),
            "trials": int(len(group)),
            "complete": bool(len(group) >= MIN_TRIALS),
            "errors": int(group["errors"].sum()),
        }
        for figure in BAND_FIGURES:
            values = pd.to_numeric(group[figure], errors="coerce").dropna()
            band[figure] = (
                None
                if values.empty
                else {
                    "median": round(float(values.median()), 4),
                    "min": round(float(values.min()), 4),
                    "max": round(float(values.max()), 4),
                }
            )
        bands.append(band)
    return bands


def speed_document(doc: object, where: str) -> dict:
    """A speed JSON document checked (workload and runs), bands recomputed from runs when missing."""
    if not isinstance(doc, dict) or "runs" not in doc or "workload" not in doc:
        raise LanebookError(f"{where} is not a `lanebook speed --json` document (needs workload and runs)")
    if not doc.get("bands"):
        doc["bands"] = bands_from_runs(doc["runs"], doc["workload"])
    return doc


def _read_json(path: Path, what: str) -> object:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LanebookError(f"cannot read {what} {path}: {exc}") from None


def load_speed_document(path: str | Path) -> dict:
    """A speed JSON (ours or an earlier run's); bands are recomputed from runs when missing."""
    path = Path(path)
    return speed_document(_read_json(path, "speed results"), str(path))


def read_baseline_file(path: str | Path) -> dict:
    """A baseline file: {"lane", "source", "provenance", "documents": [speed documents, one per workload]}."""
    path = Path(path)
    data = _read_json(path, "baseline")
    if not isinstance(data, dict) or not isinstance(data.get("documents"), list) or not data["documents"]:
        raise LanebookError(f"{path} is not a speed baseline (needs documents: one speed document per workload)")
    data["documents"] = [speed_document(doc, f"{path} documents[{i}]") for i, doc in enumerate(data["documents"])]
    workloads = [doc["workload"] for doc in data["documents"]]
    if len(set(workloads)) != len(workloads):
        raise LanebookError(f"{path}: a workload appears twice in documents ({', '.join(workloads)})")
    return data


def _cells(documents: Iterable[dict]) -> tuple[dict[Cell, dict], set[int]]:
    cells: dict[Cell, dict] = {}
    max_tokens = set()
    for doc in documents:
        max_tokens.add(doc.get("max_tokens"))
        for band in doc["bands"]:
            cells[(band["workload"], band["concurrency"])] = band
    return cells, max_tokens


@dataclass(frozen=True)
class CellVerdict:
    workload: str
    concurrency: int
    figure: str
    current: Optional[float]  # median of the measured (or B) band
    baseline: Optional[float]  # median of the baseline (or A) band
    change: Optional[float]  # current / baseline - 1
    verdict: str  # better | worse | within | missing | alike (both sides ran the same there: not weighed)
    overlap: Optional[bool]  # do the two min-max bands overlap (the difference may be noise)
    trials: int
    baseline_trials: int


@dataclass(frozen=True)
class Comparison:
    kind: str  # "baseline" or "a/b"
    tolerance: float
    cells: list[CellVerdict]
    verdict: str  # baseline: pass | fail | incomplete; a/b: promote | reject | no gain | incomplete
    complete: bool

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame([c.__dict__ for c in self.cells])

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "tolerance": self.tolerance,
            "verdict": self.verdict,
            "complete": self.complete,
            "cells": [c.__dict__ for c in self.cells],
        }

    def summary(self) -> str:
        worse = [c for c in self.cells if c.verdict == "worse"]
        better = [c for c in self.cells if c.verdict == "better"]
        head = f"{self.kind} verdict: {self.verdict} (tolerance ±{self.tolerance:.0%} on medians"
        head += ")" if self.complete else f"; incomplete: some bands have fewer than {MIN_TRIALS} trials)"
        lines = [head] + [
            f"  {c.verdict}: {c.workload} C{c.concurrency} {c.figure} {c.baseline:.1f} -> {c.current:.1f} "
            f"({c.change:+.1%})"
            for c in worse + better
        ]
        return "\n".join(lines)


def _judge(figure: str, cell: Cell, cur: Optional[dict], base: Optional[dict], tolerance: float) -> CellVerdict:
    cur_fig = (cur or {}).get(figure)
    base_fig = (base or {}).get(figure)
    trials = (cur or {}).get("trials", 0)
    base_trials = (base or {}).get("trials", 0)
    if not cur_fig or not base_fig or not base_fig["median"]:
        return CellVerdict(
            cell[0],
            cell[1],
            figure,
            cur_fig and cur_fig["median"],
            base_fig and base_fig["median"],
            None,
            "missing",
            None,
            trials,
            base_trials,
        )
    change = cur_fig["median"] / base_fig["median"] - 1
    verdict = "better" if change > tolerance else "worse" if change < -tolerance else "within"
    overlap = cur_fig["min"] <= base_fig["max"] and base_fig["min"] <= cur_fig["max"]
    return CellVerdict(
        cell[0], cell[1], figure, cur_fig["median"], base_fig["median"], change, verdict, overlap, trials, base_trials
    )


def compare_to_baseline(current: list[dict], baseline: list[dict], tolerance: float = DEFAULT_TOLERANCE) -> Comparison:
    """Each measured cell against the baseline's: fail when any median falls more than tolerance below
    or any request failed; incomplete when a band is short of trials or a cell has no baseline to meet."""
    cur_cells, cur_tokens = _cells(current)
    base_cells, base_tokens = _cells(baseline)
    if cur_tokens != base_tokens:
        raise LanebookError(
            f"not comparable: max_tokens {sorted(cur_tokens, key=str)} against the baseline's "
            f"{sorted(base_tokens, key=str)}"
        )
    verdicts = [
        _judge(figure, cell, cur_cells[cell], base_cells.get(cell), tolerance)
        for cell in sorted(cur_cells)
        for figure in VERDICT_FIGURES
    ]
    complete = all(band["complete"] for band in cur_cells.values()) and not any(
        v.verdict == "missing" for v in verdicts
    )
    if any(v.verdict == "worse" for v in verdicts) or any(band["errors"] for band in cur_cells.values()):
        verdict = "fail"
    elif not complete:
        verdict = "incomplete"
    else:
        verdict = "pass"
    return Comparison("baseline", tolerance, verdicts, verdict, complete)


def ab_canary(
    a: list[dict], b: list[dict], tolerance: float = DEFAULT_TOLERANCE, alike: Collection[int] = ()
) -> Comparison:
    """The matched A/B canary (diagnose runbook): same workloads, levels and max_tokens on both sides.

    Any cell of B worse than A beyond tolerance rejects B (seed 000's batch 8216: healthy, measured,
    rejected); B is promoted only with complete bands and at least one cell clearly better: its median beyond
    tolerance and its trials' band clear of A's. A better median inside overlapping bands may be noise (a few
    short trials vary by more than the tolerance), and a change is kept on evidence, not on chance. At the
    concurrencies in `alike` both sides run the same configuration (the verify schedule's K equals fixed K there), so
    any difference is the machine's noise: those cells are shown as "alike" and weigh neither way.
    """
    a_cells, a_tokens = _cells(a)
    b_cells, b_tokens = _cells(b)
    if set(a_cells) != set(b_cells):
        only = sorted(set(a_cells) ^ set(b_cells))
        raise LanebookError(f"A/B canary is not matched: cells {only} are measured on one side only")
    if a_tokens != b_tokens or len(a_tokens) != 1:
        raise LanebookError(
            f"A/B canary is not matched: max_tokens differ (A {sorted(a_tokens, key=str)}, B "
            f"{sorted(b_tokens, key=str)})"
        )
    verdicts = [
        _judge(figure, cell, b_cells[cell], a_cells[cell], tolerance)
        for cell in sorted(a_cells)
        for figure in VERDICT_FIGURES
    ]
    verdicts = [
        replace(v, verdict="alike") if v.concurrency in alike and v.verdict != "missing" else v for v in verdicts
    ]
    complete = all(band["complete"] for band in [*a_cells.values(), *b_cells.values()])
    if any(v.verdict == "worse" for v in verdicts):
        verdict = "reject"
    elif not complete:
        verdict = "incomplete"
    elif any(v.verdict == "better" and v.overlap is False for v in verdicts):
        verdict = "promote"
    else:
        verdict = "no gain"
    return Comparison("a/b", tolerance, verdicts, verdict, complete)


def bands_frame(documents: Iterable[dict]) -> pd.DataFrame:
    """Bands as a flat table: one row per (workload, C), median and min-max per figure."""
    rows = []
    for doc in documents:
        for band in doc["bands"]:
            row = {k: band[k] for k in ("workload", "concurrency", "trials", "complete", "errors")}
            for figure in BAND_FIGURES:
                stats = band.get(figure) or {}
                for stat in ("median", "min", "max"):
                    row[f"{figure}.{stat}"] = stats.get(stat)
            rows.append(row)
    return pd.DataFrame(rows)


def plot_bands(documents: list[dict], path: str | Path, title: str = "") -> Path:
    """Per workload: median and min-max of stream decode and aggregate against concurrency."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = bands_frame(documents)
    workloads = list(dict.fromkeys(frame["workload"]))
    fig, axes = plt.subplots(2, len(workloads), figsize=(4.5 * len(workloads), 6.5), squeeze=False)
    for col, workload in enumerate(workloads):
        rows = frame[frame["workload"] == workload].sort_values("concurrency")
        for row, (figure, label) in enumerate(
            [("mean_stream_decode_tok_s", "stream decode tok/s"), ("wall_aggregate_tok_s", "aggregate tok/s")]
        ):
            ax = axes[row][col]
            ax.fill_between(rows["concurrency"], rows[f"{figure}.min"], rows[f"{figure}.max"], alpha=0.25)
            ax.plot(rows["concurrency"], rows[f"{figure}.median"], marker="o")
            for _, r in rows[~rows["complete"]].iterrows():
                ax.annotate(
                    f"{r['trials']} trial(s): incomplete",
                    (r["concurrency"], r[f"{figure}.median"]),
                    fontsize=7,
                    textcoords="offset points",
                    xytext=(4, 4),
                )
            ax.set_xlabel("concurrent streams (C)")
            ax.set_ylabel(label)
            ax.set_xticks(list(rows["concurrency"]))
            ax.grid(alpha=0.3)
        axes[0][col].set_title(workload)
    fig.suptitle(title or "speed bands: median and min-max over trials")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_history(
    history: list[tuple[str, list[dict]]], path: str | Path, figure: str = "wall_aggregate_tok_s", title: str = ""
) -> Path:
    """A figure's band per (workload, C) across runs: history is [(run label, speed documents), ...]."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(history)), 4.5))
    labels = [label for label, _ in history]
    frames = [bands_frame(docs).assign(run=i) for i, (_, docs) in enumerate(history)]
    frame = pd.concat(frames, ignore_index=True)
    for (workload, concurrency), rows in frame.groupby(["workload", "concurrency"], sort=True):
        median = rows[f"{figure}.median"].astype(float)
        ax.errorbar(
            rows["run"],
            median,
            yerr=[median - rows[f"{figure}.min"].astype(float), rows[f"{figure}.max"].astype(float) - median],
            marker="o",
            capsize=3,
            label=f"{workload} C{concurrency}",
        )
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    ax.set_ylabel(figure)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(title or f"{figure}: median and min-max per run")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
