"""Which engine a twin container serves with: LANEBOOK_TWIN_REAL_ENGINE=vllm-cpu chooses the real vLLM's CPU build
(lanebook.twin.vllm_cpu) over the twin's own engine; unset, the twin's.

The knob is read apart from vllm_cpu, by the `vllm` stand-in and by the twin's scaled `sleep` (the real engine's boot
runs in real time), so those processes never import what running the real server needs (argparse and the rest).
"""

KNOB = "LANEBOOK_TWIN_REAL_ENGINE"
ENGINE = "vllm-cpu"


def requested(env: dict[str, str]) -> bool:
    return env.get(KNOB, "").strip() == ENGINE


def check_knob(env: dict[str, str]) -> str | None:
    """A value of the knob that names no engine: the line to refuse it with."""
    value = env.get(KNOB, "").strip()
    return None if value in ("", ENGINE) else f"vllm (lanebook twin): {KNOB} must be {ENGINE} or unset, got {value!r}"
