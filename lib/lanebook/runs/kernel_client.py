"""The client papermill talks to a runbook's kernel through: jupyter_client's, ready as soon as the kernel is.

Ready means IOPub has delivered the `idle` that follows the answered `kernel_info` (asked again while IOPub is
not yet subscribed, or moved on past a missed idle), not a fixed 0.2 s of quiet. Its channels never wait on one
poll without end: they poll in slices of WAIT_SLICE_S, so a missed wake-up costs at most one slice.
Why: docs/decisions.md, the "Runbook kernels" and "headless run" entries.
"""

from __future__ import annotations

import math
import time
from queue import Empty
from typing import Optional

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from traitlets import Type

IOPUB_WAIT_S = 0.2  # as jupyter_client: how long an answered request's first IOPub message may take to arrive
LIVE_IOPUB_WAIT_S = 10.0  # on a live IOPub, the longest wait for the next message before asking again
WELCOME = "iopub_welcome"  # what an XPUB IOPub (ipykernel 7) sends a new subscriber first (JEP 65)
WAIT_SLICE_S = 1.0  # the longest a channel waits on one poll: a wake-up missed costs at most this


class SlicedWaitChannel(AsyncZMQSocketChannel):
    """jupyter_client's asyncio channel whose waits are polls of at most WAIT_SLICE_S, one after another until a
    message comes or the timeout passes: each new poll reads the socket's state, so no missed wake-up strands one."""

    async def get_msg(self, timeout: Optional[float] = None) -> dict:
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                return await super().get_msg(timeout=max(0.0, min(WAIT_SLICE_S, left)))
            except Empty:
                if left <= WAIT_SLICE_S:
                    raise


class RunbookKernelClient(AsyncKernelClient):
    """An AsyncKernelClient whose readiness ends with the kernel's `idle` after `kernel_info`, not 0.2 s later, and
    whose shell and IOPub channels wait in slices (SlicedWaitChannel)."""

    shell_channel_class = Type(SlicedWaitChannel)
    iopub_channel_class = Type(SlicedWaitChannel)

    async def wait_for_ready(self, timeout: Optional[float] = None) -> None:
        deadline = time.monotonic() + (math.inf if timeout is None else timeout)
        asked: list[str] = []  # the kernel_info requests sent, in order
        while True:
            asked.append(self.kernel_info())
            try:
                reply = await self.shell_channel.get_msg(timeout=1)
            except Empty:
                reply = None
            if reply is not None and reply["msg_type"] == "kernel_info_reply":
                answered = reply["parent_header"].get("msg_id")
                later = set(asked[asked.index(answered) + 1 :]) if answered in asked else set()
                if await self._idle_after(answered, later):
                    self._handle_kernel_info_reply(reply)
                    return
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:.0f} seconds")

    async def _idle_after(self, request_id: Optional[str], later: frozenset[str] | set[str] = frozenset()) -> bool:
        """Read IOPub up to the kernel's `idle` after REQUEST_ID. False when no message comes within IOPUB_WAIT_S (an
        IOPub not yet subscribed, or only just: after the kernel's `iopub_welcome`), when a live IOPub is then quiet
        for LIVE_IOPUB_WAIT_S, or when it shows a message of a request sent after this one (LATER): this one's idle
        came before IOPub was live."""
        wait = IOPUB_WAIT_S
        while True:
            try:
                msg = await self.iopub_channel.get_msg(timeout=wait)
            except Empty:
                return False
            # The welcome says the subscription is live from now on, not that this request's messages are coming.
            wait = IOPUB_WAIT_S if msg["msg_type"] == WELCOME else LIVE_IOPUB_WAIT_S
            parent = msg["parent_header"].get("msg_id")
            if parent in later:
                return False
            if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle" and parent == request_id:
                return True
