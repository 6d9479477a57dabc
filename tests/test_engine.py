"""lanebook.runs.engine: papermill's nbclient engine, saving the notebook when a code cell starts."""

from __future__ import annotations

import hashlib
import json

import nbformat
import papermill
import papermill.engines
from lanebook.runs.engine import ENGINE_NAME


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
