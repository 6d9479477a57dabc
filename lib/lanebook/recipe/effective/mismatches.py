"""The lane against what runs: against a checkout's effective configuration, and against the live command."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from lanebook.base.errors import LanebookError
from lanebook.recipe.effective.config import RANK_FLAGS, SERVE_FLAGS, Effective, Setting
from lanebook.recipe.speculative import SCHEDULE_KEY, speculative_config

if TYPE_CHECKING:
    from lanebook.lane.params import LaneParams


# The lane's KV cache dtype and the `vllm serve` flag that carries it (the recipe's compose command writes it
# literally); a command without the flag runs vLLM's default.
KV_DTYPE_KEY = "kv_cache_dtype"
KV_DTYPE_FLAG = "--kv-cache-dtype"
VLLM_DEFAULT_KV_DTYPE = "auto"


def to_number(text: Optional[str]) -> Optional[float]:
    """TEXT as a number, or None when it is none (values compare as numbers where both are: 0.85 = 0.850)."""
    try:
        return float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def same_value(key: str, lane_value: str, running: Optional[str]) -> bool:
    """Whether what runs is the lane's value: numbers compare as numbers (0.85 = 0.850), and an image pinned
    by digest is the lane's when the lane names its tag without a digest."""
    if running is None:
        return False
    if key == "DSPARK_VLLM_IMAGE" and "@" not in lane_value:
        return running.split("@", 1)[0] == lane_value
    number, other = to_number(lane_value), to_number(running)
    if number is not None and other is not None:
        return number == other
    return running == lane_value


@dataclass(frozen=True)
class Mismatch:
    """A lane value that is not what the server runs."""

    key: str  # an env key, speculative.FIELD, or kv_cache_dtype
    lane_value: str
    running: Setting

    def message(self) -> str:
        return f"{self.key}: the lane says {self.lane_value}, but the checkout runs {self.running.described()}"


def env_text(value: Any) -> str:
    """A lane env value as the env file holds it (and as Compose reads it back)."""
    text = str(value)
    if "\n" in text:
        raise LanebookError(f"env value {text!r} spans lines; an env file cannot hold it")
    return text


def lane_mismatches(params: "LaneParams", eff: Effective) -> list[Mismatch]:
    """Every lane value (env keys, the compose-passed keys, the speculative config) the checkout does not run.

    Nothing is compared when the image's entrypoint refuses the configuration: no server runs at all."""
    if eff.spec.entrypoint_error:
        return []
    found = []
    for key, value in params.env.items():
        want = env_text(value)
        running = eff.setting(key)
        if key in params.compose_environment and key not in eff.compose.environment:
            running = Setting(
                None,
                eff.compose_at(eff.compose.environment_line),
                False,
                f"the environment: map of service {eff.compose.service_name} does not pass {key}",
            )
        if not same_value(key, want, running.value):
            found.append(Mismatch(key, want, running))
    if params.kv_cache_dtype is not None:
        running = eff.flag(KV_DTYPE_FLAG) or Setting(
            VLLM_DEFAULT_KV_DTYPE,
            eff.compose_at(eff.compose.service_line),
            False,
            f"the compose command has no {KV_DTYPE_FLAG}: vLLM's default",
        )
        if running.value != params.kv_cache_dtype:
            found.append(Mismatch(KV_DTYPE_KEY, params.kv_cache_dtype, running))
    spec = eff.speculative
    if spec.config is not None:
        schedule = params.speculative.schedule
        wanted = {
            "method": params.speculative.method,
            "draft_sample_method": params.speculative.draft_sample_method,
            SCHEDULE_KEY: None if schedule is None else [list(r) for r in schedule],
        }
        for name, want in wanted.items():
            got = spec.config.get(name)
            if got != want:
                found.append(Mismatch(f"speculative.{name}", _shown(want), Setting(_shown(got), spec.where, False)))
    return found


def rank_mismatches(params: "LaneParams", eff: Effective) -> list[Mismatch]:
    """The TP group the checkout's compose really passes (--tensor-parallel-size, --nnodes) against the lane's node
    count: the recipe's compose writes 2 literally, so a four-node lane on it runs a TP2 pair. Apart from
    lane_mismatches because `env render` cannot write a compose literal: lint reports it, render does not refuse."""
    if eff.spec.entrypoint_error:
        return []
    nodes = str(len(params.nodes))
    found = []
    for flag in RANK_FLAGS.values():
        running = eff.flag(flag)
        if running is not None and not same_value(flag, nodes, running.value):
            found.append(Mismatch(flag, nodes, running))
    return found


# --- the live command against the lane -------------------------------------------------------------

LIVE_FLAGS = (
    "--served-model-name",
    "--max-model-len",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--gpu-memory-utilization",
)


@dataclass(frozen=True)
class LiveMismatch:
    """A value the lane sets that the running server's command line does not carry."""

    flag: str  # a vllm serve flag, or "--speculative-config FIELD"
    lane_value: str
    live: Optional[str]  # None: absent from the live command

    def __str__(self) -> str:
        return f"{self.flag}: lane {self.lane_value}, live {'absent' if self.live is None else self.live}"


def _live_flag(tokens: list[str], flag: str) -> Optional[str]:
    for index, token in enumerate(tokens):
        if token == flag and index + 1 < len(tokens):
            return tokens[index + 1]
        if token.startswith(flag + "="):
            return token[len(flag) + 1 :]
    return None


def live_mismatches(params: "LaneParams", command: str) -> list[LiveMismatch]:
    """Each lane value the live `vllm serve` command line (as `docker top` shows it) does not carry.

    Checked: the served name, max model length, sequences, batched tokens, memory utilization and KV cache dtype
    (absent: vLLM's default, auto) the lane sets, and inside --speculative-config num_speculative_tokens and the
    batch-size schedule (present exactly when the lane has one). A flag missing from the command is a mismatch with
    live value None."""
    tokens = command.split()
    found = []
    for key, flag in SERVE_FLAGS.items():
        if flag in LIVE_FLAGS and key in params.env:
            want, live = env_text(params.env[key]), _live_flag(tokens, flag)
            if not same_value(key, want, live):
                found.append(LiveMismatch(flag, want, live))
    if params.rank_shaped:  # a lane of the four-node shape: every node a rank of one TP group
        for flag in RANK_FLAGS.values():
            live = _live_flag(tokens, flag)
            if not same_value(flag, str(len(params.nodes)), live):
                found.append(LiveMismatch(flag, str(len(params.nodes)), live))
    if params.kv_cache_dtype is not None:
        live = _live_flag(tokens, KV_DTYPE_FLAG)
        if (live or VLLM_DEFAULT_KV_DTYPE) != params.kv_cache_dtype:
            found.append(LiveMismatch(KV_DTYPE_FLAG, params.kv_cache_dtype, live))
    config = speculative_config(command)
    k = None if config is None else config.get("num_speculative_tokens")
    if not same_value("MTP_NUM_TOKENS", str(params.num_speculative_tokens), None if k is None else str(k)):
        found.append(
            LiveMismatch(
                "--speculative-config num_speculative_tokens",
                str(params.num_speculative_tokens),
                None if k is None else str(k),
            )
        )
    schedule = params.speculative.schedule_json()
    live_schedule = (
        None
        if config is None or SCHEDULE_KEY not in config
        else json.dumps(config[SCHEDULE_KEY], separators=(",", ":"))
    )
    if schedule != live_schedule:
        found.append(LiveMismatch(f"--speculative-config {SCHEDULE_KEY}", schedule or "none", live_schedule))
    return found


def _shown(value: Any) -> str:
    """A speculative-config value as a mismatch shows it: none, compact JSON for a schedule, else its text."""
    if value is None:
        return "none"
    return json.dumps(value, separators=(",", ":")) if isinstance(value, list) else str(value)
