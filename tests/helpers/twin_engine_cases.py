"""Shared by the twin engine's test modules: probe prompt sets and short ways to run a wave or build a request.

The status probes are the ones lanebook.twin.facts measures its figures with (as are its count, code
and JSON prompts, its 5/4/3 schedule and the canary's table, which the tests import from there), so
the tests and the facts page check the same thing.
"""

from __future__ import annotations

from lanebook.twin import engine_core, replies, waves
from lanebook.twin.facts import STATUS_PROBES

PROBE_SETS = {
    "status": list(STATUS_PROBES),
    "weather": [f"Request number {i} from the harness; say something about the weather of the day." for i in range(6)],
}


def wave(
    config: engine_core.EngineConfig, prompts: list[str], c: int, max_tokens: int = 256
) -> waves.VirtualWaveFigures:
    return waves.simulate_wave(config, prompts[:c], max_tokens)


def c1_rate(config: engine_core.EngineConfig, prompt: str) -> float:
    return wave(config, [prompt], 1).mean_stream_decode_tok_s


def make_seq(i: int, text: str, max_tokens: int = 32, config: engine_core.EngineConfig = engine_core.EngineConfig()):
    messages = [{"role": "user", "content": text}]
    reply = replies.plan_reply(messages, max_tokens=max_tokens, thinking=False)
    return engine_core.sequence_for(f"s{i}", messages, reply, config)
