"""Errors a user can act on. The CLI prints their message as one line and exits 2."""


class LanebookError(Exception):
    """Bad usage or bad input: one clear line for the user, no traceback."""


class LaneError(LanebookError):
    """A lane name or lane file that cannot be loaded or validated."""
