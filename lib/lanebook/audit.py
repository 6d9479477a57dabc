"""The audit trail: outputs/runs.jsonl, one line per run, each naming an executed notebook and its hash.

A run's verdict is pass, fail, error or dry-run. A dry run observed nothing on its lane, so it is shown
apart (its own colour and mark) and never counted as a pass.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

from rich.console import Console
from rich.table import Table

from .errors import LanebookError
from .paths import outputs_dir

console = Console()

VERDICTS = ("pass", "fail", "error", "dry-run")
# How the terminal and the book show each verdict: (rich colour, mark).
VERDICT_STYLES = {"pass": ("green", "✅"), "fail": ("red", "❌"), "error": ("magenta", "⚠️"), "dry-run": ("cyan", "◻️")}


def verdict_label(verdict: str) -> str:
    """The mark and the verdict, e.g. "◻️ dry-run"; an unknown verdict keeps its name with a question mark."""
    return f"{VERDICT_STYLES.get(verdict, ('yellow', '?'))[1]} {verdict}"


def tally(runs: list[dict]) -> str:
    """One line counting runs by verdict, dry runs apart from passes: "3 runs: 1 pass, 1 fail, 1 dry-run (observed nothing, …)"."""
    counts = {v: sum(r["verdict"] == v for r in runs) for v in VERDICTS}
    others = sum(r["verdict"] not in VERDICTS for r in runs)
    parts = [f"{counts[v]} {v}" + (" (observed nothing, not counted as passes)" if v == "dry-run" else "") for v in VERDICTS if counts[v]]
    parts += [f"{others} other"] if others else []
    return f"{len(runs)} run{'s' if len(runs) != 1 else ''}: " + ", ".join(parts)


def index_path() -> Path:
    return outputs_dir() / "runs.jsonl"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def append_run(record: dict) -> None:
    """One JSON line per run, written in a single append so concurrent runs never interleave."""
    path = index_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, sort_keys=False) + "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)


def read_runs(lane: Optional[str] = None) -> list[dict]:
    path = index_path()
    if not path.exists():
        return []
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in runs if lane is None or r["lane"] == lane]


def find_run(run_id: str) -> dict:
    """The record of one run by its run id; a LanebookError when the index holds none (or, impossibly, several)."""
    found = [r for r in read_runs() if r.get("run_id") == run_id]
    if len(found) != 1:
        raise LanebookError(f"no run {run_id!r} in {index_path()}" if not found
                            else f"{len(found)} runs with id {run_id!r} in {index_path()}")
    return found[0]


def resolve_output(record: dict) -> Path:
    """Outputs are recorded relative to the outputs dir so the trail survives a move or a clone."""
    return outputs_dir() / record["output"]


def print_runs(runs: list[dict]) -> None:
    if not runs:
        console.print("no runs recorded yet")
        return
    table = Table(title="lanebook runs")
    for col in ("started_at", "runbook", "lane", "twin", "verdict", "failed_step", "output"):
        table.add_column(col)
    for r in runs:
        color = VERDICT_STYLES.get(r["verdict"], ("yellow", ""))[0]
        table.add_row(r["started_at"], r["runbook"], r["lane"], "twin" if r["twin"] else "real",
                      f"[{color}]{verdict_label(r['verdict'])}[/]", r.get("failed_step") or "", r["output"])
    console.print(table)
    console.print(tally(runs))


def verify() -> bool:
    """Re-hash every recorded output; report missing or changed files."""
    runs = read_runs()
    bad = 0
    for r in runs:
        path = resolve_output(r)
        if not path.exists():
            console.print(f"[red]missing[/] {r['output']}")
            bad += 1
        elif sha256_file(path) != r["sha256"]:
            console.print(f"[red]changed[/] {r['output']}")
            bad += 1
    console.print(f"{len(runs) - bad}/{len(runs)} outputs verified")
    return bad == 0
