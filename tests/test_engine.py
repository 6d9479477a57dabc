"""lanebook.runs.engine: papermill's nbclient engine, saving the notebook around code cells only."""

from __future__ import annotations

import hashlib

import nbformat
import papermill
import papermill.engines
from lanebook.runs.engine import ENGINE_NAME


def test_markdown_cells_are_kept_and_not_saved_around(tmp_path, monkeypatch):
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
    # every cell's run is kept (the Markdown cells' with the next save), the code ran, and the writes were: the
    # start, each code cell's start and end, and the end (papermill's own saves around the run)
    assert [c.metadata.papermill["status"] for c in nb.cells] == ["completed"] * 5
    assert all(c.metadata.papermill["end_time"] for c in nb.cells)
    assert nb.cells[4].outputs[0]["text"] == "1\n"
    saved_around_code = 2 * 2
    assert len(writes) <= 1 + saved_around_code + 2, writes
    assert len(writes) < 1 + 2 * len(cells), "Markdown cells were saved around"
