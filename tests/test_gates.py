"""The gates' requests and judgements: exact bodies (the recipe's smoke line), each judgement on answers that
pass and that fail, the verdict table, a dry run that records the curl lines and sends nothing, and the
HTTP gates against a real twin `vllm serve` stand-in (thinking "false" seen as reasoning, a structured tool call)."""

from __future__ import annotations

import json

import pytest
from helpers.twin_serve import (
    NAME,
    main,  # noqa: F401 - module-scoped server fixture, used by name
)
from lanebook.base.checks import ExpectedResult
from lanebook.base.errors import LanebookError
from lanebook.lane.params import lane_with, load_lane
from lanebook.nodes.http import JsonAnswer
from lanebook.nodes.ssh import Executor
from lanebook.verify import gates

LANE = load_lane("anemll-0731")
# The recipe's exact-smoke request, as its gate line sends it.
SEED_SMOKE = (
    '{"model":"deepseek-v4-flash-0731","messages":[{"role":"user","content":"Reply exactly PROMOTE_0731_OK."}],'
    '"temperature":0,"max_tokens":32,"chat_template_kwargs":{"thinking":false}}'
)


def answer(body, status=200) -> JsonAnswer:
    return JsonAnswer(status, body, json.dumps(body), 0.01)


def chat_answer(message: dict, finish="stop") -> JsonAnswer:
    return answer({"choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}]})


def outcomes(checks) -> list[tuple[str, str]]:
    return [(c.what, c.outcome) for c in checks]


def test_the_exact_smoke_body_is_the_recipes_gate_line():
    assert json.dumps(gates.exact_smoke_body(LANE), separators=(",", ":")) == SEED_SMOKE
    assert gates.curl_line(gates.chat_url(LANE), gates.exact_smoke_body(LANE)) == (
        "curl -s http://192.168.1.11:8888/v1/chat/completions -H 'Content-Type: application/json' -d '"
        + SEED_SMOKE
        + "'"
    )
    assert gates.curl_line(gates.models_url(LANE)) == "curl -s http://192.168.1.11:8888/v1/models"


def test_the_tool_smoke_offers_the_lanes_tool_with_its_arguments_shape():
    body = gates.tool_smoke_body(LANE)
    assert (
        body["tool_choice"] == "auto"
        and body["temperature"] == 0
        and body["chat_template_kwargs"] == {"thinking": False}
    )
    assert body["messages"] == [{"role": "user", "content": "What is the weather in Pensacola, FL right now?"}]
    function = body["tools"][0]["function"]
    assert function["name"] == "get_weather"
    assert function["parameters"] == {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    }


@pytest.mark.parametrize(
    "value, name",
    [
        (None, "null"),
        (True, "boolean"),
        (3, "integer"),
        (1.5, "number"),
        ("x", "string"),
        ([1], "array"),
        ({"a": 1}, "object"),
    ],
)
def test_json_type_names_each_json_value_as_json_schema_does(value, name):
    assert gates.json_type(value) == name


def test_models_judgement():
    good = answer({"object": "list", "data": [{"id": "deepseek-v4-flash-0731", "max_model_len": 1048576}]})
    assert outcomes(gates.judge_models("1 models", good, LANE)) == [
        ("/v1/models id is deepseek-v4-flash-0731", "pass"),
        ("max_model_len is 1,048,576", "pass"),
    ]
    other = answer({"data": [{"id": "deepseek-v4-flash-dspark", "max_model_len": 1048576}]})
    assert [c.outcome for c in gates.judge_models("1 models", other, LANE)] == ["fail", "fail"]
    short = answer({"data": [{"id": "deepseek-v4-flash-0731", "max_model_len": 358400}]})
    checks = gates.judge_models("1 models", short, LANE)
    assert [c.outcome for c in checks] == ["pass", "fail"] and checks[1].detail == "358,400"
    starting = answer({"error": {"message": "The engine is still starting."}}, status=503)
    [check] = gates.judge_models("1 models", starting, LANE)
    assert check.outcome == "fail" and check.detail == "HTTP 503: The engine is still starting."


def test_exact_smoke_judgement_compares_exactly_and_sees_reasoning():
    assert outcomes(gates.judge_exact_smoke("3", chat_answer({"content": "PROMOTE_0731_OK"}), LANE)) == [
        ("the reply is exactly PROMOTE_0731_OK", "pass"),
        ("thinking off as the request asks", "pass"),
    ]
    spaced = gates.judge_exact_smoke("3", chat_answer({"content": " PROMOTE_0731_OK"}), LANE)
    assert spaced[0].outcome == "fail" and spaced[0].detail == "' PROMOTE_0731_OK' (finish_reason stop)"
    thought = gates.judge_exact_smoke(
        "3", chat_answer({"content": "PROMOTE_0731_OK", "reasoning": "The user asks"}), LANE
    )
    assert thought[1].outcome == "fail" and thought[1].pitfall == "P10" and "thinking was ON" in thought[1].detail
    older = gates.judge_exact_smoke("3", chat_answer({"content": "PROMOTE_0731_OK", "reasoning_content": "hmm"}), LANE)
    assert older[1].outcome == "fail"
    thinking_lane = lane_with(LANE, request={"chat_template_kwargs": {"thinking": True}})
    assert gates.judge_exact_smoke("3", chat_answer({"content": "PROMOTE_0731_OK", "reasoning": "x"}), thinking_lane)[
        1
    ].ok


def test_the_lanes_request_must_give_thinking_as_a_boolean():
    assert gates.judge_request_kwargs("3", LANE).ok and gates.judge_request_kwargs("3", LANE).local
    string = gates.judge_request_kwargs("3", lane_with(LANE, request={"chat_template_kwargs": {"thinking": "false"}}))
    assert string.ok is False and string.pitfall == "P10"
    assert string.detail == (
        "request.chat_template_kwargs.thinking is str 'false': any non-empty string turns thinking ON; "
        "use a JSON boolean"
    )
    assert gates.thinking_problems({"enable_thinking": 0}, "x") == [
        "x.enable_thinking is int 0: any non-empty string turns thinking ON; use a JSON boolean"
    ]
    assert gates.thinking_intended({"thinking": True}) and not gates.thinking_intended({"thinking": "true"})


def test_tool_smoke_judgement_wants_a_structured_call():
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Pensacola, FL"}'},
    }
    good = gates.judge_tool_smoke("4", chat_answer({"content": None, "tool_calls": [call]}, "tool_calls"), LANE)
    assert outcomes(good) == [
        ("a structured tool_calls[] comes back", "pass"),
        ('the call is get_weather({"city": "Pensacola, FL"})', "pass"),
    ]
    as_text = gates.judge_tool_smoke(
        "4", chat_answer({"content": 'get_weather({"city":"Pensacola, FL"})', "tool_calls": []}), LANE
    )
    assert [c.outcome for c in as_text] == ["fail"] and "no tool_calls" in as_text[0].detail
    wrong = dict(call, function={"name": "get_weather", "arguments": '{"city": "Tampa, FL"}'})
    assert [c.outcome for c in gates.judge_tool_smoke("4", chat_answer({"tool_calls": [wrong]}), LANE)] == [
        "pass",
        "fail",
    ]
    broken = dict(call, function={"name": "get_weather", "arguments": "{city: Pensacola"})
    checks = gates.judge_tool_smoke("4", chat_answer({"tool_calls": [broken]}), LANE)
    assert checks[1].outcome == "fail" and checks[1].detail.endswith("arguments are not a JSON object string")
    refused = answer({"error": {"message": '"auto" tool choice requires --enable-auto-tool-choice'}}, status=400)
    assert (
        gates.judge_tool_smoke("4", refused, LANE)[0].detail
        == 'HTTP 400: "auto" tool choice requires --enable-auto-tool-choice'
    )


def test_a_gate_that_raises_is_one_failed_check_and_the_others_still_run():
    def refused():
        raise LanebookError("GET http://x/v1/models failed: ConnectError: refused")

    assert gates.run_gate("1 models", refused) == [
        ExpectedResult.judged("1 models", "the gate ran", False, "GET http://x/v1/models failed: ConnectError: refused")
    ]


def test_verdict_table_and_figures():
    checks = [
        ExpectedResult.judged("3 exact smoke", "the reply is exactly X", True, "'X'"),
        ExpectedResult.judged(
            "5 hermes provider block", "thinking is a JSON boolean", False, "a | b", "P10", local=True
        ),
    ]
    assert gates.verdict_table(checks) == (
        "| step | expected | result | seen | pitfall |\n|---|---|---|---|---|\n"
        "| 3 exact smoke | the reply is exactly X | `PASS` | 'X' |  |\n"
        "| 5 hermes provider block | thinking is a JSON boolean | `FAIL` | a \\| b | P10 |\n"
    )
    dry = gates.verdict_table(checks, dry_run=True).splitlines()
    assert "`NOT OBSERVED`" in dry[2] and "`FAIL`" in dry[3]  # a local result is checked in a dry run too
    assert [f["outcome"] for f in gates.table_figures(checks, dry_run=True)] == ["not observed", "fail"]
    # the keys the run records already stored hold
    assert gates.table_figures(checks)[1] == {
        "step": "5 hermes provider block",
        "what": "thinking is a JSON boolean",
        "ok": False,
        "detail": "a | b",
        "pitfall": "P10",
        "local": True,
        "outcome": "fail",
    }
    assert gates.failed_checks(checks) == checks[1:] and checks[1].title == "thinking is a JSON boolean (P10)"


def test_a_dry_run_records_the_curl_lines_and_sends_nothing():
    executor = Executor(dry_run=True)
    found = (
        gates.models_gate("1 models", executor, LANE)
        + gates.exact_smoke_gate("3", executor, LANE)
        + gates.tool_smoke_gate("4", executor, LANE)
    )
    assert [c.outcome for c in found] == ["not observed", "not observed", "pass", "not observed", "not observed"]
    lines = executor.commands()
    assert lines[:2] == [
        "local: curl -s http://192.168.1.11:8888/v1/models",
        "local: " + gates.curl_line(gates.chat_url(LANE), gates.exact_smoke_body(LANE)),
    ]
    assert len(lines) == 3 and all(r.dry_run for r in executor.history)


@pytest.fixture(scope="module")
def served(main):  # noqa: F811 - the module-scoped twin server
    """The twin lane's parameters pointed at a real twin `vllm serve` (thinking on by default, tools enabled)."""
    return lane_with(load_lane("twin"), api=f"{main.url}/v1", env={"SERVED_MODEL_NAME": NAME})


def test_the_http_gates_pass_against_a_twin_server(served):
    executor = Executor()
    found = (
        gates.models_gate("1", executor, served)
        + gates.exact_smoke_gate("3", executor, served)
        + gates.tool_smoke_gate("4", executor, served)
    )
    assert [c.outcome for c in found] == ["pass"] * 7, found
    assert found[6].detail == 'get_weather({"city": "Pensacola, FL"})'
    assert [r.exit_code for r in executor.history] == [0, 0, 0]


def test_a_string_false_turns_thinking_on_and_the_exact_smoke_sees_it(served):
    """T11 through the twin server: the lane's request with thinking "false" gets reasoning back, which also eats
    the smoke's 32 tokens, so no reply comes."""
    params = lane_with(served, request={"chat_template_kwargs": {"thinking": "false"}})
    found = gates.exact_smoke_gate("3 exact smoke", Executor(), params)
    assert [(c.outcome, c.pitfall) for c in found] == [("fail", "P10"), ("fail", None), ("fail", "P10")]
    assert found[1].detail == "'' (finish_reason length)"
    assert "thinking was ON" in found[2].detail


def test_a_server_that_is_down_fails_the_gate_with_the_request_named():
    params = lane_with(LANE, api="http://127.0.0.1:9/v1")
    [check] = gates.run_gate("1 models", lambda: gates.models_gate("1 models", Executor(), params))
    assert check.ok is False and check.detail.startswith("GET http://127.0.0.1:9/v1/models failed: ConnectError")


def test_model_entries_are_judged_as_the_models_gate_judges_them():
    entries = [{"id": LANE.served_model_name, "max_model_len": LANE.max_model_len}, {"id": "other"}]
    judged = outcomes(gates.judge_model_list("5", entries, LANE))
    assert judged == outcomes(gates.judge_models("5", JsonAnswer(200, {"data": entries}, "", 0.1), LANE))
    assert [outcome for _, outcome in judged] == ["pass", "pass"]
    [named, length] = gates.judge_model_list("5", [], LANE)  # nothing listed (a dry run waited for nothing)
    assert (named.ok, named.detail, length.ok, length.detail) == (False, "ids []", False, "None")


def test_the_runbook_shows_each_gate_then_judges_every_check_under_its_step():
    from lanebook.steps.runbook import Runbook, StepFailed

    assert set(gates.FIXES) == {
        "1 models",
        "2 startup log",
        "3 exact smoke",
        "4 tool smoke",
        "5 hermes provider block",
        "6 hermes route",
    }
    rb = Runbook("gates", "anemll-0731", dry_run=True)
    found = [
        ExpectedResult.judged("1 models", "lists it", None),
        ExpectedResult.judged("3 exact smoke", "lane file", True, local=True),
    ]
    assert gates.show_gate(rb, found) is found
    gates.judge_gates(rb, found)
    assert [(c.step, c.outcome) for c in rb.checks] == [("1 models", "not observed"), ("3 exact smoke", "pass")]
    assert rb.figures["gates_failed"] == [] and [g["outcome"] for g in rb.figures["gates"]] == ["not observed", "pass"]
    failing = [ExpectedResult.judged("4 tool smoke", "lane file", False, "bad", local=True)]
    with pytest.raises(StepFailed, match="4 tool smoke: lane file"):
        gates.judge_gates(rb, failing)
    assert rb.failure == {"step": "4 tool smoke", "fix": gates.FIXES["4 tool smoke"]}


def test_a_gate_step_takes_its_step_from_the_runbook_and_shows_its_table():
    from lanebook.steps.runbook import Runbook

    rb = Runbook("gates", "anemll-0731", dry_run=True)
    with rb.step("1 models"):
        found = gates.models_step(rb)
    assert [(c.step, c.outcome) for c in found] == [("1 models", "not observed")] * 2
    assert rb.nodes.executor.commands() == ["local: curl -s http://192.168.1.11:8888/v1/models"]

    def refused(step):
        raise LanebookError(f"{step}: refused")

    with rb.step("4 tool smoke"):
        [check] = gates.gate_step(rb, refused)
    assert (check.step, check.what, check.ok, check.detail) == (
        "4 tool smoke",
        "the gate ran",
        False,
        "4 tool smoke: refused",
    )
    assert rb.checks == []  # shown, not judged: every gate runs before the verdict
