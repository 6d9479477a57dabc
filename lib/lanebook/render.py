"""`lanebook env render`: make a checkout run its lane — write .env.dspark and patch the compose file.

The env file gets the keys the checkout's launcher actually reads: each lane value whose effective
value (lanebook.effective: env file, launcher overrides, Compose, the image's script) differs is
written, to the key that decides it. On the recipe's current launcher GPU_MEMORY_UTILIZATION is
exported from the profile key, so the lane's 0.85 is written as GPU_MEMORY_UTILIZATION_TEXT (or
_VISION with ENABLE_VL_SIDECAR=1), and a lane model as DSPARK_MODEL_OFFICIAL; a line the launcher
overwrites is never written. What already runs the lane's value is left alone, so nothing is weakened:
a digest-pinned image stays pinned when the lane names its tag, and values the checkout derives (the
model from ABLITERATED, TP_SOCKET_IFNAME from NCCL_SOCKET_IFNAME in compose) keep being derived. Keys
the lane wants passed by compose (compose_environment) are always set in the env file itself.

With no env file yet, render starts from the checkout's example (.env.dspark.example; env.dspark.example
in the fixture copy), as the recipe tells operators: copy the example, then edit; so every variable
the launcher requires is set.

The compose patch is the two lines the recipe's current write-up asks for: the environment: injection of
VLLM_USE_BREAKABLE_CUDAGRAPH (every key of the lane's compose_environment) and the SPECULATIVE_CONFIG
line of the command, rewritten whole from the lane. That form writes the draft sample method literally
(`\\"draft_sample_method\\":\\"probabilistic\\"`), not the upstream `$${DRAFT_SAMPLE_METHOD}` indirection:
the lane file is the one source, so a stray DRAFT_SAMPLE_METHOD in an env file cannot change what the
lane runs. A lane without a schedule gets the rollback form (fixed K, no num_speculative_tokens_per_batch_size).

Each changed file is backed up first as NAME.bak-UTCSTAMP and replaced atomically; an unchanged file
is not touched, so a second run changes nothing and leaves no backup.
"""
from __future__ import annotations

import difflib
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .compose import COMPOSE_NAME, ComposeFile
from .effective import (ENV_NAME, CheckoutFiles, Effective, Mismatch, TextFile, env_text, lane_mismatches,
                        same_value)
from .envfile import parse_env_text
from .errors import LanebookError
from .files import backup, utc_stamp, write_atomic
from .params import LaneParams
from .redact import redact

__all__ = ["ENV_NAME", "RenderPlan", "RenderResult", "plan_render", "render_checkout", "speculative_config_line"]

ADDED_HEADER = "# --- added by `lanebook env render`"
_WORD_RE = re.compile(r"^[a-z_]+$")


def speculative_config_line(lane: LaneParams) -> str:
    """The SPECULATIVE_CONFIG assignment exactly as the recipe's write-up gives it ($$ stays doubled for Compose)."""
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
    """The environment: entries the lane injects, defaulting to the lane's own value (the recipe's ${KEY:-0})."""
    return {key: f"${{{key}:-{env_text(lane.env[key]) if key in lane.env else ''}}}" for key in lane.compose_environment}


def patch_compose(lane: LaneParams, compose: ComposeFile) -> str:
    return compose.patched(compose_environment(lane), speculative_config_line(lane))


# --- the env file -----------------------------------------------------------------------------------

def _reassign(raw: str, value: str) -> str:
    """An env line with a new value, keeping `export`, spacing before '=' and an unquoted trailing comment."""
    prefix, _, rest = raw.partition("=")
    comment = re.search(r"""\s+#[^"']*$""", rest)
    return f"{prefix}={shlex.quote(value)}" + (comment.group(0) if comment else "")


def apply_env(text: Optional[str], writes: dict[str, str], lane: LaneParams) -> str:
    """TEXT with each key of WRITES set: every line assigning it changed in place, missing keys appended under
    a header (a new file when TEXT is None)."""
    if text is None:
        lines = [f"# .env.dspark for lane {lane.name}, written by `lanebook env render` from its lane file",
                 f"# {lane.description}"]
        return "\n".join(lines + [f"{k}={shlex.quote(v)}" for k, v in writes.items()]) + "\n"
    lines = text.splitlines()
    entries = parse_env_text(text)
    missing = []
    for key, value in writes.items():
        found = [e for e in entries if e.key == key]
        for entry in found:
            if entry.value != value:
                lines[entry.line - 1] = _reassign(entry.raw, value)
        if not found:
            missing.append(f"{key}={shlex.quote(value)}")
    if missing:
        if not any(line.startswith(ADDED_HEADER) for line in lines):
            lines += ["", f"{ADDED_HEADER}: lane keys this file did not set ---"]
        lines += missing
    return "\n".join(lines) + "\n"


def target_key(key: str, eff: Effective) -> str:
    """The env key that decides a lane key: the source the launcher exports it from, else the key itself."""
    for override in eff.launcher.overrides:
        if override.key == key:
            switch = eff.variable(override.switch)
            return override.choice(switch.value if switch else None).source
    return key


def _needs(lane: LaneParams, key: str, eff: Effective) -> bool:
    want = env_text(lane.env[key])
    if not same_value(key, want, eff.setting(key).value):
        return True
    own = eff.variable(key)  # a key compose must pass is also set in the env file itself
    return key in lane.compose_environment and (own is None or not same_value(key, want, own.value))


@dataclass
class RenderPlan:
    """What render would write, computed without writing: the new texts and what still does not run the lane."""

    compose: str
    env: str
    started_from: Optional[TextFile]  # the example the env file is copied from (None: the file existed, or nothing)
    carries: dict[str, str]  # env key written → the lane key whose value it carries
    unresolved: list[Mismatch]  # lane values that still do not run after the render (render cannot fix them)
    effective: Effective  # the checkout as rendered


def plan_render(lane: LaneParams, files: CheckoutFiles) -> RenderPlan:
    """The compose patch and the env file that make FILES run LANE (see the module docstring)."""
    compose_text = patch_compose(lane, ComposeFile(files.compose.text, files.compose.name))
    env_name = files.env.name if files.env else files.compose.name[:files.compose.name.rfind("/") + 1] + ENV_NAME
    patched = files.replace(compose=TextFile(files.compose.name, compose_text))
    started_from = None if files.env else files.example
    base = files.env.text if files.env else (files.example.text if files.example else None)
    writes: dict[str, str] = {}
    carries: dict[str, str] = {}

    def rendered() -> Effective:
        text = apply_env(base, writes, lane) if (base is not None or writes) else None
        return Effective(patched.replace(env=None if text is None else TextFile(env_name, text)))

    def write(key: str, eff: Effective) -> None:
        target = target_key(key, eff)
        writes[target], carries[target] = env_text(lane.env[key]), key

    eff = rendered()
    if base is None:  # nothing to start from: every lane key, each to the key that decides it
        for key in lane.env:
            write(key, eff)
        eff = rendered()
    # First the keys whose deciding line exists (a value derived from them may then come right by itself),
    # then, one at a time, whatever still differs.
    lines = {e.key for e in eff.entries}
    for key in [k for k in lane.env if _needs(lane, k, eff) and target_key(k, eff) in lines]:
        write(key, eff)
    eff = rendered()
    for key in lane.env:
        if _needs(lane, key, eff):
            write(key, eff)
            eff = rendered()
    text = eff.env_file.text if eff.env_file else ""
    return RenderPlan(compose_text, text, started_from, carries, lane_mismatches(lane, eff), eff)


# --- writing ---------------------------------------------------------------------------------------

@dataclass
class RenderResult:
    diff: str  # unified diff of every change (secrets redacted), '' when nothing changed
    changed: list[Path] = field(default_factory=list)
    backups: list[Path] = field(default_factory=list)
    started_from: Optional[str] = None  # the example the new env file was copied from
    unresolved: list[Mismatch] = field(default_factory=list)


def render_checkout(lane: LaneParams, checkout_dir: str | Path) -> RenderResult:
    """Write the lane's .env.dspark and patch the compose file in a checkout; both are computed before either is written."""
    files = CheckoutFiles.read(checkout_dir)
    checkout = files.directory
    plan = plan_render(lane, files)
    stamp = utc_stamp()
    result = RenderResult(diff="", started_from=plan.started_from.name if plan.started_from else None,
                          unresolved=plan.unresolved)
    compose_path, env_path = checkout / COMPOSE_NAME, checkout / ENV_NAME
    old_env = files.env.text if files.env else None
    before = files.example.text if plan.started_from else old_env  # a copied example diffs against the example
    source = f"a/{Path(plan.started_from.name).name}" if plan.started_from else f"a/{ENV_NAME}"
    for path, old, shown_old, new, fromfile in (
            (env_path, old_env, before, plan.env, source if before is not None else "/dev/null"),
            (compose_path, files.compose.text, files.compose.text, plan.compose, f"a/{COMPOSE_NAME}")):
        if old == new:
            continue
        result.diff += redact("".join(difflib.unified_diff(  # printed: no secrets
            (shown_old or "").splitlines(keepends=True), new.splitlines(keepends=True), fromfile=fromfile,
            tofile=f"b/{path.name}")))
        if old is not None:
            result.backups.append(backup(path, stamp))
        write_atomic(path, new, mode=None if path.exists() else 0o600)  # a new env file may hold keys
        result.changed.append(path)
    return result
