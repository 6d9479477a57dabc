"""Write every runbook's troubleshooting section from the pitfall registry, in the notebook and its py:percent pair.

The section is the Markdown cell after the last step (before `## Verdict`): a run that stops at a failed step still
shows it. Run after editing lanebook/pitfalls.py (tests/test_runbook_shape.py fails until the cells match):

    .venv/bin/python tools/sync_troubleshooting.py
"""

import jupytext
from lanebook.base.paths import RUNBOOKS_DIR
from lanebook.recipe.pitfalls import TROUBLESHOOTING_HEADING, troubleshooting_markdown
from nbformat.v4 import new_markdown_cell


def sync(notebook) -> bool:
    """Put the registry's section before the Verdict heading (replacing the one there); True when it changed."""
    nb = jupytext.read(notebook)
    wanted = troubleshooting_markdown(notebook.stem)
    kept = [c for c in nb.cells if not (c.cell_type == "markdown" and c.source.startswith(TROUBLESHOOTING_HEADING))]
    verdict = next(i for i, c in enumerate(kept) if c.cell_type == "markdown" and c.source.startswith("## Verdict"))
    cells = kept[:verdict] + [new_markdown_cell(wanted)] + kept[verdict:]
    if [c.source for c in cells] == [c.source for c in nb.cells]:
        return False
    nb.cells = cells
    jupytext.write(nb, notebook)
    jupytext.write(nb, notebook.with_suffix(".py"), fmt="py:percent")
    return True


if __name__ == "__main__":
    for path in sorted(RUNBOOKS_DIR.glob("*.ipynb")):
        print(f"{path.name}: {'written' if sync(path) else 'already the registry'}")
