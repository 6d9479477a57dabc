"""Whether a person's frontend (JupyterLab) renders widgets in this kernel, and its widget events while a cell waits.

`pump()` hands queued comm messages (clicks, a view rendered) to the widgets while a cell keeps the main thread
busy, and gives any other queued request back to the kernel, in order, when it ends. `rendered()` waits a short
bound for a view (a widget's `_view_count`, ipywidgets 8) and otherwise answers "no frontend", remembered for the
kernel unless a widget is rendered later. Outside ipykernel 7, and in a kernel lanebook's headless runner started
(HEADLESS_KERNEL_ENV), nothing renders and nothing pumps: pumping touches private parts of ipykernel.
Why: docs/decisions.md, "A headless run's kernel pumps no widgets".
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

# JupyterLab runs a Javascript output with `element` its node, before the node is in the page: wait for it.
SCROLL_HERE = (
    "(function scrollHere(tries) { if (element.isConnected) { element.scrollIntoView({block: 'center'}); }"
    " else if (tries > 0) { setTimeout(function () { scrollHere(tries - 1); }, 100); } })(50);"
)
FRONTEND_WAIT_S = 2.0  # how long a view may take to be rendered before a run counts as headless
COMM_MESSAGES = frozenset({"comm_open", "comm_msg", "comm_close"})
HEADLESS_KERNEL_ENV = "LANEBOOK_HEADLESS_KERNEL"  # "1" in a kernel lanebook's headless runner started

_state = {"headless": False, "seen": False}  # a widget shown here went unrendered within the bound / was rendered


def kernel() -> Optional[Any]:
    """The running ipykernel kernel when this process is one that a frontend may render in and ipywidgets is
    installed, else None."""
    if os.environ.get(HEADLESS_KERNEL_ENV) == "1":
        return None
    try:
        import ipywidgets  # noqa: F401 - no widgets, nothing to render
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return getattr(shell, "kernel", None) if shell is not None else None


def _shell_stream(k: Any) -> Optional[Any]:
    try:
        from ipykernel.eventloops import get_shell_stream

        stream = get_shell_stream(k)
    except Exception:  # noqa: BLE001 - a kernel this module does not know: nothing is pumped
        return None
    return stream if hasattr(stream, "_recv_callback") and hasattr(stream, "flush") else None


@contextmanager
def ui_events() -> Iterator[Callable[[], None]]:
    """A `pump` to call while the cell waits: widget messages are handled now, other requests run after the cell.

    Off the kernel's main thread (a Fabric reader thread) or outside a kernel, `pump` does nothing.
    """
    k = kernel()
    stream = _shell_stream(k) if k is not None and threading.current_thread() is threading.main_thread() else None
    if stream is None:
        yield lambda: None
        return
    import zmq

    original, held = stream._recv_callback, []

    def handle(frames: list) -> None:
        try:  # a peek at the header only: a message read in full is signed off, and the kernel would refuse it later
            _, rest = k.session.feed_identities(frames, copy=False)
            msg_type = k.session.deserialize(rest, content=False, copy=False)["header"]["msg_type"]
            if msg_type not in COMM_MESSAGES:
                held.append(frames)
                return
            msg = k.session.deserialize(rest, content=True, copy=False)
        except Exception:  # noqa: BLE001 - not ours to judge: the kernel reads it later
            held.append(frames)
            return
        k.shell_handlers[msg_type](stream, None, msg)  # the comm manager's own handlers, as the kernel calls them

    stream.on_recv(handle, copy=False)
    try:
        yield lambda: stream.flush(zmq.POLLIN)
    finally:
        stream.on_recv(original, copy=False)
        import asyncio

        for frames in held:  # in arrival order, after the running cell (the kernel runs one request at a time)
            asyncio.ensure_future(original(frames))


def pump_once() -> None:
    """Handle the widget messages queued so far (see ui_events)."""
    with ui_events() as pump:
        pump()


def wait_until(condition: Callable[[], bool], within_s: Optional[float] = None, interval_s: float = 0.05) -> bool:
    """Handle widget events until `condition()` holds (True) or `within_s` has passed (False; None: no bound).

    A KeyboardInterrupt (the frontend's interrupt button) ends the wait as it ends any cell.
    """
    deadline = None if within_s is None else time.monotonic() + within_s
    with ui_events() as pump:
        while True:
            pump()
            if condition():
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(interval_s)


def views(widget: Any) -> int:
    return int(getattr(widget, "_view_count", 0) or 0)


def show(widget: Any) -> Any:
    """Display a widget so that its views are counted; returns the display handle (to replace the output later).

    A view rendered at any time, even after its bound, tells this kernel that a frontend renders widgets.
    """
    from IPython.display import display

    widget._view_count = 0
    widget.observe(lambda change: _state.update(seen=True) if (change["new"] or 0) > 0 else None, "_view_count")
    return display(widget, display_id=True)


def rendered(widget: Any, within_s: float = FRONTEND_WAIT_S) -> Optional[Any]:
    """Show the widget; its display handle when a frontend renders it, None when none does (a headless run, or
    outside a kernel, where nothing is shown). Waits up to `within_s` for the view, except in a kernel that
    already showed a widget nobody rendered (and none rendered since): then it only looks.
    """
    if kernel() is None:
        return None
    handle = show(widget)
    seen = wait_until(lambda: views(widget) > 0, 0.0 if headless_known() else within_s)
    _state["headless"] = not seen
    if not seen:
        handle.update({"text/plain": ""}, raw=True)  # the executed notebook keeps no dead buttons
    return handle if seen else None


def headless_known() -> bool:
    """This kernel showed a widget that no frontend rendered within the bound, and none was rendered since."""
    return _state["headless"] and not _state["seen"]


def viewed(widget: Any, shown_for_s: float) -> Optional[bool]:
    """Is a widget shown `shown_for_s` ago rendered? True, False (headless), or None: cannot tell yet.

    Its views are counted as the frontend's messages are handled, which only the kernel's main thread can
    do: from another thread (a Fabric reader) only what this kernel already knows answers.
    """
    on_main = threading.current_thread() is threading.main_thread()
    if on_main:
        pump_once()
    if views(widget) > 0:
        return True
    if headless_known():
        return False
    if on_main and shown_for_s >= FRONTEND_WAIT_S and not _state["seen"]:  # a frontend seen here may be slow
        _state["headless"] = True
        return False
    return None


def bring_into_view() -> None:
    """Scroll the notebook to this output: after Run All, JupyterLab shows the last cell, and a question asked
    further up would wait out of sight. A person's frontend runs this (a trusted output of this session); a
    headless run never gets here."""
    from IPython.display import Javascript, display

    display(Javascript(SCROLL_HERE))


def ask(what: str) -> Optional[bool]:
    """A "Confirm: WHAT" / "Cancel" button pair, waited for while the cell blocks: True or False as clicked.

    None when no frontend renders the buttons (headless, or outside a kernel): the caller decides then.
    The wait has no bound (a person may be reading the runbook); the frontend's interrupt ends it.
    """
    if kernel() is None:
        return None
    import ipywidgets as widgets

    yes = widgets.Button(
        description=f"Confirm: {what}", button_style="danger", icon="check", layout=widgets.Layout(width="auto")
    )
    no = widgets.Button(description="Cancel", icon="times", layout=widgets.Layout(width="auto"))
    answers: list[bool] = []
    yes.on_click(lambda _: answers.append(True))
    no.on_click(lambda _: answers.append(False))
    pair = widgets.HBox([yes, no])
    if rendered(pair) is None:
        return None
    bring_into_view()
    try:
        wait_until(lambda: bool(answers))
    finally:
        yes.disabled = no.disabled = True
    if answers[0]:
        yes.description = f"Confirmed: {what}"
    else:
        no.description, no.button_style = "Cancelled", "warning"
    return answers[0]
