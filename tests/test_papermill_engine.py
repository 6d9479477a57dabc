"""lanebook.runs.papermill_engine: papermill's nbclient engine, saving the notebook when a code cell starts."""

from __future__ import annotations

import hashlib
import json

import nbformat
import papermill
import papermill.engines
from helpers.lanebook_runs import STEP_AT
from lanebook.runs.papermill_engine import ENGINE_NAME, step_line, step_name


def test_saved_when_a_code_cell_starts_and_when_the_run_ends(tmp_path, monkeypatch):
    source, output = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    cells = [
        nbformat.v4.new_markdown_cell("# what you'll do"),
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_markdown_cell("## step 1"),
        nbformat.v4.new_markdown_cell("expected: x is 1"),
        nbformat.v4.new_code_cell("print(x)"),
    ]
    nbformat.write(
        nbformat.v4.new_notebook(
            cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
        ),
        source,
    )
    writes: list[str] = []  # every write of the output notebook, by the function papermill's manager saves with

    def write_ipynb(nb, path):
        real_write_ipynb(nb, path)
        writes.append(hashlib.sha256(output.read_bytes()).hexdigest())

    real_write_ipynb = papermill.engines.write_ipynb
    monkeypatch.setattr(papermill.engines, "write_ipynb", write_ipynb)
    papermill.execute_notebook(str(source), str(output), engine_name=ENGINE_NAME, progress_bar=False)
    nb = nbformat.read(output, as_version=4)
    # every cell's run is kept (each cell's end with the next save), the code ran, and the notebook was written at
    # the start, at each code cell's start, and at the end
    assert [c.metadata.papermill["status"] for c in nb.cells] == ["completed"] * 5
    assert all(c.metadata.papermill["end_time"] for c in nb.cells)
    assert nb.cells[4].outputs[0]["text"] == "1\n"
    assert len(writes) == 1 + 2 + 1, writes


def test_a_cell_running_finds_every_cell_before_it_saved_as_it_ended(tmp_path):
    source, output = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    read_saved = (  # what a run stopped in this cell would leave: the notebook as saved when the cell started
        "import json\n"
        f"saved = json.load(open({str(output)!r}))['cells']\n"
        "print(json.dumps([[c['metadata']['papermill']['status'], c.get('outputs')] for c in saved]))"
    )
    cells = [
        nbformat.v4.new_code_cell("print('one')"),
        nbformat.v4.new_markdown_cell("## two"),
        nbformat.v4.new_code_cell(read_saved),
    ]
    nbformat.write(
        nbformat.v4.new_notebook(
            cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
        ),
        source,
    )
    papermill.execute_notebook(str(source), str(output), engine_name=ENGINE_NAME, progress_bar=False)
    seen = json.loads(nbformat.read(output, as_version=4).cells[2].outputs[0]["text"])
    one = {"name": "stdout", "output_type": "stream", "text": ["one\n"]}
    assert seen == [["completed", [one]], ["completed", None], ["running", []]]


def test_step_name_is_the_first_argument_of_a_top_level_rb_step():
    assert step_name('with rb.step(\n    "4 canary variant",\n    fix="relaunch",\n):\n    pass') == "4 canary variant"
    assert step_name('with rb.step("prerequisites", fix="run launch"), other():\n    pass') == "prerequisites"
    assert step_name('x = 1\nwith rb.step("2 later"):\n    pass') == "2 later"
    assert step_name("lane = 'twin'") is None  # the parameters cell
    assert step_name('with other.step("not rb"):\n    pass') is None
    assert step_name("with rb.step(name):\n    pass") is None  # a name not written in the cell
    assert step_name('if True:\n    with rb.step("nested"):\n        pass') is None  # not the cell's own step
    assert step_name("%time x = 1") is None  # IPython syntax: not a step


def test_steps_and_what_cells_print_are_said_on_the_stdout_file_as_the_run_goes(tmp_path):
    source, output, said = tmp_path / "in.ipynb", tmp_path / "out.ipynb", tmp_path / "said.txt"
    check_said = (  # the second step, running: the first step's line and print are out already, and its own line
        f"assert [STEP_AT.sub('', line) for line in open({str(said)!r}).read().splitlines()] == "
        "['step 1 one', 'in one', 'step 2 two']"
    )
    cells = [
        nbformat.v4.new_code_cell(
            f"import contextlib, re\nSTEP_AT = re.compile({STEP_AT.pattern!r})\n"
            "class rb:\n    step = contextlib.nullcontext"
        ),
        nbformat.v4.new_markdown_cell("## 1 one"),
        nbformat.v4.new_code_cell('with rb.step("1 one"):\n    print("in one")'),
        nbformat.v4.new_code_cell(f'with rb.step("2 two"):\n    {check_said}'),
    ]
    nbformat.write(
        nbformat.v4.new_notebook(
            cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
        ),
        source,
    )
    with open(said, "w") as stream:
        papermill.execute_notebook(
            str(source), str(output), engine_name=ENGINE_NAME, progress_bar=False, stdout_file=stream
        )
    lines = said.read_text().splitlines()
    assert [STEP_AT.sub("", line) for line in lines] == ["step 1 one", "in one", "step 2 two"]
    assert all(STEP_AT.search(line) for line in (lines[0], lines[2]))
    assert nbformat.read(output, as_version=4).cells[3].metadata.papermill["status"] == "completed"


def test_step_line_names_the_minutes_and_seconds_into_the_run():
    assert step_line("3 canary baseline", 83.9) == "step 3 canary baseline (at 1:23)"
    assert step_line("11 long context", 3725) == "step 11 long context (at 62:05)"
