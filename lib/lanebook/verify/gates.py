"""The gates before a lane is called live (the recipe's "Gates before calling it live"), as checks that all run
before the verdict: `/v1/models` (id and max_model_len), the startup log, the exact smoke, the tool-call smoke.
The Hermes gates are in lanebook.verify.hermes; every gate gives back the same ExpectedResult.

Requests and judgements are pure functions (exact_smoke_body, tool_smoke_body, judge_models, judge_exact_smoke,
judge_tool_smoke, verdict_table) over the lane and the answers' JSON; `ask` sends one request from this
machine and records it in the executor's history as the curl line an operator would type, so a dry run lists
the requests and sends none.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional

from lanebook.base.checks import FAIL, MARKS, NOT_OBSERVED, NOT_OBSERVED_DRY_RUN, ExpectedResult
from lanebook.base.errors import LanebookError
from lanebook.base.redact import REDACTED
from lanebook.lane.keys import client_key_for
from lanebook.lane.params import LaneParams
from lanebook.nodes.http import JsonAnswer, guarded, request_json
from lanebook.nodes.ssh import Executor, LaneNodes, q
from lanebook.ops.launcher import container_name
from lanebook.ops.logs import BREAKABLE_GATE, KV_CACHE_LINES, check_startup_log

if TYPE_CHECKING:
    from lanebook.steps.runbook import Runbook

EXACT_SMOKE_MAX_TOKENS = 32  # the recipe's exact-smoke request
TOOL_SMOKE_MAX_TOKENS = 256
THINKING_KEYS = ("thinking", "enable_thinking")
REQUEST_TIMEOUT_S = 120.0


def not_observed(step: str, whats: Iterable[str]) -> list[ExpectedResult]:
    """The results a dry run leaves unobserved (it asks the lane nothing)."""
    return [ExpectedResult.judged(step, what, None, NOT_OBSERVED_DRY_RUN) for what in whats]


def run_gate(step: str, gate: Callable[[], list[ExpectedResult]]) -> list[ExpectedResult]:
    """A gate's checks; a LanebookError (a refused connection, a missing container) is that gate's one failed
    check, so the other gates still run and the verdict table shows every gate."""
    try:
        return gate()
    except LanebookError as exc:
        return [ExpectedResult.judged(step, "the gate ran", False, str(exc))]


# --- requests --------------------------------------------------------------------------------------


def curl_line(url: str, body: Optional[Mapping[str, Any]] = None) -> str:
    """The curl command an operator would type for the same request (the recipe's gate lines); a keyed lane's
    bearer header shown with its key replaced (the key itself is never in a line lanebook writes)."""
    auth = f" -H 'Authorization: Bearer {REDACTED}'" if guarded(url) and client_key_for(url) else ""
    if body is None:
        return f"curl -s {q(url)}{auth}"
    data = json.dumps(body, separators=(",", ":"))
    return f"curl -s {q(url)}{auth} -H 'Content-Type: application/json' -d {q(data)}"


def ask(
    executor: Executor, url: str, body: Optional[dict] = None, timeout_s: float = REQUEST_TIMEOUT_S
) -> Optional[JsonAnswer]:
    """GET (no body) or POST one JSON request from this machine, recorded as its curl line; None in a dry run."""
    line = curl_line(url, body)
    if executor.dry_run:
        executor.record_local(line)
        return None
    started = time.monotonic()
    try:
        answer = request_json("GET" if body is None else "POST", url, body, timeout_s=timeout_s)
    except LanebookError as exc:
        executor.record_local(line, exit_code=1, duration_s=time.monotonic() - started, detail=str(exc))
        raise
    executor.record_local(
        line, exit_code=0 if answer.status == 200 else 1, duration_s=answer.duration_s, detail=f"HTTP {answer.status}"
    )
    return answer


def chat_url(params: LaneParams) -> str:
    return f"{params.api.rstrip('/')}/chat/completions"


def models_url(params: LaneParams) -> str:
    return f"{params.api.rstrip('/')}/models"


def exact_smoke_body(params: LaneParams) -> dict:
    """The recipe's exact smoke: `Reply exactly TOKEN.`, temperature 0, 32 tokens, the lane's request kwargs."""
    return {
        "model": params.served_model_name,
        "messages": [{"role": "user", "content": params.gates.exact_smoke_prompt}],
        "temperature": 0,
        "max_tokens": EXACT_SMOKE_MAX_TOKENS,
        **params.request,
    }


JSON_TYPES = (  # bool before int: a bool is an int
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (Mapping, "object"),
)


def json_type(value: Any) -> str:
    """The JSON Schema type name of a decoded JSON value (a Python type's own name for anything JSON has not)."""
    if value is None:
        return "null"
    return next((name for kind, name in JSON_TYPES if isinstance(value, kind)), type(value).__name__)


def tool_schema(params: LaneParams) -> dict:
    """The tool the smoke offers, its parameters shaped after the arguments the lane expects back."""
    smoke = params.gates.tool_smoke
    return {
        "type": "function",
        "function": {
            "name": smoke.function,
            "description": f"Call {smoke.function} with: {', '.join(smoke.arguments)}.",
            "parameters": {
                "type": "object",
                "properties": {k: {"type": json_type(v)} for k, v in smoke.arguments.items()},
                "required": list(smoke.arguments),
            },
        },
    }


def tool_smoke_body(params: LaneParams) -> dict:
    """The tool-call smoke: one tool offered with tool_choice auto, as an agent client sends it."""
    return {
        "model": params.served_model_name,
        "messages": [{"role": "user", "content": params.gates.tool_smoke.prompt}],
        "tools": [tool_schema(params)],
        "tool_choice": "auto",
        "temperature": 0,
        "max_tokens": TOOL_SMOKE_MAX_TOKENS,
        **params.request,
    }


# --- judgements (pure) -----------------------------------------------------------------------------


def thinking_problems(kwargs: Any, where: str) -> list[str]:
    """Each thinking switch in chat_template_kwargs that is not a JSON boolean (the template tests truthiness,
    so the string "false" turns thinking on)."""
    if not isinstance(kwargs, Mapping):
        return [f"{where} is {kwargs!r}, not a mapping"] if kwargs is not None else []
    return [
        f"{where}.{key} is {type(kwargs[key]).__name__} {kwargs[key]!r}: any non-empty string turns thinking ON; "
        "use a JSON boolean"
        for key in THINKING_KEYS
        if key in kwargs and not isinstance(kwargs[key], bool)
    ]


def thinking_intended(kwargs: Any) -> bool:
    """Whether the lane means thinking on: only a boolean true says so."""
    return isinstance(kwargs, Mapping) and any(kwargs.get(key) is True for key in THINKING_KEYS)


def _error_text(answer: JsonAnswer) -> str:
    if answer.refused:
        return answer.refused
    body = answer.body
    if isinstance(body, Mapping):
        error = body.get("error")
        message = error.get("message") if isinstance(error, Mapping) else body.get("detail") or body.get("message")
        if message:
            return f"HTTP {answer.status}: {message}"
    return f"HTTP {answer.status}: {answer.text[:200]}"


def _message(answer: JsonAnswer) -> tuple[Optional[Mapping[str, Any]], Optional[str]]:
    """choices[0] of a chat answer and its finish_reason, or (None, why not)."""
    if answer.status != 200:
        return None, _error_text(answer)
    body = answer.body
    choices = body.get("choices") if isinstance(body, Mapping) else None
    if not choices or not isinstance(choices[0], Mapping) or not isinstance(choices[0].get("message"), Mapping):
        return None, f"no choices[0].message in the answer: {answer.text[:200]}"
    return choices[0], None


def reasoning_text(message: Mapping[str, Any]) -> str:
    """The reasoning a chat message carries (vLLM: `reasoning`, older `reasoning_content`)."""
    return str(message.get("reasoning") or message.get("reasoning_content") or "")


def judge_models(step: str, answer: JsonAnswer, params: LaneParams) -> list[ExpectedResult]:
    """/v1/models lists the lane's served name with the lane's max_model_len."""
    data = answer.body.get("data") if answer.status == 200 and isinstance(answer.body, Mapping) else None
    if not isinstance(data, list):
        return [ExpectedResult.judged(step, f"/v1/models lists {params.served_model_name}", False, _error_text(answer))]
    return judge_model_list(step, data, params)


def judge_model_list(step: str, data: list, params: LaneParams) -> list[ExpectedResult]:
    """The entries /v1/models gave (its data[]; launch waits for them) hold the lane's served name with the lane's
    max_model_len."""
    ids = [m.get("id") for m in data if isinstance(m, Mapping)]
    model = next((m for m in data if isinstance(m, Mapping) and m.get("id") == params.served_model_name), None)
    length = model.get("max_model_len") if model else None
    return [
        ExpectedResult.judged(step, f"/v1/models id is {params.served_model_name}", model is not None, f"ids {ids}"),
        ExpectedResult.judged(
            step,
            f"max_model_len is {params.max_model_len:,}",
            length == params.max_model_len,
            f"{length:,}" if isinstance(length, int) else repr(length),
        ),
    ]


def judge_request_kwargs(step: str, params: LaneParams) -> ExpectedResult:
    """The lane's own request kwargs give thinking as a JSON boolean (checked on this machine)."""
    problems = thinking_problems(params.request.get("chat_template_kwargs"), "request.chat_template_kwargs")
    return ExpectedResult.judged(
        step,
        "the lane's request gives thinking as a JSON boolean",
        not problems,
        "; ".join(problems) or json.dumps(params.request.get("chat_template_kwargs")),
        "P10",
        local=True,
    )


def judge_exact_smoke(step: str, answer: JsonAnswer, params: LaneParams) -> list[ExpectedResult]:
    """The reply is the lane's token exactly (no trimming), and thinking is as the request asks."""
    expected = params.gates.exact_smoke
    choice, why = _message(answer)
    if choice is None:
        return [ExpectedResult.judged(step, f"the reply is exactly {expected}", False, why)]
    message = choice["message"]
    content = message.get("content")
    checks = [
        ExpectedResult.judged(
            step,
            f"the reply is exactly {expected}",
            content == expected,
            f"{content!r} (finish_reason {choice.get('finish_reason')})",
        )
    ]
    intended = thinking_intended(params.request.get("chat_template_kwargs"))
    reasoning = reasoning_text(message)
    checks.append(
        ExpectedResult.judged(
            step,
            f"thinking {'on' if intended else 'off'} as the request asks",
            bool(reasoning) == intended,
            f"reasoning of {len(reasoning)} characters in the reply"
            + (" — thinking was ON" if reasoning and not intended else ""),
            "P10",
        )
    )
    return checks


def judge_tool_smoke(step: str, answer: JsonAnswer, params: LaneParams) -> list[ExpectedResult]:
    """The answer carries a structured tool_calls[] calling the lane's tool with its arguments (parsed JSON)."""
    smoke = params.gates.tool_smoke
    wanted = f"{smoke.function}({json.dumps(smoke.arguments, ensure_ascii=False)})"
    choice, why = _message(answer)
    if choice is None:
        return [ExpectedResult.judged(step, "a structured tool_calls[] comes back", False, why)]
    message = choice["message"]
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return [
            ExpectedResult.judged(
                step,
                "a structured tool_calls[] comes back",
                False,
                f"no tool_calls; content {message.get('content')!r} (finish_reason {choice.get('finish_reason')})",
            )
        ]
    call = calls[0] if isinstance(calls[0], Mapping) else {}
    function = call.get("function") if isinstance(call.get("function"), Mapping) else {}
    raw = function.get("arguments")
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else None
    except json.JSONDecodeError:
        arguments = None
    seen = f"{function.get('name')}({raw})"
    return [
        ExpectedResult.judged(
            step,
            "a structured tool_calls[] comes back",
            call.get("type") == "function" and bool(function),
            f"{len(calls)} call(s), finish_reason {choice.get('finish_reason')}",
        ),
        ExpectedResult.judged(
            step,
            f"the call is {wanted}",
            function.get("name") == smoke.function and arguments == smoke.arguments,
            seen if arguments is not None else f"{seen}: arguments are not a JSON object string",
        ),
    ]


# --- the gates: ask, then judge ------------------------------------------------------------------------


def models_gate(step: str, executor: Executor, params: LaneParams) -> list[ExpectedResult]:
    """`curl -s API/models`: the lane's served name and max_model_len."""
    answer = ask(executor, models_url(params))
    if answer is None:
        return not_observed(
            step, [f"/v1/models id is {params.served_model_name}", f"max_model_len is {params.max_model_len:,}"]
        )
    return judge_models(step, answer, params)


def log_gate(step: str, nodes: LaneNodes) -> list[ExpectedResult]:
    """`docker logs CONTAINER 2>&1 | grep -E ...` on the head: no line enabling breakable graphs (P01), startup
    complete, the KV cache in the lane's band."""
    expectations, _kv = check_startup_log(nodes.head, container_name(nodes), nodes.params.gates)
    return [
        replace(
            e,
            step=step,
            pitfall="P01" if e.what == BREAKABLE_GATE else "P07" if e.what.startswith(KV_CACHE_LINES) else None,
        )
        for e in expectations
    ]


def exact_smoke_gate(step: str, executor: Executor, params: LaneParams) -> list[ExpectedResult]:
    """The exact smoke: the lane's request kwargs (checked here), then the reply compared exactly."""
    checks = [judge_request_kwargs(step, params)]
    answer = ask(executor, chat_url(params), exact_smoke_body(params))
    if answer is None:
        return checks + not_observed(step, [f"the reply is exactly {params.gates.exact_smoke}"])
    return checks + judge_exact_smoke(step, answer, params)


def tool_smoke_gate(step: str, executor: Executor, params: LaneParams) -> list[ExpectedResult]:
    """The tool-call smoke: a structured tool_calls[] with the lane's call."""
    answer = ask(executor, chat_url(params), tool_smoke_body(params))
    if answer is None:
        return not_observed(step, ["a structured tool_calls[] comes back"])
    return judge_tool_smoke(step, answer, params)


# --- the verdict table -----------------------------------------------------------------------------


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _outcome(check: ExpectedResult, dry_run: bool) -> str:
    return NOT_OBSERVED if dry_run and not check.local else check.outcome


def verdict_table(checks: Iterable[ExpectedResult], dry_run: bool = False) -> str:
    """Every gate's checks as a Markdown table: step, what was expected, the outcome, what was seen, the pitfall."""
    rows = ["| step | expected | result | seen | pitfall |", "|---|---|---|---|---|"]
    for c in checks:
        rows.append(
            f"| {_cell(c.step)} | {_cell(c.what)} | {MARKS[_outcome(c, dry_run)]} | {_cell(c.detail)} "
            f"| {c.pitfall or ''} |"
        )
    return "\n".join(rows) + "\n"


def table_figures(checks: Iterable[ExpectedResult], dry_run: bool = False) -> list[dict]:
    """The table as the run record keeps it, one dict a check (the keys of records already stored)."""
    return [
        {
            "step": c.step,
            "what": c.what,
            "ok": None if c.outcome == NOT_OBSERVED else c.ok,
            "detail": c.detail,
            "pitfall": c.pitfall,
            "local": c.local,
            "outcome": _outcome(c, dry_run),
        }
        for c in checks
    ]


def failed_checks(checks: Iterable[ExpectedResult]) -> list[ExpectedResult]:
    return [c for c in checks if c.outcome == FAIL]


# --- the gates runbook: each gate shown as it runs, then every check judged under its step ------------------

FIXES = {
    "1 models": "run `status`; a wrong id or context means the lane's env did not reach the server: run `env`, "
    "then `launch`",
    "2 startup log": "auto-enabled breakable graphs (P01): run `env` (env line and compose injection), then `stop` and "
    "`launch`; a KV cache out of band: check GPU_MEMORY_UTILIZATION (P07), then `stop` and `launch`",
    "3 exact smoke": "reasoning in the reply means thinking is on: give chat_template_kwargs.thinking as a JSON "
    "boolean (P10); a wrong reply on a healthy server: run `diagnose`, or `rollback`",
    "4 tool smoke": "the server must run with --enable-auto-tool-choice and --tool-call-parser: run `env`, then "
    "`launch`; otherwise `rollback`",
    "5 hermes provider block": "edit the Hermes config's provider block as the table says (api_key no-key-required, "
    "thinking: false as a boolean, context, default model), then run `gates` again",
    "6 hermes route": "reasoning in state.db means thinking is on (P10): thinking: false as a boolean in the provider "
    "block's extra_body; a Hermes that cannot reach the API: check hermes.host and the API address",
}


def show_gate(rb: "Runbook", found: list[ExpectedResult]) -> list[ExpectedResult]:
    """Show one gate's checks as its table (nothing judged yet: every gate runs); its checks."""
    rb.show(markdown=verdict_table(found, rb.dry_run))
    return found


def gate_step(rb: "Runbook", gate: Callable[[str], list[ExpectedResult]]) -> list[ExpectedResult]:
    """One gate in the runbook's current step, named once there: `gate(step)`'s checks (a LanebookError its one
    failed check, so every gate runs before the verdict), shown as its table; its checks."""
    step = rb.current_step
    return show_gate(rb, run_gate(step, lambda: gate(step)))


def models_step(rb: "Runbook") -> list[ExpectedResult]:
    """`/v1/models` in the current step (models_gate)."""
    return gate_step(rb, lambda step: models_gate(step, rb.nodes.executor, rb.params))


def log_step(rb: "Runbook") -> list[ExpectedResult]:
    """The startup log in the current step (log_gate)."""
    return gate_step(rb, lambda step: log_gate(step, rb.nodes))


def exact_smoke_step(rb: "Runbook") -> list[ExpectedResult]:
    """The exact smoke in the current step, its request printed first as the curl line (exact_smoke_gate)."""
    print(curl_line(chat_url(rb.params), exact_smoke_body(rb.params)))
    return gate_step(rb, lambda step: exact_smoke_gate(step, rb.nodes.executor, rb.params))


def tool_smoke_step(rb: "Runbook") -> list[ExpectedResult]:
    """The tool-call smoke in the current step (tool_smoke_gate)."""
    return gate_step(rb, lambda step: tool_smoke_gate(step, rb.nodes.executor, rb.params))


def judge_gates(rb: "Runbook", checks: list[ExpectedResult]) -> None:
    """Every gate's checks in one table and the record, then each judged under its gate's step with that gate's fix
    (the first failed one stops the run, after every gate has run)."""
    rb.show(markdown=verdict_table(checks, rb.dry_run))
    rb.record(gates=table_figures(checks, rb.dry_run), gates_failed=sorted({c.step for c in failed_checks(checks)}))
    for check in checks:
        with rb.step(check.step, fix=FIXES[check.step]):
            rb.expect(check)
