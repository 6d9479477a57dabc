"""The audit trail (lanebook.runs.audit): outputs/runs.jsonl, verification of every record, and how runs are shown:
a dry run observed nothing, so it is shown apart from passes and never counted as one. A run's pending record
makes even a killed run land (once); concurrent appends never interleave or lose a line."""

import io
import json
import os
import re
import socket
import subprocess
import sys
import time

import nbformat
import pytest
from lanebook.base.errors import LanebookError
from lanebook.base.files import sha256_file
from lanebook.runs import audit
from rich.console import Console


@pytest.fixture
def outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(tmp_path / "outputs"))
    return tmp_path / "outputs"


@pytest.fixture
def printed(monkeypatch):
    """What audit prints, as plain text (wide, no colour codes)."""
    buffer = io.StringIO()
    monkeypatch.setattr(audit, "console", Console(file=buffer, width=250, color_system=None))
    return buffer


def record(outputs, run_id, verdict, lane="twin", text="executed"):
    path = outputs / lane / f"20261201T000000Z-launch-{run_id}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    run = {
        "run_id": run_id,
        "runbook": "launch",
        "lane": lane,
        "twin": lane == "twin",
        "dry_run": verdict == "dry-run",
        "started_at": "2026-12-01T00:00:00+00:00",
        "finished_at": "2026-12-01T00:00:05+00:00",
        "verdict": verdict,
        "failed_step": "prerequisites" if verdict == "fail" else None,
        "output": str(path.relative_to(outputs)),
        "sha256": sha256_file(path),
        "params": {},
        "git_commit": None,
        "figures": {},
    }
    audit.append_run(run)
    return run, path


def test_runs_are_appended_one_line_each_and_read_back(outputs):
    first, _ = record(outputs, "aaaa0001", "pass")
    second, _ = record(outputs, "aaaa0002", "dry-run", lane="anemll-0731")
    lines = (outputs / "runs.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [first, second]
    assert audit.read_runs() == [first, second]
    assert audit.read_runs(lane_name="anemll-0731") == [second]
    assert audit.resolve_output(second) == outputs / "anemll-0731" / "20261201T000000Z-launch-aaaa0002.ipynb"


def test_a_run_is_found_by_its_id(outputs):
    first, _ = record(outputs, "cccc0001", "pass")
    record(outputs, "cccc0002", "fail")
    assert audit.find_run("cccc0001") == first
    with pytest.raises(LanebookError, match=r"^no run 'cccc9999' in .*runs\.jsonl$"):
        audit.find_run("cccc9999")


def test_no_runs_yet(outputs, printed):
    assert audit.read_runs() == []
    audit.print_runs([])
    assert printed.getvalue() == "no runs recorded yet\n"


def test_verify_finds_changed_and_missing_records(outputs, printed):
    record(outputs, "bbbb0001", "pass")
    _, changed = record(outputs, "bbbb0002", "fail")
    _, gone = record(outputs, "bbbb0003", "dry-run")
    assert audit.verify()
    changed.write_text("edited after the run")
    gone.unlink()
    assert not audit.verify()
    text = printed.getvalue()
    assert "changed twin/20261201T000000Z-launch-bbbb0002.ipynb" in text
    assert "missing twin/20261201T000000Z-launch-bbbb0003.ipynb" in text
    assert text.endswith("1/3 outputs verified\n")


def test_dry_runs_are_shown_apart_from_passes(outputs, printed):
    runs = [
        record(outputs, f"cccc000{n}", verdict)[0]
        for n, verdict in enumerate(["pass", "dry-run", "dry-run", "fail", "error"])
    ]
    audit.print_runs(runs)
    text = printed.getvalue()
    assert text.count("+ pass") == 1 and text.count("- dry-run") == 2 and "x fail" in text and "! error" in text
    assert text.rstrip().endswith(
        "5 runs: 1 pass, 1 fail, 1 error, 2 dry-run (observed nothing, not counted as passes)"
    )


def test_each_verdict_has_its_own_colour_and_mark():
    colours = [colour for colour, _ in audit.VERDICT_STYLES.values()]
    marks = [mark for _, mark in audit.VERDICT_STYLES.values()]
    assert set(audit.VERDICT_STYLES) == set(audit.VERDICTS) == {"pass", "fail", "error", "dry-run"}
    assert len(set(colours)) == len(colours) and len(set(marks)) == len(marks)
    assert audit.verdict_label("dry-run") == "- dry-run" and audit.verdict_label("odd") == "? odd"


def test_tally():
    runs = [{"verdict": v} for v in ("pass", "pass", "dry-run")]
    assert audit.tally(runs) == "3 runs: 2 pass, 1 dry-run (observed nothing, not counted as passes)"
    assert audit.tally([{"verdict": "pass"}]) == "1 run: 1 pass"
    assert audit.tally([{"verdict": "unknown"}]) == "1 run: 1 other"


def pending_run(outputs, run_id, lane="twin", cells=("print('step 1')",)):
    """A run's output notebook and pending record as `lanebook run` writes them at its start."""
    path = outputs / lane / f"20261201T000000Z-status-{run_id}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), path)
    return audit.begin_run(
        {
            "run_id": run_id,
            "runbook": "status",
            "lane": lane,
            "twin": True,
            "dry_run": False,
            "started_at": "2026-12-01T00:00:00+00:00",
            "finished_at": None,
            "verdict": None,
            "output": str(path.relative_to(outputs)),
            "sha256": None,
            "params": {},
            "figures": {},
        }
    )


def dead_pid():
    """The pid of a process that has ended (and been reaped)."""
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def test_a_finished_run_is_one_line_and_its_pending_record_goes(outputs):
    pending = pending_run(outputs, "eeee0001")
    assert (outputs / ".pending" / "eeee0001.json").is_file() and pending["pid"] == os.getpid()
    assert [r["run_id"] for r in audit.running_runs()] == ["eeee0001"]
    record = audit.finish_run(
        pending, {"finished_at": "2026-12-01T00:00:04+00:00", "duration_s": 4.2, "verdict": "pass"}
    )
    assert not (outputs / ".pending" / "eeee0001.json").exists() and audit.running_runs() == []
    assert audit.read_runs() == [record] and "pid_started" not in record
    assert (record["verdict"], record["duration_s"], record["pid"], record["host"]) == (
        "pass",
        4.2,
        os.getpid(),
        socket.gethostname(),
    )
    assert record["sha256"] == sha256_file(outputs / record["output"])


def test_a_killed_run_is_finalized_once_by_the_next_reader(outputs, monkeypatch):
    pending = pending_run(outputs, "eeee0002", cells=("print('step 1 done')", "import time; time.sleep(600)"))
    pending["pid"] = dead_pid()
    (outputs / ".pending" / "eeee0002.json").write_text(json.dumps(pending))
    (record,) = audit.read_runs()
    assert record["verdict"] == "error" and record["run_id"] == "eeee0002"
    assert re.fullmatch(
        rf"killed: its process \(pid {pending['pid']} on {re.escape(socket.gethostname())}\) died without "
        r"recording the run; its notebook was last saved at 20\d\d-.*",
        record["failed_step"],
    )
    assert record["finished_at"] and record["duration_s"] >= 0
    nb = nbformat.read(outputs / record["output"], as_version=4)
    assert [c.source for c in nb.cells[:2]] == ["print('step 1 done')", "import time; time.sleep(600)"]
    assert nb.cells[-1].source.startswith("**This run did not finish: killed: its process")
    assert record["sha256"] == sha256_file(outputs / record["output"])
    assert audit.read_runs() == [record] and len((outputs / "runs.jsonl").read_text().splitlines()) == 1
    assert not list((outputs / ".pending").iterdir()) and audit.verify()


def test_a_run_that_died_after_its_line_landed_is_not_recorded_twice(outputs):
    pending = pending_run(outputs, "eeee0003")
    audit.append_run({**pending, "verdict": "pass", "sha256": sha256_file(outputs / pending["output"])})
    (outputs / ".pending" / "eeee0003.json").write_text(json.dumps({**pending, "pid": dead_pid()}))
    assert [r["verdict"] for r in audit.read_runs()] == ["pass"]
    assert not (outputs / ".pending" / "eeee0003.json").exists()


def test_live_runs_and_other_hosts_runs_are_left_running(outputs):
    pending_run(outputs, "eeee0004")  # this process: alive
    other = pending_run(outputs, "eeee0005")
    (outputs / ".pending" / "eeee0005.json").write_text(
        json.dumps({**other, "host": "another-host", "pid": dead_pid()})
    )
    assert audit.read_runs() == []
    assert sorted(r["run_id"] for r in audit.running_runs()) == ["eeee0004", "eeee0005"]


def test_a_line_cut_short_stays_apart_and_verify_names_it(outputs, printed):
    record(outputs, "ffff0001", "pass")
    with open(outputs / "runs.jsonl", "a") as index:
        index.write('{"run_id": "ffff0002", "verdict": "pa')  # a writer died mid-write
    second, _ = record(outputs, "ffff0003", "fail")
    assert [r["run_id"] for r in audit.read_runs()] == ["ffff0001", "ffff0003"]
    assert not audit.verify()
    assert "unreadable line 2 of runs.jsonl" in printed.getvalue() and printed.getvalue().endswith(
        "2/3 outputs verified\n"
    )


def test_sealing_scrubs_the_notebook_and_notes_why_it_stopped(outputs):
    pending = pending_run(outputs, "eeee0006", cells=("print('hf_" + "x" * 24 + "')",))
    record = audit.finish_run(
        pending,
        {"verdict": "error", "failed_step": "interrupted: SIGINT (Ctrl-C)"},
        unfinished="interrupted: SIGINT (Ctrl-C)",
    )
    nb = nbformat.read(outputs / record["output"], as_version=4)
    assert nb.cells[0].source == "print('[REDACTED]')"
    assert nb.cells[-1].source == (
        "**This run did not finish: interrupted: SIGINT (Ctrl-C).** The cells above ran as far as "
        "their outputs show; cells marked pending never started. The run's record says `error`."
    )


# Twenty writers at once, each with a record far larger than one write the kernel guarantees atomic for pipes
# (4 KiB) or that a buffered writer would issue whole: every line must land whole, none lost or interleaved.
WRITER = """
import json, os, sys, time
from pathlib import Path
from lanebook.runs import audit
outputs, run_id, go = Path(os.environ["LANEBOOK_OUTPUTS"]), sys.argv[1], Path(sys.argv[2])
out = outputs / "twin" / f"20261201T000000Z-status-{run_id}.ipynb"
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
pending = audit.begin_run({"run_id": run_id, "runbook": "status", "lane": "twin", "twin": True, "dry_run": False,
                           "started_at": "2026-12-01T00:00:00+00:00", "output": str(out.relative_to(outputs))})
while not go.exists():
    time.sleep(0.005)
audit.finish_run(pending, {"verdict": "pass", "figures": {"payload": run_id * 40000}})
"""


def test_twenty_concurrent_runs_each_land_one_whole_line(outputs, tmp_path):
    go = tmp_path / "go"
    ids = [f"a{n:07d}" for n in range(20)]
    env = {**os.environ, "LANEBOOK_OUTPUTS": str(outputs)}
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, run_id, str(go)], env=env) for run_id in ids]
    while len(list((outputs / ".pending").glob("*.json"))) < len(ids) if (outputs / ".pending").is_dir() else True:
        assert all(w.poll() is None for w in writers), "a writer ended before the start"
        time.sleep(0.01)
    go.touch()  # all twenty append at once
    assert [w.wait(timeout=120) for w in writers] == [0] * 20
    lines = (outputs / "runs.jsonl").read_text().splitlines()
    assert len(lines) == 20
    records = [json.loads(line) for line in lines]
    assert sorted(r["run_id"] for r in records) == ids
    assert all(r["figures"]["payload"] == r["run_id"] * 40000 for r in records)  # 320 KB each, whole
    assert not list((outputs / ".pending").iterdir()) and audit.verify()


def test_durations_and_key_figures_are_short():
    assert [audit.format_duration(s) for s in (None, 0.04, 4.25, 9.96, 59.4, 61, 3599, 3725)] == [
        "",
        "0.0 s",
        "4.2 s",
        "10.0 s",
        "59 s",
        "1 min 01 s",
        "59 min 59 s",
        "1 h 02 min",
    ]
    assert audit.duration_s({"duration_s": 3.5}) == 3.5
    assert (
        audit.duration_s({"started_at": "2026-12-01T00:00:00+00:00", "finished_at": "2026-12-01T00:01:05+00:00"})
        == 65.0
    )
    assert audit.duration_s({"started_at": "2026-12-01T00:00:00+00:00", "finished_at": None}) is None
    figures = {
        "state": "up",
        "mean_stream_decode_tok_s": 82.8123,
        "ok": True,
        "bands": [{"c": 1}],
        "kv": 2493464,
        "note": "x" * 30,
    }
    assert audit.key_figures(figures) == "state=up, mean_stream_decode_tok_s=82.8, ok=true +3"
    assert (
        audit.key_figures(figures, limit=6)
        == "state=up, mean_stream_decode_tok_s=82.8, ok=true, kv=2493464, note=xxxxxxxxxxxxxxxxxxxxxxx… +1"
    )
    assert audit.key_figures({}) == "" and audit.key_figures({"bands": []}) == " +1"


def test_a_run_is_listed_in_two_lines_that_fit_80_columns():
    run = {
        "run_id": "b1c2d3e4",
        "runbook": "warmup",
        "lane": "anemll-0731",
        "twin": False,
        "verdict": "dry-run",
        "started_at": "2026-12-01T09:15:02+00:00",
        "duration_s": 125.0,
        "promotion_id": "5f3a9c1e2b7d",
        "figures": {"state": "up", "bands": []},
        "failed_step": None,
    }
    assert audit.run_lines(run) == (
        "2026-12-01 09:15  real  anemll-0731  warmup    2 min 05 s  b1c2d3e4  - dry-run",
        "    promotion 5f3a9c1e2b7d · state=up +1",
    )
    assert len(audit.run_lines(run)[0]) <= 80
    failed = {
        **run,
        "lane": "twin",
        "twin": True,
        "verdict": "fail",
        "promotion_id": None,
        "figures": {},
        "failed_step": "2 memory",
        "duration_s": 4.0,
    }
    assert audit.run_lines(failed) == (
        "2026-12-01 09:15  twin  twin         warmup         4.0 s  b1c2d3e4  x fail",
        "    failed step: 2 memory",
    )
    assert audit.run_lines({**failed, "failed_step": None})[1] == ""


def test_the_listing_shows_running_runs_then_each_run_then_the_tally(outputs, printed):
    run, _ = record(outputs, "gggg0001", "pass")
    run = {
        **run,
        "duration_s": 61.0,
        "figures": {"state": "up"},
        "promotion_id": "5f3a9c1e2b7d",
        "failed_step": "[x] odd",
    }
    running = pending_run(outputs, "gggg0002")
    audit.print_runs([run], [running])
    assert printed.getvalue().splitlines() == [
        f"running status on twin since 2026-12-01T00:00:00+00:00 (pid {os.getpid()} on {socket.gethostname()}): "
        "twin/20261201T000000Z-status-gggg0002.ipynb",
        "2026-12-01 00:00  twin  twin         launch    1 min 01 s  gggg0001  + pass",
        "    promotion 5f3a9c1e2b7d · state=up · failed step: [x] odd",
        "1 run: 1 pass",
    ]
