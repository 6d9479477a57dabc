"""`hf download` on a twin node: the twin's hub writes the model tree into the node's HF cache.

The hub knows the shipped lanes' weight repositories (one revision each); it refuses others as the
real hub answers an unknown repository or revision, honours HF_HUB_OFFLINE as the client does, and
writes each blob as *.incomplete first, so an interrupted download leaves what the real one leaves.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from lanebook.twin.standins.base import fail, take

OFFLINE_MISS = (
    "Cannot find an appropriate cached snapshot folder for the specified revision on the local disk and "
    "outgoing traffic has been disabled. To enable repo look-ups and downloads online, set "
    "'HF_HUB_OFFLINE=0' as environment variable."
)


def hub_models() -> dict:
    """repo -> HubModel for every shipped lane's weights."""
    from lanebook.lane.params import lane_names, load_lane
    from lanebook.twin.tree import HubModel

    models = {}
    for name in lane_names():
        weights = load_lane(name).weights
        models[weights.repo] = HubModel(weights.repo, weights.shards)
    return models


def hub_dir(environ: Mapping[str, str], cache_dir: str | None = None) -> Path:
    """Where the client keeps the hub cache: --cache-dir, HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub."""
    if cache_dir:
        return Path(cache_dir)
    if environ.get("HF_HUB_CACHE"):
        return Path(environ["HF_HUB_CACHE"])
    home = Path(environ.get("HOME", "~")).expanduser()
    return Path(environ.get("HF_HOME") or home / ".cache" / "huggingface") / "hub"


def truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def hf(args: list[str]) -> int:
    """`hf download REPO [--revision R] [--max-workers N] [--cache-dir D]`."""
    from lanebook.twin.tree import write_hub_model

    if args[:1] != ["download"]:
        return fail("the twin's hf stand-in implements `hf download REPO` only", 2)
    rest = args[1:]
    revision = take(rest, "--revision")
    cache_dir = take(rest, "--cache-dir")
    take(rest, "--max-workers", "--token", "--repo-type", "--include", "--exclude", many=True)
    quiet = take(rest, "--quiet", flag=True)
    if len(rest) != 1:
        return fail("usage: hf download REPO_ID [--revision R] [--max-workers N] [--cache-dir DIR]", 2)
    repo = rest[0]
    hub = hub_dir(os.environ, cache_dir)
    model = hub_models().get(repo)
    snapshot = (
        hub
        / (model.dir_name if model else "models--" + repo.replace("/", "--"))
        / "snapshots"
        / (model.revision if model else "")
    )
    if truthy(os.environ.get("HF_HUB_OFFLINE")):
        if model and all((snapshot / name).exists() for name, _ in model.files()):
            print(snapshot)
            return 0
        return fail(OFFLINE_MISS)
    if model is None:
        return fail(f"Repository Not Found for url: https://huggingface.co/api/models/{repo}/revision/main.")
    if revision not in (None, "main", model.revision):
        return fail(f"Revision Not Found for url: https://huggingface.co/api/models/{repo}/revision/{revision}.")
    total = len(model.files())
    written = [0]

    def progress() -> None:
        written[0] += 1
        if not quiet and (written[0] % 8 == 0 or written[0] == total):
            print(f"Fetching {total} files: {written[0]}/{total}", file=sys.stderr, flush=True)
        time.sleep(0.02)  # the twin hub's pace: an interrupted download leaves *.incomplete behind

    write_hub_model(hub, model, pace=progress)
    print(snapshot)
    return 0
