"""A twin node without sshd, for testing the stand-ins: a node root, its bin/ of stand-in shims, and a
`run` that does what the node session does (the node's paths mapped, then bash)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from lanebook.twin.nodes import LIB_DIR, STANDINS, sleep_shim
from lanebook.twin.session import map_paths, mapped_root
from lanebook.twin.standins.machine import NodeMachine, init_node

UNIT = "aiden-vllm.service"


@dataclass
class LocalNode:
    root: Path
    env: dict

    @property
    def machine(self) -> NodeMachine:
        return NodeMachine(self.root)

    def run(self, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-c", map_paths(command, mapped_root(self.root))],
            env=self.env,
            cwd=self.root / "home",
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def local_node(tmp_path: Path, legacy_active: bool = False, faults: tuple[str, ...] = ()) -> LocalNode:
    root = tmp_path / "node"
    init_node(root, [UNIT], legacy_active)
    (root / "home").mkdir(exist_ok=True)
    bin_dir = root / "bin"
    bin_dir.mkdir()
    python = shlex.quote(sys.executable)
    for name in STANDINS:
        (bin_dir / name).write_text(f'#!/bin/sh\nexec {python} -m lanebook.twin.standins {name} "$@"\n')
    (bin_dir / "sleep").write_text(sleep_shim(python))  # the --fast node's (LANEBOOK_TWIN_TIME_SCALE below)
    for shim in bin_dir.iterdir():
        shim.chmod(0o755)
    twin_dir = tmp_path / "twin"
    twin_dir.mkdir()
    (twin_dir / "state.json").write_text(json.dumps({"faults": list(faults), "time_scale": 0.01}))
    env = {
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(root / "home"),
        "LANEBOOK_NODE_ROOT": str(root),
        "LANEBOOK_TWIN_DIR": str(twin_dir),
        "LANEBOOK_TWIN_TIME_SCALE": "0.01",
        "PYTHONPATH": str(LIB_DIR),
    }
    return LocalNode(root, env)
