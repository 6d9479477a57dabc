"""What the twin's model says: the prompt as the chat template frames it, and the reply to a request.

Replies are deterministic for a prompt at temperature 0 and follow the request's shape as the seeds'
gates exercise it: "Reply exactly X." gives X, count prompts count, a request with tools gets a parsed
tool call (the canary's (seed 003) smoke returned get_weather({"city":"Pensacola, FL"}), fact T12),
and thinking follows DeepSeek V4's chat template, where the string "false" turns thinking on (the
recipe, seed 000, pitfall 10; fact T11). Facts live in lanebook.twin.facts.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional
from typing import Sequence as Seq

from lanebook.twin.tokens import pieces, stable_hash
from lanebook.twin.workloads import WORKLOADS, RequestClass, classify

# Twin assumption: free text ends by itself ("stop") after this many tokens, so a client asking for far
# more (Hermes sends max_tokens 65536) is not streamed for a quarter of an hour.
NATURAL_REPLY_TOKENS = 4096


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


REASONING_TOKENS = {"low": 48, "high": 192, "max": 384}  # twin assumption, per reasoning_effort
REASONING_TOKENS_DEFAULT = 96
_EXACT_RE = re.compile(r"\breply exactly\s*:?\s*(.+?)\s*$", re.I | re.S)
_COUNT_RANGE_RE = re.compile(r"\bcount(?: down)? from\s+(\d+)\s+to\s+(\d+)(?:\s+in steps of (\w+))?", re.I)
_LOCATION_RE = re.compile(r"\b(?:in|at|for|near)\s+([A-Z][\w.'-]*(?:,?\s+[A-Z][\w.'-]*)*)")
_QUOTED_RE = re.compile(r"[\"“']([^\"”']{1,200})[\"”']")
_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?")
_WORD_RE = re.compile(r"[a-z]+")
_GENERIC_TOOL_WORDS = {
    "get",
    "set",
    "list",
    "fetch",
    "run",
    "call",
    "make",
    "create",
    "update",
    "delete",
    "read",
    "write",
    "the",
    "and",
    "for",
    "tool",
    "current",
    "this",
    "that",
    "with",
    "from",
}
_LOCATION_PARAMS = {"city", "location", "place", "address", "town", "region", "where"}
_PATH_PARAMS = {"path", "dir", "directory", "folder"}
_QUERY_PARAMS = {"query", "q", "pattern", "text", "search", "term", "prompt"}
_PATH_RE = re.compile(r"\b(?:under|in|inside|within)\s+(?:the\s+)?([\w.-]*/[\w./-]*|[\w.-]+\s+folder)")
_IDENTIFIER_RE = re.compile(r"\b([A-Za-z]+_[\w]+|[a-z]+[A-Z]\w*)\b")
_STEP_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "ten": 10}
_VOCABULARY = {
    "prose": (
        "the lane serves requests while the head and worker share each step of the model and the "
        "cache keeps recent prefixes close so a repeated question returns quickly but a busy hour "
        "asks more of every verify pass than a quiet morning ever does"
    ).split(),
    "code": [
        "def",
        "return",
        "value",
        "items",
        "result",
        "for",
        "in",
        "if",
        "None",
        "self",
        "index",
        "append",
        "range",
        "len",
        "key",
        "config",
        "parse",
        "raise",
        "ValueError",
        "else",
    ],
    "agent": (
        "next I will check the output then update the plan and call the tool again if the result "
        "is incomplete before I report back"
    ).split(),
}


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # a JSON string, as vLLM returns it


@dataclass(frozen=True)
class Reply:
    """What the model will say: reasoning, then content or one tool call, as token pieces."""

    workload: RequestClass
    reasoning: tuple[str, ...]
    content: tuple[str, ...]
    tool_call: Optional[ToolCall]
    finish_reason: str

    @property
    def tokens(self) -> int:
        return len(self.reasoning) + len(self.content)


def thinking_enabled(
    request_kwargs: Optional[Mapping[str, Any]],
    default_kwargs: Optional[Mapping[str, Any]],
    reasoning_effort: Optional[str] = None,
) -> tuple[bool, Optional[str]]:
    """DeepSeek V4's rule (vllm/tokenizers/deepseek_v4.py): on when bool(thinking) or bool(enable_thinking).

    The request's chat_template_kwargs override the server's --default-chat-template-kwargs key by key;
    the string "false" is truthy, so it turns thinking ON (the recipe's pitfall 10, fact T11);
    reasoning_effort "none" is off.
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
    """The call a request gets: the named tool, or the one the prompt asks for with arguments from it.

    The canary's tool smoke (fact T12) asks for the weather in Pensacola, FL and gets
    get_weather({"city": "Pensacola, FL"}).
    """
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


def _free_text(workload: RequestClass, rng: random.Random, limit: int) -> str:
    """Plausible text of the workload's class, at least ``limit`` pieces long."""
    out, produced, line = [], 0, 0
    while produced < limit:
        line += 1
        if workload.name == "json":
            text = json.dumps(
                {
                    "id": line,
                    "name": rng.choice(_VOCABULARY["prose"]),
                    "value": rng.randint(1, 999),
                    "ok": rng.random() < 0.5,
                }
            )
        elif workload.name == "code":
            words = _VOCABULARY["code"]
            text = f"def {rng.choice(words).lower()}_{line}({rng.choice(words).lower()}):\n    return " + " ".join(
                rng.choice(words) for _ in range(rng.randint(3, 7))
            )
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
    workload = classify(
        prompt, has_tools=bool(tools) and tool_choice != "none", after_tool_result=after_tool, json_format=json_format
    )
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
    return Reply(workload, reasoning_part, tuple(tokens[len(reasoning) :]), call, finish)
