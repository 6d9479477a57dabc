"""Headless runs (lanebook.execute): papermill executes a runbook notebook and the run leaves a record whose
verdict says what was established: pass, fail (a check failed), error, or dry-run (nothing observed).

The notebooks here are small ones written by the tests into a runbooks dir of their own; the shipped
runbooks run end to end in test_runbooks.py. Records go to a temporary outputs dir (LANEBOOK_OUTPUTS).
"""
import json

import nbformat
import pytest

from lanebook import execute
from lanebook.audit import read_runs, sha256_file
from lanebook.errors import LanebookError
from lanebook.runbook import VERDICT_MIME

HEADER = 'from lanebook.runbook import Runbook\nrb = Runbook("status", lane, dry_run=dry_run)'


def notebook(*cells: str) -> nbformat.NotebookNode:
    params = nbformat.v4.new_code_cell('lane = "twin"\ndry_run = False\nthreshold = 1')
    params.metadata["tags"] = ["parameters"]
    nb = nbformat.v4.new_notebook(cells=[params] + [nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


@pytest.fixture
def runbooks(tmp_path, monkeypatch):
    """A runbooks dir of this test's own; write(name, *cells) adds a notebook to it."""
    folder = tmp_path / "runbooks"
    folder.mkdir()
    monkeypatch.setattr(execute, "RUNBOOKS_DIR", folder)
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(tmp_path / "outputs"))

    def write(name, *cells):
        nbformat.write(notebook(*cells), folder / f"{name}.ipynb")

    return write


def test_a_clean_dry_run_is_recorded_as_dry_run_never_pass(runbooks):
    runbooks("status", HEADER, 'rb.expect(threshold == 2, "parameters valid", local=True)',
             'rb.lane.head.run("free -m")\nrb.expect(True, "enough free memory")', "rb.finish()")
    record = execute.run_runbook("status", "anemll-0731", {"threshold": 2}, dry_run=True)
    assert (record["verdict"], record["failed_step"], record["dry_run"], record["twin"]) == ("dry-run", None, True, False)
    assert record["commands"] == ["head: free -m"] and record["params"] == {"threshold": 2}
    (stored,) = read_runs()
    assert stored["verdict"] == "dry-run" and stored["sha256"] == sha256_file(execute.outputs_dir() / stored["output"])
    assert stored["output"].startswith("anemll-0731/") and stored["output"].endswith(f"-status-{stored['run_id']}.ipynb")


def test_a_local_check_fails_a_dry_run(runbooks):
    runbooks("status", HEADER, 'with rb.step("prerequisites"):\n    rb.expect(threshold == 2, "parameters valid", local=True)',
             "rb.finish()")
    record = execute.run_runbook("status", "anemll-0731", {"threshold": 3}, dry_run=True)
    assert (record["verdict"], record["failed_step"]) == ("fail", "prerequisites")


def test_a_failed_run_keeps_its_figures_and_says_what_to_do_next(runbooks):
    runbooks("status", HEADER, 'rb.record(free_gib=99.0)\nwith rb.step("2 memory", fix="run `stop`, then `launch`"):\n'
             '    rb.expect(threshold == 2, "enough free memory", local=True)', "rb.finish()")
    record = execute.run_runbook("status", "anemll-0731", {"threshold": 3}, dry_run=True)
    assert (record["verdict"], record["failed_step"], record["fix"]) == ("fail", "2 memory", "run `stop`, then `launch`")
    assert record["figures"] == {"free_gib": 99.0} and read_runs()[0]["figures"] == {"free_gib": 99.0}


def test_an_exception_is_an_error_naming_its_cell(runbooks):
    runbooks("status", HEADER, 'raise ValueError("the library broke")', "rb.finish()")
    record = execute.run_runbook("status", "anemll-0731", {}, dry_run=True)
    assert (record["verdict"], record["failed_step"]) == ("error", "cell 4: ValueError")  # papermill's injected-parameters cell ran second


def test_a_notebook_that_emits_no_verdict_is_an_error(runbooks):
    runbooks("status", HEADER, "x = 1")
    record = execute.run_runbook("status", "anemll-0731", {}, dry_run=True)
    assert (record["verdict"], record["failed_step"]) == ("error", "no verdict: the notebook ended without rb.finish()")


def test_a_dry_run_record_never_says_pass_whatever_the_notebook_emits(runbooks):
    """The record's rule does not rely on the notebook: one emitting pass in a dry run is still recorded dry-run."""
    emit = (f"from IPython.display import display\ndisplay({{{VERDICT_MIME!r}: {{'verdict': 'pass', 'checks': [], "
            "'figures': {}, 'commands': []}}, raw=True)")
    runbooks("status", emit)
    assert execute.run_runbook("status", "anemll-0731", {}, dry_run=True)["verdict"] == "dry-run"


def test_record_verdict():
    assert execute.record_verdict("pass", dry_run=False) == "pass"
    assert execute.record_verdict("pass", dry_run=True) == "dry-run"
    assert execute.record_verdict("dry-run", dry_run=True) == "dry-run"
    assert execute.record_verdict("fail", dry_run=True) == "fail"
    assert execute.record_verdict(None, dry_run=False) == "error"


def test_read_verdict_takes_the_last_emitted(tmp_path):
    nb = notebook()
    first = {"verdict": "fail", "checks": [], "figures": {}}
    last = {"verdict": "pass", "checks": [], "figures": {"a": 1}}
    nb.cells[0].outputs = [nbformat.v4.new_output("display_data", data={VERDICT_MIME: first})]
    nb.cells.append(nbformat.v4.new_code_cell("", outputs=[nbformat.v4.new_output("display_data", data={VERDICT_MIME: json.dumps(last)})]))
    path = tmp_path / "out.ipynb"
    nbformat.write(nb, path)
    assert execute.read_verdict(path) == last
    path.write_text("")
    assert execute.read_verdict(path) is None  # an empty (half-written) output has no verdict


def test_parameters_are_yaml_scalars():
    assert execute.parse_params(["n=1", "ok=true", "name=a b", "empty=", "ratio=0.85", "s='1'"]) == {
        "n": 1, "ok": True, "name": "a b", "empty": "", "ratio": 0.85, "s": "1"}
    for bad in ("novalue", "1x=2", "k=[1"):
        with pytest.raises(LanebookError):
            execute.parse_params([bad])


def test_refusals_leave_no_record(runbooks):
    runbooks("stop", HEADER, "rb.finish()")
    with pytest.raises(LanebookError, match=r"unknown parameter\(s\) for stop: bogus \(accepted: threshold\)"):
        execute.run_runbook("stop", "twin", {"bogus": 1})
    with pytest.raises(LanebookError, match="changes the real lane anemll-0731: add --yes"):
        execute.run_runbook("stop", "anemll-0731", {})
    with pytest.raises(LanebookError, match=r"runbook 'gates' is not written yet"):
        execute.run_runbook("gates", "twin", {})
    with pytest.raises(LanebookError, match="unknown runbook 'nosuch'"):
        execute.run_runbook("nosuch", "twin", {})
    assert read_runs() == []


def test_run_ids_stay_text_when_given_back_as_a_parameter(tmp_path, monkeypatch):
    """`-p restore=RUN_ID` is read as YAML: an id must never read as a number (12345678, 1234e567)."""
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(tmp_path))
    for _ in range(300):
        run_id, _ = execute._new_output("twin", "env")
        assert execute.parse_params([f"restore={run_id}"]) == {"restore": run_id}


def test_only_a_twin_lane_is_launched_on_demand_and_never_in_a_dry_run():
    from lanebook.runbook import Runbook

    for name in ("anemll-0731", "twin"):
        rb = Runbook("speed", name, dry_run=True)
        execute.launch_twin_lane_if_down(rb, name)
        assert rb.commands() == [] and rb.checks == [] and rb.figures == {}  # nothing asked, run or recorded
