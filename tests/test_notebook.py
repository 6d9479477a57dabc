"""A recorded notebook as a page: the record untouched; in the copy one title, no verdict or widget output, badges."""

import nbformat
from lanebook.site.pages.notebook import demote_titles, notebook_title, page_notebook
from lanebook.steps.runbook import VERDICT_MIME


def test_titles_are_demoted_outside_code_fences():
    assert (
        demote_titles("# Title\ntext\n```sh\n# a shell comment\n```\n# Another")
        == "## Title\ntext\n```sh\n# a shell comment\n```\n## Another"
    )


def test_page_copy_leaves_out_verdict_and_widgets_and_badges_marks(tmp_path):
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_markdown_cell("# Launch the lane\nsee ✅"), nbformat.v4.new_code_cell("rb.finish()")]
    )
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    nb.cells[1].outputs = [
        nbformat.v4.new_output("display_data", data={"text/markdown": "`PASS` **up**", "text/plain": "<Markdown>"}),
        nbformat.v4.new_output(
            "display_data", data={"application/vnd.jupyter.widget-view+json": {"model_id": "m"}, "text/plain": "VBox()"}
        ),
        nbformat.v4.new_output("display_data", data={VERDICT_MIME: {"verdict": "pass"}, "text/plain": "{}"}),
        nbformat.v4.new_output("stream", name="stdout", text="waited 3/10 s\n"),
    ]
    source = tmp_path / "run.ipynb"
    nbformat.write(nb, source)
    before = source.read_bytes()
    page = page_notebook(source, "# [TWIN] launch")
    assert source.read_bytes() == before
    assert notebook_title(source) == "Launch the lane"
    assert [c.source for c in page.cells if c.cell_type == "markdown"] == [
        "# [TWIN] launch",
        '## Launch the lane\nsee <span class="lanebook-badge lanebook-badge-pass">PASS</span>',
    ]
    outputs = page.cells[2].outputs
    assert len(outputs) == 2 and outputs[1]["text"] == "waited 3/10 s\n"
    assert outputs[0]["data"]["text/markdown"] == '<span class="lanebook-badge lanebook-badge-pass">PASS</span> **up**'
    assert "widgets" not in page.metadata


def test_page_copy_shows_local_paths_relative_to_the_repository(tmp_path):
    """The record keeps what ran; the page shows no path of the machine that built it."""
    import tempfile

    from lanebook.base.paths import REPO

    lane = f"{REPO}/params/twin.yaml"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f'lane = "{lane}"')])
    nb.cells[0].outputs = [
        nbformat.v4.new_output("stream", name="stdout", text=f"linted {lane}\n"),
        nbformat.v4.new_output("display_data", data={"text/markdown": f"`HERMES_HOME={tempfile.gettempdir()}/h`"}),
        nbformat.v4.new_output("error", ename="E", evalue=f"at {lane}", traceback=[f"File {REPO}/lib/x.py"]),
    ]
    source = tmp_path / "run.ipynb"
    nbformat.write(nb, source)
    page = page_notebook(source, "# [TWIN] env")
    code = page.cells[1]
    assert code.source == 'lane = "params/twin.yaml"' and REPO.as_posix() in source.read_text()
    assert code.outputs[0]["text"] == "linted params/twin.yaml\n"
    assert code.outputs[1]["data"]["text/markdown"] == "`HERMES_HOME=$TMPDIR/h`"
    assert code.outputs[2]["evalue"] == "at params/twin.yaml" and code.outputs[2]["traceback"] == ["File lib/x.py"]
