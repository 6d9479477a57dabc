"""Fixtures shared by every test module: the session's twin."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def twin():
    """The twin's status dict (SPEC section 9). Brought up with --fast when it is down, and left up:
    other test sessions may be using it, and a second `up` is instant. Only `lanebook twin down` stops it."""
    from lanebook.twin import control

    status = control.status()
    if not status["running"]:
        status = control.up(faults=[], fast=True)
    yield status
