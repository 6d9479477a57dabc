"""The audit trail: outputs/runs.jsonl, one line per run, each naming an executed notebook and its hash.

A verdict is pass, fail, error or dry-run; a dry run observed nothing, so it is shown apart and never counted as a
pass. No run vanishes: its pending record (outputs/.pending/RUN_ID.json) stays until its one index line replaces it,
and a run killed outright is finalized as `error` by the next reader. Lines are appended whole under a lock, never
twice; notebook and record are scrubbed of secrets (lanebook.base.redact) before the notebook is hashed, and
`audit verify` re-hashes every output against its line.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import socket
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Optional

from lanebook.base.errors import LanebookError
from lanebook.base.files import sha256_file, write_atomic
from lanebook.base.paths import outputs_dir
from lanebook.base.processes import process_alive, process_start
from lanebook.base.redact import redact_data, redact_notebook

console = None  # rich's Console, once _console() made it

VERDICTS = ("pass", "fail", "error", "dry-run")
# How the terminal and notebook tables show each verdict: (rich colour, mark). ASCII marks, not emoji: they
# show wherever the text goes (a terminal or a browser without an emoji font); the book draws its own badges.
VERDICT_STYLES = {"pass": ("green", "+"), "fail": ("red", "x"), "error": ("magenta", "!"), "dry-run": ("cyan", "-")}
# Fields of a pending record that only serve to tell whether its process still lives.
_LIVENESS = ("pid_started",)


def verdict_label(verdict: str) -> str:
    """The mark and the verdict, e.g. "- dry-run"; an unknown verdict keeps its name with a question mark."""
    return f"{VERDICT_STYLES.get(verdict, ('yellow', '?'))[1]} {verdict}"


def tally(runs: list[dict]) -> str:
    """One line counting runs by verdict, dry runs apart from passes: "3 runs: 1 pass, 1 fail, 1 dry-run (observed
    nothing, …)"."""
    counts = {v: sum(r["verdict"] == v for r in runs) for v in VERDICTS}
    others = sum(r["verdict"] not in VERDICTS for r in runs)
    parts = [
        f"{counts[v]} {v}" + (" (observed nothing, not counted as passes)" if v == "dry-run" else "")
        for v in VERDICTS
        if counts[v]
    ]
    parts += [f"{others} other"] if others else []
    return f"{len(runs)} run{'s' if len(runs) != 1 else ''}: " + ", ".join(parts)


def index_path() -> Path:
    return outputs_dir() / "runs.jsonl"


def pending_dir() -> Path:
    return outputs_dir() / ".pending"


def _pending_path(run_id: str) -> Path:
    return pending_dir() / f"{run_id}.json"


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --- the index: one locked append per line ---------------------------------------------------------------


@contextmanager
def _locked_index() -> Iterator[int]:
    """The index opened for appending, held under an exclusive lock (released by the kernel if we die)."""
    path = index_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # closing releases the lock


def _append_line(fd: int, record: dict) -> None:
    data = (json.dumps(record, sort_keys=False) + "\n").encode()
    size = os.fstat(fd).st_size
    if size and os.pread(fd, 1, size - 1) != b"\n":
        data = b"\n" + data  # a line cut short by a writer that died mid-write stays apart from ours
    while data:
        data = data[os.write(fd, data) :]
    os.fsync(fd)


def append_run(record: dict) -> None:
    """One JSON line per run, appended under the index's lock so concurrent runs never interleave."""
    with _locked_index() as fd:
        _append_line(fd, record)


def _index_lines() -> list[tuple[int, Optional[dict]]]:
    """(line number, record) for every non-empty line; the record is None for a line that is not a JSON object."""
    path = index_path()
    if not path.exists():
        return []
    lines = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if line.strip():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            lines.append((number, record if isinstance(record, dict) else None))
    return lines


# --- a run's life: pending, then one line ----------------------------------------------------------------


def begin_run(record: dict) -> dict:
    """Write the run's pending record (atomically) before its notebook starts; returns it."""
    pending = {**record, "host": socket.gethostname(), "pid": os.getpid(), "pid_started": process_start(os.getpid())}
    write_atomic(_pending_path(record["run_id"]), json.dumps(pending, indent=1) + "\n")
    return pending


def _note_unfinished(nb: dict, why: str) -> None:
    """Say on the notebook of a run that did not finish why it stopped. papermill marks every cell "completed"
    when it stops, even those that never started; they go back to "pending", which is what they are."""
    cells = nb["cells"]
    for cell in cells:
        meta = cell.get("metadata", {}).get("papermill")
        if isinstance(meta, dict) and meta.get("start_time") is None and meta.get("status") == "completed":
            meta["status"] = "pending"
    note = {
        "cell_type": "markdown",
        "metadata": {},
        "source": (
            f"**This run did not finish: {why}.** The cells above ran as far as their outputs show; cells marked "
            "pending never started. The run's record says `error`."
        ),
    }
    if (nb.get("nbformat"), nb.get("nbformat_minor", 0)) >= (4, 5):
        note["id"] = f"lanebook-unfinished-{len(cells)}"  # cell ids are required from nbformat 4.5
    cells.append(note)


def seal_output(path: Path, unfinished: Optional[str] = None) -> str:
    """Scrub the executed notebook of secrets, say on it why it stopped when the run did not finish, and
    return its sha256 (what `audit verify` compares)."""
    text = path.read_text(errors="replace") if path.exists() else ""
    sealed = redact_notebook(text)
    if unfinished:
        try:
            nb = json.loads(sealed)
            if not isinstance(nb.get("cells"), list):
                raise ValueError("no cells")
        except (ValueError, AttributeError):  # cut short or never written: nothing to add the note to
            nb = None
        if nb is not None:
            _note_unfinished(nb, unfinished)
            sealed = json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"
    if sealed != text:
        write_atomic(path, sealed)
    return sha256_file(path) if path.exists() else ""


def finish_run(pending: dict, result: dict, unfinished: Optional[str] = None) -> dict:
    """The run's one index line: its pending record completed by RESULT (verdict, figures, ...), the notebook
    sealed, the whole record scrubbed of secrets; the pending record goes in the same lock."""
    sha = seal_output(outputs_dir() / pending["output"], unfinished)
    record = redact_data({k: v for k, v in {**pending, **result, "sha256": sha}.items() if k not in _LIVENESS})
    with _locked_index() as fd:
        _append_line(fd, record)
        _pending_path(record["run_id"]).unlink(missing_ok=True)
    return record


def discard_run(pending: dict) -> None:
    """Forget a run that never started (refused before its notebook ran): its pending record and its claimed output."""
    (outputs_dir() / pending["output"]).unlink(missing_ok=True)
    _pending_path(pending["run_id"]).unlink(missing_ok=True)


def _pending_records() -> list[tuple[Path, dict]]:
    folder = pending_dir()
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.json")):
        try:
            found.append((path, json.loads(path.read_text())))
        except (OSError, json.JSONDecodeError):
            continue  # begin_run writes atomically, so this is no pending record of ours
    return found


def _abandoned(pending: dict) -> bool:
    return pending.get("host") == socket.gethostname() and not process_alive(pending["pid"], pending.get("pid_started"))


def running_runs() -> list[dict]:
    """Pending records of runs still in progress (or on another host, where we cannot tell)."""
    return [p for _, p in _pending_records() if not _abandoned(p)]


def finalize_abandoned() -> list[dict]:
    """Record every run whose process died without recording itself: verdict `error`, "killed: ...", its notebook
    as far as it got. Returns the records written."""
    if not any(_abandoned(p) for _, p in _pending_records()):
        return []
    written = []
    with _locked_index() as fd:
        recorded = {r.get("run_id") for _, r in _index_lines() if r}
        for path, pending in _pending_records():
            if not path.exists() or not _abandoned(pending):
                continue
            if pending["run_id"] not in recorded:  # else it died after its line landed: only the file is left
                output = outputs_dir() / pending["output"]
                last_saved = (
                    datetime.fromtimestamp(output.stat().st_mtime, timezone.utc)
                    if output.exists()
                    else datetime.now(timezone.utc)
                )
                why = (
                    f"killed: its process (pid {pending['pid']} on {pending['host']}) died without recording "
                    f"the run; its notebook was last saved at {last_saved.isoformat(timespec='seconds')}"
                )
                sha = seal_output(output, why)
                started = datetime.fromisoformat(pending["started_at"])
                record = redact_data(
                    {
                        k: v
                        for k, v in {
                            **pending,
                            "finished_at": last_saved.isoformat(timespec="seconds"),
                            "duration_s": round(max(0.0, (last_saved - started).total_seconds()), 1),
                            "verdict": "error",
                            "failed_step": why,
                            "sha256": sha,
                        }.items()
                        if k not in _LIVENESS
                    }
                )
                _append_line(fd, record)
                written.append(record)
            path.unlink(missing_ok=True)
    return written


# --- reading and showing ---------------------------------------------------------------------------------


def read_runs(lane_name: Optional[str] = None, runbook: Optional[str] = None) -> list[dict]:
    """Every recorded run, oldest first (abandoned runs finalized first), optionally of one lane and one runbook.
    A line that is not a record (cut short) is skipped here; `verify` names it."""
    finalize_abandoned()
    runs = [r for _, r in _index_lines() if r is not None]
    return [
        r
        for r in runs
        if (lane_name is None or r.get("lane") == lane_name) and (runbook is None or r.get("runbook") == runbook)
    ]


def find_run(run_id: str) -> dict:
    """The record of one run by its run id; a LanebookError when the index holds none (or, impossibly, several)."""
    found = [r for r in read_runs() if r.get("run_id") == run_id]
    if len(found) != 1:
        raise LanebookError(
            f"no run {run_id!r} in {index_path()}"
            if not found
            else f"{len(found)} runs with id {run_id!r} in {index_path()}"
        )
    return found[0]


def resolve_output(record: dict) -> Path:
    """Outputs are recorded relative to the outputs dir so the trail survives a move or a clone."""
    return outputs_dir() / record["output"]


def duration_s(record: dict) -> Optional[float]:
    """The run's duration: its recorded `duration_s`, else (older records) finished_at minus started_at."""
    if record.get("duration_s") is not None:
        return float(record["duration_s"])
    try:
        return (
            datetime.fromisoformat(record["finished_at"]) - datetime.fromisoformat(record["started_at"])
        ).total_seconds()
    except (KeyError, TypeError, ValueError):
        return None


def format_duration(seconds: Optional[float]) -> str:
    """4.2 s, 59 s, 3 min 05 s, 1 h 02 min; "" when unknown."""
    if seconds is None:
        return ""
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = int(round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def _short(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, float):
        if value == 0 or not math.isfinite(value):
            return str(value)
        return f"{value:.3g}" if abs(value) < 1e6 else f"{value:.3e}"
    text = str(value)
    return text if len(text) <= 24 else text[:23] + "…"


def key_figures(figures: dict, limit: int = 3) -> str:
    """The run's first LIMIT plain figures (numbers, flags, short text; not tables), short: "state=up, free_gib=99.5
    +2"."""
    plain = [(k, v) for k, v in (figures or {}).items() if v is None or isinstance(v, (bool, int, float, str))]
    shown = ", ".join(f"{k}={_short(v)}" for k, v in plain[:limit])
    more = len(figures or {}) - min(limit, len(plain))
    return shown + (f" +{more}" if more > 0 else "")


def run_lines(record: dict, lane_width: int = 11) -> tuple[str, str]:
    """One run as the listing shows it, without colour: a line of fixed fields (started, twin or real, lane,
    runbook, duration, run id, verdict), then an indented line of what there is of promotion, key figures and
    failed step ("" when none). Fits 80 columns for lane names up to 11 characters."""
    first = (
        f"{record['started_at'][:16].replace('T', ' ')}  {'twin' if record.get('twin') else 'real'}  "
        f"{record['lane']:<{lane_width}}  {record['runbook']:<8}  {format_duration(duration_s(record)):>10}  "
        f"{record['run_id']}  {verdict_label(record['verdict'])}"
    )
    details = [
        f"promotion {record['promotion_id']}" if record.get("promotion_id") else "",
        key_figures(record.get("figures") or {}),
        f"failed step: {record['failed_step']}" if record.get("failed_step") else "",
    ]
    second = " · ".join(d for d in details if d)
    return first, ("    " + second if second else "")


def _console():
    """The console, made where something is first printed: every `lanebook run` records through this module and
    prints nothing with it, so it does not import rich."""
    global console
    if console is None:
        from rich.console import Console

        console = Console()
    return console


def print_runs(runs: list[dict], running: Optional[list[dict]] = None) -> None:
    """The listing: runs still in progress, then one or two lines per run, then the tally."""
    from rich.markup import escape

    console = _console()
    for r in running or []:
        console.print(
            escape(
                f"running {r['runbook']} on {r['lane']} since {r['started_at']} "
                f"(pid {r['pid']} on {r['host']}): {r['output']}"
            ),
            style="yellow",
            soft_wrap=True,
        )
    if not runs:
        console.print("no runs recorded yet")
        return
    width = max(11, *(len(r["lane"]) for r in runs))
    for r in runs:
        first, second = run_lines(r, width)
        color = VERDICT_STYLES.get(r["verdict"], ("yellow", ""))[0]
        label = verdict_label(r["verdict"])
        console.print(escape(first[: -len(label)]) + f"[{color}]{escape(label)}[/]", soft_wrap=True)
        if second:
            console.print(escape(second), soft_wrap=True)
    console.print(tally(runs))


def verify() -> bool:
    """Re-hash every recorded output; name each one missing or changed (and any index line that is not a record)."""
    finalize_abandoned()
    console = _console()
    lines = _index_lines()
    bad = 0
    for number, r in lines:
        if r is None:
            console.print(f"[red]unreadable[/] line {number} of {index_path().name}")
            bad += 1
            continue
        path = resolve_output(r)
        if not path.exists():
            console.print(f"[red]missing[/] {r['output']}")
            bad += 1
        elif sha256_file(path) != r["sha256"]:
            console.print(f"[red]changed[/] {r['output']}")
            bad += 1
    console.print(f"{len(lines) - bad}/{len(lines)} outputs verified")
    return bad == 0
