"""Showing a bounded wait or a count (lanebook.base.progress): headless, a few exact lines, throttled; a widget in a
live frontend is checked in a real JupyterLab by tests/browser_confirm_check.py."""

from lanebook.base import progress
from lanebook.base.progress import Progress, counter, progress_line


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def headless(what="waiting for /health", total=900, unit="s", every_s=15.0):
    printed, clock = [], Clock()
    return Progress(what, total, unit, every_s=every_s, out=printed.append, clock=clock), printed, clock


def test_the_line_says_what_how_far_and_the_last_answer():
    assert (
        progress_line("waiting for /health", 12.4, 900, "s", "attempt 3, last: HTTP 503")
        == "waiting for /health: 12/900 s — attempt 3, last: HTTP 503"
    )
    assert progress_line("rsync ~/hub to workers", 1, 2, "worker(s)") == "rsync ~/hub to workers: 1/2 worker(s)"


def test_headless_prints_the_first_update_then_at_most_one_line_per_interval_and_the_last():
    shown, printed, clock = headless()
    for second in range(0, 40, 5):  # a poll every 5 s for 35 s
        clock.now = float(second)
        shown.update(second, f"attempt {second // 5 + 1}, last: ConnectError")
    clock.now = 38.0
    shown.finish(38.0, "ready")
    assert printed == [
        "waiting for /health: 0/900 s — attempt 1, last: ConnectError",
        "waiting for /health: 15/900 s — attempt 4, last: ConnectError",
        "waiting for /health: 30/900 s — attempt 7, last: ConnectError",
        "waiting for /health: 38/900 s — ready",
    ]
    assert shown.lines == printed


def test_a_wait_that_never_showed_progress_prints_nothing():
    shown, printed, _ = headless()
    shown.finish(0.1, "ready")
    assert printed == []


def test_a_count_prints_its_last_state_once():
    printed = []
    show = counter("speed waves", "waves", out=printed.append)
    for done in range(1, 5):
        show(done, 4, f"trial 1 C{done}: ok")
    assert printed == ["speed waves: 1/4 waves — trial 1 C1: ok", "speed waves: 4/4 waves — trial 1 C4: ok"]


def test_the_default_output_is_printed_and_flushed(capsys):
    shown = Progress("launcher", 1920)
    shown.update(3.2, "Waiting for http://127.0.0.2:8888/v1/models (attempt 1/100, next check in 15s)")
    shown.finish(20.0, "launcher ok (exit 0, 20 s)")
    assert capsys.readouterr().out.splitlines() == [
        "launcher: 3/1920 s — Waiting for http://127.0.0.2:8888/v1/models (attempt 1/100, next check in 15s)",
        "launcher: 20/1920 s — launcher ok (exit 0, 20 s)",
    ]
    assert progress.EVERY_S == 15.0
