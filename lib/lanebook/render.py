"""`lanebook env render`: write a lane's .env.dspark into a checkout and patch its compose file.

The compose patch is the two lines seed 000 asks for: the environment: injection of
VLLM_USE_BREAKABLE_CUDAGRAPH (every key of the lane's compose_environment) and the SPECULATIVE_CONFIG
line of the command, rewritten whole from the lane in the seed's form. The seed form writes the
draft sample method literally (`\\"draft_sample_method\\":\\"probabilistic\\"`), not the newer
`$${DRAFT_SAMPLE_METHOD}` indirection of the upstream compose: the lane file is the one source, so a
stray DRAFT_SAMPLE_METHOD in an env file cannot change what the lane runs. A lane without a schedule
gets the seed's rollback form (fixed K, no num_speculative_tokens_per_batch_size).

Each changed file is backed up first as NAME.bak-UTCSTAMP and replaced atomically; an unchanged file
is not touched, so a second run changes nothing and leaves no backup.
"""
from __future__ import annotations

import difflib
import re
import shlex
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from .compose import COMPOSE_NAME, ComposeFile, load_compose
from .envfile import parse_env_text
from .errors import LanebookError
from .files import backup, write_atomic
from .params import EnvValue, LaneParams
from .redact import redact

ENV_NAME = ".env.dspark"
ADDED_HEADER = "# --- added by `lanebook env render`"
_WORD_RE = re.compile(r"^[a-z_]+$")


@dataclass
class RenderResult:
    diff: str  # unified diff of every change, '' when nothing changed
    changed: list[Path] = field(default_factory=list)
    backups: list[Path] = field(default_factory=list)


def env_text(value: EnvValue) -> str:
    """A lane env value as the env file holds it (and as Compose reads it back)."""
    text = str(value)
    if "\n" in text:
        raise LanebookError(f"env value {text!r} spans lines; an env file cannot hold it")
    return text


def speculative_config_line(lane: LaneParams) -> str:
    """The SPECULATIVE_CONFIG assignment exactly as seed 000 writes it ($$ stays doubled for Compose)."""
    spec = lane.speculative
    for name, value in (("method", spec.method), ("draft_sample_method", spec.draft_sample_method)):
        if not _WORD_RE.match(value):
            raise LanebookError(f"lane {lane.name}: speculative.{name} {value!r} is not a plain lowercase word")
    fields = [f'\\"method\\":\\"{spec.method}\\"',
              f'\\"num_speculative_tokens\\":$${{MTP_NUM_TOKENS:-{lane.num_speculative_tokens}}}',
              f'\\"draft_sample_method\\":\\"{spec.draft_sample_method}\\"']
    if spec.schedule is not None:
        fields.append(f'\\"num_speculative_tokens_per_batch_size\\":{spec.schedule_json()}')
    return 'SPECULATIVE_CONFIG="{' + ",".join(fields) + '}";'


def compose_environment(lane: LaneParams) -> dict[str, str]:
    """The environment: entries the lane injects, defaulting to the lane's own value (seed: ${KEY:-0})."""
    return {key: f"${{{key}:-{env_text(lane.env[key]) if key in lane.env else ''}}}" for key in lane.compose_environment}


def patch_compose(lane: LaneParams, compose: ComposeFile) -> str:
    return compose.patched(compose_environment(lane), speculative_config_line(lane))


def _reassign(raw: str, value: str) -> str:
    """An env line with a new value, keeping `export`, spacing before '=' and an unquoted trailing comment."""
    prefix, _, rest = raw.partition("=")
    comment = re.search(r"""\s+#[^"']*$""", rest)
    return f"{prefix}={shlex.quote(value)}" + (comment.group(0) if comment else "")


def render_env_text(lane: LaneParams, existing: Optional[str]) -> str:
    """The checkout's env file with the lane's keys: changed in place, missing ones appended under a header."""
    if existing is None:
        lines = [f"# .env.dspark for lane {lane.name}, written by `lanebook env render` from its lane file",
                 f"# {lane.description}"]
        return "\n".join(lines + [f"{k}={shlex.quote(env_text(v))}" for k, v in lane.env.items()]) + "\n"
    lines = existing.splitlines()
    entries = parse_env_text(existing)
    missing = []
    for key, value in lane.env.items():
        want = env_text(value)
        found = [e for e in entries if e.key == key]
        for entry in found:
            if entry.value != want:
                lines[entry.line - 1] = _reassign(entry.raw, want)
        if not found:
            missing.append(f"{key}={shlex.quote(want)}")
    if missing:
        if not any(line.startswith(ADDED_HEADER) for line in lines):
            lines += ["", f"{ADDED_HEADER}: lane keys this file did not set ---"]
        lines += missing
    return "\n".join(lines) + "\n"


def render_checkout(lane: LaneParams, checkout_dir: str | Path) -> RenderResult:
    """Write the lane's .env.dspark and patch the compose file in a checkout; both are computed before either is written."""
    checkout = Path(checkout_dir).expanduser()
    if not checkout.is_dir():
        raise LanebookError(f"checkout directory not found: {checkout}")
    compose_path, env_path = checkout / COMPOSE_NAME, checkout / ENV_NAME
    compose = load_compose(compose_path)
    old_env = env_path.read_text() if env_path.exists() else None
    plan = [(env_path, old_env, render_env_text(lane, old_env)),
            (compose_path, compose.text, patch_compose(lane, compose))]
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    result = RenderResult(diff="")
    for path, old, new in plan:
        if old == new:
            continue
        result.diff += redact("".join(difflib.unified_diff(
            (old or "").splitlines(keepends=True), new.splitlines(keepends=True),
            fromfile=f"a/{path.name}" if old is not None else "/dev/null", tofile=f"b/{path.name}")))  # printed: no secrets
        if old is not None:
            result.backups.append(backup(path, stamp))
        write_atomic(path, new, mode=None if path.exists() else 0o600)  # a new env file may hold keys
        result.changed.append(path)
    return result
