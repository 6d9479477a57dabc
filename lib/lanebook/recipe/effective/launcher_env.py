"""The launcher's own overrides: variables the start script computes and exports, whatever the env file says."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from lanebook.recipe.effective.checkout import CheckoutFiles, Location, TextFile


@dataclass(frozen=True)
class Choice:
    """A key the launcher reads and its default: ${SOURCE:-DEFAULT}, or ${SOURCE-DEFAULT} when an empty value counts."""

    source: str
    default: str
    empty_counts: bool = False


@dataclass(frozen=True)
class Override:
    """A variable the launcher computes and exports, whatever line of the env file sets it."""

    key: str
    switch: str  # the key choosing between the two sources ("1" selects `on`)
    on: Choice
    off: Choice
    marker: str  # a key whose mention in the start script (or env file) shows the launcher makes this override

    def choice(self, switch_value: Optional[str]) -> Choice:
        return self.on if switch_value == "1" else self.off


# The recipe's current start script, as data (its defaults are the ones the example env file documents).
RECIPE_OVERRIDES = (
    Override(
        "GPU_MEMORY_UTILIZATION",
        "ENABLE_VL_SIDECAR",
        Choice("GPU_MEMORY_UTILIZATION_VISION", "0.80"),
        Choice("GPU_MEMORY_UTILIZATION_TEXT", "0.835"),
        marker="GPU_MEMORY_UTILIZATION_TEXT",
    ),
    Override(
        "DSPARK_MODEL",
        "ABLITERATED",
        Choice("DSPARK_MODEL_ABLITERATED", "drowzeys/keys-DeepSeekV4-Flash-GA-0731-Dspark-Abliterated-32-32"),
        Choice("DSPARK_MODEL_OFFICIAL", "deepseek-ai/DeepSeek-V4-Flash-0731"),
        marker="DSPARK_MODEL_OFFICIAL",
    ),
    # The official checkpoint is pinned to the tested revision unless DSPARK_REVISION is set (empty: the tip).
    Override(
        "DSPARK_REVISION",
        "ABLITERATED",
        Choice("DSPARK_REVISION_ABLITERATED", ""),
        Choice("DSPARK_REVISION", "9e165c30e2704aec5d9d593cce3eebd58bbef1cb", empty_counts=True),
        marker="DSPARK_REVISION_ABLITERATED",
    ),
)
HEAD_RANK = {"NODE_RANK": "0", "HEADLESS": ""}  # what the launcher sets for the head's compose up


@dataclass(frozen=True)
class LauncherOverrides:
    """The overrides a checkout's launcher makes, and the files that show it."""

    overrides: tuple[Override, ...]
    seen_in: tuple[TextFile, ...]  # the start script and what it sources, else the env file and example

    def mention(self, key: str) -> Location:
        """The first line naming KEY in the files the shape was read from (where a launcher default is located)."""
        for file in self.seen_in:
            for number, text in enumerate(file.text.splitlines(), start=1):
                if re.search(rf"\b{key}\b", text):
                    return file.at(number)
        return self.seen_in[0].at(0) if self.seen_in else Location("the launcher", 0)


def launcher_overrides(files: CheckoutFiles) -> LauncherOverrides:
    """Read from the start script (and what it sources) when the checkout has one, else from its env file and
    example."""
    sources = tuple(files.launcher_files or [f for f in (files.env, files.example) if f])
    active = tuple(o for o in RECIPE_OVERRIDES if any(re.search(rf"\b{o.marker}\b", f.text) for f in sources))
    return LauncherOverrides(active, sources)
