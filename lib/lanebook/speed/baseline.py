"""A lane's stored baseline, the workloads a lane runs, and the rule that judges a run against its baseline.

A lane's baseline lives beside the code in speed/baselines/LANE.json: its speed documents (one per
workload: runs and bands) and the setup they were measured on (speed.provenance). A lane runs the
workloads of its baseline, so each run has bands to meet; a lane without one runs DEFAULT_WORKLOADS.

The judgement: a run is judged against the baseline only when the setups are the same (every recorded
fact known on both sides and equal) and the runs are comparable (same max_tokens per workload). Then a
cell (workload, C) whose median stream or aggregate rate falls more than the tolerance below the
baseline's median, or any failed request, fails it. Otherwise the figures are shown beside the baseline's
and the judgement says why it did not judge: "different setup", "setup not established" (a fact one side
did not record), "not comparable".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from lanebook.base.errors import LanebookError
from lanebook.base.files import backup, write_atomic
from lanebook.speed.bands import BASELINES_DIR, MIN_TRIALS, Comparison, compare_to_baseline, read_baseline_file
from lanebook.speed.provenance import Provenance, SetupMatch, compare_setups

# Seed 003's short streaming probe, plus the code and prose bands an operator publishes (the count
# stream is the synthetic ceiling, never the published band alone: pitfall 17).
DEFAULT_WORKLOADS = ("probe", "code", "prose")
# Well above the scatter of medians on one setup (two twin runs of the same setup agreed within 2%
# cell by cell; the twin reproduces the seed's figures within 3%), so a fail is a change, not noise.
# The runbook takes it as a parameter for a tighter check.
BASELINE_TOLERANCE = 0.10

JUDGED = ("pass", "fail", "incomplete")
NOT_JUDGED, NO_BASELINE = "not judged", "no baseline"


@dataclass(frozen=True)
class Baseline:
    lane_name: str
    source: str
    provenance: Provenance
    documents: list[dict]
    path: Optional[Path] = None

    @property
    def workloads(self) -> list[str]:
        return [doc["workload"] for doc in self.documents]

    def document(self, workload: str) -> Optional[dict]:
        return next((doc for doc in self.documents if doc["workload"] == workload), None)


def baseline_path(lane_name: str) -> Path:
    return BASELINES_DIR / f"{lane_name}.json"


def load_baseline(path: str | Path) -> Baseline:
    path = Path(path)
    data = read_baseline_file(path)
    if not isinstance(data.get("provenance"), dict):
        raise LanebookError(f"{path}: a baseline needs its provenance (the setup its figures were measured on)")
    return Baseline(
        str(data.get("lane", "")),
        str(data.get("source", "")),
        Provenance.from_json(data["provenance"]),
        data["documents"],
        path,
    )


def stored_baseline(lane_name: str) -> Optional[Baseline]:
    """The lane's baseline shipped in speed/baselines/, or None when it has none yet."""
    path = baseline_path(lane_name)
    return load_baseline(path) if path.is_file() else None


def lane_workloads(lane_name: str) -> list[str]:
    """The workloads a lane runs: its baseline's, else DEFAULT_WORKLOADS."""
    baseline = stored_baseline(lane_name)
    return baseline.workloads if baseline else list(DEFAULT_WORKLOADS)


def baseline_json(documents: list[dict], provenance: Provenance, source: str) -> dict:
    """A run as a baseline file; refused when it would make a poor one (failed requests, short bands, a dry run)."""
    if not documents:
        raise LanebookError("no speed document to store as a baseline (was anything measured?)")
    for doc in documents:
        bands = doc["bands"]
        if any(band["errors"] for band in bands):
            raise LanebookError(f"not a baseline: requests of workload {doc['workload']} failed")
        if not bands or not all(band["complete"] for band in bands):
            raise LanebookError(
                f"not a baseline: workload {doc['workload']} has bands of fewer than {MIN_TRIALS} trials"
            )
        if bool(doc.get("twin")) != provenance.twin:
            raise LanebookError(f"workload {doc['workload']}: its twin flag disagrees with the provenance's")
    return {"lane": provenance.lane, "source": source, "provenance": provenance.to_json(), "documents": documents}


def baseline_text(data: dict) -> str:
    """A baseline file as a reviewer reads it: one line per run; bands are left out (they follow from the runs)."""
    provenance = json.dumps(data["provenance"], indent=2).replace("\n", "\n  ")
    documents = []
    for doc in data["documents"]:
        meta = json.dumps({k: v for k, v in doc.items() if k not in ("runs", "bands")})[1:-1]
        runs = ",\n".join("      " + json.dumps(run) for run in doc["runs"])
        documents.append(f'    {{{meta}, "runs": [\n{runs}\n    ]}}')
    return (
        f'{{\n  "lane": {json.dumps(data["lane"])},\n  "source": {json.dumps(data["source"])},\n'
        f'  "provenance": {provenance},\n  "documents": [\n' + ",\n".join(documents) + "\n  ]\n}\n"
    )


def write_baseline(path: str | Path, documents: list[dict], provenance: Provenance, source: str) -> Path:
    """Store a run as a baseline (atomically; an existing file is backed up first)."""
    text = baseline_text(baseline_json(documents, provenance, source))
    path = Path(path)
    if path.exists():
        backup(path)
    write_atomic(path, text)
    return path


@dataclass(frozen=True)
class Judgement:
    """A run against its lane's baseline: judged (pass, fail, incomplete), not judged, or no baseline."""

    verdict: str  # pass | fail | incomplete | not judged | no baseline
    reason: str
    tolerance: float
    setup: Optional[SetupMatch] = None
    comparison: Optional[Comparison] = None  # also when not judged, to show the figures side by side
    baseline_source: str = ""

    @property
    def judged(self) -> bool:
        return self.verdict in JUDGED

    @property
    def failed(self) -> bool:
        return self.verdict == "fail"

    def summary(self) -> str:
        if self.judged and self.comparison is not None:
            return f"{self.reason}; {self.comparison.summary()}"
        return f"{self.verdict}: {self.reason}"

    def to_json(self) -> dict:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "tolerance": self.tolerance,
            "setup": self.setup.to_json() if self.setup else None,
            "comparison": self.comparison.to_json() if self.comparison else None,
            "baseline_source": self.baseline_source,
        }


def counterpart(baseline: Optional[Baseline], document: dict) -> Optional[dict]:
    """The baseline's document a run's document is set against: same workload, same max_tokens."""
    stored = baseline.document(document["workload"]) if baseline else None
    return stored if stored is not None and stored.get("max_tokens") == document.get("max_tokens") else None


def _comparable(documents: list[dict], baseline: Baseline) -> list[str]:
    """Why the run cannot be set against the baseline cell by cell (empty when it can)."""
    problems = []
    for doc in documents:
        stored = baseline.document(doc["workload"])
        if stored is not None and counterpart(baseline, doc) is None:
            problems.append(
                f"{doc['workload']}: max_tokens {doc.get('max_tokens')} here, {stored.get('max_tokens')} in the "
                "baseline"
            )
    if not any(baseline.document(doc["workload"]) for doc in documents):
        problems.append(
            f"no workload in common (measured {', '.join(d['workload'] for d in documents)}; "
            f"the baseline has {', '.join(baseline.workloads)})"
        )
    return problems


def judge(
    documents: list[dict], provenance: Provenance, baseline: Optional[Baseline], tolerance: float = BASELINE_TOLERANCE
) -> Judgement:
    """The run's speed documents against the baseline's, under the rule of this module's docstring."""
    if baseline is None:
        return Judgement(NO_BASELINE, f"lane {provenance.lane} has no stored baseline", tolerance)
    setup = compare_setups(provenance, baseline.provenance)
    problems = _comparable(documents, baseline)
    comparison = (
        None
        if problems
        else compare_to_baseline(
            documents,
            [d for d in baseline.documents if d["workload"] in {doc["workload"] for doc in documents}],
            tolerance,
        )
    )
    reasons = ([] if setup.same else [setup.summary()]) + (
        ["not comparable: " + "; ".join(problems)] if problems else []
    )
    if reasons:
        return Judgement(NOT_JUDGED, "; ".join(reasons), tolerance, setup, comparison, baseline.source)
    return Judgement(comparison.verdict, setup.summary(), tolerance, setup, comparison, baseline.source)
