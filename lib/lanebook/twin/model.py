"""The twin engine's behaviour: pure functions and an engine core fitted to the seeds' figures.

No I/O and no clock here. server.py drives ``EngineCore`` in real time; ``simulate_wave`` drives the
same core in virtual time, so unit tests check the seed figures exactly and the server inherits
them. Every constant names its source: a seed figure (000 = the current recipe, 003 = the canary
write-up, NOTES = ../shared/NOTES.md) or "twin assumption" where the seeds measure nothing and the
twin has to pick a value. Twin figures are twin figures, never a real lane's.
"""
from __future__ import annotations

import hashlib
import json
import math
import random
import re
import statistics
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence as Seq

GIB = 1024**3
MODEL_LEN_1M = 1_048_576

# --- KV budget (T01, T02, T15) -------------------------------------------------------------------
# needed(len) = KV_FIXED_GIB + KV_PER_TOKEN_GIB * len, the line through 003's two failure figures:
# 7.54 GiB needed at 1,048,576 and 7.16 GiB available being enough for 953,088 tokens.
KV_NEEDED_AT_1M_GIB = 7.54  # 003: "7.54 GiB KV cache is needed"
KV_AVAILABLE_AT_080_GIB = 7.16  # 003: available KV at GPU_MEMORY_UTILIZATION=0.80
KV_ESTIMATED_MAX_LEN_AT_080 = 953_088  # 003: "estimated maximum model length is 953088"
KV_TOKENS_AT_085 = 2_493_464  # NOTES/000: "GPU KV cache size: 2,493,464 tokens" at 0.85 (band 2.2-2.5M)
KV_PER_TOKEN_GIB = (KV_NEEDED_AT_1M_GIB - KV_AVAILABLE_AT_080_GIB) / (MODEL_LEN_1M - KV_ESTIMATED_MAX_LEN_AT_080)
KV_FIXED_GIB = KV_NEEDED_AT_1M_GIB - KV_PER_TOKEN_GIB * MODEL_LEN_1M
# available(u) = u * GPU_MEMORY_GIB - NON_KV_USED_GIB through (0.80, 7.16 GiB) and the 0.85 point
# whose KV holds 2,493,464 tokens: about 122.6 GiB of GPU memory and 90.9 GiB for weights and graphs.
_AVAILABLE_AT_085_GIB = KV_FIXED_GIB + KV_PER_TOKEN_GIB * KV_TOKENS_AT_085
GPU_MEMORY_GIB = (_AVAILABLE_AT_085_GIB - KV_AVAILABLE_AT_080_GIB) / (0.85 - 0.80)
NON_KV_USED_GIB = 0.80 * GPU_MEMORY_GIB - KV_AVAILABLE_AT_080_GIB
STICKY_UMA_DEFAULT_GIB = 12.0  # 000 pitfall 4: free memory sticks "~10-16 Gi" after stop


@dataclass(frozen=True)
class KvBudget:
    """What vLLM's KV sizing reports at boot for one memory setting and context length."""

    gpu_memory_utilization: float
    max_model_len: int
    available_gib: float
    needed_gib: float
    kv_tokens: int
    estimated_max_len: int

    @property
    def fits(self) -> bool:
        return self.available_gib > 0 and self.needed_gib <= self.available_gib

    @property
    def max_concurrency(self) -> float:
        return self.kv_tokens / self.max_model_len

    def log_lines(self) -> list[str]:
        """The lines operators grep after a good boot (NOTES: thousands separators)."""
        return [
            f"Available KV cache memory: {self.available_gib:.2f} GiB",
            f"GPU KV cache size: {self.kv_tokens:,} tokens",
            f"Maximum concurrency for {self.max_model_len:,} tokens per request: {self.max_concurrency:.2f}x",
        ]

    def error_message(self) -> str:
        """vLLM's ValueError text (vllm/v1/core/kv_cache_utils.py), verbatim shape from NOTES."""
        if self.available_gib <= 0:
            return ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                    "when initializing the engine.")
        return (
            f"To serve at least one request with the model's max seq len ({self.max_model_len}), "
            f"({self.needed_gib:.2f} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({self.available_gib:.2f} GiB). Based on the available memory, the estimated maximum "
            f"model length is {self.estimated_max_len}. Try increasing `gpu_memory_utilization` or "
            f"decreasing `max_model_len` when initializing the engine."
        )


def kv_budget(gpu_memory_utilization: float, max_model_len: int, block_size: int = 256,
              sticky_gib: float = 0.0) -> KvBudget:
    """KV sizing for a memory setting; ``sticky_gib`` is memory the OS still holds (fault sticky-uma)."""
    available = gpu_memory_utilization * GPU_MEMORY_GIB - NON_KV_USED_GIB - sticky_gib
    tokens = max(0.0, (available - KV_FIXED_GIB) / KV_PER_TOKEN_GIB)
    # vLLM's estimate is a whole number of blocks; the epsilon keeps 953088.0 from flooring a block down.
    estimated = int(math.floor(tokens / block_size + 1e-6)) * block_size
    return KvBudget(
        gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len,
        available_gib=available,
        needed_gib=KV_FIXED_GIB + KV_PER_TOKEN_GIB * max_model_len,
        kv_tokens=int(round(tokens)),
        estimated_max_len=estimated,
    )


def startup_memory_error(gpu_memory_utilization: float, sticky_gib: float = 0.0) -> Optional[str]:
    """vLLM's refusal when free memory at start is below what the utilization asks for (sticky UMA, T15)."""
    free = GPU_MEMORY_GIB - sticky_gib
    wanted = gpu_memory_utilization * GPU_MEMORY_GIB
    if free >= wanted:
        return None
    return (f"Free memory on device ({free:.2f}/{GPU_MEMORY_GIB:.2f} GiB) on startup is less than desired GPU memory "
            f"utilization ({gpu_memory_utilization}, {wanted:.2f} GiB). Decrease GPU memory utilization or reduce "
            f"GPU memory used by other processes.")


# --- Workloads: draft acceptance per class (T04, T06) ---------------------------------------------
DRAFTER_BLOCK_SIZE = 5  # 000 pitfall 14: dspark_block_size=5; positions beyond it are never accepted (T08)


@dataclass(frozen=True)
class Workload:
    """A request class: P(draft position i and all before it accepted), for positions 1..block size."""

    name: str
    cumulative_accept: tuple[float, ...]

    def accepted(self, k: int, u: float) -> int:
        """Accepted draft tokens of one verify of ``k`` positions for a uniform draw ``u`` in [0, 1)."""
        return sum(1 for c in self.cumulative_accept[: max(0, k)] if u < c)

    def mean_tokens_per_step(self, k: int) -> float:
        """1 target token + expected accepted drafts: vLLM's mean acceptance length."""
        return 1.0 + sum(self.cumulative_accept[: max(0, k)])


# Twin assumptions shaped so the C1 decode rates come out where the seeds put each class:
# count ~94 t/s (000), code/agent/JSON/tool inside 47-70 t/s (000), probe and prose at 003's 82.8 t/s.
WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("probe", (0.90, 0.75, 0.55, 0.35, 0.20)),
        Workload("prose", (0.90, 0.75, 0.55, 0.35, 0.20)),
        Workload("count", (0.96, 0.88, 0.72, 0.48, 0.29)),
        Workload("json", (0.80, 0.57, 0.35, 0.18, 0.10)),
        Workload("code", (0.75, 0.50, 0.28, 0.13, 0.06)),
        Workload("tool", (0.72, 0.45, 0.23, 0.10, 0.04)),
        Workload("agent", (0.68, 0.40, 0.18, 0.07, 0.03)),
    )
}

_COUNT_RE = re.compile(r"\bcount\b", re.I)
_ONLY_JSON_RE = re.compile(r"\b(?:only|return|output|respond (?:with|in))\s+(?:only\s+)?json\b|\bjson only\b", re.I)
_CODE_RE = re.compile(
    r"\b(?:python|rust|bash|typescript|javascript|golang|go|sql|c\+\+|java|code|function|script|class|"
    r"refactor|implement|def|compile|bug|regex)\b", re.I)
_JSON_RE = re.compile(r"\bjson\b", re.I)
_PROSE_RE = re.compile(r"\b(?:explain|story|describe|summari[sz]e|letter|essay|guide|paragraph|poem)\b", re.I)


def classify(prompt: str, has_tools: bool = False, after_tool_result: bool = False,
             json_format: bool = False) -> Workload:
    """The workload class a request falls in, from its prompt text and shape."""
    if after_tool_result:
        name = "agent"
    elif _COUNT_RE.search(prompt):
        name = "count"
    elif json_format or _ONLY_JSON_RE.search(prompt):
        name = "json"
    elif has_tools:
        name = "tool"
    elif _CODE_RE.search(prompt):
        name = "code"
    elif _JSON_RE.search(prompt):
        name = "json"
    elif _PROSE_RE.search(prompt):
        name = "prose"
    else:
        name = "probe"
    return WORKLOADS[name]


# --- Step timing (T03, T04, T05, T07, T08) --------------------------------------------------------
# One decode step verifies K+1 tokens for each of B requests: n = B*(K+1). Its time is a soft
# roofline: memory-bound STEP_BASE_S at small n, compute-bound STEP_PER_TOKEN_S*n at large n,
# blended by a p-norm. The three constants are fitted (simulate_wave, fixed K=5, probe class,
# 256-token streams) to 003's per-stream rates C1 82.8, C4 59.1, C6 42.5 tok/s. The roofline shape
# is a twin assumption; it is what makes the 5/4/3 schedule (000) raise aggregate at C4-C6 (T05):
# fewer verify positions per request buy more than the tail acceptance they give up.
STEP_BASE_S = 0.045074
STEP_PER_TOKEN_S = 0.0023723
STEP_ROOFLINE_P = 3.5320
# Prefill: all requests admitted at one step boundary prefill together. Cost grows with their number
# (superlinear: they contend for the same step) and with their tokens. Fitted to 003's wall aggregates
# C1 76.6, C4 211.6, C6 219.2 tok/s (255 tokens per request); PREFILL_PER_TOKEN_S is a twin assumption
# (about 4,000 prompt tokens/s), so TTFT also grows with prompt length.
PREFILL_BASE_S = 0.23618
PREFILL_BATCH_S = 0.0040963
PREFILL_BATCH_EXP = 2.8389
PREFILL_PER_TOKEN_S = 0.00025
# Twin assumption: the breakable CUDA-graph path (000 pitfall 1) costs this much per decode step; the
# seeds only say it is the slow path (94.3-94.7 count t/s came "after the graph fix").
BREAKABLE_STEP_FACTOR = 1.25
# MAX_NUM_BATCHED_TOKENS: 8192 is the measured best (000). Twin assumptions for the measured
# regressions: 16384 slows every decode step (000 pitfall 2: single-stream regression), and a
# budget that is not a whole number of 256-token blocks (8216, 000 pitfall 3) slows them too.
BATCH_BUDGET_BEST = 8192
BUDGET_PER_DOUBLING_FACTOR = 0.06
BUDGET_MISALIGNED_FACTOR = 0.04
SCHEDULER_BLOCK_TOKENS = 256
# Twin assumptions for latency events (T09, T10); both scale with time_scale, decode never does.
COLD_BIND_S = 9 * 60.0  # 000: cold bind is often 8-15 minutes
JIT_DELAY_S = 30.0  # 000: first use of an untouched shape compiles kernels mid-inference
# Twin assumption: free text ends by itself ("stop") after this many tokens, so a client asking for far
# more (Hermes sends max_tokens 65536) is not streamed for a quarter of an hour.
NATURAL_REPLY_TOKENS = 4096


def budget_factor(max_num_batched_tokens: int) -> float:
    """Decode-step slowdown of a batch-token budget against the measured best, 8192."""
    factor = 1.0
    if max_num_batched_tokens > BATCH_BUDGET_BEST:
        factor += BUDGET_PER_DOUBLING_FACTOR * math.log2(max_num_batched_tokens / BATCH_BUDGET_BEST)
    if max_num_batched_tokens % SCHEDULER_BLOCK_TOKENS:
        factor += BUDGET_MISALIGNED_FACTOR
    return factor


def decode_step_s(batch: int, k: int) -> float:
    """Seconds for one decode step of ``batch`` requests verifying ``k`` draft positions each (fast path)."""
    n = batch * (k + 1)
    return (STEP_BASE_S**STEP_ROOFLINE_P + (STEP_PER_TOKEN_S * n) ** STEP_ROOFLINE_P) ** (1.0 / STEP_ROOFLINE_P)


def prefill_step_s(requests: int, tokens: int) -> float:
    """Seconds a step spends prefilling ``tokens`` prompt tokens of ``requests`` requests."""
    return PREFILL_BASE_S + PREFILL_BATCH_S * requests**PREFILL_BATCH_EXP + PREFILL_PER_TOKEN_S * tokens


@dataclass(frozen=True)
class EngineConfig:
    """The serve settings the behaviour depends on (from `vllm serve` flags and the container env)."""

    max_model_len: int = MODEL_LEN_1M
    max_num_seqs: int = 6
    max_num_batched_tokens: int = 8192
    long_prefill_token_threshold: int = 1024
    num_speculative_tokens: int = 5
    k_schedule: Optional[tuple[tuple[int, int, int], ...]] = None  # num_speculative_tokens_per_batch_size
    breakable_cudagraph: bool = False
    block_size: int = 256
    enable_prefix_caching: bool = True
    prefix_evict: bool = False  # fault prefix-evict
    kv_tokens: int = KV_TOKENS_AT_085
    time_scale: float = 1.0

    def k_for_batch(self, batch: int) -> int:
        """Verify positions for a batch size: the schedule's inclusive range, else the fixed K."""
        for start, end, k in self.k_schedule or ():
            if start <= batch <= end:
                return k
        return self.num_speculative_tokens

    def decode_s(self, batch: int, k: int) -> float:
        slow = BREAKABLE_STEP_FACTOR if self.breakable_cudagraph else 1.0
        return decode_step_s(batch, k) * slow * budget_factor(self.max_num_batched_tokens)

    @property
    def jit_delay_s(self) -> float:
        return JIT_DELAY_S * self.time_scale

    @property
    def cold_bind_s(self) -> float:
        return COLD_BIND_S * self.time_scale


def check_k_schedule(schedule: Any, num_speculative_tokens: int) -> tuple[tuple[int, int, int], ...]:
    """Validate num_speculative_tokens_per_batch_size as vLLM does: [[start_bs, end_bs, K], ...]."""
    if not isinstance(schedule, list) or not schedule:
        raise ValueError("num_speculative_tokens_per_batch_size must be a non-empty list of [start_bs, end_bs, K]")
    rows = []
    for row in schedule:
        if (not isinstance(row, list) or len(row) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) for v in row)):
            raise ValueError(f"num_speculative_tokens_per_batch_size entry {row!r} must be [start_bs, end_bs, K] integers")
        start, end, k = row
        if start < 1 or end < start:
            raise ValueError(f"num_speculative_tokens_per_batch_size entry {row!r}: need 1 <= start_bs <= end_bs")
        if not 0 <= k <= num_speculative_tokens:
            raise ValueError(f"num_speculative_tokens_per_batch_size entry {row!r}: K must be between 0 and "
                             f"num_speculative_tokens ({num_speculative_tokens})")
        rows.append((start, end, k))
    rows.sort()
    for (_, end, _), (start, _, _) in zip(rows, rows[1:]):
        if start <= end:
            raise ValueError("num_speculative_tokens_per_batch_size ranges overlap")
    return tuple(rows)


# --- Text pieces (the twin's tokens) ---------------------------------------------------------------
# Twin assumption: a token is a run of up to 8 letters or 3 digits, or one other character, with the
# whitespace before it. Joining the pieces gives the text back (trailing whitespace aside).
_PIECE_RE = re.compile(r"\s*(?:[A-Za-z]{1,8}|\d{1,3}|[^\sA-Za-z\d])")


def pieces(text: str) -> list[str]:
    return _PIECE_RE.findall(text)


def stable_hash(*parts: str) -> int:
    """A hash that is the same in every process (Python's hash() is salted per process)."""
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def message_text(content: Any) -> str:
    """Text of a message's content: a string or OpenAI content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    return ""


def render_prompt(messages: Seq[Mapping[str, Any]], tools: Optional[Seq[Any]], thinking: bool) -> str:
    """The prompt as a DeepSeek-V4-like chat template frames it (for token counts and prefix hashing)."""
    parts = ["<｜begin▁of▁sentence｜>"]
    if tools:
        parts.append("## Tools\n" + json.dumps(tools, separators=(",", ":"), sort_keys=True) + "\n")
    for message in messages:
        role = str(message.get("role", "user"))
        text = message_text(message.get("content"))
        if role == "system":
            parts.append(text)
        elif role == "user":
            parts.append("<｜User｜>" + text)
        elif role == "assistant":
            parts.append("<｜Assistant｜></think>" + text + "<｜end▁of▁sentence｜>")
        else:
            parts.append("<tool_output>" + text + "</tool_output>")
    parts.append("<｜Assistant｜>" + ("<think>" if thinking else "</think>"))
    return "".join(parts)


def block_hashes(prompt_pieces: Seq[str], block_size: int) -> tuple[int, ...]:
    """Chained hashes of the prompt's full blocks, as vLLM's prefix cache keys them."""
    hashes, parent = [], "root"
    for start in range(0, len(prompt_pieces) - block_size + 1, block_size):
        parent = str(stable_hash(parent, *prompt_pieces[start:start + block_size]))
        hashes.append(int(parent))
    return tuple(hashes)


# --- Replies: thinking, content, tool calls (T11, T12) --------------------------------------------
REASONING_TOKENS = {"low": 48, "high": 192, "max": 384}  # twin assumption, per reasoning_effort
REASONING_TOKENS_DEFAULT = 96
_EXACT_RE = re.compile(r"\breply exactly\s*:?\s*(.+?)\s*$", re.I | re.S)
_COUNT_RANGE_RE = re.compile(r"\bcount(?: down)? from\s+(\d+)\s+to\s+(\d+)(?:\s+in steps of (\w+))?", re.I)
_LOCATION_RE = re.compile(r"\b(?:in|at|for|near)\s+([A-Z][\w.'-]*(?:,?\s+[A-Z][\w.'-]*)*)")
_QUOTED_RE = re.compile(r"[\"“']([^\"”']{1,200})[\"”']")
_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?")
_WORD_RE = re.compile(r"[a-z]+")
_GENERIC_TOOL_WORDS = {"get", "set", "list", "fetch", "run", "call", "make", "create", "update", "delete", "read",
                       "write", "the", "and", "for", "tool", "current", "this", "that", "with", "from"}
_LOCATION_PARAMS = {"city", "location", "place", "address", "town", "region", "where"}
_PATH_PARAMS = {"path", "dir", "directory", "folder"}
_QUERY_PARAMS = {"query", "q", "pattern", "text", "search", "term", "prompt"}
_PATH_RE = re.compile(r"\b(?:under|in|inside|within)\s+(?:the\s+)?([\w.-]*/[\w./-]*|[\w.-]+\s+folder)")
_IDENTIFIER_RE = re.compile(r"\b([A-Za-z]+_[\w]+|[a-z]+[A-Z]\w*)\b")
_STEP_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "ten": 10}
_VOCABULARY = {
    "prose": ("the lane serves requests while the head and worker share each step of the model and the "
              "cache keeps recent prefixes close so a repeated question returns quickly but a busy hour "
              "asks more of every verify pass than a quiet morning ever does").split(),
    "code": ["def", "return", "value", "items", "result", "for", "in", "if", "None", "self", "index",
             "append", "range", "len", "key", "config", "parse", "raise", "ValueError", "else"],
    "agent": ("next I will check the output then update the plan and call the tool again if the result "
              "is incomplete before I report back").split(),
}


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # a JSON string, as vLLM returns it


@dataclass(frozen=True)
class Reply:
    """What the model will say: reasoning, then content or one tool call, as token pieces."""

    workload: Workload
    reasoning: tuple[str, ...]
    content: tuple[str, ...]
    tool_call: Optional[ToolCall]
    finish_reason: str

    @property
    def tokens(self) -> int:
        return len(self.reasoning) + len(self.content)


def thinking_enabled(request_kwargs: Optional[Mapping[str, Any]], default_kwargs: Optional[Mapping[str, Any]],
                     reasoning_effort: Optional[str] = None) -> tuple[bool, Optional[str]]:
    """DeepSeek V4's rule (vllm/tokenizers/deepseek_v4.py): on when bool(thinking) or bool(enable_thinking).

    The request's chat_template_kwargs override the server's --default-chat-template-kwargs key by key;
    the string "false" is truthy, so it turns thinking ON (000 pitfall 10); reasoning_effort "none" is off.
    """
    kwargs = {**(default_kwargs or {}), **(request_kwargs or {})}
    effort = kwargs.get("reasoning_effort", reasoning_effort)
    if effort == "none":
        return False, effort
    return bool(kwargs.get("thinking")) or bool(kwargs.get("enable_thinking")), effort


def _tool_function(tool: Any) -> Mapping[str, Any]:
    return tool.get("function", {}) if isinstance(tool, Mapping) else {}


def _argument_value(name: str, spec: Mapping[str, Any], prompt: str) -> tuple[Any, bool]:
    """One argument read from the prompt and whether the prompt gives it specifically (not as a fallback)."""
    key = name.lower()
    if isinstance(spec.get("enum"), list):
        value = next((v for v in spec["enum"] if str(v).lower() in prompt.lower()), None)
        return value, value is not None
    kind = spec.get("type")
    if kind in ("number", "integer"):
        match = _NUMBER_RE.search(prompt)
        if not match:
            return None, False
        return (int(float(match.group())) if kind == "integer" else float(match.group())), True
    if kind not in (None, "string"):
        return None, False
    if key in _LOCATION_PARAMS:
        match = _LOCATION_RE.search(prompt)
        return (match.group(1).rstrip(".,;:!? "), True) if match else (None, False)
    if key in _PATH_PARAMS:
        match = _PATH_RE.search(prompt)
        return (match.group(1), True) if match else (None, False)
    if key in _QUERY_PARAMS:
        match = _QUOTED_RE.search(prompt) or _IDENTIFIER_RE.search(prompt)
        return (match.group(1), True) if match else (prompt.strip().rstrip("?.!"), False)
    match = _QUOTED_RE.search(prompt)
    return (match.group(1), True) if match else (None, False)


def _tool_arguments(tool: Any, prompt: str) -> tuple[dict[str, Any], bool, int]:
    """Arguments for a tool, whether every required one was found, and how many the prompt gave specifically."""
    schema = _tool_function(tool).get("parameters") or {}
    properties = schema.get("properties") or {}
    arguments, specific = {}, 0
    for name, spec in properties.items():
        value, exact = _argument_value(name, spec if isinstance(spec, Mapping) else {}, prompt)
        if value is not None:
            arguments[name] = value
            specific += exact
    return arguments, set(schema.get("required") or []) <= set(arguments), specific


def _tool_score(tool: Any, prompt: str) -> int:
    """How strongly a prompt asks for a tool: its name words, description words and arguments found."""
    prompt_words = set(_WORD_RE.findall(prompt.lower()))
    function = _tool_function(tool)
    name_words = set(_WORD_RE.findall(re.sub(r"([a-z])([A-Z])", r"\1 \2", str(function.get("name", ""))).lower()))
    described = set(_WORD_RE.findall(str(function.get("description", "")).lower()))

    def overlap(words: set[str]) -> int:
        words = {w for w in words if len(w) > 2} - _GENERIC_TOOL_WORDS
        return sum(1 for w in words if w in prompt_words or w.rstrip("s") in prompt_words or w + "s" in prompt_words)

    arguments, complete, specific = _tool_arguments(tool, prompt)
    if not complete:
        return 0
    return 3 * overlap(name_words) + overlap(described - name_words) + 2 * specific


def plan_tool_call(tools: Optional[Seq[Any]], tool_choice: Any, prompt: str) -> Optional[ToolCall]:
    """The call a request gets (T12): the named tool, or the one the prompt asks for with arguments from it."""
    if not tools or tool_choice == "none":
        return None
    if isinstance(tool_choice, Mapping):
        wanted = _tool_function(tool_choice).get("name")
        chosen = next((t for t in tools if _tool_function(t).get("name") == wanted), None)
    else:
        best = max(tools, key=lambda t: _tool_score(t, prompt))
        chosen = best if tool_choice == "required" or _tool_score(best, prompt) > 0 else None
    if chosen is None:
        return None
    arguments, _, _ = _tool_arguments(chosen, prompt)
    return ToolCall(str(_tool_function(chosen).get("name")), json.dumps(arguments, ensure_ascii=False))


def _count_text(prompt: str, limit: int) -> tuple[str, bool]:
    """The count a count prompt asks for; True when it reaches its stated end within ``limit`` pieces."""
    match = _COUNT_RANGE_RE.search(prompt)
    start, end, step = 1, None, 1
    if match:
        start, end = int(match.group(1)), int(match.group(2))
        given = (match.group(3) or "one").lower()
        step = _STEP_WORDS.get(given, int(given) if given.isdigit() else 1)
    direction = -1 if end is not None and end < start else 1
    numbers, produced, value = [], 0, start
    while produced < limit:
        if end is not None and (value - end) * direction > 0:
            return ", ".join(numbers), True
        numbers.append(str(value))
        produced += len(pieces(str(value))) + 1
        value += direction * step
    return ", ".join(numbers), False


def _free_text(workload: Workload, rng: random.Random, limit: int) -> str:
    """Plausible text of the workload's class, at least ``limit`` pieces long."""
    out, produced, line = [], 0, 0
    while produced < limit:
        line += 1
        if workload.name == "json":
            text = json.dumps({"id": line, "name": rng.choice(_VOCABULARY["prose"]), "value": rng.randint(1, 999),
                               "ok": rng.random() < 0.5})
        elif workload.name == "code":
            words = _VOCABULARY["code"]
            text = f"def {rng.choice(words).lower()}_{line}({rng.choice(words).lower()}):\n    return " + \
                   " ".join(rng.choice(words) for _ in range(rng.randint(3, 7)))
        else:
            words = _VOCABULARY["agent" if workload.name in ("agent", "tool") else "prose"]
            sentence = " ".join(rng.choice(words) for _ in range(rng.randint(8, 16)))
            text = sentence[0].upper() + sentence[1:] + "."
        out.append(text)
        produced += len(pieces(text))
    return ("\n" if workload.name in ("json", "code") else " ").join(out)


def _last_user_text(messages: Seq[Mapping[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return message_text(message.get("content"))
    return ""


def plan_reply(
    messages: Seq[Mapping[str, Any]],
    *,
    max_tokens: Optional[int],
    thinking: bool,
    reasoning_effort: Optional[str] = None,
    tools: Optional[Seq[Any]] = None,
    tool_choice: Any = "auto",
    json_format: bool = False,
    salt: str = "",
) -> Reply:
    """The reply to a chat request, deterministic for a given prompt and salt (temperature 0: no salt).

    "Reply exactly X." gives X; count prompts count; tools give a parsed call; anything else gives
    text of its class until max_tokens ("length"), or NATURAL_REPLY_TOKENS when that comes first ("stop").
    """
    prompt = _last_user_text(messages)
    after_tool = bool(messages) and messages[-1].get("role") == "tool"
    rng = random.Random(stable_hash(json.dumps(list(messages), sort_keys=True, default=str), salt))
    exact = _EXACT_RE.search(prompt)
    call = None if (exact or after_tool) else plan_tool_call(tools, tool_choice, prompt)
    workload = classify(prompt, has_tools=bool(tools) and tool_choice != "none", after_tool_result=after_tool,
                        json_format=json_format)
    cap = max_tokens if max_tokens is not None else NATURAL_REPLY_TOKENS
    natural = max_tokens is None or max_tokens > NATURAL_REPLY_TOKENS
    reasoning: list[str] = []
    if thinking:
        n = REASONING_TOKENS.get(str(reasoning_effort), REASONING_TOKENS_DEFAULT)
        lead = f"The user asks: {prompt[:160].strip()} I should think about what is wanted and answer plainly. "
        reasoning = pieces(lead + _free_text(WORKLOADS["prose"], rng, n))[:n]
    room = max(0, cap - len(reasoning))
    natural_end = True
    if call is not None:
        text = call.arguments
    elif exact:
        text = exact.group(1).rstrip().rstrip(".")
    elif after_tool:
        text = "Here is what the tool returned: " + message_text(messages[-1].get("content"))[:300].strip()
    elif workload.name == "count":
        text, natural_end = _count_text(prompt, room + 1)
    else:
        limit = max(1, NATURAL_REPLY_TOKENS - len(reasoning)) if natural else room + 1
        text, natural_end = "".join(pieces(_free_text(workload, rng, limit))[:limit]), natural
    content = pieces(text) or [" "]
    tokens = reasoning + content
    finish = "tool_calls" if call is not None else "stop"
    if len(tokens) > cap or not natural_end:
        tokens, finish = tokens[:cap], "length"
    reasoning_part = tuple(tokens[: len(reasoning)])
    return Reply(workload, reasoning_part, tuple(tokens[len(reasoning):]), call, finish)


# --- Prefix cache (T13) ----------------------------------------------------------------------------
class PrefixCache:
    """Block-hashed prompt prefixes in an LRU; fault prefix-evict drops everything on an unrelated prompt."""

    def __init__(self, capacity_blocks: int, evict_unrelated: bool = False):
        self.capacity_blocks = max(1, capacity_blocks)
        self.evict_unrelated = evict_unrelated
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def lookup_and_insert(self, hashes: Seq[int]) -> int:
        """Leading blocks already cached; then the prompt's blocks become the most recent."""
        hit = 0
        for h in hashes:
            if h not in self._blocks:
                break
            hit += 1
        if hashes and hit == 0 and self.evict_unrelated:
            self._blocks.clear()
        for h in hashes:
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)
        return hit


# --- Engine core ----------------------------------------------------------------------------------
GOLDEN = (math.sqrt(5) - 1) / 2


def batch_bucket(batch: int) -> int:
    """The CUDA-graph batch bucket a batch size runs in (powers of two)."""
    return 1 << max(0, batch - 1).bit_length()


@dataclass(eq=False)
class Sequence:
    """One request inside the engine: prompt tokens in, ``max_new`` tokens out."""

    seq_id: str
    prompt_tokens: int
    max_new: int
    workload: Workload
    hashes: tuple[int, ...] = ()
    phase: float = 0.0  # start of the request's low-discrepancy acceptance draws (seeded from the request)
    owner: Any = None  # whatever the driver attaches (the server's stream handle)
    cached_tokens: int = 0
    prefilled: int = 0
    produced: int = 0
    steps: int = 0
    jit_s: float = 0.0

    @property
    def prefill_done(self) -> bool:
        return self.prefilled >= self.prompt_tokens

    @property
    def finished(self) -> bool:
        return self.produced >= self.max_new


@dataclass
class EngineStats:
    """Counters /metrics exposes (vLLM names in server.py)."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=lambda: [0] * DRAFTER_BLOCK_SIZE)
    steps: int = 0
    jit_events: int = 0


@dataclass(frozen=True)
class Step:
    """One engine step: how long it takes and the tokens each sequence has at its end."""

    duration_s: float
    emitted: tuple[tuple[Sequence, int], ...]
    jit_s: float
    k: int
    batch: int


class EngineCore:
    """vLLM's scheduler loop in miniature: admit up to max_num_seqs, prefill in budget, decode with drafts.

    Time is not kept here; the driver sleeps each Step's duration (virtual or real) and then hands the
    emitted tokens out, so concurrency effects come from the one shared step, as on the GPU.
    """

    def __init__(self, config: EngineConfig):
        self.config = config
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.stats = EngineStats(accepted_per_pos=[0] * max(DRAFTER_BLOCK_SIZE, config.num_speculative_tokens))
        self.cache = PrefixCache(config.kv_tokens // max(1, config.block_size), config.prefix_evict)
        # Twin assumption: boot-time graph capture covers single-request decode and short prefill only.
        self.warm_shapes: set[tuple] = {("decode", config.k_for_batch(1), 1), ("prefill", False)}

    def reachable_shapes(self) -> set[tuple]:
        """Every shape this configuration can run: what a complete warmup compiles."""
        decode = {("decode", self.config.k_for_batch(b), batch_bucket(b)) for b in range(1, self.config.max_num_seqs + 1)}
        return decode | {("prefill", False), ("prefill", True)}

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def abort(self, seq: Sequence) -> None:
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting.popleft()
            if self.config.enable_prefix_caching:
                hit_blocks = self.cache.lookup_and_insert(seq.hashes)
                seq.cached_tokens = min(hit_blocks * self.config.block_size, seq.prompt_tokens - 1)
                self.stats.prefix_queries += seq.prompt_tokens
                self.stats.prefix_hits += seq.cached_tokens
            seq.prefilled = seq.cached_tokens
            self.stats.prompt_tokens += seq.prompt_tokens
            self.running.append(seq)

    def step(self) -> Optional[Step]:
        """Plan and account one step; None when there is nothing to do."""
        self._admit()
        if not self.running:
            return None
        cfg = self.config
        decoding = [s for s in self.running if s.prefill_done]
        prefilling = [s for s in self.running if not s.prefill_done]
        k = cfg.k_for_batch(len(decoding)) if decoding else 0
        budget = cfg.max_num_batched_tokens - len(decoding) * (k + 1)
        chunks: list[tuple[Sequence, int]] = []
        for seq in prefilling:
            chunk = seq.prompt_tokens - seq.prefilled
            if cfg.long_prefill_token_threshold > 0:
                chunk = min(chunk, cfg.long_prefill_token_threshold)
            chunk = min(chunk, budget)
            if chunk <= 0:
                break
            chunks.append((seq, chunk))
            budget -= chunk
        shapes = set()
        duration = 0.0
        if decoding:
            shapes.add(("decode", k, batch_bucket(len(decoding))))
            duration += cfg.decode_s(len(decoding), k)
        if chunks:
            long_prefill = any(s.prompt_tokens - s.cached_tokens > cfg.long_prefill_token_threshold for s, _ in chunks)
            shapes.add(("prefill", long_prefill))
            duration += prefill_step_s(len(chunks), sum(c for _, c in chunks))
        cold = shapes - self.warm_shapes
        jit = cfg.jit_delay_s * len(cold)
        self.warm_shapes |= cold
        self.stats.jit_events += len(cold)
        emitted: list[tuple[Sequence, int]] = []
        for seq in decoding:
            u = (seq.phase + seq.steps * GOLDEN) % 1.0
            accepted = seq.workload.accepted(k, u)
            seq.steps += 1
            if k:
                self.stats.drafts += 1
                self.stats.draft_tokens += k
                self.stats.accepted_tokens += accepted
                for pos in range(accepted):
                    self.stats.accepted_per_pos[pos] += 1
            emitted.append((seq, min(1 + accepted, seq.max_new - seq.produced)))
        for seq, chunk in chunks:
            seq.prefilled += chunk
            if seq.prefill_done:
                emitted.append((seq, 1))  # the first token is sampled at the end of prefill
        for seq, n in emitted:
            seq.produced += n
            self.stats.generation_tokens += n
        for seq in decoding + [s for s, _ in chunks]:
            seq.jit_s += jit
        self.running = [s for s in self.running if not s.finished]
        self.stats.steps += 1
        return Step(duration + jit, tuple(emitted), jit, k, len(decoding))


def request_phase(*parts: str) -> float:
    """Where a request's acceptance draws start in [0, 1), seeded from the request so runs repeat."""
    return stable_hash("phase", *parts) / 2.0**64


# --- Waves in virtual time (SPEC section 6) --------------------------------------------------------
@dataclass(frozen=True)
class Timing:
    """One request of a wave as SPEC section 6 measures it (seconds from the wave start)."""

    t_sent: float
    t_first: float
    t_last: float
    completion_tokens: int

    @property
    def decode_tokens(self) -> int:
        return self.completion_tokens - 1

    @property
    def stream_decode_tok_s(self) -> float:
        return self.decode_tokens / (self.t_last - self.t_first) if self.t_last > self.t_first else 0.0


@dataclass(frozen=True)
class WaveFigures:
    concurrency: int
    decode_tokens: int
    wall_s: float
    mean_stream_decode_tok_s: float
    wall_aggregate_tok_s: float
    ttft_s_median: float


def wave_figures(timings: Seq[Timing]) -> WaveFigures:
    """SPEC section 6 figures of one wave."""
    start = min(t.t_sent for t in timings)
    wall = max(t.t_last for t in timings) - start
    decode = sum(t.decode_tokens for t in timings)
    return WaveFigures(
        concurrency=len(timings),
        decode_tokens=decode,
        wall_s=wall,
        mean_stream_decode_tok_s=statistics.fmean(t.stream_decode_tok_s for t in timings),
        wall_aggregate_tok_s=decode / wall,
        ttft_s_median=statistics.median(t.t_first - t.t_sent for t in timings),
    )


def sequence_for(seq_id: str, messages: Seq[Mapping[str, Any]], reply: Reply, config: EngineConfig,
                 tools: Optional[Seq[Any]] = None, thinking: bool = False) -> Sequence:
    """The engine's view of a planned request (used by the server and by simulate_wave alike)."""
    prompt_pieces = pieces(render_prompt(messages, tools, thinking))
    return Sequence(
        seq_id=seq_id,
        prompt_tokens=max(1, len(prompt_pieces)),
        max_new=max(1, reply.tokens),
        workload=reply.workload,
        hashes=block_hashes(prompt_pieces, config.block_size),
        phase=request_phase(render_prompt(messages, tools, thinking)),
    )


def run_virtual(core: EngineCore, arrivals: Iterable[tuple[float, Sequence]]) -> dict[str, Timing]:
    """Drive the core in virtual time: requests join at step boundaries, as on the server."""
    pending = sorted(arrivals, key=lambda a: a[0])
    sent = {seq.seq_id: t for t, seq in pending}
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    produced: dict[str, int] = {}
    now, i = 0.0, 0
    while i < len(pending) or not core.idle:
        while i < len(pending) and pending[i][0] <= now:
            core.add(pending[i][1])
            i += 1
        step = core.step()
        if step is None:
            now = pending[i][0]
            continue
        now += step.duration_s
        for seq, n in step.emitted:
            first.setdefault(seq.seq_id, now)
            last[seq.seq_id] = now
            produced[seq.seq_id] = produced.get(seq.seq_id, 0) + n
    return {sid: Timing(sent[sid], first[sid], last[sid], produced[sid]) for sid in sent}


def simulate_wave(config: EngineConfig, prompts: Seq[str], max_tokens: int = 256, warmed: bool = True) -> WaveFigures:
    """C simultaneous streaming requests (one per prompt), temperature 0, thinking off: SPEC section 6 figures.

    ``warmed`` measures a lane after its bounded warmup (every shape compiled), as the seeds' tables were.
    """
    core = EngineCore(config)
    if warmed:
        core.warm_shapes |= core.reachable_shapes()
    arrivals = []
    for i, prompt in enumerate(prompts):
        messages = [{"role": "user", "content": prompt}]
        reply = plan_reply(messages, max_tokens=max_tokens, thinking=False)
        arrivals.append((0.0, sequence_for(f"wave-{i}", messages, reply, config)))
    return wave_figures(list(run_virtual(core, arrivals).values()))
