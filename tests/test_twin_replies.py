"""What the twin's model says: exact replies, counts, length cut-offs, thinking and tool calls."""

from __future__ import annotations

import json

import pytest
from helpers.twin_serve import WEATHER
from lanebook.twin import replies


def test_exact_reply_count_and_length():
    exact = replies.plan_reply(
        [{"role": "user", "content": "Reply exactly PROMOTE_0731_OK."}], max_tokens=32, thinking=False
    )
    assert ("".join(exact.content), exact.finish_reason) == ("PROMOTE_0731_OK", "stop")
    count = replies.plan_reply([{"role": "user", "content": "Count from 1 to 12."}], max_tokens=256, thinking=False)
    assert ("".join(count.content), count.finish_reason) == ("1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12", "stop")
    prose = replies.plan_reply([{"role": "user", "content": "Explain the lane."}], max_tokens=100, thinking=False)
    assert (prose.tokens, prose.finish_reason) == (100, "length")
    again = replies.plan_reply([{"role": "user", "content": "Explain the lane."}], max_tokens=100, thinking=False)
    assert again == prose  # temperature 0: deterministic


def test_free_text_stops_by_itself_when_the_client_asks_for_far_more():
    reply = replies.plan_reply([{"role": "user", "content": "Explain the lane."}], max_tokens=65536, thinking=False)
    assert (reply.tokens, reply.finish_reason) == (replies.NATURAL_REPLY_TOKENS, "stop")


@pytest.mark.parametrize(
    "kwargs, default, on",
    [
        ({"thinking": "false"}, None, True),  # the string "false" is truthy: it turns thinking on
        ({"thinking": False}, None, False),
        ({"thinking": False}, {"thinking": True, "reasoning_effort": "low"}, False),
        (None, {"thinking": True, "reasoning_effort": "low"}, True),
        ({"enable_thinking": "no"}, None, True),
        ({"thinking": True, "reasoning_effort": "none"}, None, False),
    ],
)
def test_t11_thinking_follows_the_deepseek_v4_template(kwargs, default, on):
    thinking, effort = replies.thinking_enabled(kwargs, default)
    assert thinking is on
    reply = replies.plan_reply(
        [{"role": "user", "content": "Reply exactly ROUTE_OK."}],
        max_tokens=None,
        thinking=thinking,
        reasoning_effort=effort,
    )
    assert bool(reply.reasoning) is on and "".join(reply.content) == "ROUTE_OK"


def test_t12_tool_smoke_parses_the_city():
    reply = replies.plan_reply(
        [{"role": "user", "content": "What is the weather in Pensacola, FL right now?"}],
        max_tokens=None,
        thinking=False,
        tools=[WEATHER],
        tool_choice="auto",
    )
    assert reply.tool_call.name == "get_weather"
    assert json.loads(reply.tool_call.arguments) == {"city": "Pensacola, FL"}
    assert "".join(reply.content) == reply.tool_call.arguments and reply.finish_reason == "tool_calls"


def test_tools_are_not_called_for_an_exact_reply_or_with_tool_choice_none():
    route = replies.plan_reply(
        [{"role": "user", "content": "Reply exactly ROUTE_OK."}], max_tokens=None, thinking=False, tools=[WEATHER]
    )
    assert route.tool_call is None and "".join(route.content) == "ROUTE_OK"
    assert replies.plan_tool_call([WEATHER], "none", "What is the weather in Pensacola, FL?") is None


def test_render_prompt_frames_roles_tools_and_thinking():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
        {"role": "assistant", "content": "Hello"},
        {"role": "tool", "content": "42"},
    ]
    assert replies.render_prompt(messages, None, thinking=True) == (
        "<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hi<｜Assistant｜></think>Hello<｜end▁of▁sentence｜>"
        "<tool_output>42</tool_output><｜Assistant｜><think>"
    )
    with_tools = replies.render_prompt(messages[1:2], [WEATHER], thinking=False)
    assert with_tools.startswith("<｜begin▁of▁sentence｜>## Tools\n[{")
    assert with_tools.endswith("<｜Assistant｜></think>")
