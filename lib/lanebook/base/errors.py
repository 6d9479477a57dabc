"""Errors a user can act on. The CLI prints their message as one line and exits 2."""

import re


class LanebookError(Exception):
    """Bad usage or bad input: one clear line for the user, no traceback. A message built from text lanebook was
    given (a YAML parser's problem, a file's line) may hold line breaks: they are joined into the one line."""

    def __init__(self, message: object = ""):
        super().__init__(re.sub(r"\s*[\r\n]+\s*", " ", str(message)).strip())


class LaneError(LanebookError):
    """A lane name or lane file that cannot be loaded or validated."""
