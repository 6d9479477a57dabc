"""Writing one lane value back into its lane file, so the file says what the lane runs after a canary's decision.

The lane file is the operator's truth: a canary that leaves the lane on other values than the file's (seed 000's
schedule canary restoring fixed K) would otherwise be undone silently by the next `env` and `launch`. So lanebook
writes the decided value itself rather than asking for a hand edit: only that value's line changes (comments and
every other line stay as the operator wrote them), the file is backed up beside itself first (NAME.yaml.bak-UTCSTAMP)
and replaced atomically, and the new text must read back as the value before it is written.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional, Sequence

from lanebook.base import yamltext
from lanebook.base.errors import LanebookError
from lanebook.base.files import backup, read_text, write_atomic

_BLOCK = re.compile(r"^speculative:\s*(#.*)?$")
_SCHEDULE = re.compile(r"^(?P<indent>[ \t]+)schedule:(?P<value>[^#\n]*)(?P<comment>#.*)?$")


def schedule_text(schedule: Optional[Sequence[Sequence[int]]]) -> str:
    """The schedule as its lane-file value: null (fixed K), or the ranges in flow style."""
    return "null" if schedule is None else json.dumps([list(r) for r in schedule]).replace("],[", "], [")


def with_schedule_line(text: str, schedule: Optional[Sequence[Sequence[int]]], note: str) -> str:
    """TEXT with `speculative.schedule` set to SCHEDULE on its own line, commented with NOTE (pure).

    The existing line is replaced in place; without one it is added as the block's first line, and without a
    `speculative:` block one is appended."""
    lines = text.splitlines()
    value = f"{schedule_text(schedule)}  # {note}"
    start = next((i for i, line in enumerate(lines) if _BLOCK.match(line)), None)
    if start is None:
        lines += ["speculative:", f"  schedule: {value}"]
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i][0].isspace()), len(lines))
        found = next((i for i in range(start + 1, end) if _SCHEDULE.match(lines[i])), None)
        if found is None:
            lines.insert(start + 1, f"  schedule: {value}")
        else:
            lines[found] = f"{_SCHEDULE.match(lines[found])['indent']}schedule: {value}"
    return "\n".join(lines) + "\n"


def read_schedule(text: str) -> Optional[list[list[int]]]:
    """`speculative.schedule` as the lane file's text gives it (None: fixed K, or no speculative block)."""
    data = yamltext.load(text) or {}
    schedule = (data.get("speculative") or {}).get("schedule")
    return None if schedule is None else [list(r) for r in schedule]


def write_schedule(path: Path, schedule: Optional[Sequence[Sequence[int]]], note: str) -> Optional[Path]:
    """Set the lane file's `speculative.schedule` (backup first, atomic); its backup (None: it held that already)."""
    text = read_text(path, "lane file")
    wanted = None if schedule is None else [list(r) for r in schedule]
    if read_schedule(text) == wanted:
        return None
    new_text = with_schedule_line(text, schedule, note)
    if read_schedule(new_text) != wanted:
        raise LanebookError(f"{path}: could not set speculative.schedule to {schedule_text(schedule)} on its own line")
    saved = backup(path)
    write_atomic(path, new_text)
    return saved


_CHECKOUT = re.compile(r"^checkout:(?P<value>[^#\n]*)(?P<comment>#.*)?$")


def with_checkout_line(text: str, checkout: str, note: str) -> str:
    """TEXT with the top-level `checkout:` set to CHECKOUT on its own line, commented with NOTE (pure). A lane file
    always has the line (a lane without it does not load)."""
    lines = text.splitlines()
    found = next((i for i, line in enumerate(lines) if _CHECKOUT.match(line)), None)
    if found is None:
        raise LanebookError("the lane file has no top-level `checkout:` line to set")
    lines[found] = f"checkout: {checkout}  # {note}"
    return "\n".join(lines) + "\n"


def checkout_value(text: str) -> Optional[str]:
    """`checkout:` as the lane file's text gives it."""
    value = (yamltext.load(text) or {}).get("checkout")
    return None if value is None else str(value)


def checkout_text(text: str, checkout: str, note: str) -> str:
    """The lane file's text with its checkout set, refused unless it reads back as that checkout."""
    new_text = with_checkout_line(text, checkout, note)
    if checkout_value(new_text) != checkout:
        raise LanebookError(f"could not set checkout to {checkout} on its own line")
    return new_text


def write_checkout(path: Path, checkout: str, note: str) -> Optional[Path]:
    """Set the lane file's `checkout:` (backup first, atomic); its backup (None: it held that already)."""
    text = read_text(path, "lane file")
    if checkout_value(text) == checkout:
        return None
    try:
        new_text = checkout_text(text, checkout, note)
    except LanebookError as exc:
        raise LanebookError(f"{path}: {exc}") from None
    saved = backup(path)
    write_atomic(path, new_text)
    return saved
