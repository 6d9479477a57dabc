"""The papermill engine runbooks run on: papermill's nbclient engine, saving the notebook when a code cell starts.

papermill saves the whole notebook when each cell starts and ends, Markdown cells included, so that a run stopped
half-way leaves its notebook as far as it got. Each save is a full serialisation and write of the notebook, and
most are written again at once: a cell's end is followed by the next cell's start with nothing run between them,
and a Markdown cell runs nothing. So the notebook is saved when a code cell starts, with every cell before it as it
ended, and when the run ends, however it ends (papermill's engine saves it then, the last cell's end with it): a run
stopped in a cell leaves every earlier cell's outputs and that cell marked running, as before.

Headless, a run would say nothing until its verdict, for minutes on a real lane. Given papermill's `stdout_file`, the
engine also writes there, as each step's cell starts, the step's name and the time since the run began; papermill
writes there what the notebook's cells print (the progress lines of its waits, lanebook.base.progress).
"""

from __future__ import annotations

import ast
import time
from contextlib import contextmanager
from typing import Optional, TextIO

from papermill.engines import NBClientEngine, NotebookExecutionManager, papermill_engines

ENGINE_NAME = "lanebook"


def step_name(source: str) -> Optional[str]:
    """The name of the step a runbook cell runs: the first argument of its top-level `with rb.step("NAME", ...)`."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a cell with IPython syntax is not a step
        return None
    for statement in tree.body:
        for item in statement.items if isinstance(statement, ast.With) else ():
            call = item.context_expr
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "step"
                and isinstance(call.func.value, ast.Name)
                and call.func.value.id == "rb"
                and call.args
                and isinstance(call.args[0], ast.Constant)
                and isinstance(call.args[0].value, str)
            ):
                return call.args[0].value
    return None


def step_line(name: str, elapsed_s: float) -> str:
    """`step NAME (at M:SS)`: a step starting, ELAPSED_S into the run."""
    minutes, seconds = divmod(int(elapsed_s), 60)
    return f"step {name} (at {minutes}:{seconds:02d})"


class RunbookExecutionManager(NotebookExecutionManager):
    """papermill's execution manager, saving at a code cell's start only (and at the notebook's start and end); with
    an `echo` stream, naming there each step as it starts."""

    skip_save = False
    echo: Optional[TextIO] = None
    began = 0.0

    def notebook_start(self, **kwargs):
        self.began = time.monotonic()
        super().notebook_start(**kwargs)

    def cell_start(self, cell, cell_index=None, **kwargs):
        if self.echo is not None and cell.cell_type == "code":
            name = step_name(cell.source)
            if name is not None:
                self.echo.write(step_line(name, time.monotonic() - self.began) + "\n")
                self.echo.flush()
        with self._unsaved(cell.cell_type != "code"):
            super().cell_start(cell, cell_index, **kwargs)

    def cell_complete(self, cell, cell_index=None, **kwargs):
        with self._unsaved(True):  # written by the next save: the next code cell's start, or the notebook's end
            super().cell_complete(cell, cell_index, **kwargs)

    def save(self, **kwargs):
        if not self.skip_save:
            super().save(**kwargs)

    @contextmanager
    def _unsaved(self, unsaved: bool):
        self.skip_save = unsaved
        try:
            yield
        finally:
            self.skip_save = False


class RunbookEngine(NBClientEngine):
    """papermill's nbclient engine with RunbookExecutionManager (as papermill's Engine.execute_notebook, which names
    its manager class); the steps are named on papermill's `stdout_file`, when there is one."""

    @classmethod
    def execute_notebook(
        cls, nb, kernel_name, output_path=None, progress_bar=True, log_output=False, autosave_cell_every=30, **kwargs
    ):
        nb_man = RunbookExecutionManager(
            nb,
            output_path=output_path,
            progress_bar=progress_bar,
            log_output=log_output,
            autosave_cell_every=autosave_cell_every,
        )
        nb_man.echo = kwargs.get("stdout_file")
        nb_man.notebook_start()
        try:
            cls.execute_managed_notebook(nb_man, kernel_name, log_output=log_output, **kwargs)
        finally:
            nb_man.cleanup_pbar()
            nb_man.notebook_complete()
        return nb_man.nb


papermill_engines.register(ENGINE_NAME, RunbookEngine)
