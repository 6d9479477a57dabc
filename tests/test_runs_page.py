"""Which runs the book publishes and which run each runbook's recipe page shows."""

import nbformat
from lanebook.base.files import sha256_file
from lanebook.site.pages.runs_page import latest_rehearsals, published_runs


def _record(outputs, run_id, runbook, started, *, twin=True, dry=False, write=True):
    output = f"{'twin' if twin else 'anemll-0731'}/20261201T{started.replace(':', '')}00Z-{runbook}-{run_id}.ipynb"
    path = outputs / output
    if write:
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nbformat.v4.new_notebook(), path)
    return {
        "run_id": run_id,
        "runbook": runbook,
        "lane": "twin" if twin else "anemll-0731",
        "twin": twin,
        "dry_run": dry,
        "started_at": f"2026-12-01T{started}",
        "output": output,
        "sha256": sha256_file(path) if write else "0" * 64,
    }


def test_published_runs_and_latest_rehearsals(tmp_path, monkeypatch):
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(tmp_path))
    records = [
        _record(tmp_path, "a0000001", "launch", "10:00"),
        _record(tmp_path, "a0000002", "launch", "11:00"),
        _record(tmp_path, "a0000003", "launch", "12:00", dry=True),  # a dry run rehearses nothing
        _record(tmp_path, "a0000004", "launch", "13:00", twin=False),  # a real lane's run is no twin rehearsal
        _record(tmp_path, "a0000005", "speed", "09:00"),
        _record(tmp_path, "a0000006", "gates", "14:00", write=False),
    ]  # its notebook is gone: not published
    (tmp_path / records[4]["output"]).write_text((tmp_path / records[4]["output"]).read_text() + " ")  # changed since
    runs = published_runs(records)
    assert [r.run_id for r in runs] == ["a0000001", "a0000002", "a0000003", "a0000004", "a0000005"]
    assert runs[0].doc == "audit/twin-20261201T100000Z-launch-a0000001" and runs[3].doc.startswith("audit/anemll-0731-")
    assert [r.intact for r in runs] == [True, True, True, True, False]
    assert {name: run.run_id for name, run in latest_rehearsals(runs).items()} == {
        "launch": "a0000002",
        "speed": "a0000005",
    }
