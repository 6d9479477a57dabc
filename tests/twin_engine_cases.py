"""Shared by the twin engine's test modules: the prompts and configurations the seed figures are checked with.

The probe, count, code and JSON prompts, the recipe's 5/4/3 verify schedule and the canary's streaming
table are the ones lanebook.twin.facts measures its figures with and against, so the tests and the
facts page check the same thing (imported here for the test modules).
"""
from __future__ import annotations

from lanebook.twin import engine, replies, waves
from lanebook.twin.facts import CODE_PROMPT, COUNT_PROMPT, JSON_PROMPT, SCHEDULE_543, SEED_003, STATUS_PROBES

PROBE_SETS = {
    "status": list(STATUS_PROBES),
    "weather": [f"Request number {i} from the harness; say something about the weather of the day." for i in range(6)],
}


def wave(config: engine.EngineConfig, prompts: list[str], c: int, max_tokens: int = 256) -> waves.WaveFigures:
    return waves.simulate_wave(config, prompts[:c], max_tokens)


def c1_rate(config: engine.EngineConfig, prompt: str) -> float:
    return wave(config, [prompt], 1).mean_stream_decode_tok_s


def make_seq(i: int, text: str, max_tokens: int = 32, config: engine.EngineConfig = engine.EngineConfig()):
    messages = [{"role": "user", "content": text}]
    reply = replies.plan_reply(messages, max_tokens=max_tokens, thinking=False)
    return engine.sequence_for(f"s{i}", messages, reply, config)
