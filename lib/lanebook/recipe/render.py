"""`lanebook env render`: make a checkout run its lane — write .env.dspark and patch the compose file.

The env file gets each lane value the checkout does not already run, under the key its launcher reads for it
(lanebook.recipe.effective); what already runs the lane's value is left alone. With no env file yet, render starts
from the checkout's example. The compose patch rewrites the lane's `environment:` keys and its SPECULATIVE_CONFIG line
(and `--kv-cache-dtype` where it differs). A keyed lane's keys come from lanebook.lane.keys, shown redacted, in a file
of mode 0600. `plan_render` is the one renderer and writes nothing; `render_checkout` backs each changed file up and
replaces it atomically, so a second run changes nothing.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from lanebook.base.errors import LanebookError
from lanebook.base.files import backup, utc_stamp, write_atomic
from lanebook.base.redact import redact
from lanebook.lane.keys import LaneKeys
from lanebook.lane.params import KEY_VARIABLES, LaneParams
from lanebook.recipe.compose import COMPOSE_NAME, ComposeFile
from lanebook.recipe.effective.checkout import ENV_NAME, CheckoutFiles, TextFile
from lanebook.recipe.effective.config import Effective
from lanebook.recipe.effective.mismatches import KV_DTYPE_FLAG, Mismatch, env_text, lane_mismatches, same_value
from lanebook.recipe.envfile import parse_env_text

__all__ = [
    "ENV_NAME",
    "Backup",
    "RenderPlan",
    "RenderResult",
    "diff_text",
    "plan_render",
    "render_checkout",
    "sha256",
    "speculative_config_line",
]

ADDED_HEADER = "# --- added by `lanebook env render`"
_WORD_RE = re.compile(r"^[a-z_]+$")


def speculative_config_line(params: LaneParams) -> str:
    """The SPECULATIVE_CONFIG assignment exactly as the recipe's write-up gives it ($$ stays doubled for Compose)."""
    spec = params.speculative
    for name, value in (("method", spec.method), ("draft_sample_method", spec.draft_sample_method)):
        if not _WORD_RE.match(value):
            raise LanebookError(f"lane {params.name}: speculative.{name} {value!r} is not a plain lowercase word")
    fields = [
        f'\\"method\\":\\"{spec.method}\\"',
        f'\\"num_speculative_tokens\\":$${{MTP_NUM_TOKENS:-{params.num_speculative_tokens}}}',
        f'\\"draft_sample_method\\":\\"{spec.draft_sample_method}\\"',
    ]
    if spec.schedule is not None:
        fields.append(f'\\"num_speculative_tokens_per_batch_size\\":{spec.schedule_json()}')
    return 'SPECULATIVE_CONFIG="{' + ",".join(fields) + '}";'


def compose_environment(params: LaneParams) -> dict[str, str]:
    """The environment: entries the lane injects, defaulting to the lane's own value (the recipe's ${KEY:-0})."""
    return {
        key: f"${{{key}:-{env_text(params.env[key]) if key in params.env else ''}}}"
        for key in params.compose_environment
    }


def serve_flags(params: LaneParams) -> dict[str, str]:
    """The `vllm serve` flags the recipe's compose command writes literally that the lane sets: its KV cache dtype."""
    return {} if params.kv_cache_dtype is None else {KV_DTYPE_FLAG: params.kv_cache_dtype}


def patch_compose(params: LaneParams, compose: ComposeFile) -> str:
    return compose.patched(compose_environment(params), speculative_config_line(params), serve_flags(params))


# --- the env file -----------------------------------------------------------------------------------


def _reassign(raw: str, value: str) -> str:
    """An env line with a new value, keeping `export`, spacing before '=' and an unquoted trailing comment."""
    prefix, _, rest = raw.partition("=")
    comment = re.search(r"""\s+#[^"']*$""", rest)
    return f"{prefix}={shlex.quote(value)}" + (comment.group(0) if comment else "")


def apply_env(text: Optional[str], writes: dict[str, str], params: LaneParams) -> str:
    """TEXT with each key of WRITES set: every line assigning it changed in place, missing keys appended under
    a header (a new file when TEXT is None)."""
    if text is None:
        lines = [
            f"# .env.dspark for lane {params.name}, written by `lanebook env render` from its lane file",
            f"# {params.description}",
        ]
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
    for override in eff.launcher_overrides.overrides:
        if override.key == key:
            switch = eff.variable(override.switch)
            return override.choice(switch.value if switch else None).source
    return key


def _needs(params: LaneParams, key: str, eff: Effective) -> bool:
    want = env_text(params.env[key])
    if not same_value(key, want, eff.setting(key).value):
        return True
    own = eff.variable(key)  # a key compose must pass is also set in the env file itself
    return key in params.compose_environment and (own is None or not same_value(key, want, own.value))


@dataclass
class RenderPlan:
    """What render would write, computed without writing: the new texts and what still does not run the lane."""

    compose: str
    env: str
    started_from: Optional[TextFile]  # the example the env file is copied from (None: the file existed, or nothing)
    carries: dict[str, str]  # env key written → the lane key whose value it carries
    unresolved: list[Mismatch]  # lane values that still do not run after the render (render cannot fix them)
    effective: Effective  # the checkout as rendered
    writes: dict[str, str]  # checkout-relative name → new text, for each file the render changes
    diff: str  # unified diff of those changes (secrets redacted), '' when nothing changes


def diff_text(old: Optional[str], new: Optional[str], fromfile: str, tofile: str) -> str:
    """A unified diff with secrets redacted (it is printed and recorded); None is no file (/dev/null)."""
    return redact(
        "".join(
            difflib.unified_diff(
                (old or "").splitlines(keepends=True),
                (new or "").splitlines(keepends=True),
                fromfile=fromfile if old is not None else "/dev/null",
                tofile=tofile if new is not None else "/dev/null",
            )
        )
    )


def key_writes(keys: Optional[LaneKeys], entries: list) -> dict[str, str]:
    """The env lines a keyed lane's keys make: its variable set to them, the other variable emptied where the file
    sets it (nothing for a keyless lane: a key the operator set by hand is theirs)."""
    if keys is None:
        return {}
    other = next(v for v in KEY_VARIABLES if v != keys.variable)
    emptied = {other: ""} if any(e.key == other and e.value for e in entries) else {}
    return {keys.variable: keys.env_value, **emptied}


def plan_render(params: LaneParams, files: CheckoutFiles, keys: Optional[LaneKeys] = None) -> RenderPlan:
    """The compose patch and the env file that make FILES run LANE (see the module docstring); KEYS: a keyed lane's
    keys (lanebook.lane.keys.lane_keys), written to the variable its auth names."""
    compose_text = patch_compose(params, ComposeFile(files.compose.text, files.compose.name))
    env_name = files.env.name if files.env else files.compose.name[: files.compose.name.rfind("/") + 1] + ENV_NAME
    patched = files.replace(compose=TextFile(files.compose.name, compose_text))
    started_from = None if files.env else files.example
    base = files.env.text if files.env else (files.example.text if files.example else None)
    writes: dict[str, str] = {}
    carries: dict[str, str] = {}

    def rendered() -> Effective:
        text = apply_env(base, writes, params) if (base is not None or writes) else None
        return Effective(patched.replace(env=None if text is None else TextFile(env_name, text)))

    def write(key: str, eff: Effective) -> None:
        target = target_key(key, eff)
        writes[target], carries[target] = env_text(params.env[key]), key

    eff = rendered()
    if base is None:  # nothing to start from: every lane key, each to the key that decides it
        for key in params.env:
            write(key, eff)
        eff = rendered()
    for variable, value in key_writes(keys, eff.entries).items():
        writes[variable] = value
    eff = rendered()
    # First the keys whose deciding line exists (a value derived from them may then come right by itself),
    # then, one at a time, whatever still differs.
    lines = {e.key for e in eff.entries}
    for key in [k for k in params.env if _needs(params, k, eff) and target_key(k, eff) in lines]:
        write(key, eff)
    eff = rendered()
    for key in params.env:
        if _needs(params, key, eff):
            write(key, eff)
            eff = rendered()
    text = eff.env_file.text if eff.env_file else ""
    changes: dict[str, str] = {}
    diff = ""
    if compose_text != files.compose.text:
        changes[COMPOSE_NAME] = compose_text
        diff += diff_text(files.compose.text, compose_text, f"a/{COMPOSE_NAME}", f"b/{COMPOSE_NAME}")
    old_env = files.env.text if files.env else None
    if text != old_env:
        changes[ENV_NAME] = text
        shown, fromfile = (
            (started_from.text, f"a/{started_from.name.rsplit('/', 1)[-1]}")
            if started_from
            else (old_env, f"a/{ENV_NAME}")
        )  # a copied example diffs against the example
        diff += diff_text(shown, text, fromfile, f"b/{ENV_NAME}")
    return RenderPlan(compose_text, text, started_from, carries, lane_mismatches(params, eff), eff, changes, diff)


# --- writing ---------------------------------------------------------------------------------------


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Backup:
    """One file a render (or a restore) changed, and how to undo it.

    backup: where its earlier bytes are kept beside it (None: there was no file before);
    sha256_new: what the change left there (None: it left no file), which a restore requires to find."""

    path: str  # a local path, or a path on the head (~ = the node's home)
    backup: Optional[str]
    sha256_backup: Optional[str]
    sha256_new: Optional[str]

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "backup": self.backup,
            "sha256_backup": self.sha256_backup,
            "sha256_new": self.sha256_new,
        }

    @classmethod
    def from_json(cls, data: Any) -> "Backup":
        keys = ("path", "backup", "sha256_backup", "sha256_new")
        if not isinstance(data, Mapping) or set(data) != set(keys) or not isinstance(data["path"], str):
            raise LanebookError(f"not a backup entry of an env run: {data!r}")
        if (data["backup"] is None) != (data["sha256_backup"] is None):
            raise LanebookError(f"backup entry of {data['path']}: a backup path needs its sha256 and none without one")
        return cls(*(data[k] for k in keys))


@dataclass
class RenderResult:
    """What a render, local or on the head, (or a restore) did: its diff (secrets redacted), the files it wrote, a
    Backup of each, the example a new env file was started from, and the lane values it cannot make run."""

    diff: str
    changed: list[str] = field(default_factory=list)  # local paths, or paths on the head
    backups: list[Backup] = field(default_factory=list)
    started_from: Optional[str] = None
    unresolved: list[Mismatch] = field(default_factory=list)
    dry_run: bool = False  # recorded, not sent: nothing was changed or observed
    notice: str = ""  # who decided the effective configuration, when it was not Docker Compose (compose_cli)


def render_checkout(params: LaneParams, checkout_dir: str | Path, keys: Optional[LaneKeys] = None) -> RenderResult:
    """Write the lane's .env.dspark and patch the compose file in a local checkout (the plan is computed before
    anything is written); KEYS: a keyed lane's, read by the caller (lanebook.lane.keys.lane_keys)."""
    files = CheckoutFiles.read(checkout_dir)
    plan = plan_render(params, files, keys)
    result = RenderResult(
        plan.diff,
        started_from=plan.started_from.name if plan.started_from else None,
        unresolved=plan.unresolved,
        notice=plan.effective.notice,
    )
    stamp = utc_stamp()
    for name, text in plan.writes.items():
        path = files.directory / name
        kept = backup(path, stamp) if path.exists() else None
        private = name == ENV_NAME and keys is not None
        write_atomic(path, text, mode=0o600 if private or not kept else None)  # a new env file may hold keys
        result.changed.append(str(path))
        result.backups.append(
            Backup(
                str(path),
                str(kept) if kept else None,
                sha256(kept.read_bytes()) if kept else None,
                sha256(text.encode()),
            )
        )
    return result
