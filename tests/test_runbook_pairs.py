"""Every runbook is a notebook paired with a py:percent file (jupytext) for review: the two hold the same cells,
and the notebook is tracked by git with no outputs (outputs belong to the records under outputs/)."""

import subprocess

import jupytext
import nbformat
import pytest
from lanebook.base.paths import REPO, RUNBOOKS_DIR

NOTEBOOKS = sorted(RUNBOOKS_DIR.glob("*.ipynb"))


def test_there_are_runbooks():
    assert NOTEBOOKS, f"no notebooks in {RUNBOOKS_DIR}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_and_py_pair_hold_the_same_cells(notebook):
    script = notebook.with_suffix(".py")
    assert script.is_file(), (
        f"{script.name} missing: pair it with `jupytext --set-formats ipynb,py:percent {notebook.name}`"
    )
    ipynb, py = jupytext.read(notebook), jupytext.read(script)
    assert ipynb.metadata.get("jupytext", {}).get("formats") == "ipynb,py:percent"
    cells = lambda nb: [(c.cell_type, c.source, c.metadata.get("tags", [])) for c in nb.cells]  # noqa: E731
    assert cells(ipynb) == cells(py), f"{notebook.name} and {script.name} differ: run `jupytext --sync {notebook.name}`"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_kept_without_outputs(notebook):
    nb = nbformat.read(notebook, as_version=4)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{notebook.name} cell {index} keeps outputs"
    assert "papermill" not in nb.metadata, f"{notebook.name} is an executed copy, not the runbook"


@pytest.mark.parametrize("path", NOTEBOOKS + [p.with_suffix(".py") for p in NOTEBOOKS], ids=lambda p: p.name)
def test_runbook_files_are_tracked(path):
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: nothing to compare with")
    tracked = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "--error-unmatch", str(path.relative_to(REPO))],
        capture_output=True,
        text=True,
    )
    assert tracked.returncode == 0, f"{path.name} is not added to git"


def test_papermill_reads_every_parameter_each_runbook_declares():
    """papermill parses the parameters cell line by line: a comment it cannot read (an `=` or `;` in it) silently
    drops that parameter, so `-p NAME=...` would be refused and `--yes` would never reach `confirm`."""
    import ast

    import nbformat
    import papermill
    from lanebook.base.paths import RUNBOOKS_DIR

    for path in sorted(RUNBOOKS_DIR.glob("*.ipynb")):
        cell = next(c for c in nbformat.read(path, as_version=4).cells if "parameters" in c.metadata.get("tags", []))
        declared = {t.id for node in ast.parse(cell.source).body if isinstance(node, ast.Assign) for t in node.targets}
        assert set(papermill.inspect_notebook(str(path))) == declared, path.name
