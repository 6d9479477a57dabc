"""A keyed lane's API keys, read from where its lane file says (`auth:`), checked, and known to the redactor.

The lane file names a key file (mode 0600) or an environment variable of the operator's machine, never a key. The
keys are read once per process where a command starts acting on a lane (`lane_keys`), each problem one LaneError line
(exit 2) before any node is touched, and every key read is registered with the redactor (lanebook.base.redact), so no
output, record or printed line of this process carries it. lanebook's own clients send the first key
(`client_key`); the others are the operator's, for other callers (DSPARK_API_KEYS: independently revocable keys).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Optional
from urllib.parse import urlsplit

from lanebook.base.errors import LaneError
from lanebook.base.redact import add_secrets
from lanebook.lane.params import LaneParams

# What the recipe's compose command and launcher take: no whitespace, backslash or quote (the line is sourced by bash
# and read by Compose), no leading '-' (read as a vLLM option); lanebook also wants no '$' or '`' (expanded in the
# double-quoted line), and at least 8 characters, as the redactor replaces a key wherever it appears.
KEY_RE = re.compile(r"[A-Za-z0-9._~+/=:@][A-Za-z0-9._~+/=:@-]{7,}")


@dataclass(frozen=True)
class LaneKeys:
    """The keys a keyed lane serves with: the recipe variable that carries them, and where they were read."""

    variable: str  # VLLM_API_KEY or DSPARK_API_KEYS
    keys: tuple[str, ...]
    source: str  # "key file PATH" or "$NAME", as the lane file names it

    @property
    def client_key(self) -> str:
        """The key lanebook's own clients send."""
        return self.keys[0]

    @property
    def env_value(self) -> str:
        """The variable's value in .env.dspark: the keys space-separated, on one line."""
        return " ".join(self.keys)


# The keys of each API origin (scheme://host:port) this process resolved, for the HTTP clients (nodes.http): the
# last lane resolved for an origin wins (a rollback resolves the lane it moves to).
_CLIENT_KEYS: dict[str, str] = {}


def origin(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


def client_key_for(url: str) -> Optional[str]:
    """The key to send to URL's server, None where no keyed lane of this process serves there."""
    return _CLIENT_KEYS.get(origin(url))


def key_file_path(params: LaneParams) -> Optional[Path]:
    """Where a lane's key file is on this machine: `~` and `$NAME` expanded, a relative path taken from the lane
    file's folder (None: the lane names no key file)."""
    if params.auth is None or params.auth.source.key_file is None:
        return None
    path = Path(os.path.expanduser(os.path.expandvars(params.auth.source.key_file)))
    if not path.is_absolute():
        path = Path(os.path.normpath((params.file.parent if params.file else Path.cwd()) / path))
    return path


def _read_file(where: str, setting: str, path: Path) -> str:
    try:
        info = path.stat()
    except FileNotFoundError:
        raise LaneError(
            f"{where}: key file {setting} not found (write it with mode 0600; a twin lane's: `lanebook twin up`)"
        ) from None
    except OSError as exc:
        raise LaneError(f"{where}: key file {setting} cannot be read: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise LaneError(f"{where}: key file {setting} is not a regular file")
    if info.st_mode & 0o077:
        raise LaneError(
            f"{where}: key file {setting} is readable by group or others (mode {stat.S_IMODE(info.st_mode):04o}); "
            f"chmod 600 {setting}"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LaneError(f"{where}: key file {setting} cannot be read as UTF-8 text ({type(exc).__name__})") from None
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def read_keys(params: LaneParams) -> Optional[LaneKeys]:
    """A keyed lane's keys as its `auth:` names them, checked (None for a keyless lane); pure of registration."""
    if params.auth is None:
        return None
    variable, source = params.auth.variable, params.auth.source
    where = f"lane {params.name}: auth.{variable}"
    if source.key_file is not None:
        text = _read_file(f"{where}.key_file", source.key_file, key_file_path(params))
    else:
        if source.key_env not in os.environ:
            raise LaneError(f"{where}.key_env: ${source.key_env} is not set in this environment")
        text = os.environ[source.key_env]
    keys = tuple(text.split())
    if not keys:
        raise LaneError(f"{where}: {source.shown} holds no key")
    for number, key in enumerate(keys, 1):
        if not KEY_RE.fullmatch(key):
            raise LaneError(
                f"{where}: key {number} of {source.shown} is not a key the recipe takes (at least 8 of letters, "
                "digits and ._~+/=:@-, not starting with '-')"
            )
    if variable == "VLLM_API_KEY" and len(keys) > 1:
        raise LaneError(
            f"{where}: VLLM_API_KEY takes one key, {source.shown} holds {len(keys)} (DSPARK_API_KEYS takes several)"
        )
    return LaneKeys(variable, keys, source.shown)


def lane_keys(params: LaneParams) -> Optional[LaneKeys]:
    """A keyed lane's keys (None for a keyless lane), read and checked, registered with the redactor and as the key
    this process's clients send to the lane's API."""
    keys = read_keys(params)
    if keys is None:  # a key sent to a keyless server is ignored by it: a keyed lane's key at this origin stays
        return None
    add_secrets(keys.keys)
    _CLIENT_KEYS[origin(params.api)] = keys.client_key
    return keys


def endpoint_key(api: str, *, key_file: Optional[str] = None, key_env: Optional[str] = None) -> Optional[str]:
    """The key for an OpenAI-compatible endpoint that is no lane of ours (`lanebook doctor --ask URL`), read as a
    lane's is (a key file of mode 0600, or an environment variable; the first key it holds), registered with the
    redactor and as the key this process's clients send to API's origin. None when neither is named."""
    if key_file is None and key_env is None:
        return None
    if key_file is not None and key_env is not None:
        raise LaneError("name the endpoint's key file or its environment variable, not both")
    if key_file is not None:
        text = _read_file("--ask-key-file", key_file, Path(os.path.expanduser(key_file)))
    else:
        if key_env not in os.environ:
            raise LaneError(f"--ask-key-env: ${key_env} is not set in this environment")
        text = os.environ[key_env]
    keys = text.split()
    if not keys or not KEY_RE.fullmatch(keys[0]):
        raise LaneError(f"{'key file ' + key_file if key_file else '$' + str(key_env)} holds no key")
    add_secrets(keys)
    _CLIENT_KEYS[origin(api)] = keys[0]
    return keys[0]
