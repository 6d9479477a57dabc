"""lanebook.runs.kernel_client: the client is ready once the kernel's `idle` after `kernel_info` is read."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from jupyter_core.utils import run_sync
from lanebook.runs.kernel import started_kernel
from lanebook.runs.kernel_client import RunbookKernelClient


@pytest.fixture
def manager(tmp_path: Path):
    path = tmp_path / "book.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), path)
    with started_kernel(path) as manager:
        yield manager


@pytest.fixture
def client(manager):
    client = manager.client()
    client.start_channels()
    yield client
    client.stop_channels()


def test_ready_with_the_kernel_info_read_and_iopub_drained(client):
    assert isinstance(client, RunbookKernelClient)
    run_sync(client.wait_for_ready)(timeout=60)
    # Read up to the idle of an answered kernel_info. Under load it may have asked again (no idle within 0.2 s), so a
    # later request's busy/idle can still come: only kernel_info's status, which nbclient ignores by its parent id.
    left = []
    while run_sync(client.iopub_channel.msg_ready)():
        left.append(run_sync(client.iopub_channel.get_msg)(timeout=1))
    assert all(m["msg_type"] == "status" and m["parent_header"]["msg_type"] == "kernel_info_request" for m in left)
    printed: list = []
    reply = run_sync(client.execute_interactive)("print(6 * 7)", timeout=60, output_hook=printed.append)
    assert reply["content"]["status"] == "ok"
    assert [m["content"]["text"] for m in printed if m["msg_type"] == "stream"] == ["42\n"]


def test_no_idle_for_a_request_the_kernel_never_had(client):
    run_sync(client.wait_for_ready)(timeout=60)
    assert run_sync(client._idle_after)("no-such-request") is False  # so the client asks again


def test_a_kernel_that_died_is_never_ready(manager, client):
    process = manager.provisioner.process
    process.kill()
    process.wait(timeout=10)
    with pytest.raises(RuntimeError, match="died"):
        run_sync(client.wait_for_ready)(timeout=60)
