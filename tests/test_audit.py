"""The audit trail (lanebook.audit): outputs/runs.jsonl, verification of every record, and how runs are shown:
a dry run observed nothing, so it is shown apart from passes and never counted as one."""
import io
import json

import pytest
from rich.console import Console

from lanebook import audit
from lanebook.errors import LanebookError


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
    run = {"run_id": run_id, "runbook": "launch", "lane": lane, "twin": lane == "twin", "dry_run": verdict == "dry-run",
           "started_at": "2026-12-01T00:00:00+00:00", "finished_at": "2026-12-01T00:00:05+00:00", "verdict": verdict,
           "failed_step": "prerequisites" if verdict == "fail" else None, "output": str(path.relative_to(outputs)),
           "sha256": audit.sha256_file(path), "params": {}, "git_commit": None, "figures": {}}
    audit.append_run(run)
    return run, path


def test_runs_are_appended_one_line_each_and_read_back(outputs):
    first, _ = record(outputs, "aaaa0001", "pass")
    second, _ = record(outputs, "aaaa0002", "dry-run", lane="anemll-0731")
    lines = (outputs / "runs.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [first, second]
    assert audit.read_runs() == [first, second]
    assert audit.read_runs(lane="anemll-0731") == [second]
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
    runs = [record(outputs, f"cccc000{n}", verdict)[0] for n, verdict in enumerate(["pass", "dry-run", "dry-run", "fail", "error"])]
    audit.print_runs(runs)
    text = printed.getvalue()
    assert text.count("✅ pass") == 1 and text.count("◻️ dry-run") == 2 and "❌ fail" in text and "⚠️ error" in text
    assert text.rstrip().endswith("5 runs: 1 pass, 1 fail, 1 error, 2 dry-run (observed nothing, not counted as passes)")


def test_each_verdict_has_its_own_colour_and_mark():
    colours = [colour for colour, _ in audit.VERDICT_STYLES.values()]
    marks = [mark for _, mark in audit.VERDICT_STYLES.values()]
    assert set(audit.VERDICT_STYLES) == set(audit.VERDICTS) == {"pass", "fail", "error", "dry-run"}
    assert len(set(colours)) == len(colours) and len(set(marks)) == len(marks)
    assert audit.verdict_label("dry-run") == "◻️ dry-run" and audit.verdict_label("odd") == "? odd"


def test_tally():
    runs = [{"verdict": v} for v in ("pass", "pass", "dry-run")]
    assert audit.tally(runs) == "3 runs: 2 pass, 1 dry-run (observed nothing, not counted as passes)"
    assert audit.tally([{"verdict": "pass"}]) == "1 run: 1 pass"
    assert audit.tally([{"verdict": "unknown"}]) == "1 run: 1 other"
