"""The papermill engine runbooks run on: papermill's nbclient engine, saving the notebook around code cells only.

papermill saves the whole notebook when each cell starts and ends, Markdown cells included, so that a run stopped
half-way leaves its notebook as far as it got. A Markdown cell runs nothing and shows nothing new: its start and
end are kept in its metadata and written with the next save, the next code cell's start. Half of a runbook's cells
are Markdown, and each save is a full serialisation and write of the notebook.
"""

from __future__ import annotations

from contextlib import contextmanager

from papermill.engines import NBClientEngine, NotebookExecutionManager, papermill_engines

ENGINE_NAME = "lanebook"


class RunbookExecutionManager(NotebookExecutionManager):
    """papermill's execution manager, with no save at the start or end of a Markdown cell."""

    skip_save = False

    def cell_start(self, cell, cell_index=None, **kwargs):
        with self._saved_if_code(cell):
            super().cell_start(cell, cell_index, **kwargs)

    def cell_complete(self, cell, cell_index=None, **kwargs):
        with self._saved_if_code(cell):
            super().cell_complete(cell, cell_index, **kwargs)

    def save(self, **kwargs):
        if not self.skip_save:
            super().save(**kwargs)

    @contextmanager
    def _saved_if_code(self, cell):
        self.skip_save = cell.cell_type != "code"
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
