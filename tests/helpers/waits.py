"""The tests' one bounded wait: poll a condition until it holds or its bound passes, for what happens a moment
after the action a test took (a process gone, a log line written, a thread ended). The test asserts on what it
returns, so a wait that ran out fails where it was asked for, with the test's own message."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def eventually(condition: Callable[[], T], within_s: float, poll_s: float = 0.05) -> T:
    """CONDITION's first truthy value, or its last (falsy) value once WITHIN_S have passed; it is always asked at
    least once, and once more at the bound."""
    deadline = time.monotonic() + within_s
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
