"""The papermill engine runbooks run on: papermill's nbclient engine, saving the notebook when a code cell starts.

papermill saves the whole notebook when each cell starts and ends, Markdown cells included, so that a run stopped
half-way leaves its notebook as far as it got. Each save is a full serialisation and write of the notebook, and
most are written again at once: a cell's end is followed by the next cell's start with nothing run between them,
and a Markdown cell runs nothing. So the notebook is saved when a code cell starts, with every cell before it as it
ended, and when the run ends, however it ends (papermill's engine saves it then, the last cell's end with it): a run
stopped in a cell leaves every earlier cell's outputs and that cell marked running, as before.
"""

from __future__ import annotations

from contextlib import contextmanager

from papermill.engines import NBClientEngine, NotebookExecutionManager, papermill_engines

ENGINE_NAME = "lanebook"


class RunbookExecutionManager(NotebookExecutionManager):
    """papermill's execution manager, saving at a code cell's start only (and at the notebook's start and end)."""

    skip_save = False

    def cell_start(self, cell, cell_index=None, **kwargs):
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
    its manager class)."""

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
        nb_man.notebook_start()
        try:
            cls.execute_managed_notebook(nb_man, kernel_name, log_output=log_output, **kwargs)
        finally:
            nb_man.cleanup_pbar()
            nb_man.notebook_complete()
        return nb_man.nb


papermill_engines.register(ENGINE_NAME, RunbookEngine)
