"""The site: built offline by jupyter-book from the lane files, the registry and stored outputs; never publishes a secret."""
import subprocess
import sys
from pathlib import Path

import nbformat

from lanebook.audit import append_run, sha256_file

LANEBOOK = Path(sys.executable).parent / "lanebook"


def _record(outputs: Path, text: str) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# launch"), nbformat.v4.new_code_cell("print(1)")])
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    path = outputs / "twin" / "20261129T000000Z-launch-0000beef.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)
    append_run({"run_id": "0000beef", "runbook": "launch", "lane": "twin", "twin": True, "dry_run": False,
                "started_at": "2026-11-29T00:00:00+00:00", "finished_at": "2026-11-29T00:00:01+00:00",
                "verdict": "pass", "failed_step": None, "output": str(path.relative_to(outputs)),
                "sha256": sha256_file(path), "params": {}, "git_commit": None, "figures": {}})


def _build(tmp_path, monkeypatch, text):
    outputs = tmp_path / "outputs"
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(outputs))
    _record(outputs, text)
    return subprocess.run([str(LANEBOOK), "book", "--out", str(tmp_path / "site")], capture_output=True, text=True)


def test_book_publishes_lanes_pitfalls_runbooks_and_the_trail(tmp_path, monkeypatch):
    built = _build(tmp_path, monkeypatch, "GPU KV cache size: 2,493,464 tokens\n")
    assert built.returncode == 0, built.stderr
    html = tmp_path / "site" / "_build" / "html"
    lanes = (html / "lanes.html").read_text()
    assert all(name in lanes for name in ("anemll-0731", "anemll-1m6", "patch3-c12", "twin"))
    assert "[[1,1,5],[2,4,4],[5,6,3]]" in lanes and "anemll-0731 → anemll-1m6 → patch3-c12" in lanes
    pitfalls = (html / "pitfalls.html").read_text()
    assert all(f"P{n:02d}" in pitfalls for n in range(1, 18))
    assert (html / "runbooks" / "launch.html").exists()
    twin = (html / "twin.html").read_text()  # the twin plugin's page: facts with figures measured at build time
    assert all(f"T{n:02d}" in twin for n in range(1, 16)) and "953,088" in twin and "2,493,464" in twin
    faults = (html / "faults.html").read_text()  # the fault matrix, rendered from the tests' own rows
    assert "Fault matrix" in faults and all(f"<code class=\"docutils literal notranslate\"><span class=\"pre\">{name}" in faults
                                            for name in ("worker-unreachable", "head-dies", "worker-reboots"))
    (page,) = (html / "audit").glob("*.html")
    assert "[TWIN]" in page.read_text() and "2,493,464" in page.read_text()


def test_book_refuses_to_publish_a_secret(tmp_path, monkeypatch):
    built = _build(tmp_path, monkeypatch, "HF_TOKEN=hf_" + "Q" * 30 + "\n")
    assert built.returncode == 2 and "refusing to publish" in built.stderr and "Traceback" not in built.stderr
    assert not (tmp_path / "site" / "_build" / "html").exists()


def test_the_audit_page_shows_dry_runs_apart_from_passes(tmp_path, monkeypatch):
    """A dry run observed nothing: its own mark and colour on the index and its page, never counted as a pass."""
    import json

    from lanebook.paths import outputs_dir

    built = _build(tmp_path, monkeypatch, "dry\n")
    assert built.returncode == 0, built.stderr
    index = outputs_dir() / "runs.jsonl"
    run = json.loads(index.read_text())
    dry = {**run, "run_id": "0000d0d0", "dry_run": True, "verdict": "dry-run", "output": run["output"].replace("0000beef", "0000d0d0")}
    (outputs_dir() / dry["output"]).write_bytes((outputs_dir() / run["output"]).read_bytes())
    append_run(dry)
    built = subprocess.run([str(LANEBOOK), "book", "--out", str(tmp_path / "site")], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    html = tmp_path / "site" / "_build" / "html"
    trail = (html / "audit.html").read_text()
    assert '<span class="lanebook-verdict lanebook-verdict-pass">✅ pass</span>' in trail
    assert '<span class="lanebook-verdict lanebook-verdict-dry-run">◻️ dry-run</span>' in trail
    assert "2 runs: 1 pass, 1 dry-run (observed nothing, not counted as passes)" in trail
    (page,) = [p for p in (html / "audit").glob("*.html") if "0000d0d0" in p.name]
    assert "[DRY RUN]" in page.read_text() and "nothing on the lane was observed: not a pass" in page.read_text()
