"""The knob choosing the real vLLM's CPU build over the twin's engine (lanebook.twin.real_engine)."""

from lanebook.twin import real_engine


def test_the_knob_names_the_engine_or_is_refused():
    assert real_engine.requested({"LANEBOOK_TWIN_REAL_ENGINE": "vllm-cpu"})
    assert real_engine.requested({"LANEBOOK_TWIN_REAL_ENGINE": " vllm-cpu\n"})
    assert not real_engine.requested({}) and real_engine.check_knob({}) is None
    assert "must be vllm-cpu or unset" in real_engine.check_knob({"LANEBOOK_TWIN_REAL_ENGINE": "vllm-gpu"})
