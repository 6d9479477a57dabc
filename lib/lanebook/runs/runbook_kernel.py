"""A runbook's kernel, started before papermill asks for one, so it boots while lanebook prepares the run.

papermill runs the notebook on it (`km=`); lanebook stops it when the run ends. It is ipykernel's, started as
`python -m lanebook.runs.runbook_kernel` (the one kernel spec, read from KERNELS_DIR alone) without the debugger, and
it talks over Unix sockets in a folder of its own, never loopback TCP ports, so kernels started at once by two
processes cannot collide. Why: docs/decisions.md, the "Runbook kernels" entries.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from lanebook.base import paths
from lanebook.base.frontend import HEADLESS_KERNEL_ENV
from lanebook.base.paths import REPO

LANEBOOK_DIR = Path(__file__).resolve().parents[1]  # the lanebook package
KERNEL_NAME = "python3"
KERNELS_DIR = Path(__file__).with_name("kernels")  # KERNEL_NAME/kernel.json: this module, as ipykernel_launcher
# As papermill and nbclient start a kernel for lanebook: no kernel chatter on the terminal, history in memory.
KERNEL_ARGUMENTS = ("--IPKernelApp.log_level=ERROR", "--HistoryManager.hist_file=:memory:")


def _lanebook_module(name: str) -> bool:
    """Whether NAME (lanebook.X.Y) is a module of lanebook, read from its files: asking the import system would
    import lanebook.X (and, for a name inside a module, the module with all it imports) before the kernel starts."""
    path = LANEBOOK_DIR.joinpath(*name.split(".")[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def lanebook_imports(notebook: Path) -> list[str]:
    """The lanebook modules a notebook's code cells import, in order: `from lanebook.verify import gates` names
    lanebook.verify.gates (a module), `from lanebook.steps.runbook import Runbook` names lanebook.steps.runbook."""
    modules: list[str] = []
    for cell in json.loads(notebook.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        try:
            tree = ast.parse("".join(cell["source"]))
        except SyntaxError:  # a cell IPython would read (a magic): it imports nothing ahead
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [
                    f"{node.module}.{alias.name}" if _lanebook_module(f"{node.module}.{alias.name}") else node.module
                    for alias in node.names
                ]
            else:
                continue
            modules += [n for n in dict.fromkeys(names) if n.split(".")[0] == "lanebook" and n not in modules]
    return modules


# What a runbook's first connection imports (nodes.ssh imports Fabric, and with it paramiko, only when a node is first
# reached, so that a dry run and the CLI's quick answers never pay for it): made as the kernel boots instead, unless
# the run is a dry run, which opens no connection.
CONNECTION_MODULES = ("fabric", "fabric.runners")


def preload_line(modules: list[str], connects: bool = True) -> str:
    """The statement the kernel runs as it starts: it imports the modules (and, for a runbook that imports lanebook
    and CONNECTS, what its first connection will) and binds no name in the notebook's namespace (a cell that forgot
    its import still fails, as it would in JupyterLab)."""
    if not modules:
        return ""
    names = [*modules, *(CONNECTION_MODULES if connects else ())]
    bound = dict.fromkeys(name.split(".")[0] for name in names)  # the names the imports bind, in order
    return f"import {', '.join(names)}; del {', '.join(bound)}"


def import_runbook_modules() -> list[str]:
    """Import here what every runbook's kernel imports as it boots (ipykernel's app, each runbook's lanebook modules,
    Fabric's): `make setup` calls it so their bytecode is written then, not by a kernel's first boot, which must answer
    within papermill's 60 s start timeout. Returns the modules, in the order imported."""
    import importlib

    modules = ["ipykernel.kernelapp", *CONNECTION_MODULES]
    for notebook in sorted(paths.RUNBOOKS_DIR.glob("*.ipynb")):
        modules += [name for name in lanebook_imports(notebook) if name not in modules]
    for name in modules:
        importlib.import_module(name)
    return modules


@contextmanager
def started_kernel(notebook: Path, connects: bool = True) -> Iterator[object]:
    """A kernel booting for NOTEBOOK (its lanebook imports, and Fabric's where the run CONNECTS, made as it starts): a
    jupyter_client kernel manager to give papermill as `km`, whose clients are ready as soon as the kernel is
    (lanebook.runs.kernel_client). Stopped at once, and its files removed, when the block ends however it ends."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_core.utils import run_sync

    from lanebook.runs.kernel_client import RunbookKernelClient

    line = preload_line(lanebook_imports(notebook), connects)
    arguments = [*KERNEL_ARGUMENTS, *([f"--IPKernelApp.exec_lines={json.dumps([line])}"] if line else [])]
    with tempfile.TemporaryDirectory(prefix="lanebook-kernel-", ignore_cleanup_errors=True) as folder:
        home = Path(folder)  # its connection file and its sockets (ipc-1 to ipc-5)
        manager = _manager_class()(
            transport="ipc",
            ip=str(home / "ipc"),
            connection_file=str(home / "kernel.json"),
            kernel_name=KERNEL_NAME,
            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(KERNELS_DIR)], ensure_native_kernel=False),
            client_factory=RunbookKernelClient,
        )
        # no frontend will connect: widgets would never render, and its shell stream is never pumped (base.frontend)
        environment = {**os.environ, HEADLESS_KERNEL_ENV: "1"}
        run_sync(manager.start_kernel)(extra_arguments=arguments, cwd=str(REPO), env=environment)
        try:
            yield manager
        finally:
            stop_kernel(manager)


@contextmanager
def kernel_for(runbook: str, connects: bool = True) -> Iterator[object]:
    """The kernel for the runbook of that name, started first thing (None when no such notebook: the run refuses it
    and says why)."""
    notebook = paths.RUNBOOKS_DIR / f"{runbook}.ipynb"
    if not notebook.is_file():
        yield None
        return
    with started_kernel(notebook, connects) as manager:
        yield manager


@functools.cache
def _manager_class():
    """jupyter_client's AsyncKernelManager, keeping each client it makes (`made_clients`): nbclient leaves open the
    channels of a client whose manager it was given, a thread and a dozen descriptors each, so stop_kernel closes
    them."""
    from jupyter_client.manager import AsyncKernelManager

    class RunbookKernelManager(AsyncKernelManager):
        def client(self, **kwargs):
            made = super().client(**kwargs)
            self.made_clients = [*getattr(self, "made_clients", []), made]
            return made

    return RunbookKernelManager


def stop_kernel(manager) -> None:
    """Close the channels of the clients it made, kill the kernel now and reap it (nothing in its teardown is kept),
    then let jupyter_client clean up after it (its connection file, its ports). jupyter_client's own forced shutdown
    polls every 0.1 s for the process to go; a local kernel's process is waited for instead."""
    from jupyter_core.utils import run_sync

    for client in getattr(manager, "made_clients", ()):
        client.stop_channels()

    provisioner = manager.provisioner
    process = getattr(provisioner, "process", None)  # a local kernel's Popen
    if process is not None and process.poll() is None:
        run_sync(provisioner.kill)()  # SIGKILL to the kernel's process group
        process.wait(timeout=10)
    run_sync(manager.shutdown_kernel)(now=True)  # finds it gone: no wait, only the clean-up


def main() -> None:
    """The kernel's process, as ipykernel_launcher (the working directory off sys.path while ipykernel loads; IPython
    puts it back), with debugpy absent: ipykernel then boots without its debugger. httpx's command-line client is
    absent too: httpx imports it with the package when it can (click and rich, ~30 ms of every kernel's boot) and
    a runbook never runs it."""
    if Path(sys.path[0]) == Path.cwd():
        del sys.path[0]
    sys.modules["debugpy"] = None
    sys.modules["httpx._main"] = None
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()
