"""Files safely: written atomically (temp file in the same dir + rename) with a backup first, and read with one clear
line when a file an operator named cannot be read."""

from __future__ import annotations

import os
from pathlib import Path

from lanebook.base.errors import LanebookError

# hashlib, shutil, tempfile and datetime are imported where used: much of lanebook imports this module, the twin's
# stand-ins (a fresh process per command) included, and most callers need none of them.


def record_id() -> str:
    """A new record's id: 8 hex digits with a letter first (`-p restore=RUN_ID` is read as YAML, where 12345678 or
    1234e567 would be numbers)."""
    import uuid

    return "abcdef"[uuid.uuid4().int % 6] + uuid.uuid4().hex[:7]


def utc_stamp() -> str:
    """Now as UTCSTAMP, e.g. 20261202T045311Z: the one form of the time in backup, record and output names."""
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def write_atomic(path: Path, text: str | bytes, mode: int | None = None, *, exclusive: bool = False) -> None:
    """A reader sees the old file or the new one, never half of one (TEXT: str, or bytes written as they are).

    mode: the new file's permissions; None keeps an existing file's mode (0o644 for a new file).
    exclusive: only a new file: FileExistsError where PATH already is (a file that appeared meanwhile included).
    """
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        if exclusive:
            os.link(tmp, path)  # FileExistsError where PATH is: never a replace
            Path(tmp).unlink()
        else:
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def backup(path: Path, stamp: str | None = None) -> Path:
    """Copy PATH to PATH.bak-UTCSTAMP (never overwriting an earlier backup) before it is changed."""
    import shutil

    path = Path(path)
    stamp = stamp or utc_stamp()
    target = path.with_name(f"{path.name}.bak-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.bak-{stamp}-{n}")
    shutil.copy2(path, target)
    return target


def read_bytes(path: str | Path, what: str) -> bytes:
    """The bytes of a file lanebook was pointed at (WHAT names it), or one LanebookError line saying why not."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise LanebookError(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise LanebookError(f"{what} is a directory: {path}") from None
    except OSError as exc:
        raise LanebookError(f"{what} {path} cannot be read: {exc.strerror or exc}") from None


def read_text(path: str | Path, what: str) -> str:
    """The text of a file lanebook was pointed at (WHAT names it: "env file"), or one LanebookError line saying why
    it cannot be read: missing, a directory, not UTF-8, not readable. Newlines read as Path.read_text reads them."""
    data = read_bytes(path, what)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LanebookError(f"{what} {path} is not UTF-8 text (byte {exc.start})") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def sha256_file(path: Path) -> str:
    """The file's sha256, read in 1 MiB blocks (outputs and lane files are hashed for records and provenance)."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
