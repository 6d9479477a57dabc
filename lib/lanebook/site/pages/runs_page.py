"""Which recorded runs the book publishes, under which page names, and which run each runbook's recipe page shows.

A run is published when its executed notebook is there and not empty; its page is audit/LANE-STEM (STEM is the
notebook's UTCSTAMP-RUNBOOK-ID). A runbook's recipe page shows its latest twin run that was not a dry run: the
rehearsal of the runbook, with real outputs, on the digital twin. Pure over the records and the files they name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from lanebook.base.files import sha256_file
from lanebook.runs.audit import resolve_output


@dataclass(frozen=True)
class PublishedRun:
    record: dict
    path: Path  # the executed notebook (the record itself, never changed)
    doc: str  # its page in the book, without suffix: audit/LANE-STEM
    intact: bool  # the notebook still has the hash recorded (`lanebook audit verify` names it otherwise)

    @property
    def run_id(self) -> str:
        return self.record["run_id"]


def audit_doc(record: dict, path: Path) -> str:
    return f"audit/{record['lane']}-{path.stem}"


def published_runs(records: list[dict]) -> list[PublishedRun]:
    """Every recorded run whose notebook is there, in the order of the index (oldest first)."""
    runs = []
    for record in records:
        path = resolve_output(record)
        if path.is_file() and path.stat().st_size:
            runs.append(PublishedRun(record, path, audit_doc(record, path), sha256_file(path) == record.get("sha256")))
    return runs


def is_rehearsal(run: PublishedRun) -> bool:
    """A twin run that was not a dry run: it acted on the twin's nodes, so its outputs are observed (twin) results."""
    return bool(run.record.get("twin")) and not run.record.get("dry_run")


def latest_rehearsals(runs: list[PublishedRun]) -> dict[str, PublishedRun]:
    """Per runbook, its latest twin run that was not a dry run (by start time; the index order breaks ties)."""
    latest: dict[str, PublishedRun] = {}
    for run in runs:
        if is_rehearsal(run):
            current: Optional[PublishedRun] = latest.get(run.record["runbook"])
            if current is None or run.record["started_at"] >= current.record["started_at"]:
                latest[run.record["runbook"]] = run
    return latest
