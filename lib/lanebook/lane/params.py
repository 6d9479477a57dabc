"""Lane parameters: one YAML file per lane under params/, validated on load.

A lane file is the single source for everything the recipe varies per lane: the .env.dspark
values (kept under ``env:`` with their env-file names, so a variant is a copy with one line
changed), the speculative schedule, the nodes, the launcher, the gates and the rollback chain.
The env file, compose patch, twin, gates and the book's lane matrix are all derived from it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)
from ruamel.yaml.error import YAMLError

from lanebook.base import yamltext
from lanebook.base.errors import LanebookError, LaneError
from lanebook.base.files import read_bytes
from lanebook.base.paths import PARAMS_DIR

EnvValue = Union[StrictInt, StrictFloat, StrictStr]


# Env keys the recipe's shell arithmetic and vLLM read as integers.
INTEGER_ENV_KEYS = ("MAX_MODEL_LEN", "MAX_NUM_SEQS", "MAX_NUM_BATCHED_TOKENS", "MTP_NUM_TOKENS")


def _is_integer(value: object) -> bool:
    """An int, or text of ASCII digits (str.isdigit also takes '²', which int() refuses)."""
    return isinstance(value, int) or (isinstance(value, str) and re.fullmatch(r"\s*[0-9]+\s*", value) is not None)


# Values that name something on a command line (an address, a login, a model id, a unit) must match a
# strict pattern, so `; rm -rf`, `$(...)`, backticks, quotes, spaces, newlines or a leading `-` (an option) are
# refused when the lane file is loaded. Paths and env values are quoted where they are used (nodes.q/qpath),
# but none may hold a line break or NUL: they are written to line-oriented files and read back line by line.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # a lane (also a directory name) or a node alias
ALIAS_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._@:-]{0,127}")  # also [user@]host[:port], Hermes's host as a node
HOSTNAME_RE = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)
USER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
MODEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(?:/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?")  # hub id or served name
ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
KV_DTYPE_RE = re.compile(r"[a-z0-9][a-z0-9_]{0,31}")  # vLLM's --kv-cache-dtype choices: auto, fp8, nvfp4_ds_mla, ...
UNIT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@:-]*")
MODEL_ENV_KEYS = ("DSPARK_MODEL", "SERVED_MODEL_NAME")
# How what is measured or planned on a lane is labelled (LaneParams.figures_label): a twin's never passes for real.
TWIN_FIGURES, REAL_FIGURES = "twin", "real lane"
# The four-node shape (public four-Spark profiles of this model, e.g. the `.env.tp4.example` of
# MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks): the recipe's launcher and compose are two-node only, so a lane of more
# nodes carries these env keys (the lists space-separated, in rank order: the workers as `nodes:` lists them) and
# names launcher scripts of its own; its compose reads --tensor-parallel-size ${TP_SIZE} and --nnodes ${NNODES}.
RANK_KEYS = ("NNODES", "TP_SIZE", "WORKER_HOSTS", "WORKER_IPS")
RECIPE_SCRIPTS = (
    "./start-deepseek-v4-flash-dspark.sh",
    "./status-deepseek-v4-flash-dspark.sh",
    "./stop-deepseek-v4-flash-dspark.sh",
)
_LINE_BREAKS = ("\n", "\r", "\x00")


def _matching(pattern: re.Pattern, what: str, value: str) -> str:
    if not pattern.fullmatch(value):
        raise ValueError(f"must be {what}, got {value!r}")
    return value


def check_name(value: str) -> str:
    return _matching(NAME_RE, "a name of letters, digits, '.', '_' and '-' (not starting with one of those)", value)


def check_alias(value: str) -> str:
    return _matching(
        ALIAS_RE, "a node alias (letters, digits, '.', '_', '-', or an ssh destination user@host:port)", value
    )


def check_destination(value: str) -> str:
    """Hermes's host: a node alias of the lane, or an ssh destination [user@]host[:port] whose parts are each valid."""
    if NAME_RE.fullmatch(value):
        return value
    user, _, rest = value.rpartition("@")
    host, _, port = rest.partition(":") if rest.count(":") <= 1 else (rest, "", "")
    check_host(host)
    if user:
        check_user(user)
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"must be a node alias or [user@]host[:port], got {value!r}")
    return value


def check_host(value: str) -> str:
    """A host name or an IPv4/IPv6 address: nothing a shell or ssh would read as more than an address. (Python takes
    any text as an IPv6 scope, `fe80::1%a;b`: a scope must be an interface name.)"""
    address, _, scope = value.partition("%")
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return _matching(HOSTNAME_RE, "a host name or IP address", value)
    if "%" in value and (":" not in address or not re.fullmatch(r"[A-Za-z0-9_.-]{1,15}", scope)):
        raise ValueError(f"must be a host name or IP address, got {value!r}")
    return value


def check_user(value: str) -> str:
    return _matching(USER_RE, "a login name (letters, digits, '_', '.', '-')", value)


def check_model(value: str) -> str:
    return _matching(MODEL_RE, "a model id like org/name (letters, digits, '.', '_', '-')", value)


def check_env(env: dict) -> dict:
    """Env keys are shell identifiers (they are written unquoted, `K=V`); values hold no line break."""
    for key, value in env.items():
        _matching(ENV_KEY_RE, "an env key (a shell identifier)", key)
        if isinstance(value, str) and any(c in value for c in _LINE_BREAKS):
            raise ValueError(f"{key}: an env value must be one line, got {value!r}")
    return env


def check_path(value: str) -> str:
    """A node path: absolute or under ~ (a relative one starting with '-' would be read as an option), one line."""
    if any(c in value for c in _LINE_BREAKS) or not (value.startswith("/") or value == "~" or value.startswith("~/")):
        raise ValueError(f"must be an absolute path or one under ~/, on one line, got {value!r}")
    return value


def check_line(value: str) -> str:
    if any(c in value for c in _LINE_BREAKS):
        raise ValueError(f"must be one line, got {value!r}")
    return value


def _validated(check, *fields: str):
    """A pydantic validator applying `check` to each of `fields`; None passes (the optional fields' default)."""
    return field_validator(*fields)(classmethod(lambda cls, value: value if value is None else check(value)))


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LanePolicy(Strict):
    """What the product lets a lane do unasked. The defaults are a real lane's; a lane where nothing is real (the
    twin's) sets both false in its file."""

    confirm_changes: StrictBool = Field(
        True,
        description="a run or step that changes the lane needs the operator's yes (--yes, -p confirm=True or the "
        "button); false: it goes ahead unasked",
    )
    attended_long_probes: StrictBool = Field(
        True,
        description="a long-context probe (pitfall P15) runs only with an operator watching the head's console "
        "(-p attended=True or the button); false: it runs headless",
    )


class NodeParams(Strict):
    alias: StrictStr = Field(description="head, worker (or worker2, ...): the name runbooks and ssh use")
    role: Literal["head", "worker"]
    host: StrictStr = Field(description="address the operator's machine uses to reach the node")
    port: StrictInt = 22
    user: Optional[StrictStr] = Field(None, description="login user; null means the current user (twin)")
    roce_ip: StrictStr = Field(description="the node's address on the RoCE link (TP traffic, rsync)")
    jump: Optional[StrictStr] = Field(None, description="alias of a node to jump through (ProxyJump)")

    _alias = _validated(check_alias, "alias")
    _jump = _validated(check_alias, "jump")
    _hosts = _validated(check_host, "host", "roce_ip")
    _user = _validated(check_user, "user")

    @field_validator("port")
    @classmethod
    def _port(cls, value: int) -> int:
        if not 0 < value < 65536:
            raise ValueError(f"must be a TCP port 1-65535, got {value}")
        return value


class LauncherParams(Strict):
    start: StrictStr = RECIPE_SCRIPTS[0]
    status: StrictStr = RECIPE_SCRIPTS[1]
    stop: StrictStr = RECIPE_SCRIPTS[2]
    env: dict[StrictStr, EnvValue] = Field(description="PROJECT_NAME, WAIT_ATTEMPTS, WAIT_SECONDS")

    _env = _validated(check_env, "env")
    _scripts = _validated(check_line, "start", "status", "stop")

    @model_validator(mode="after")
    def _required_env(self):
        missing = [k for k in ("PROJECT_NAME", "WAIT_ATTEMPTS", "WAIT_SECONDS") if k not in self.env]
        if missing:
            raise ValueError(f"launcher.env is missing {', '.join(missing)}")
        for key in ("WAIT_ATTEMPTS", "WAIT_SECONDS"):
            if not _is_integer(self.env[key]):
                raise ValueError(f"launcher.env.{key} must be an integer, got {self.env[key]!r}")
        return self

    @property
    def wait_budget_s(self) -> int:
        return int(self.env["WAIT_ATTEMPTS"]) * int(self.env["WAIT_SECONDS"])


class SpeculativeParams(Strict):
    method: StrictStr = "dspark"
    draft_sample_method: StrictStr = "probabilistic"
    drafter_block_size: StrictInt = Field(5, description="dspark_block_size of the checkpoint: K above it is wasted")
    schedule: Optional[list[tuple[StrictInt, StrictInt, StrictInt]]] = Field(
        None, description="num_speculative_tokens_per_batch_size [[start_bs, end_bs, K], ...]; null = fixed K"
    )

    def schedule_json(self) -> Optional[str]:
        return None if self.schedule is None else json.dumps([list(r) for r in self.schedule], separators=(",", ":"))


class WeightsParams(Strict):
    repo: StrictStr
    shards: StrictInt = 48
    max_workers: StrictInt = 4
    download_env: dict[StrictStr, EnvValue] = Field(
        default_factory=lambda: {"HF_HUB_OFFLINE": 0, "TRANSFORMERS_OFFLINE": 0, "HF_HUB_DISABLE_XET": 1}
    )
    hf_cache: StrictStr = "~/.cache/huggingface"

    _repo = _validated(check_model, "repo")
    _download_env = _validated(check_env, "download_env")
    _hf_cache = _validated(check_path, "hf_cache")

    @property
    def hub_dir(self) -> str:
        """The full hub model dir (blobs + snapshots + refs): mount and rsync this, never a snapshot alone."""
        return f"{self.hf_cache}/hub/models--{self.repo.replace('/', '--')}"


class ToolSmoke(Strict):
    function: StrictStr = "get_weather"
    arguments: dict[StrictStr, Any] = Field(default_factory=lambda: {"city": "Pensacola, FL"})
    prompt: StrictStr = "What is the weather in Pensacola, FL right now?"


class GateParams(Strict):
    exact_smoke: StrictStr = Field(description="the token the exact smoke must return verbatim")
    tool_smoke: ToolSmoke = Field(default_factory=ToolSmoke)
    hermes_route: StrictStr = "ROUTE_OK"
    kv_cache_tokens: tuple[StrictInt, StrictInt] = Field(description="band for the KV cache size log line")
    kv_cache_line: Literal["GPU KV cache size", "CPU KV cache size"] = Field(
        "GPU KV cache size",
        description="the startup line sizing the KV cache: vLLM's GPU builds print 'GPU KV cache size: N tokens', "
        "its CPU build 'CPU KV cache size: N tokens'",
    )
    log_forbidden: list[StrictStr] = Field(
        default_factory=list,
        description="further lines the startup log must not hold (extended regular expressions); the check that no "
        "line enables breakable CUDA graphs is always made (lanebook.ops.logs)",
    )
    log_required: list[StrictStr] = Field(default_factory=lambda: ["Application startup complete"])

    @property
    def exact_smoke_prompt(self) -> str:
        return f"Reply exactly {self.exact_smoke}."


# The recipe's two key variables (its .env.dspark): one key, or several independently revocable keys on one line. The
# compose command refuses both set at once (exit 2), so a lane names exactly one.
KEY_VARIABLES = ("VLLM_API_KEY", "DSPARK_API_KEYS")
# What a lane file may hold where a key would go: the recipe's keyless placeholders, never a key.
KEYLESS_VALUES = ("no-key-required", "none", "")


class KeySource(Strict):
    """Where a lane's API key(s) come from on the operator's machine: a file (mode 0600, keys separated by spaces or
    lines, `#` comments) or an environment variable (keys space-separated). Never the key itself."""

    key_file: Optional[StrictStr] = Field(None, description="a file on this machine holding the key(s), mode 0600")
    key_env: Optional[StrictStr] = Field(None, description="an environment variable of this machine holding the key(s)")

    _key_file = _validated(check_line, "key_file")
    _key_env = _validated(lambda value: _matching(ENV_KEY_RE, "an environment variable name", value), "key_env")

    @model_validator(mode="after")
    def _one_source(self):
        if (self.key_file is None) == (self.key_env is None):
            raise ValueError("name exactly one of key_file or key_env")
        return self

    @property
    def shown(self) -> str:
        return f"key file {self.key_file}" if self.key_file is not None else f"${self.key_env}"


class AuthParams(Strict):
    """`auth:` of a keyed lane: the recipe variable that carries the key(s) into `vllm serve --api-key`, and where
    they come from. `{VLLM_API_KEY: SOURCE}` (one key) or `{DSPARK_API_KEYS: SOURCE}` (one or more)."""

    VLLM_API_KEY: Optional[KeySource] = None
    DSPARK_API_KEYS: Optional[KeySource] = None

    @model_validator(mode="after")
    def _one_variable(self):
        named = [v for v in KEY_VARIABLES if getattr(self, v) is not None]
        if len(named) == 2:
            raise ValueError("VLLM_API_KEY and DSPARK_API_KEYS are both set; set exactly one of them")
        if not named:
            raise ValueError("name VLLM_API_KEY or DSPARK_API_KEYS and where its key comes from")
        return self

    @property
    def variable(self) -> str:
        """The recipe variable render writes: VLLM_API_KEY or DSPARK_API_KEYS."""
        return next(v for v in KEY_VARIABLES if getattr(self, v) is not None)

    @property
    def source(self) -> KeySource:
        return getattr(self, self.variable)


class HermesParams(Strict):
    provider: StrictStr = "spark-ds4"
    api_key: StrictStr = Field(
        "no-key-required", description="a keyless lane's placeholder (never a key: a keyed lane names key_env)"
    )
    key_env: Optional[StrictStr] = Field(
        None,
        description="a keyed lane: the environment variable Hermes reads the key from (its provider block's key_env); "
        "null = the lane's auth key_env, if it names one",
    )
    context_length: StrictInt = 200000
    extra_body: dict[StrictStr, Any] = Field(default_factory=lambda: {"chat_template_kwargs": {"thinking": False}})
    host: Optional[StrictStr] = Field(
        None,
        description="where the operator's Hermes runs: null = this machine; a node alias of the lane or an ssh "
        "destination [user@]host[:port] = that host, over SSH",
    )
    bin: Optional[StrictStr] = Field(
        None,
        description=(
            "the hermes command there; null = lanebook's own install (.tools/hermes) here, else `hermes` on PATH"
        ),
    )
    config: Optional[StrictStr] = Field(
        None,
        description="the operator's Hermes config.yaml on the Hermes host, which gates and rollback keep pointed at "
        "the lane serving (backed up before each change); null = none: gates check the block rendered from the lane",
    )

    _host = _validated(check_destination, "host")
    _config = _validated(check_path, "config")
    _key_env = _validated(lambda value: _matching(ENV_KEY_RE, "an environment variable name", value), "key_env")


# An RDMA device as `rdma link` and `ib_write_bw -d` name it (rocep1s0f0, roceP2p1s0f0 on a DGX Spark).
RDMA_DEVICE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# perftest's RC writes above 64 KiB fail on GB10 (https://github.com/linux-rdma/perftest/issues/394).
LINK_MAX_MESSAGE_BYTES = 65536


class LinkParams(Strict):
    """`link:`: the RoCE rails `lanebook check` and the watch measure between the head and each worker. A rail is an
    RDMA device, named alike on every node; with none named here, the devices of env NCCL_IB_HCA are the rails."""

    rails: list[StrictStr] = Field(
        default_factory=list,
        description="RDMA devices, one per rail (`rdma link show` lists them): both halves of the QSFP port on a "
        "DGX Spark, e.g. [rocep1s0f0, roceP2p1s0f0]; empty = those env NCCL_IB_HCA names",
    )
    gid_index: Optional[StrictInt] = Field(3, description="ib_write_bw -x: the RoCEv2 IPv4 GID; null = perftest's own")
    message_bytes: StrictInt = Field(
        LINK_MAX_MESSAGE_BYTES, description="ib_write_bw -s, at most 65536 (larger RC writes fail on GB10)"
    )
    qps: StrictInt = Field(1, description="ib_write_bw -q: queue pairs")
    duration_s: StrictInt = Field(3, description="ib_write_bw -D: seconds each rail is measured")
    port: StrictInt = Field(18515, description="ib_write_bw -p: the TCP port of its exchange (perftest's default)")
    mtu: StrictInt = Field(9000, description="the MTU every rail's netdev is expected at")
    all_reduce_perf: Optional[StrictStr] = Field(
        None,
        description="the path of nccl-tests' all_reduce_perf inside the lane's image; null = looked up on the "
        "image's PATH (where the image carries none, NCCL's bus bandwidth is not measured, and the report says so)",
    )

    _all_reduce_perf = _validated(check_path, "all_reduce_perf")

    @field_validator("rails")
    @classmethod
    def _rails(cls, rails: list[str]) -> list[str]:
        if len(set(rails)) != len(rails):
            raise ValueError(f"rails are named twice: {rails}")
        return [_matching(RDMA_DEVICE_RE, "an RDMA device name like rocep1s0f0", r) for r in rails]

    @model_validator(mode="after")
    def _bounds(self):
        if not 0 < self.message_bytes <= LINK_MAX_MESSAGE_BYTES:
            raise ValueError(
                f"link.message_bytes must be 1-{LINK_MAX_MESSAGE_BYTES} (RC writes above 64 KiB fail on GB10: "
                f"https://github.com/linux-rdma/perftest/issues/394), got {self.message_bytes}"
            )
        for key, low, high in (("qps", 1, 64), ("duration_s", 1, 60), ("port", 1024, 65535), ("mtu", 576, 9216)):
            if not low <= getattr(self, key) <= high:
                raise ValueError(f"link.{key} must be {low}-{high}, got {getattr(self, key)}")
        if self.gid_index is not None and not 0 <= self.gid_index <= 255:
            raise ValueError(f"link.gid_index must be 0-255, got {self.gid_index}")
        return self


DURATION_RE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhd])\s*")
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def check_duration(value: Any) -> Any:
    """A duration as seconds: a number passes as it is; text like '6h', '30m', '1d', '45s' becomes seconds."""
    if isinstance(value, str):
        match = DURATION_RE.fullmatch(value)
        if not match:
            raise ValueError(f"must be seconds or a duration like 30s, 10m, 6h, 1d, got {value!r}")
        return float(match.group(1)) * DURATION_UNITS[match.group(2)]
    return value


class RestartParams(Strict):
    """How often the watch may relaunch a lane on its own: at most `max` relaunches within `within_s` seconds."""

    max: StrictInt = Field(2, ge=0, description="relaunches allowed within the window (0: never relaunch)")
    within_s: StrictInt = Field(3600, ge=1, description="the window, in seconds")


class WatchParams(Strict):
    """`watch:` in the lane file: how `lanebook watch` probes the lane once it serves, and what it may do unasked
    (lanebook.runs.watch)."""

    interval_s: Union[StrictInt, StrictFloat] = Field(30, gt=0, description="seconds between probe rounds")
    fail_after: StrictInt = Field(2, ge=1, description="consecutive failed rounds that open an incident")
    speed_every: Union[StrictInt, StrictFloat] = Field(
        6 * 3600, ge=0, description="how often a speed probe wave runs: seconds, or '6h', '30m', '1d' (0: never)"
    )
    speed_samples: StrictInt = Field(
        3, ge=2, description="the last this many speed waves must all fall below the band to call a regression"
    )
    link_every: Union[StrictInt, StrictFloat] = Field(
        86400, ge=0, description="how often the RoCE link is measured: seconds, or '1d', '12h' (0: never)"
    )
    restart: RestartParams = Field(default_factory=RestartParams)
    then: Literal["rollback", "page"] = Field(
        "page", description="once restarts run out: run the rollback runbook (needs `rollback:`) or page"
    )
    backoff_s: Union[StrictInt, StrictFloat] = Field(
        60, ge=0, description="seconds to wait after a remedy before the next, doubled after each (bounded by an hour)"
    )

    _durations = field_validator("speed_every", "link_every", mode="before")(
        classmethod(lambda cls, value: check_duration(value))
    )


class PageParams(Strict):
    """`page:` in the lane file: where the watch sends an incident. A command gets it as JSON on stdin; a webhook
    gets it as a JSON POST, its URL from an environment variable or a 0600 file of this machine (never written
    here). No key or token is ever part of a page."""

    command: Optional[StrictStr] = Field(None, description="a command line run with the incident as JSON on stdin")
    webhook_url_env: Optional[StrictStr] = Field(None, description="an environment variable holding the webhook URL")
    webhook_file: Optional[StrictStr] = Field(None, description="a file (mode 0600) holding the webhook URL")
    min_interval_s: Union[StrictInt, StrictFloat] = Field(
        300, ge=0, description="at most one page per incident and cause within this many seconds"
    )

    _command = _validated(check_line, "command")
    _webhook_file = _validated(check_line, "webhook_file")
    _webhook_url_env = _validated(
        lambda value: _matching(ENV_KEY_RE, "an environment variable name", value), "webhook_url_env"
    )

    @model_validator(mode="after")
    def _one_webhook(self):
        if self.webhook_url_env is not None and self.webhook_file is not None:
            raise ValueError("page: name webhook_url_env or webhook_file, not both")
        return self


def check_checkout_from(value: Any) -> Union[str, Literal[False], None]:
    """`checkout_from:` is a node path, false (the checkout is never copied) or null (the rollback lane's)."""
    if value is None or value is False:
        return value
    if not isinstance(value, str):
        raise ValueError(f"must be a checkout path, false or null, got {value!r}")
    return check_path(value)


class LaneParams(Strict):
    name: StrictStr
    description: StrictStr
    source: StrictStr = Field(description="which seed the values come from")
    twin: bool = False
    policy: LanePolicy = Field(default_factory=LanePolicy, description="what the lane lets run unasked")
    checkout: StrictStr = Field(description="the lane's checkout directory on every node (~ = the node's home)")
    checkout_from: Union[StrictStr, Literal[False], None] = Field(
        None,
        description="where a node without the lane's checkout gets it (`cp -a FROM CHECKOUT`, seed 000): a checkout "
        "path; null = the rollback lane's checkout; false = never copied (a checkout made by hand)",
    )
    api: StrictStr = Field(description="OpenAI-compatible base URL, ending in /v1")
    ssh_config: Optional[StrictStr] = Field(None, description="ssh config file for the nodes; 'twin' = the twin's")
    nodes: list[NodeParams]
    launcher: LauncherParams
    env: dict[StrictStr, EnvValue]
    compose_environment: list[StrictStr] = Field(
        default_factory=lambda: ["VLLM_USE_BREAKABLE_CUDAGRAPH"],
        description="env-file keys the compose environment: map must pass into the container",
    )
    speculative: SpeculativeParams = Field(default_factory=SpeculativeParams)
    kv_cache_dtype: Optional[StrictStr] = Field(
        None,
        description="vllm serve --kv-cache-dtype, which the recipe's compose command sets (nvfp4_ds_mla on both "
        "seed lanes); null = the lane does not say, so nothing checks it",
    )
    weights: WeightsParams
    gates: GateParams
    hermes: HermesParams = Field(default_factory=HermesParams)
    request: dict[StrictStr, Any] = Field(
        default_factory=lambda: {"chat_template_kwargs": {"thinking": False}},
        description="extra body every request of ours carries (thinking as a JSON boolean)",
    )
    legacy_units: list[StrictStr] = Field(
        default_factory=lambda: ["aiden-vllm.service"],
        description=(
            "systemd units of older serving stacks to mask before compose: a legacy unit can restart and take the "
            "pair's memory (pitfall 13)"
        ),
    )
    link: LinkParams = Field(default_factory=LinkParams, description="the RoCE rails the link check measures")
    rollback: Optional[StrictStr] = Field(None, description="the lane to fall back to")
    auth: Optional[AuthParams] = Field(
        None,
        description="a keyed lane: the recipe variable carrying its API key(s) and where they come from "
        "(lanebook.lane.keys reads them); null = a keyless lane",
    )
    watch: WatchParams = Field(default_factory=WatchParams, description="how `lanebook watch` keeps the lane served")
    page: PageParams = Field(default_factory=PageParams, description="where `lanebook watch` sends an incident")

    # Where load_lane read the lane: a command loads it once and passes it down, and what needs the file (a
    # runbook's kernel, a promotion's digest) takes it from here. None for a lane built in memory (lane_with).
    _file: Optional[Path] = PrivateAttr(None)
    _file_sha256: Optional[str] = PrivateAttr(None)

    _name = _validated(check_name, "name")
    _rollback = _validated(check_name, "rollback")
    _checkout = _validated(check_path, "checkout")
    _checkout_from = field_validator("checkout_from", mode="before")(
        classmethod(lambda cls, value: check_checkout_from(value))
    )
    _env = _validated(check_env, "env")
    _kv_cache_dtype = _validated(
        lambda value: _matching(KV_DTYPE_RE, "a KV cache dtype like nvfp4_ds_mla", value), "kv_cache_dtype"
    )

    @field_validator("compose_environment")
    @classmethod
    def _compose_environment(cls, keys: list[str]) -> list[str]:
        return [_matching(ENV_KEY_RE, "an env key (a shell identifier)", k) for k in keys]

    @field_validator("legacy_units")
    @classmethod
    def _legacy_units(cls, units: list[str]) -> list[str]:
        return [_matching(UNIT_RE, "a systemd unit name", u) for u in units]

    @model_validator(mode="after")
    def _consistent(self):
        heads = [n for n in self.nodes if n.role == "head"]
        if len(heads) != 1:
            raise ValueError(f"nodes: exactly one head is required, found {len(heads)}")
        if not any(n.role == "worker" for n in self.nodes):
            raise ValueError("nodes: at least one worker is required")
        for key in ("DSPARK_MODEL", "SERVED_MODEL_NAME", "MAX_MODEL_LEN", "MAX_NUM_SEQS", "MTP_NUM_TOKENS"):
            if key not in self.env:
                raise ValueError(f"env: {key} is required")
        for key in INTEGER_ENV_KEYS:
            if key in self.env and not _is_integer(self.env[key]):
                raise ValueError(f"env.{key} must be an integer, got {self.env[key]!r}")
        for key in MODEL_ENV_KEYS:
            try:
                check_model(str(self.env[key]))
            except ValueError as exc:
                raise ValueError(f"env.{key} {exc}") from None
        aliases = {n.alias: n for n in self.nodes}
        for node in self.nodes:
            if node.jump and (node.jump not in aliases or node.jump == node.alias or aliases[node.jump].jump):
                raise ValueError(
                    f"nodes.{node.alias}.jump must name another node that is reached directly, got {node.jump!r}"
                )
        if self.env["DSPARK_MODEL"] != self.weights.repo:
            raise ValueError("weights.repo must equal env.DSPARK_MODEL")
        if self.watch.then == "rollback" and not self.rollback:
            raise ValueError("watch.then: rollback needs a rollback lane (rollback:), and this lane names none")
        return self

    # Derived facts (one source each).
    @property
    def figures_label(self) -> str:
        """How figures measured or plans made on this lane are labelled wherever they are shown: TWIN_FIGURES for a
        twin lane (its file says `twin: true`), REAL_FIGURES otherwise."""
        return TWIN_FIGURES if self.twin else REAL_FIGURES

    @property
    def head(self) -> NodeParams:
        return next(n for n in self.nodes if n.role == "head")

    @property
    def workers(self) -> list[NodeParams]:
        return [n for n in self.nodes if n.role == "worker"]

    @property
    def rank_shaped(self) -> bool:
        """Whether the four-node keys apply: more than one worker, or a lane that carries any of them."""
        return len(self.workers) > 1 or any(key in self.env for key in RANK_KEYS)

    def rank_values(self) -> dict[str, str]:
        """What each four-node key must say for these nodes: the node count, and the workers' RoCE IPs in rank
        order (the head's ssh reaches a worker at its RoCE IP, as the recipe's WORKER_HOST does)."""
        roce = " ".join(w.roce_ip for w in self.workers)
        count = str(len(self.nodes))
        return {"NNODES": count, "TP_SIZE": count, "WORKER_HOSTS": roce, "WORKER_IPS": roce}

    @property
    def rails(self) -> list[str]:
        """The RDMA devices the link check measures: `link.rails`, else those env NCCL_IB_HCA names (its `=`/`^`
        prefix and `:PORT` suffixes dropped; an exclusion list names none)."""
        if self.link.rails:
            return list(self.link.rails)
        hca = str(self.env.get("NCCL_IB_HCA", "")).strip()
        if not hca or hca.startswith("^"):
            return []
        names = [part.split(":")[0].strip() for part in hca.lstrip("=").split(",")]
        return [n for n in dict.fromkeys(names) if n and RDMA_DEVICE_RE.fullmatch(n)]

    @property
    def keyed(self) -> bool:
        return self.auth is not None

    @property
    def hermes_key_env(self) -> Optional[str]:
        """The environment variable a keyed lane's Hermes block names (key_env); None for a keyless lane, or a keyed
        lane that names none (its Hermes block is then keyless: a lint finding)."""
        if self.auth is None:
            return None
        return self.hermes.key_env or self.auth.source.key_env

    @property
    def served_model_name(self) -> str:
        return str(self.env["SERVED_MODEL_NAME"])

    @property
    def max_model_len(self) -> int:
        return int(self.env["MAX_MODEL_LEN"])

    @property
    def max_num_seqs(self) -> int:
        return int(self.env["MAX_NUM_SEQS"])

    @property
    def num_speculative_tokens(self) -> int:
        return int(self.env["MTP_NUM_TOKENS"])

    def env_lines(self) -> list[str]:
        """The lane's .env.dspark lines, in the order the lane file gives them."""
        return [f"{k}={v}" for k, v in self.env.items()]

    @property
    def file(self) -> Optional[Path]:
        """The lane file it was loaded from (absolute), None for a lane built in memory."""
        return self._file

    @property
    def file_sha256(self) -> Optional[str]:
        """The SHA-256 of the bytes it was loaded from, None for a lane built in memory."""
        return self._file_sha256


def lane_path(name_or_path: str | Path) -> Path:
    """A lane name under params/ or the path of a lane YAML file."""
    p = Path(name_or_path)
    # A bare name is a lane name even where a directory of that name happens to be (a node's home holds checkouts).
    if p.suffix in (".yaml", ".yml") or p.is_file() or len(p.parts) > 1:
        if not p.is_file():
            raise LaneError(f"lane file not found: {p}")
        return p
    candidate = PARAMS_DIR / f"{name_or_path}.yaml"
    if not candidate.is_file():
        known = ", ".join(lane_names()) or "none"
        raise LaneError(f"unknown lane '{name_or_path}' (known: {known})")
    return candidate


def lane_names() -> list[str]:
    return sorted(p.stem for p in PARAMS_DIR.glob("*.yaml"))


_UNION_TAGS = {"int", "float", "str", "bool"}


def _key(err: dict) -> str:
    """The dotted key of an error, without pydantic's union-member tags (env values are int|float|str)."""
    loc = [str(part) for part in err["loc"]]
    while loc and loc[-1] in _UNION_TAGS:
        loc.pop()
    return ".".join(loc) or "(top level)"


def _describe(err: dict, union: bool) -> str:
    key = _key(err)
    if err["type"] == "extra_forbidden":
        return f"unknown key '{key}'"
    if err["type"] == "missing":
        return f"missing key '{key}'"
    if union:
        return f"'{key}': must be a number or a string, got {type(err['input']).__name__}"
    return f"'{key}': {err['msg']}"


def read_mapping(path: Path, what: str) -> tuple[bytes, dict]:
    """The bytes of a YAML file lanebook was pointed at (WHAT names it: "lane file", "fleet file") and the mapping
    they hold; any problem is one LaneError line naming the file."""
    try:
        raw = read_bytes(path, what)
    except LanebookError as exc:
        raise LaneError(str(exc)) from None
    try:
        text = raw.decode().replace("\r\n", "\n").replace("\r", "\n")  # line ends as text mode reads them
    except UnicodeDecodeError as exc:
        raise LaneError(f"{what} {path} is not UTF-8 text (byte {exc.start})") from None
    try:
        data = yamltext.load(text)
    except YAMLError as exc:
        raise LaneError(yamltext.problem(path, exc)) from None
    if not isinstance(data, dict):
        raise LaneError(f"{path}: a {what} must be a YAML mapping")
    return raw, data


def validation_problem(path: Path, exc: ValidationError) -> str:
    """A model's validation errors as one line naming the file and the first key, with how many more there are."""
    by_key: dict[str, list[dict]] = {}
    for err in exc.errors():
        by_key.setdefault(_key(err), []).append(err)
    first = next(iter(by_key.values()))
    more = f" (and {len(by_key) - 1} more)" if len(by_key) > 1 else ""
    return f"{path}: {_describe(first[0], union=len(first) > 1)}{more}"


def _written_keys(data: dict) -> Optional[str]:
    """The first place a lane file's mapping holds an API key itself (where only its source may be named)."""
    for section in ("env",):
        env = data.get(section)
        for variable in KEY_VARIABLES:
            if isinstance(env, dict) and str(env.get(variable, "") or "").strip():
                return f"{section}.{variable}"
    launcher = data.get("launcher")
    env = launcher.get("env") if isinstance(launcher, dict) else None
    for variable in KEY_VARIABLES:
        if isinstance(env, dict) and str(env.get(variable, "") or "").strip():
            return f"launcher.env.{variable}"
    auth = data.get("auth")
    if isinstance(auth, dict):
        for variable, source in auth.items():
            if isinstance(source, (str, int, float, list)) and source not in ("", None):
                return f"auth.{variable}"
            named = set(source) if isinstance(source, dict) else set()
            written_in = sorted(named & {"key", "keys", "api_key", "value", "token"})
            if written_in:
                return f"auth.{variable}.{written_in[0]}"
    hermes = data.get("hermes")
    if isinstance(hermes, dict) and str(hermes.get("api_key", "")).strip().lower() not in KEYLESS_VALUES:
        return "hermes.api_key"
    return None


# Keys a node of a lane file had under another name before: the old name is refused with the fix, never read.
RENAMED_NODE_KEYS = {"fabric_ip": "roce_ip"}


def _renamed_key(path: Path, data: dict) -> Optional[str]:
    """The fix for the first node key of DATA that lanebook now spells otherwise (RENAMED_NODE_KEYS), if any."""
    nodes = data.get("nodes")
    for node in nodes if isinstance(nodes, list) else []:
        for old, new in RENAMED_NODE_KEYS.items():
            if isinstance(node, dict) and old in node:
                return f"{old} is now {new}: rename the key in {path}"
    return None


def load_lane(name_or_path: str | Path) -> LaneParams:
    """Load and validate a lane; every problem becomes one LaneError line naming the file and key. A lane file that
    holds an API key itself is refused (it names only where the key comes from: `auth:`)."""
    path = lane_path(name_or_path)
    raw, data = read_mapping(path, "lane file")
    renamed = _renamed_key(path, data)
    if renamed:
        raise LaneError(renamed)
    written = _written_keys(data)
    if written:
        raise LaneError(
            f"{path}: {written} holds an API key written in the lane file; a lane file names only where its key "
            "comes from: auth: {DSPARK_API_KEYS: {key_file: PATH}} (mode 0600) or {key_env: NAME}"
        )
    try:
        params = LaneParams.model_validate(data)
    except ValidationError as exc:
        raise LaneError(validation_problem(path, exc)) from None
    params._file, params._file_sha256 = path.resolve(), hashlib.sha256(raw).hexdigest()
    return params


def lane_with(params: LaneParams, **changes: Any) -> LaneParams:
    """A validated copy of a lane with top-level fields replaced (env merged key by key)."""
    data = params.model_dump()
    env = changes.pop("env", None)
    if env:
        data["env"] = {**data["env"], **env}
    data.update(changes)
    return LaneParams.model_validate(data)
