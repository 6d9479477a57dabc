"""The twin nodes' own filesystem roots: a home with the lane checkouts and an HF cache laid out as the hub lays it.

Shards are small (a few hundred KiB) but shaped like the real thing: valid safetensors files stored
as blobs/<sha256>, linked from snapshots/<rev>/ by relative symlinks, with refs/main and an index
json, so `find`, rsync -aH, symlink-breaking snapshot-only copies and `*.incomplete` leftovers behave
as they do on a DGX Spark. Content and mtimes are deterministic, so head and worker copies compare equal, and
a checkout or model tree laid out again by a fresh `twin up` is the same tree (its fingerprint unchanged).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

from lanebook.base.errors import LanebookError
from lanebook.lane.params import LaneParams, lane_with
from lanebook.recipe.compose import COMPOSE_NAME
from lanebook.recipe.effective.checkout import ENV_NAME, CheckoutFiles
from lanebook.recipe.render import plan_render
from lanebook.twin.nodes import TwinAddresses
from lanebook.twin.remote import CURRENT, REMOTE_NAME, TP4, TP4_SCRIPTS, clone_at, lay_out_remote

SHARD_BYTES = 192 * 1024
FIXED_MTIME = 1785456000  # 2026-07-31T00:00Z: identical on every node, so rsync sees equal trees


@dataclass(frozen=True)
class HubModel:
    """A model repository as the twin's hub serves it: 48 shards, config and index, one revision."""

    repo: str
    shards: int = 48

    @property
    def revision(self) -> str:
        return hashlib.sha1(f"twin-hub:{self.repo}".encode()).hexdigest()

    @property
    def dir_name(self) -> str:
        return "models--" + self.repo.replace("/", "--")

    def shard_name(self, index: int) -> str:
        return f"model-{index:05d}-of-{self.shards:05d}.safetensors"

    def _tensors(self, index: int) -> list[str]:
        layer = index - 1
        names = [f"model.layers.{layer}.attn.wkv.weight", f"model.layers.{layer}.ffn.experts.weight"]
        if index == 1:
            names.insert(0, "model.embed.weight")
        if index == self.shards:
            names.append("lm_head.weight")
        return names

    def shard_bytes(self, index: int) -> bytes:
        """A valid safetensors file: 8-byte header length, JSON header, then the tensors' bytes."""
        names = self._tensors(index)
        size = SHARD_BYTES // len(names)
        header = {"__metadata__": {"format": "pt"}}
        for n, name in enumerate(names):
            header[name] = {"dtype": "U8", "shape": [size], "data_offsets": [n * size, (n + 1) * size]}
        head = json.dumps(header, separators=(",", ":")).encode()
        body = random.Random(f"{self.repo}:{index}").randbytes(size * len(names))
        return struct.pack("<Q", len(head)) + head + body

    def files(self) -> list[tuple[str, bytes]]:
        """Snapshot file name → content, shards first."""
        shards = [(self.shard_name(i), self.shard_bytes(i)) for i in range(1, self.shards + 1)]
        weight_map = {t: self.shard_name(i) for i in range(1, self.shards + 1) for t in self._tensors(i)}
        index = {"metadata": {"total_size": sum(len(data) for _, data in shards)}, "weight_map": weight_map}
        config = {
            "architectures": ["DeepseekV4ForCausalLM"],
            "model_type": "deepseek_v4",
            "_name_or_path": self.repo,
            "num_hidden_layers": self.shards - 1,
            "dspark_block_size": 5,
            "max_position_embeddings": 1048576,
        }
        return shards + [
            ("config.json", json.dumps(config, indent=2).encode()),
            ("model.safetensors.index.json", json.dumps(index, indent=2).encode()),
        ]


def blob_name(name: str, data: bytes) -> str:
    """The hub's blob name: sha256 for LFS files (the shards), the git blob sha1 for small text files."""
    if name.endswith(".safetensors"):
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def hub_root(home: Path) -> Path:
    return home / ".cache" / "huggingface" / "hub"


def write_hub_model(
    hub: Path,
    model: HubModel,
    *,
    missing: Iterable[int] = (),
    incomplete: Iterable[int] = (),
    pace: Optional[Callable[[], None]] = None,
) -> Path:
    """Lay out (or resume) a model tree under hub/; returns the snapshot dir.

    Each blob is written as <sha>.incomplete and renamed when whole, so an interrupted run leaves
    `*.incomplete` files as the hub client does; shards in `incomplete` are left that way on purpose
    and shards in `missing` are not written at all.
    """
    missing, incomplete = set(missing), set(incomplete)
    repo_dir = hub / model.dir_name
    blobs, snapshot = repo_dir / "blobs", repo_dir / "snapshots" / model.revision
    blobs.mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for number, (name, data) in enumerate(model.files(), start=1):
        if number in missing:
            continue
        blob = blobs / blob_name(name, data)
        if not (blob.is_file() and blob.stat().st_size == len(data)):
            partial = blob.with_name(blob.name + ".incomplete")
            with open(partial, "wb") as handle:
                handle.write(data[: len(data) // 2])
                if number in incomplete:
                    continue
                handle.flush()
                if pace:
                    pace()  # the download's pace: an interruption here leaves the .incomplete file
                handle.write(data[len(data) // 2 :])
            os.utime(partial, (FIXED_MTIME, FIXED_MTIME))
            os.replace(partial, blob)
        link = snapshot / name
        if not link.is_symlink():
            link.symlink_to(f"../../blobs/{blob.name}")
        os.utime(link, (FIXED_MTIME, FIXED_MTIME), follow_symlinks=False)
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(model.revision)
    for path in (repo_dir / "refs" / "main", repo_dir / "refs", snapshot, repo_dir / "snapshots", blobs, repo_dir):
        os.utime(path, (FIXED_MTIME, FIXED_MTIME))
    return snapshot


def twin_env(params: LaneParams, addresses: TwinAddresses) -> dict[str, str]:
    """The lane's env-file values with the twin's node addresses in place of the real lane's: a node the twin has by
    its alias (a twin lane's own), else the default pair's by role (a real two-node lane laid out on the twin)."""
    known = dict(addresses.nodes)
    real_to_twin = {}
    for node in params.nodes:
        twin_ip = known.get(node.alias) or (addresses.head_ip if node.role == "head" else addresses.worker_ip)
        real_to_twin[node.host] = real_to_twin[node.roce_ip] = twin_ip
    env = {key: real_to_twin.get(str(value), str(value)) for key, value in params.env.items()}
    env.setdefault("VLLM_HOST", addresses.head_ip)
    env.setdefault("VLLM_PORT", str(addresses.api_port))
    env.setdefault("MASTER_PORT", str(addresses.master_port))
    return env


_RENDERED: dict[tuple[str, tuple, str, str], tuple[str, str]] = {}


def _rendered(params: LaneParams, addresses: TwinAddresses, checkout: Path, shape: str) -> tuple[str, str]:
    """The compose and env texts `env render` makes of CHECKOUT (the recipe's files at SHAPE, just cloned) for a lane
    with twin addresses: the same on every node and in every twin of this process, so rendered once (a render asks
    Compose several times: about 3 s of CPU for a twin's checkouts)."""
    env = twin_env(params, addresses)
    key = (params.model_dump_json(), tuple(env.items()), checkout.name, shape)
    if key not in _RENDERED:
        plan = plan_render(lane_with(params, env=env), CheckoutFiles.read(checkout))
        if plan.unresolved:
            raise LanebookError(
                f"twin checkout of lane {params.name} cannot run its lane: "
                + "; ".join(m.message() for m in plan.unresolved)
            )
        _RENDERED[key] = (plan.compose, plan.env)
    return _RENDERED[key]


def recipe_remote(root: Path) -> tuple[Path, dict[str, str]]:
    """The twin's recipe remote under ROOT (laid out when absent) and its shas by shape (lanebook.twin.remote)."""
    remote, listed = root / REMOTE_NAME, root / "shapes"
    if not (remote.is_dir() and listed.is_file()):
        remote, shas = lay_out_remote(root)
        listed.write_text("".join(f"{name} {sha}\n" for name, sha in shas.items()))
    return remote, dict(line.split(" ", 1) for line in listed.read_text().splitlines())


def recipe_template(root: Path, shape: str) -> Path:
    """A clone of the recipe remote under ROOT at SHAPE's commit, made once: every checkout at SHAPE copies it, so
    each is the same bytes (index and all)."""
    template = root / "clones" / shape
    if not template.is_dir():
        remote, shas = recipe_remote(root)
        if shape not in shas:
            raise LanebookError(f"the twin's recipe remote has no shape {shape} (it has {', '.join(shas)})")
        clone_at(remote, shas[shape], template)
    return template


def shape_of(params: LaneParams) -> str:
    """The recipe shape a lane's checkout is laid out at: the four-node launcher's commit for a lane started by it (its
    `launcher.start`), else the current one."""
    return TP4 if Path(params.launcher.start).name in TP4_SCRIPTS else CURRENT


def write_checkout(
    home: Path, params: LaneParams, addresses: TwinAddresses, shape: Optional[str] = None, recipe: Optional[Path] = None
) -> Path:
    """A lane checkout as an operator leaves it: a clone of the recipe's repository (the twin's remote under RECIPE,
    by default beside HOME) at SHAPE's commit (shape_of the lane by default), its example copied to .env.dspark, then
    the lane rendered into it (twin addresses in place of the real ones) exactly as `lanebook env render` would, so the
    twin boots with what a real node would get. A checkout already there is replaced."""
    checkout = home / params.checkout.removeprefix("~/")
    shutil.rmtree(checkout, ignore_errors=True)
    checkout.parent.mkdir(parents=True, exist_ok=True)
    shape = shape or shape_of(params)
    shutil.copytree(recipe_template(recipe or home.parent / "recipe", shape), checkout, symlinks=True)
    compose, env = _rendered(params, addresses, checkout, shape)
    (checkout / COMPOSE_NAME).write_text(compose)
    (checkout / ENV_NAME).write_text(env)
    for path in [*checkout.rglob("*"), checkout]:
        os.utime(path, (FIXED_MTIME, FIXED_MTIME), follow_symlinks=False)
    return checkout
