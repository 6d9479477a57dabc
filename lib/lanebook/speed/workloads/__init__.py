"""Workloads as operators use the lane: small prompt sets kept beside this file, one YAML each.

Each request gets a unique tag at the very start of its user message, so no two requests of a run
share a prompt prefix (the prefix cache would otherwise flatter TTFT and prefill).
The request's extra shape (chat_template_kwargs, ...) comes from the lane; ``thinking`` must be a
JSON boolean, because the DeepSeek V4 template treats the string "false" as on (seed 000 pitfall 10).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from lanebook.base import yamltext
from lanebook.base.errors import LanebookError
from lanebook.recipe.pitfalls import THINKING_KEYS

WORKLOADS_DIR = Path(__file__).resolve().parent


class Workload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: StrictStr
    description: StrictStr
    prompts: list[StrictStr] = Field(min_length=1)
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Optional[StrictStr] = None
    context: StrictStr = ""
    context_repeat: StrictInt = 1

    def messages(self, index: int, tag: str) -> list[dict[str, str]]:
        """The messages of request ``index``: unique tag first, then any long context, then the prompt."""
        prompt = self.prompts[index % len(self.prompts)]
        context = "\n".join([self.context] * self.context_repeat) + "\n\n" if self.context else ""
        return [{"role": "user", "content": f"[{tag}]\n{context}{prompt}"}]

    def body_extra(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.tools:
            extra["tools"] = self.tools
        if self.tool_choice:
            extra["tool_choice"] = self.tool_choice
        return extra


def workload_names() -> list[str]:
    return sorted(p.stem for p in WORKLOADS_DIR.glob("*.yaml"))


def load_workload(name: str) -> Workload:
    path = WORKLOADS_DIR / f"{name}.yaml"
    if not path.is_file():
        raise LanebookError(f"unknown workload '{name}' (known: {', '.join(workload_names())})")
    try:
        return Workload.model_validate(yamltext.load(path.read_text()))
    except ValidationError as exc:
        err = exc.errors()[0]
        raise LanebookError(f"{path}: '{'.'.join(map(str, err['loc']))}': {err['msg']}") from None


def check_thinking_booleans(shape: Any, where: str = "request") -> None:
    """Refuse any ``thinking``/``enable_thinking`` that is not a JSON boolean, wherever it is nested."""
    if isinstance(shape, Mapping):
        for key, value in shape.items():
            if key in THINKING_KEYS and not isinstance(value, bool):
                raise LanebookError(
                    f"{where}.{key} must be a JSON boolean, got {value!r}: the DeepSeek V4 template treats "
                    'any non-empty string (even "false") as thinking on (seed 000 pitfall 10)'
                )
            check_thinking_booleans(value, f"{where}.{key}")
    elif isinstance(shape, list):
        for i, item in enumerate(shape):
            check_thinking_booleans(item, f"{where}[{i}]")


def request_body(
    model: str,
    workload: Workload,
    index: int,
    tag: str,
    max_tokens: int,
    lane_request: Mapping[str, Any],
) -> dict[str, Any]:
    """One streamed chat request as ARCHITECTURE.md, "Speed figures", fixes it: temperature 0, max_tokens N, usage
    included."""
    check_thinking_booleans(lane_request)
    return {
        **lane_request,
        **workload.body_extra(),
        "model": model,
        "messages": workload.messages(index, tag),
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
