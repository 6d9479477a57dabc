"""Showing how far one bounded wait or count has come (a lane's /health, the launcher, rsync, speed waves).

In a frontend that renders widgets (a live JupyterLab) it is a progress bar with a line of text, updated in
place. Headless (papermill keeps what a cell prints in the executed notebook; a terminal; tests) it is a few
plain lines: the first update, then at most one every `every_s`, and the last, never one per poll. It never
blocks and is never required: a caller passes nothing and gets this display, or passes its own callback.

Whether a frontend renders the bar is learnt as the wait goes (lanebook.base.frontend): until then lines are held,
and printed once the run proves headless, or at the end.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

from lanebook.base import frontend

EVERY_S = 15.0


def _print(line: str) -> None:
    print(line, flush=True)


def progress_line(what: str, done: float, total: float, unit: str, detail: str = "") -> str:
    """`WHAT: DONE/TOTAL UNIT — DETAIL`, the text of the bar and of each headless line."""
    return f"{what}: {done:.0f}/{total:.0f} {unit}" + (f" — {detail}" if detail else "")


class Progress:
    """One wait or count of `total` (seconds of a bound, workers, waves), shown from its first update on."""

    def __init__(
        self,
        what: str,
        total: float,
        unit: str = "s",
        *,
        every_s: float = EVERY_S,
        out: Callable[[str], None] = _print,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.what, self.total, self.unit, self.every_s = what, float(total), unit, every_s
        self.out, self.clock = out, clock
        self.lines: list[str] = []  # every line printed headless
        self._lock = threading.Lock()
        self._started = False
        self._live: Optional[bool] = None  # None: not known yet whether a frontend renders the bar
        self._held: Optional[str] = None  # the first line, until it is known that no frontend shows the bar
        self._printed_at: Optional[float] = None
        self._widgets: Optional[tuple[Any, Any, Any]] = None  # (box, bar, label)
        self._shown_at = 0.0

    def update(self, done: float, detail: str = "") -> None:
        """Show `done` of `total` (with a short detail: the last answer, the attempt)."""
        with self._lock:
            self._start()
            line = progress_line(self.what, done, self.total, self.unit, detail)
            self._set_widgets(done, line)
            self._decide()
            if self._live is False:
                self._print_throttled(line)
            elif self._live is None and self._held is None:
                self._held = line

    def finish(self, done: float, detail: str = "", ok: bool = True) -> None:
        """The last state (always shown headless); nothing when the wait never showed anything (it ended at once)."""
        with self._lock:
            if not self._started:
                return
            line = progress_line(self.what, done, self.total, self.unit, detail)
            self._set_widgets(done, line, "success" if ok else "danger")
            self._decide()
            if self._live is not True:
                self._release_held()
                self._emit(line)

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        if frontend.kernel() is None:
            self._live = False
            return
        import ipywidgets as widgets

        bar = widgets.FloatProgress(value=0.0, min=0.0, max=max(self.total, 1e-9), layout=widgets.Layout(width="40%"))
        label = widgets.Label(value=self.what)
        box = widgets.HBox([bar, label])
        self._handle = frontend.show(box)
        self._widgets, self._shown_at = (box, bar, label), self.clock()

    def _set_widgets(self, done: float, line: str, style: str = "") -> None:
        if self._widgets and self._live is not False:
            _, bar, label = self._widgets
            bar.value, label.value = min(max(done, 0.0), bar.max), line
            if style:
                bar.bar_style = style

    def _decide(self) -> None:
        if self._live is not None or not self._widgets:
            return
        self._live = frontend.viewed(self._widgets[0], self.clock() - self._shown_at)
        if self._live is False:
            self._handle.update({"text/plain": ""}, raw=True)  # the executed notebook keeps no dead bar
            self._release_held()

    def _release_held(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            self._emit(held)

    def _print_throttled(self, line: str) -> None:
        if self._printed_at is None or self.clock() - self._printed_at >= self.every_s:
            self._emit(line)

    def _emit(self, line: str) -> None:
        if self.lines and self.lines[-1] == line:  # a count's last update and its finish say the same
            return
        self._printed_at = self.clock()
        self.lines.append(line)
        self.out(line)


def counter(what: str, unit: str, **kwargs: Any) -> Callable[[int, int, str], None]:
    """A `(done, total, detail)` callback (e.g. run_speed's on_wave) showing a count; the last one finishes it."""
    shown: list[Progress] = []

    def show(done: int, total: int, detail: str = "") -> None:
        if not shown:
            shown.append(Progress(what, total, unit, **kwargs))
        shown[0].update(done, detail)
        if done >= total:
            shown[0].finish(done, detail)

    return show
