"""lanebook.runs.kernel_client: the client is ready once the kernel's `idle` after `kernel_info` is read."""

from __future__ import annotations

import asyncio
from contextlib import contextmanager
from pathlib import Path
from queue import Empty
from typing import Iterator, Optional

import nbformat
import pytest
import zmq
import zmq.asyncio
from jupyter_client.session import Session
from jupyter_core.utils import run_sync
from lanebook.runs import kernel_client
from lanebook.runs.kernel_client import RunbookKernelClient, SlicedWaitChannel
from lanebook.runs.runbook_kernel import started_kernel


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


def test_the_client_waits_on_sliced_channels(client):
    assert isinstance(client.shell_channel, SlicedWaitChannel)
    assert isinstance(client.iopub_channel, SlicedWaitChannel)


@contextmanager
def _pair(tmp_path: Path) -> Iterator[tuple[Session, zmq.asyncio.Socket, zmq.Socket]]:
    """A session and a connected pair of sockets: the receiving end (asyncio, as a channel's) and the sending end."""
    session = Session()
    receiving = zmq.asyncio.Context().socket(zmq.PAIR)
    sending = zmq.Context().socket(zmq.PAIR)
    address = f"ipc://{tmp_path / 'pair'}"
    receiving.bind(address)
    sending.connect(address)
    try:
        yield session, receiving, sending
    finally:
        sending.close(0)
        receiving.close(0)


async def _sent_after(seconds: float, timeout: Optional[float], tmp_path: Path) -> dict:
    """What a SlicedWaitChannel's get_msg(TIMEOUT) returns for a message sent SECONDS after it began to wait."""
    with _pair(tmp_path) as (session, receiving, sending):
        waiting = asyncio.ensure_future(SlicedWaitChannel(receiving, session).get_msg(timeout=timeout))
        await asyncio.sleep(seconds)
        session.send(sending, "kernel_info_reply", {"status": "ok"})
        return await waiting


def test_a_wait_without_timeout_reads_a_message_that_came_after_many_slices(tmp_path, monkeypatch):
    monkeypatch.setattr(kernel_client, "WAIT_SLICE_S", 0.05)
    assert run_sync(_sent_after)(0.5, None, tmp_path)["msg_type"] == "kernel_info_reply"


def test_a_wait_with_a_timeout_reads_a_message_within_it(tmp_path, monkeypatch):
    monkeypatch.setattr(kernel_client, "WAIT_SLICE_S", 0.05)
    assert run_sync(_sent_after)(0.3, 60, tmp_path)["content"] == {"status": "ok"}


def test_a_sliced_wait_with_a_timeout_still_times_out(tmp_path, monkeypatch):
    monkeypatch.setattr(kernel_client, "WAIT_SLICE_S", 0.05)

    async def quiet():
        socket = zmq.asyncio.Context().socket(zmq.PAIR)
        socket.bind(f"ipc://{tmp_path / 'quiet'}")
        try:
            await SlicedWaitChannel(socket, Session()).get_msg(timeout=0.3)
        finally:
            socket.close(0)

    with pytest.raises(Empty):
        run_sync(quiet)()


def test_after_the_iopub_welcome_an_idle_sent_before_it_is_asked_for_again_at_once(tmp_path):
    """An XPUB IOPub (ipykernel 7) first sends a new subscriber its welcome. The request's idle may have gone out before
    the subscription, so after the welcome it is waited for as on an IOPub not yet live, never LIVE_IOPUB_WAIT_S."""
    waits: list[Optional[float]] = []

    class Recording(SlicedWaitChannel):
        async def get_msg(self, timeout: Optional[float] = None) -> dict:
            waits.append(timeout)
            return await super().get_msg(timeout=timeout)

    async def welcomed_only() -> bool:
        with _pair(tmp_path) as (session, receiving, sending):
            session.send(sending, kernel_client.WELCOME, {"subscription": ""})
            client = type("Client", (), {"iopub_channel": Recording(receiving, session)})()
            return await RunbookKernelClient._idle_after(client, "kernel-info-1")

    assert run_sync(welcomed_only)() is False
    assert waits == [kernel_client.IOPUB_WAIT_S, kernel_client.IOPUB_WAIT_S]
