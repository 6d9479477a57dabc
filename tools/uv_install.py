"""`uv pip install` into a venv, from where pip on this machine would take the same packages.

    python3 tools/uv_install.py UV VENV [uv pip install arguments...]

The Makefile builds every venv with uv (tools/uv-requirements.txt): it installs the same pinned files several times
faster than pip and with a fraction of its CPU, which the suite needs while vLLM's CPU venv builds beside it. uv
does not read pip's configuration, and a machine's wheels may lie where only that configuration says (a local
find-links folder holding the CPU build of torch, local package indexes). So this reads pip's own view of it
(`pip config list`, the environment's PIP_* included) and hands uv the same index URL, extra index URLs and
find-links, with pip's choice among them (the best version from any index), and pip's certificate bundle (a proxy's
CA, say) where the environment names none, then runs uv. A file:// location that does not exist is left out, as pip
ignores it with a warning. Standard library only: it runs before any venv exists.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from urllib.parse import urlparse

# pip's option → uv's, each taking whitespace-separated values as pip does
OPTIONS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links"}
CONFIG_LINE = re.compile(r"^(?P<scope>[^.]*)\.(?P<key>[a-z-]+)='(?P<value>.*)'$")


def pip_config(*pythons: str) -> str:
    """`pip config list` as the first of PYTHONS that has pip answers it (a distribution's python3 may have none,
    nor a venv made `--without-pip`). pip reads the same files and environment from any of them."""
    for python in pythons:
        done = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False)
        if done.returncode == 0:
            return done.stdout
    return ""


def pip_locations(config_list: str) -> dict[str, list[str]]:
    """pip's index and find-links settings from `pip config list`: an environment variable (scope ':env:') wins over
    a file's setting of the same key, as in pip."""
    chosen: dict[str, tuple[bool, list[str]]] = {}
    for line in config_list.splitlines():
        match = CONFIG_LINE.match(line.strip())
        if not match or match["key"] not in OPTIONS:
            continue
        from_env = match["scope"] == ":env:"
        if match["key"] not in chosen or from_env or not chosen[match["key"]][0]:
            chosen[match["key"]] = (from_env, match["value"].split())
    return {key: [v for v in values if _present(v)] for key, (_, values) in chosen.items()}


def _present(location: str) -> bool:
    """Whether a location can be read: a URL other than file://, or a path (or file:// URL) that exists."""
    parsed = urlparse(location)
    if parsed.scheme not in ("", "file"):
        return True
    return os.path.exists(parsed.path if parsed.scheme == "file" else location)


def pip_cert(config_list: str) -> str | None:
    """The certificate bundle pip verifies indexes with (`cert`), the environment's setting first, if it exists."""
    chosen = None
    for line in config_list.splitlines():
        match = CONFIG_LINE.match(line.strip())
        if match and match["key"] == "cert" and (chosen is None or match["scope"] == ":env:"):
            chosen = match["value"]
    return chosen if chosen and os.path.isfile(chosen) else None


def uv_environment(config_list: str, environ: dict[str, str]) -> dict[str, str]:
    """ENVIRON for uv: with pip's certificate bundle as SSL_CERT_FILE where ENVIRON names no bundle of its own."""
    cert = pip_cert(config_list)
    if cert and "SSL_CERT_FILE" not in environ:
        return {**environ, "SSL_CERT_FILE": cert}
    return dict(environ)


def uv_arguments(locations: dict[str, list[str]]) -> list[str]:
    arguments = ["--index-strategy", "unsafe-best-match"]  # pip takes the best version from any of its indexes
    for key, values in locations.items():
        for value in values:
            arguments += [OPTIONS[key], value]
    return arguments


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    uv, venv, *rest = argv
    python = os.path.join(venv, "bin", "python")
    # the venv's pip where it has one, else the pip uv itself was installed with (venvs are made without pip)
    config = pip_config(python, os.path.join(os.path.dirname(uv), "python"), sys.executable)
    command = [uv, "pip", "install", "--quiet", "--python", python, *uv_arguments(pip_locations(config)), *rest]
    return subprocess.run(command, check=False, env=uv_environment(config, dict(os.environ))).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
