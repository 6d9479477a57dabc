"""The install on arm64, proven under emulation: a fresh clone's `make setup` as a plain user in an arm64 Debian 13
root, the dry-run promotion of anemll-0731 there against the same on this machine, and no ELF file of another
architecture among what setup installed.

    sudo python3 benchmarks/arm64_install.py [--root DIR] [--repo DIR]

Needs root, Debian's qemu-user-static, binfmt-support and debootstrap (it builds the root with `debootstrap
--arch=arm64 trixie` when DIR holds none; Debian 13 carries Compose v2 as docker-compose and Python 3.13). Slow:
every arm64 program runs emulated (about 6 minutes for setup, 3 for the dry run). Prints each phase's time and the
findings; exit 1 when one fails. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("python3", "python3-venv", "make", "git", "ca-certificates", "docker-compose", "openssh-server", "rsync",
            "sudo", "fonts-dejavu-core", "fonts-liberation")  # fmt: skip
USER = "spark"
ELF_MACHINES = {0x3E: "x86-64", 0xB7: "aarch64", 0x03: "i386", 0x28: "arm", 0xF3: "riscv", 0x16: "s390"}
# debugpy ships attach helpers for every architecture on purpose; they are never loaded on another one.
FOREIGN_ON_PURPOSE = ("pydevd_attach_to_process",)


def run(command: list[str] | str, *, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    shown = command if isinstance(command, str) else shlex.join(command)
    print(f"$ {shown}", flush=True)
    return subprocess.run(command, check=check, shell=isinstance(command, str), **kwargs)


def build_root(root: Path, mirror: str) -> None:
    if (root / "usr/bin/python3").exists():
        return
    run(["debootstrap", "--arch=arm64", f"--include={','.join(PACKAGES)}", "trixie", str(root), mirror])


def mounts(root: Path) -> list[Path]:
    points = []
    for source, fstype in (("/proc", "proc"), ("/sys", "sysfs"), ("/dev", None), ("/dev/pts", None)):
        target = root / source.lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        if fstype:
            run(["mount", "-t", fstype, fstype, str(target)])
        else:
            run(["mount", "--bind", source, str(target)])
        points.append(target)
    return points


def in_root(root: Path, script: str, *, user: str | None = USER, check: bool = True, capture: bool = False):
    shell = ["su", "-", user, "-c", script] if user else ["sh", "-c", script]
    return run(["chroot", str(root), *shell], check=check, capture_output=capture, text=True)


def elf_machines(folder: Path) -> dict[str, list[str]]:
    """Every ELF file under FOLDER by its machine (e_machine), as paths relative to FOLDER."""
    found: dict[str, list[str]] = {}
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            with open(path, "rb") as handle:
                head = handle.read(20)
            if len(head) == 20 and head[:4] == b"\x7fELF":
                machine = int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")
                found.setdefault(ELF_MACHINES.get(machine, hex(machine)), []).append(str(path.relative_to(folder)))
    return found


def normalized(text: str, *paths: str) -> list[str]:
    """A dry run's lines with this machine's paths, ids and times taken out, to compare two machines' runs."""
    import re

    for path in paths:
        text = text.replace(path, "<repo>")
    text = re.sub(r"\b[0-9]{8}T[0-9]{6}Z\b", "<stamp>", text)
    text = re.sub(r"\b[0-9a-f]{8,12}\b", "<id>", text)
    text = re.sub(r"\(at [0-9:]+\)", "(at <t>)", text)
    return [line.rstrip() for line in text.splitlines() if line.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--root", type=Path, default=REPO / ".bench" / "arm64-root")
    parser.add_argument("--repo", type=Path, default=REPO, help="the repository to clone (its committed HEAD)")
    parser.add_argument("--mirror", default="http://deb.debian.org/debian")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("arm64_install: needs root (debootstrap, chroot, mounts)", file=sys.stderr)
        return 2
    if not Path("/proc/sys/fs/binfmt_misc/qemu-aarch64").exists():
        print("arm64_install: no qemu-aarch64 binfmt: apt-get install qemu-user-static binfmt-support", file=sys.stderr)
        return 2
    root = args.root.resolve()
    started = time.monotonic()
    build_root(root, args.mirror)
    figures = {"root": time.monotonic() - started}
    points = mounts(root)
    try:
        shutil.copy("/etc/resolv.conf", root / "etc/resolv.conf")
        # This machine reaches the index through a proxy whose CA its own bundle holds: the root's pip (and so uv,
        # through tools/uv_install.py) is told of it as an operator behind one would tell theirs.
        shutil.copy("/etc/ssl/certs/ca-certificates.crt", root / "etc/ssl/certs/host-ca.crt")
        (root / "etc/pip.conf").write_text("[global]\ncert = /etc/ssl/certs/host-ca.crt\n")
        in_root(root, f"id {USER} >/dev/null 2>&1 || useradd -m -s /bin/bash -G sudo {USER}", user=None)
        (root / "etc/sudoers.d" / USER).write_text(f"{USER} ALL=(ALL) NOPASSWD:ALL\n")
        source = root / "mnt/lanebook.git"
        if source.exists():
            shutil.rmtree(source)
        run(["git", "clone", "-q", "--bare", str(args.repo), str(source)])
        in_root(root, f"chown -R {USER}: /mnt/lanebook.git", user=None)  # git refuses a repository of another owner
        in_root(root, "rm -rf lanebook && git clone -q /mnt/lanebook.git lanebook && git -C lanebook log --oneline -1")
        # This machine's dry run of the same commit, taken now: the checkout may move on while the root installs.
        here = run([str(REPO / ".venv/bin/lanebook"), "promote", "--lane", "anemll-0731", "--dry-run"], check=False,
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        uname = in_root(root, "uname -m; python3 --version", capture=True).stdout.split()
        print(f"machine in the root: {' '.join(uname)}")
        t0 = time.monotonic()
        setup = in_root(root, "cd lanebook && make setup 2>&1 | tail -25", check=False, capture=True)
        figures["setup"] = time.monotonic() - t0
        print(setup.stdout)
        ok = in_root(root, "test -f lanebook/.venv/.installed", check=False).returncode == 0
        t0 = time.monotonic()
        dry = in_root(root, "cd lanebook && .venv/bin/lanebook promote --lane anemll-0731 --dry-run 2>&1", check=False,
                      capture=True)  # fmt: skip
        figures["dry run"] = time.monotonic() - t0
        theirs = normalized(dry.stdout, f"/home/{USER}/lanebook")
        ours = normalized(here.stdout, str(REPO))
        same = theirs == ours
        foreign = {
            machine: [p for p in paths if not any(mark in p for mark in FOREIGN_ON_PURPOSE)]
            for machine, paths in elf_machines(root / "home" / USER / "lanebook").items()
            if machine != "aarch64"
        }
        foreign = {machine: paths for machine, paths in foreign.items() if paths}
        aside = [
            path
            for machine, paths in elf_machines(root / "home" / USER / "lanebook").items()
            if machine != "aarch64"
            for path in paths
            if any(mark in path for mark in FOREIGN_ON_PURPOSE)
        ]
        counts = {m: len(p) for m, p in elf_machines(root / "home" / USER / "lanebook").items()}
    finally:
        for point in reversed(points):
            subprocess.run(["umount", "-l", str(point)], check=False)
    print("\n--- the dry run in the arm64 root (tail) ---")
    print("\n".join(dry.stdout.splitlines()[-15:]))
    print("\n--- figures (arm64 under qemu emulation on this x86-64 machine) ---")
    for phase, seconds in figures.items():
        print(f"{phase:>8}: {seconds / 60:.1f} min")
    print(f"setup: {'passed' if ok else 'FAILED'}; dry run exit {dry.returncode}, verdicts as on this machine: {same}")
    print(f"ELF files installed, by machine: {counts}")
    print(f"of another architecture (debugpy's attach helpers aside): {foreign or 'none'}")
    print(f"set aside: {aside or 'none'}")
    if not same:
        import difflib

        print("\n".join(difflib.unified_diff(ours, theirs, "this machine", "arm64 root", lineterm="", n=1)))
    return 0 if ok and dry.returncode == 0 and same and not foreign else 1


if __name__ == "__main__":
    sys.exit(main())
