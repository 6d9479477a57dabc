"""Whether a frontend renders widgets (lanebook.base.frontend). Outside a kernel nothing does and nothing waits; a
headless kernel (nbclient) shows no widget a view, answers within the bound and then at once. A live JupyterLab
is checked by tests/browser_confirm_check.py (buttons clicked through Chromium)."""

import nbformat
from lanebook.base import frontend
from nbclient import NotebookClient


def test_outside_a_kernel_nothing_renders_and_nothing_is_asked():
    assert frontend.kernel() is None
    assert frontend.ask("stop the lane on every node") is None
    assert frontend.rendered(object()) is None
    assert frontend.wait_until(lambda: True) is True
    assert frontend.wait_until(lambda: False, within_s=0.1) is False


def test_a_headless_kernel_answers_within_the_bound_then_without_waiting():
    """nbclient's timeout turns a hang into a failure: the cell must finish on its own."""
    code = """
from lanebook.base import frontend
first = frontend.ask('drop the page cache')
known = frontend.headless_known()  # the second question is answered from this, without a wait
print(first, known, frontend.ask('drop the page cache'))
"""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    NotebookClient(nb, timeout=60, kernel_name="python3").execute()
    outputs = nb.cells[0].outputs
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert printed.strip() == "None True None", outputs
    # the buttons shown while finding out were replaced by nothing: no dead widget in the executed notebook
    assert all("application/vnd.jupyter.widget-view+json" not in o.get("data", {}) for o in outputs)
