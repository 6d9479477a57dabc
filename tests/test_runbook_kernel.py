"""lanebook.runs.runbook_kernel: the runbook's kernel, started ahead with the runbook's lanebook imports made as it
boots."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import nbformat
from jupyter_core.utils import run_sync
from lanebook.base.frontend import HEADLESS_KERNEL_ENV
from lanebook.base.paths import REPO
from lanebook.runs.runbook_kernel import (
    import_runbook_modules,
    kernel_for,
    lanebook_imports,
    preload_line,
    started_kernel,
)


def notebook(tmp_path: Path, *cells) -> Path:
    path = tmp_path / "book.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=list(cells)), path)
    return path


def test_the_runbooks_lanebook_imports_are_named_by_module(tmp_path):
    path = notebook(
        tmp_path,
        nbformat.v4.new_markdown_cell("from lanebook.ops import launcher"),  # prose, not code
        nbformat.v4.new_code_cell(
            "from lanebook.steps.runbook import Runbook, StepFailed\nfrom lanebook.verify import gates, hermes"
        ),  # two names of one module: the module once
        nbformat.v4.new_code_cell("import json\nimport lanebook.speed.bands\n%matplotlib inline"),  # a magic: skipped
        nbformat.v4.new_code_cell("def f():\n    from lanebook.verify import gates\n    from . import x"),
    )
    assert lanebook_imports(path) == ["lanebook.steps.runbook", "lanebook.verify.gates", "lanebook.verify.hermes"]


def test_every_runbook_has_imports_to_make_ahead():
    for path in sorted(Path("runbooks").glob("*.ipynb")):
        assert "lanebook.steps.runbook" in lanebook_imports(path), path.name


def test_naming_the_imports_imports_nothing():
    """They are read before the kernel starts: importing them there would make the kernel wait for the runner."""
    probe = (
        "import sys; from pathlib import Path; from lanebook.runs.runbook_kernel import lanebook_imports; "
        "before = set(sys.modules); named = lanebook_imports(Path('runbooks/gates.ipynb')); "
        "print(named, sorted(set(sys.modules) - before))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO)
    assert done.stdout.strip() == "['lanebook.steps.runbook', 'lanebook.verify.gates', 'lanebook.verify.hermes'] []"


def test_the_preload_binds_no_name():
    assert preload_line([]) == ""
    assert preload_line(["lanebook.a", "lanebook.b.c"]) == (
        "import lanebook.a, lanebook.b.c, fabric, fabric.runners; del lanebook, fabric"
    )
    assert preload_line(["lanebook.a"], connects=False) == "import lanebook.a; del lanebook"  # a dry run


def execute(manager, code: str) -> str:
    """Run CODE on the kernel; what it printed."""
    client = manager.client()
    client.start_channels()
    try:
        run_sync(client.wait_for_ready)(timeout=60)
        reply = run_sync(client.execute_interactive)(code, timeout=60, output_hook=lambda msg: printed.append(msg))
        assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        client.stop_channels()
    return "".join(m["content"].get("text", "") for m in printed if m["msg_type"] == "stream")


printed: list = []


def test_the_kernel_has_made_the_imports_and_is_gone_after(tmp_path):
    path = notebook(tmp_path, nbformat.v4.new_code_cell("from lanebook.verify import gates"))
    printed.clear()
    with started_kernel(path) as manager:
        process = manager.provisioner.process
        connection_file = manager.connection_file
        seen = execute(manager, "import sys; print('lanebook.verify.gates' in sys.modules, 'lanebook' in dir())")
        assert Path(connection_file).exists()
    assert seen.split() == ["True", "False"]  # imported, and no name left in the notebook's namespace
    assert process.poll() is not None and not Path(f"/proc/{process.pid}").exists()
    assert not os.path.exists(connection_file)


def test_a_client_left_open_is_closed_with_the_kernel(tmp_path):
    """nbclient leaves open the channels of a client it made from a manager it was given; the kernel's end closes
    them, so that many runs in one process (a promotion, a fleet) leave no thread or descriptor behind."""
    path = notebook(tmp_path, nbformat.v4.new_code_cell("x = 1"))

    def held() -> tuple[int, int]:
        return threading.active_count(), len(os.listdir("/proc/self/fd"))

    before = held()
    for _ in range(3):
        with started_kernel(path) as manager:
            client = manager.client()
            client.start_channels()  # and never stopped, as nbclient leaves it
            run_sync(client.wait_for_ready)(timeout=60)
            assert held() > before
    assert held() == before and not client.channels_running


def test_kernels_started_at_once_listen_on_sockets_of_their_own_and_leave_none(tmp_path):
    """Loopback TCP ports picked for two kernels at once can be the same port; a socket in a folder of its own
    cannot (lanebook.runs.runbook_kernel)."""
    path = notebook(tmp_path, nbformat.v4.new_code_cell("x = 1"))
    printed.clear()
    with started_kernel(path) as first, started_kernel(path) as second:
        homes = [Path(m.connection_file).parent for m in (first, second)]
        assert (first.transport, second.transport) == ("ipc", "ipc") and homes[0] != homes[1]
        for manager, home in zip((first, second), homes):
            assert manager.ip == str(home / "ipc")
            execute(manager, "x = 1")
            assert sorted(p.name for p in home.iterdir()) == [*(f"ipc-{n}" for n in range(1, 6)), "kernel.json"]
            assert all(home.joinpath(f"ipc-{n}").is_socket() for n in range(1, 6))
    assert not any(home.exists() for home in homes)


def test_the_kernel_is_ipykernel_without_its_debugger_or_httpx_command_line(tmp_path):
    path = notebook(tmp_path, nbformat.v4.new_code_cell("x = 1"))
    printed.clear()
    with started_kernel(path) as manager:
        assert manager.kernel_spec.argv[1:3] == ["-m", "lanebook.runs.runbook_kernel"]
        seen = execute(
            manager,
            "import os, sys, httpx; print(type(get_ipython().kernel).__name__, sys.modules['debugpy'], "
            f"os.getcwd() == {str(REPO)!r}, '' in sys.path, httpx.get.__name__, 'click' in sys.modules)",
        )
    # IPython put the working directory back; httpx works, without its command-line client
    assert seen.split() == ["IPythonKernel", "None", "True", "True", "get", "False"]


def test_the_kernel_knows_no_frontend_will_render_in_it(tmp_path):
    """A headless run's kernel: no widget is shown for a frontend, and its shell stream is never pumped."""
    path = notebook(tmp_path, nbformat.v4.new_code_cell("x = 1"))
    printed.clear()
    with started_kernel(path) as manager:
        seen = execute(
            manager,
            "from lanebook.base import frontend; import ipywidgets; "
            "print(type(get_ipython().kernel).__name__, frontend.kernel(), frontend.rendered(ipywidgets.Button()))",
        )
    assert seen.split() == ["IPythonKernel", "None", "None"]
    assert os.environ.get(HEADLESS_KERNEL_ENV) is None  # told to the kernel, not to this process


def test_a_kernel_stopped_mid_cell_is_killed_and_reaped(tmp_path):
    path = notebook(tmp_path, nbformat.v4.new_code_cell("x = 1"))
    with started_kernel(path) as manager:
        process = manager.provisioner.process
        client = manager.client()
        client.start_channels()
        run_sync(client.wait_for_ready)(timeout=60)
        client.execute("import time; time.sleep(60)")
        client.stop_channels()
    assert process.poll() is not None


def test_no_kernel_for_a_runbook_that_does_not_exist():
    with kernel_for("nosuch") as manager:
        assert manager is None


def test_setup_imports_what_every_runbooks_kernel_imports_as_it_boots():
    """What `make setup` imports so its bytecode is written before a kernel's first boot: ipykernel's app, Fabric's
    connection modules and every runbook's lanebook imports (the speed runbook's pull in pandas)."""
    imported = import_runbook_modules()
    runbooks = sorted((REPO / "runbooks").glob("*.ipynb"))
    assert len(runbooks) >= 10
    assert all(name in imported for notebook in runbooks for name in lanebook_imports(notebook))
    assert imported[0] == "ipykernel.kernelapp" and "fabric" in imported and "lanebook.speed.lanespeed" in imported
    assert len(imported) == len(set(imported)) and all(name in sys.modules for name in [*imported, "pandas"])
