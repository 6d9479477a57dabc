"""`lanebook lane import`: a lane file from the checkout an operator already runs, proven by a round trip.

What the checkout serves is read by the readers lanebook already has (the checkout reader, the env file and
compose readers, the effective configuration with the launcher's overrides and Docker Compose's own answer, the
speculative-config reader), never by a second parser. Each lane value is what `vllm serve` really gets, and the
written file says, beside each value, the file:line it came from.

The import promises that nothing is dropped silently: an env-file line the lane model cannot carry (a secret, a
value that refers to other variables, a line a later line or the launcher overrides, a compose literal that wins
over the env file) is listed with why. The round trip renders the written lane file (`recipe.render`, the one
renderer) into a copy of the same checkout: where a byte of `.env.dspark` or the compose file would change, the
changed lines are listed too, with what the lane writes instead.
"""

from __future__ import annotations

import difflib
import io
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from lanebook.base import yamltext
from lanebook.base.errors import LanebookError, LaneError
from lanebook.base.files import utc_stamp, write_atomic
from lanebook.base.redact import SECRET_KEYS, redact
from lanebook.lane.params import (
    KEY_VARIABLES,
    MODEL_ENV_KEYS,
    LaneParams,
    check_host,
    check_user,
    load_lane,
)
from lanebook.recipe.compose import COMPOSE_NAME
from lanebook.recipe.effective.checkout import ENV_NAME, CheckoutFiles, Location
from lanebook.recipe.effective.config import SERVE_FLAGS, Effective, Setting
from lanebook.recipe.effective.launcher_env import launcher_values
from lanebook.recipe.effective.mismatches import KV_DTYPE_FLAG, lane_mismatches
from lanebook.recipe.envfile import references
from lanebook.recipe.render import render_checkout, speculative_config_line

if TYPE_CHECKING:
    from lanebook.nodes.ssh import Node

# Lane env keys that decide what `vllm serve` gets: each is imported as it runs, even where the env file does not set
# it (a compose default, or the launcher's export from a profile key).
SERVING_KEYS = (*MODEL_ENV_KEYS, "DSPARK_VLLM_IMAGE", "MTP_NUM_TOKENS", *SERVE_FLAGS)
LAUNCHER_KEYS = ("PROJECT_NAME", "WAIT_ATTEMPTS", "WAIT_SECONDS")
RECIPE_LAUNCHER_DEFAULTS = {"PROJECT_NAME": "deepseek-v4-flash", "WAIT_ATTEMPTS": "100", "WAIT_SECONDS": "15"}
SHARD_RE = re.compile(r"-of-0*([0-9]+)\.safetensors$")
SEED_KV_BAND = (2200000, 2500000)  # seed 000's GPU KV cache size band at 0.85 and 1M context


@dataclass(frozen=True)
class Unexpressed:
    """A line of the operator's files the lane file does not say as written, and why (never dropped silently)."""

    where: Location
    text: str  # the line (secrets redacted)
    reason: str

    def __str__(self) -> str:
        return f"{self.where.file}:{self.where.line}: {self.text.strip()} — {self.reason}"

    def to_json(self) -> dict:
        return {"file": self.where.file, "line": self.where.line, "text": self.text, "reason": self.reason}


@dataclass(frozen=True)
class Head:
    """Where the head is reached: `--head USER@HOST[:PORT]`, with the ssh config that reaches it (None: ssh's)."""

    host: str
    user: Optional[str] = None
    port: Optional[int] = None
    ssh_config: Optional[str] = None

    @classmethod
    def parse(cls, text: str, *, ssh_config: Optional[str] = None) -> "Head":
        user, _, rest = text.rpartition("@")
        host, _, port = rest.partition(":")
        try:
            check_host(host)
            if user:
                check_user(user)
        except ValueError as exc:
            raise LanebookError(f"--head {text!r}: {exc}") from None
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise LanebookError(f"--head {text!r}: the port must be 1-65535")
        return cls(host, user or None, int(port) if port else None, ssh_config)

    @property
    def destination(self) -> str:
        """[user@]host[:port], the node alias a connection through an ssh config is opened with."""
        return (f"{self.user}@" if self.user else "") + self.host + (f":{self.port}" if self.port else "")


@dataclass
class Imported:
    """A lane imported from a checkout: its YAML text (with where each value came from), and what it cannot say."""

    name: str
    text: str
    params: LaneParams
    unexpressed: list[Unexpressed] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class _Builder:
    """Collects lane values with the location each came from, and the lines it cannot express."""

    def __init__(self, files: CheckoutFiles):
        self.files = files
        self.eff = Effective(files)
        self.unexpressed: list[Unexpressed] = []
        self.notes: list[str] = []

    def line_text(self, where: Location) -> str:
        for file in (self.files.env, self.files.compose, *self.files.launcher_files):
            if file is not None and where.file == file.at(where.line).file and where.line > 0:
                lines = file.text.splitlines()
                return redact(lines[where.line - 1]) if where.line <= len(lines) else ""
        return ""

    def skip(self, where: Location, reason: str) -> None:
        self.unexpressed.append(Unexpressed(where, self.line_text(where), reason))


def _typed(value: str) -> Any:
    """An env value as the lane file holds it: a number where the text is exactly that number, else the text."""
    if re.fullmatch(r"-?(0|[1-9][0-9]*)", value):
        return int(value)
    if re.fullmatch(r"-?(0|[1-9][0-9]*)\.[0-9]*[1-9]", value):
        return float(value)
    return value


def _where(location: Location) -> str:
    return f"{Path(location.file).name if ':' not in location.file else location.file}:{location.line}"


def _env_values(b: _Builder) -> tuple[dict[str, tuple[Any, str]], list[str]]:
    """The lane's env map (key → value, where it came from) and the keys the compose environment: map already passes
    in the form render writes."""
    eff = b.eff
    env: dict[str, tuple[Any, str]] = {}
    last = {e.key: e for e in eff.entries}
    dead = {(d.where.file, d.where.line) for d in eff.dead_lines}
    for line in eff.dead_lines:
        b.skip(line.where, f"never reaches anything: {line.reason}; the lane carries {line.winner.described()}")
    for key, entry in last.items():
        where = eff.env_file.at(entry.line)
        if (where.file, where.line) in dead:
            continue
        if key in KEY_VARIABLES and entry.value:
            b.skip(
                where,
                f"its API key(s): lane files hold none; add `auth: {{{key}: {{key_file: PATH}}}}` (or key_env) so "
                "lanebook's clients send them and render writes them",
            )
            continue
        if SECRET_KEYS.search(key) or redact(entry.raw) != entry.raw:
            b.skip(where, "a secret: lane files hold none; it stays in the env file, which render leaves alone")
            continue
        if references(entry.raw.partition("=")[2]) and key not in SERVING_KEYS:
            b.skip(where, "refers to other variables; a lane value is literal, so the line stays the env file's own")
            continue
        setting = eff.setting(key) if key in SERVING_KEYS else (eff.variable(key) or eff.setting(key))
        value = setting.value if setting.value is not None else entry.value
        if setting.value is not None and setting.where != where and setting.value != entry.value:
            b.skip(where, f"{key}={entry.value} is not what runs: {setting.described()} at {_where(setting.where)}")
        env[key] = (_typed(value), _where(setting.where if setting.value is not None else where))
    for key in SERVING_KEYS:
        if key in env:
            continue
        setting: Setting = eff.setting(key)
        if setting.value is None or references(setting.value):
            continue
        via = f" ({setting.via})" if setting.via else ""
        env[key] = (_typed(setting.value), _where(setting.where) + via)
    compose_env = []
    for key, item in eff.compose.environment.items():
        if key in env and key in last and item.raw == f"${{{key}:-{env[key][0]}}}":
            compose_env.append(key)
    return env, compose_env


def _speculative(b: _Builder) -> dict[str, tuple[Any, str]]:
    spec = b.eff.speculative
    if spec.config is None:
        b.skip(spec.where, f"the speculative config cannot be read ({spec.error}); the lane keeps lanebook's default")
        return {}
    where = _where(spec.where)
    found: dict[str, tuple[Any, str]] = {"method": (spec.config.get("method", "dspark"), where)}
    method = spec.config.get("draft_sample_method")
    if isinstance(method, str) and re.fullmatch(r"[a-z_]+", method):
        found["draft_sample_method"] = (method, where)
    schedule = spec.config.get("num_speculative_tokens_per_batch_size")
    if schedule is not None:
        seq = CommentedSeq([CommentedSeq(row) for row in schedule])
        for row in seq:
            row.fa.set_flow_style()
        seq.fa.set_flow_style()
        found["schedule"] = (seq, where)
    return found


def _launcher(b: _Builder) -> dict[str, tuple[Any, str]]:
    values = launcher_values(b.files, b.eff.values)
    found = {}
    for key in LAUNCHER_KEYS:
        variable = b.eff.variable(key)
        if variable is not None and variable.value:
            found[key] = (_typed(variable.value), _where(variable.where))
            continue
        line = next(
            (
                (f, n)
                for f in b.files.launcher_files
                for n, text in enumerate(f.text.splitlines(), 1)
                if text.startswith(f"{key}=")
            ),
            None,
        )
        if key in values and line:
            found[key] = (_typed(values[key]), _where(line[0].at(line[1])))
        else:
            found[key] = (_typed(RECIPE_LAUNCHER_DEFAULTS[key]), "no launcher in the checkout: the recipe's default")
    return found


def _setting(b: _Builder, key: str) -> Optional[tuple[str, str]]:
    s = b.eff.setting(key)
    return (s.value, _where(s.where)) if s.value else None


def _hf_cache(b: _Builder) -> Optional[tuple[str, str]]:
    """The HF cache the compose mounts, as a node path: the env file's HF_CACHE, `${HOME}` read as the node's ~."""
    entry = next((e for e in reversed(b.eff.entries) if e.key == "HF_CACHE"), None)
    if entry is None:
        return None
    value = re.sub(r"^\$(?:\{HOME\}|HOME)(?=/|$)", "~", entry.value)
    if references(value) or not (value.startswith("/") or value.startswith("~/")):
        return None
    return value, _where(b.eff.env_file.at(entry.line))


def _count_shards(node: "Node", hub_dir: str) -> Optional[int]:
    """The shard count the head's HF cache holds for the repo (its snapshot's model-NNNNN-of-NNNNN names)."""
    from lanebook.nodes.ssh import qpath

    listed = node.run(f"ls -1 {qpath(hub_dir)}/snapshots/*/ 2>/dev/null || true", timeout=30)
    counts = [int(m.group(1)) for line in listed.stdout.splitlines() if (m := SHARD_RE.search(line))]
    return max(counts) if counts else None


def import_lane(
    name: str,
    files: CheckoutFiles,
    *,
    checkout: str,
    head: Optional[Head] = None,
    rollback: Optional[str] = None,
    twin: bool = False,
    node: Optional["Node"] = None,
    project: Optional[tuple[str, str]] = None,
    kv_band: Optional[tuple[tuple[int, int], str, str]] = None,
) -> Imported:
    """The lane NAME as FILES serve it (see the module docstring); CHECKOUT is the checkout's path on the nodes, HEAD
    how the head is reached (None: a local copy, so the head's RoCE address stands in), NODE the head to read the
    HF cache on (None: not read), PROJECT the Compose project the lane serves under and where that was seen (a running
    container's name: the launcher may be given PROJECT_NAME outside the checkout), KV_BAND the gate's KV cache band
    read from a serving lane's startup log ((low, high), the line vLLM sizes it with, where it was read)."""
    b = _Builder(files)
    env, compose_env = _env_values(b)
    head_roce = _setting(b, "VLLM_HOST_IP") or _setting(b, "MASTER_ADDR")
    worker = _setting(b, "WORKER_HOST")
    worker_roce = _setting(b, "WORKER_VLLM_HOST_IP") or worker
    if head_roce is None or worker is None:
        raise LaneError(
            f"{files.env.name if files.env else files.compose.name}: the env file names no "
            f"{'MASTER_ADDR/VLLM_HOST_IP' if head_roce is None else 'WORKER_HOST'}: the import needs the pair"
        )
    api_host = head.host if head else head_roce[0]
    port = _setting(b, "VLLM_PORT") or ("8000", "vLLM's default port")
    spec = _speculative(b)
    image = env.get("DSPARK_VLLM_IMAGE")
    hf = _hf_cache(b)
    doc = CommentedMap()
    comments: dict[tuple[str, ...], str] = {}

    def put(path: tuple[str, ...], value: Any, where: str = "") -> None:
        target = doc
        for part in path[:-1]:
            target = target.setdefault(part, CommentedMap())
        target[path[-1]] = value
        if where:
            comments[path] = where

    source = f"{'ssh ' + head.destination + ':' if head else ''}{checkout}"
    put(("name",), name)
    put(("description",), f"imported from the checkout at {source} by `lanebook lane import`")
    put(("source",), f"lanebook lane import of {source} at {utc_stamp()}")
    put(("twin",), twin)
    put(("checkout",), checkout, "" if head else "the local copy's path: the checkout's path on the nodes if elsewhere")
    put(("checkout_from",), False, "a checkout made by hand: never copied")
    put(("api",), f"http://{api_host}:{port[0]}/v1", f"VLLM_PORT {port[1]}")
    if head and head.ssh_config:
        put(("ssh_config",), head.ssh_config)
    user = head.user if head else None
    head_node = CommentedMap(alias="head", role="head", host=api_host)
    if head and head.port:
        head_node["port"] = head.port
    head_node.update(user=user, roce_ip=head_roce[0])
    worker_node = CommentedMap(
        alias="worker", role="worker", host=worker[0], user=user, roce_ip=worker_roce[0], jump="head"
    )
    for n in (head_node, worker_node):
        n.fa.set_flow_style()
    nodes = CommentedSeq([head_node, worker_node])
    put(("nodes",), nodes)
    nodes.yaml_add_eol_comment(f"RoCE: {head_roce[1]}; worker: WORKER_HOST {worker[1]}", 0)
    nodes.yaml_add_eol_comment(f"RoCE: {worker_roce[1]}", 1)
    launcher = _launcher(b)
    if project:
        launcher["PROJECT_NAME"] = project
    for key, (value, where) in launcher.items():
        put(("launcher", "env", key), value, where)
    for key, (value, where) in env.items():
        put(("env", key), value, where)
    compose_seq = CommentedSeq(compose_env)
    compose_seq.fa.set_flow_style()
    put(("compose_environment",), compose_seq, "the compose environment: map passes these already")
    for key, (value, where) in spec.items():
        put(("speculative", key), value, where)
    put(("speculative", "drafter_block_size"), 5, "not in the checkout: the checkpoint's dspark_block_size (seed 000)")
    kv = b.eff.flag(KV_DTYPE_FLAG)
    if kv is not None and kv.value:
        put(("kv_cache_dtype",), kv.value, _where(kv.where))
    model = env["DSPARK_MODEL"] if "DSPARK_MODEL" in env else None
    if model is None:
        raise LaneError(f"{files.compose.name}: the model `vllm serve` gets cannot be read")
    put(("weights", "repo"), model[0], model[1])
    shards, shards_from = 48, "not observed (no HF cache read): the recipe's 48"
    if hf and (hf[0].startswith("/") or hf[0].startswith("~/")):
        put(("weights", "hf_cache"), hf[0], hf[1])
    if node is not None:
        hub = f"{hf[0] if hf else '~/.cache/huggingface'}/hub/models--{str(model[0]).replace('/', '--')}"
        counted = _count_shards(node, hub)
        if counted:
            shards, shards_from = counted, f"the head's HF cache ({hub})"
        else:
            b.notes.append(f"no weights of {model[0]} in the head's HF cache ({hub}): the shard count is the recipe's")
    put(("weights", "shards"), shards, shards_from)
    put(("gates", "exact_smoke"), "PROMOTE_OK")
    band = CommentedSeq(kv_band[0] if kv_band else SEED_KV_BAND)
    band.fa.set_flow_style()
    if kv_band:
        put(("gates", "kv_cache_tokens"), band, kv_band[2])
        put(("gates", "kv_cache_line"), kv_band[1])
    else:
        put(("gates", "kv_cache_tokens"), band, "seed 000's band at 0.85/1M: set it from your startup log")
    if rollback:
        put(("rollback",), rollback)
    if image is None:
        b.notes.append("the checkout names no image (DSPARK_VLLM_IMAGE): check cannot look for it on the nodes")
    for path, where in comments.items():
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        parent.yaml_add_eol_comment(where, path[-1])
    text = _dump(doc)
    try:
        params = LaneParams.model_validate(yamltext.load(text))
    except Exception as exc:  # noqa: BLE001 - a value the checkout holds that a lane refuses: one clear line
        raise LaneError(f"the checkout's values do not make a valid lane: {exc}".splitlines()[0]) from None
    header = (
        f"# Lane {name}: imported by `lanebook lane import` from {source}.\n"
        "# Each comment says the file:line the value came from.\n"
    )
    return Imported(name, header + text, params, b.unexpressed, b.notes)


def _dump(doc: CommentedMap) -> str:
    yaml = YAML()
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


# --- the round trip ---------------------------------------------------------------------------------


def _changed_lines(name: str, old: str, new: str, why: str) -> list[Unexpressed]:
    found = []
    old_lines, new_lines = old.splitlines(), new.splitlines()
    matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        wrote = " | ".join(redact(line) for line in new_lines[j1:j2]) or "(removed)"
        for n in range(i1, i2) or [i1]:
            text = redact(old_lines[n]) if n < len(old_lines) else ""
            found.append(Unexpressed(Location(name, n + 1), text, f"{why}; render writes: {wrote}"))
    return found


def round_trip(lane_file: Path, files: CheckoutFiles) -> list[Unexpressed]:
    """Render the lane file, loaded as a command loads it, into a copy of the checkout's files (the one renderer),
    and list every line of `.env.dspark` and the compose file whose bytes it would change."""
    params = load_lane(lane_file)
    changed: list[Unexpressed] = []
    with tempfile.TemporaryDirectory(prefix="lanebook-import-") as tmp:
        copy = Path(tmp)
        sources = [files.compose, files.env, files.example, files.start, *files.sourced]
        for f in sources:
            if f is not None:
                target = copy / f.name[len(files.compose.name) - len(COMPOSE_NAME) :]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(f.text.encode())
        render_checkout(params, copy)
        for name, file, why in (
            (ENV_NAME, files.env, "the lane's env value is written differently"),
            (COMPOSE_NAME, files.compose, "the lane model says this line in its own form"),
        ):
            old = file.text if file is not None else ""
            new = (copy / name).read_text() if (copy / name).exists() else ""
            if new != old:
                what = why
                if name == COMPOSE_NAME and speculative_config_line(params) in new:
                    what = (
                        "the lane writes SPECULATIVE_CONFIG in one form (draft method literal, K from MTP_NUM_TOKENS)"
                    )
                changed += _changed_lines(file.name if file else name, old, new, what)
    return changed


def lane_findings(lane_file: Path, files: CheckoutFiles) -> list[str]:
    """Lane values the checkout does not run (none, for a faithful import), as lint's S04 would name them."""
    return [m.message() for m in lane_mismatches(load_lane(lane_file), Effective(files))]


# --- writing ---------------------------------------------------------------------------------------


def write_new(path: Path, text: str) -> None:
    """Write a new lane file atomically; an existing file is never overwritten."""
    path = Path(path)
    try:
        write_atomic(path, text, 0o644, exclusive=True)
    except FileExistsError:
        raise LaneError(
            f"{path} exists: lanebook never overwrites a lane file (give --out FILE to write elsewhere)"
        ) from None


def local_checkout(directory: Path) -> tuple[CheckoutFiles, str]:
    files = CheckoutFiles.read(directory)
    if files.env is None:
        raise LanebookError(f"no {ENV_NAME} in {directory}: import reads the env file the operator runs")
    return files, str(Path(directory).expanduser().resolve())
