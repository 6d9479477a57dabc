"""The launcher's own overrides: variables the start script computes and exports, whatever the env file says; and
what it exports to the worker's Compose over SSH (NODE_RANK=1 HEADLESS=1 and the values its worker line passes)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional

from lanebook.base.errors import LanebookError
from lanebook.recipe.compose import COMPOSE_NAME
from lanebook.recipe.effective.checkout import CheckoutFiles, Location, TextFile
from lanebook.recipe.envfile import interpolate


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


# --- the worker's compose: what the launcher passes over SSH ------------------------------------------

WORKER_RANK = {"NODE_RANK": "1", "HEADLESS": "1"}  # what a launcher whose worker line cannot be read still sets
# The worker's `up -d`: remote_compose "NODE_RANK=1 HEADLESS=1 HF_CACHE='$WORKER_HF_CACHE' ... docker compose ... up -d"
_WORKER_UP_RE = re.compile(
    r'remote_compose\s+"((?:[A-Z_][A-Z0-9_]*=\S*\s+)+)docker compose\b[^"\n]*-f '
    + re.escape(COMPOSE_NAME)
    + r'[^"\n]*\bup -d\b'
)
_ASSIGNED_RE = re.compile(r"\b([A-Z_][A-Z0-9_]*)=(?:'([^']*)'|(\S*))")
# remote_compose's body prefixes every worker command with $(remote_nccl_env): printf "KEY='%s' ..." "$VALUE" ...
_NCCL_BODY_RE = re.compile(r"^remote_nccl_env\(\)\s*\{\n(.*?)^\}", re.S | re.M)
_CALLS_NCCL_RE = re.compile(r"^remote_compose\(\)\s*\{[^}]*\$\(remote_nccl_env\)", re.M)
# A top-level assignment the launcher makes from parameter expansions only: WORKER_HF_CACHE="${WORKER_HF_CACHE:-...}".
_TOP_ASSIGN_RE = re.compile(r'^([A-Z_][A-Z0-9_]*)="([^"`]*)"[ \t]*$', re.M)


def _nccl_exports(text: str) -> dict[str, str]:
    """KEY → the shell word remote_nccl_env prints for it (its printf format's KEY='%s' paired with its arguments)."""
    body = _NCCL_BODY_RE.search(text)
    if not body or not _CALLS_NCCL_RE.search(text):
        return {}
    printf = re.search(r'printf\s+"([^"]*)"(.*)', body.group(1), re.S)
    if not printf:
        return {}
    keys = re.findall(r"([A-Z_][A-Z0-9_]*)='%s'", printf.group(1))
    words = re.findall(r'"([^"]*)"', printf.group(2))
    return dict(zip(keys, words)) if len(keys) == len(words) else {}


def worker_words(files: CheckoutFiles) -> dict[str, str]:
    """What the launcher exports to the worker's `docker compose up -d`, as the shell words it writes (evaluated on
    the head): remote_nccl_env's pairs, then the assignments of the worker's up line (a later one wins)."""
    text = "\n".join(f.text for f in files.launcher_files)
    line = _WORKER_UP_RE.search(text)
    if not line:
        return dict(WORKER_RANK)
    assigned = {key: quoted if quoted or bare is None else bare for key, quoted, bare in _ASSIGNED_RE.findall(line[1])}
    return {**_nccl_exports(text), **assigned}


def launcher_values(files: CheckoutFiles, variables: Mapping[str, str]) -> dict[str, str]:
    """The launcher's variables: VARIABLES (the env file as it sources it, with its overrides), then each top-level
    assignment it makes from parameter expansions only, in order (command substitutions and arithmetic are not run,
    nor the overrides' keys, which VARIABLES already decides)."""
    values = dict(variables)
    decided = {o.key for o in RECIPE_OVERRIDES}
    for file in files.launcher_files:
        for name, value in _TOP_ASSIGN_RE.findall(file.text):
            if name in decided or "$(" in value:
                continue
            value = _expanded(value, values)
            if value is not None:
                values[name] = value
    return values


def worker_exports(files: CheckoutFiles, variables: Mapping[str, str]) -> dict[str, str]:
    """The environment the launcher gives the worker's Compose (worker_words evaluated with launcher_values)."""
    values = launcher_values(files, variables)
    return {key: _expanded(word, values) or "" for key, word in worker_words(files).items()}


def _expanded(word: str, values: Mapping[str, str]) -> Optional[str]:
    """WORD's parameter expansions with VALUES; None where lanebook's reading cannot follow the shell (a ${X:?}
    that stops the launcher, expansions nested deeper than it reads)."""
    try:
        text = interpolate(word, values)
    except LanebookError:
        return None
    return None if "${" in text else text
