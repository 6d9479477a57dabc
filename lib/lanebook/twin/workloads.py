"""Request classes and how much of each draft the target model accepts for them.

Speculative decoding's speed depends on what is asked: a count stream's drafts are nearly always
right, code and agent turns much less often (the recipe, seed 000: a count stream ~94 tok/s at one
stream, code and agent work 47-70 tok/s; facts T06 and T08 in lanebook.twin.facts). Each class carries
the probability that the first i draft positions are all accepted; the engine draws against it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The recipe (000, pitfall 14): the Flash drafter's dspark_block_size is 5, so it proposes at most five
# positions; asking for K=7 verifies positions 6-7 that are never accepted (fact T08: no speed gained).
DRAFTER_BLOCK_SIZE = 5


@dataclass(frozen=True)
class RequestClass:
    """A request class as the engine drafts for it: P(draft position i and all before it accepted), for positions
    1..block size (lanebook speed's Workload is a prompt set that requests are sent from)."""

    name: str
    cumulative_accept: tuple[float, ...]

    def accepted(self, k: int, u: float) -> int:
        """Accepted draft tokens of one verify of ``k`` positions for a uniform draw ``u`` in [0, 1)."""
        return sum(1 for c in self.cumulative_accept[: max(0, k)] if u < c)

    def mean_tokens_per_step(self, k: int) -> float:
        """1 target token + expected accepted drafts: vLLM's mean acceptance length."""
        return 1.0 + sum(self.cumulative_accept[: max(0, k)])


# Twin assumptions shaped so the single-stream (C1) decode rates come out where the seeds put each class:
# count ~94 tok/s and code/agent/JSON/tool inside 47-70 tok/s (the recipe, 000), probe and prose at the
# canary's (003) fresh short streaming probe, 82.8 tok/s.
WORKLOADS: dict[str, RequestClass] = {
    w.name: w
    for w in (
        RequestClass("probe", (0.90, 0.75, 0.55, 0.35, 0.20)),
        RequestClass("prose", (0.90, 0.75, 0.55, 0.35, 0.20)),
        RequestClass("count", (0.96, 0.88, 0.72, 0.48, 0.29)),
        RequestClass("json", (0.80, 0.57, 0.35, 0.18, 0.10)),
        RequestClass("code", (0.75, 0.50, 0.28, 0.13, 0.06)),
        RequestClass("tool", (0.72, 0.45, 0.23, 0.10, 0.04)),
        RequestClass("agent", (0.68, 0.40, 0.18, 0.07, 0.03)),
    )
}
# Fault drafter-mismatch: a drafter from another release proposes tokens the target almost never keeps, whatever
# is asked (twin assumption: 2% at the first position, none after it).
MISMATCHED_DRAFTER = RequestClass("mismatched drafter", (0.02, 0.0, 0.0, 0.0, 0.0))

_COUNT_RE = re.compile(r"\bcount\b", re.I)
_ONLY_JSON_RE = re.compile(r"\b(?:only|return|output|respond (?:with|in))\s+(?:only\s+)?json\b|\bjson only\b", re.I)
_CODE_RE = re.compile(
    r"\b(?:python|rust|bash|typescript|javascript|golang|go|sql|c\+\+|java|code|function|script|class|"
    r"refactor|implement|def|compile|bug|regex)\b",
    re.I,
)
_JSON_RE = re.compile(r"\bjson\b", re.I)
_PROSE_RE = re.compile(r"\b(?:explain|story|describe|summari[sz]e|letter|essay|guide|paragraph|poem)\b", re.I)


def classify(
    prompt: str, has_tools: bool = False, after_tool_result: bool = False, json_format: bool = False
) -> RequestClass:
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
