"""The doctor's diagnosis (lanebook.verify.doctor): cases assembled from the facts of public reports (the line
formats vLLM, NCCL, the kernel and Hermes print, as the cited reports show them), look-alikes a healthy lane shows,
and a healthy start's log. It must name the right cause for at least 80% of the cases and never confirm a finding on
a look-alike or on the healthy log."""

from __future__ import annotations

import json

import pytest
from lanebook.recipe.pitfalls import symptom
from lanebook.verify.doctor import CONFIRMED, SUSPECTED, Line, Scrape, diagnose, read_lines
from lanebook.verify.doctor_cases import CaseIndex
from lanebook.verify.doctor_report import diagnosis_markdown


def v(msg: str, t: str = "10:20:00", level: str = "INFO", where: str = "core.py:1", proc: str = "(APIServer pid=92)"):
    """One line as vLLM's logger prints it: `(PROC pid=N) LEVEL MM-DD HH:MM:SS [file.py:N] message`."""
    return f"{proc} {level} 08-15 {t} [{where}] {msg}"


SHM = (
    "No available shared memory broadcast block found in 60 seconds. This typically happens when some processes are "
    "hanging or doing some time-consuming work (e.g. compilation, weight/kv cache quantization)."
)
READY = v("Application startup complete.", "10:12:00", where="on.py:62")


def spec(mean: float, positions: list[float], t: str = "10:20:00") -> str:
    """vLLM's SpecDecoding log line (vllm/v1/spec_decode/metrics.py)."""
    drafted = 900
    accepted = int(sum(positions) * drafted / len(positions))
    rates = ", ".join(f"{p:.3f}" for p in positions)
    return v(
        f"SpecDecoding metrics: Mean acceptance length: {mean:.2f}, Accepted throughput: {accepted / 10:.2f} tokens/s, "
        f"Drafted throughput: {drafted / 10:.2f} tokens/s, Accepted: {accepted} tokens, Drafted: {drafted} tokens, "
        f"Per-position acceptance rate: {rates}, Avg Draft acceptance rate: {100 * accepted / drafted:.1f}%",
        t,
        where="metrics.py:120",
    )


def stats(prompt: float, gen: float, running: int, waiting: int = 0, t: str = "10:21:00") -> str:
    return v(
        f"Engine 000: Avg prompt throughput: {prompt:.1f} tokens/s, Avg generation throughput: {gen:.1f} tokens/s, "
        f"Running: {running} reqs, Waiting: {waiting} reqs, GPU KV cache usage: 3.1%, Prefix cache hit rate: 0.0%",
        t,
        where="loggers.py:259",
    )


HEALTHY_START = [
    v("vLLM API server version 0.25.2.dev0+g752a3a504.d20260714", "10:00:00", where="api_server.py:1"),
    v("Loading weights took 212.31 seconds", "10:04:00", proc="(Worker_TP0 pid=180)", where="default_loader.py:1"),
    v("Loading drafter model...", "10:04:10", proc="(Worker_TP0 pid=180)", where="gpu_model_runner.py:5332"),
    v(SHM, "10:05:10", proc="(EngineCore pid=120)", where="shm_broadcast.py:466"),
    "(Worker_TP0 pid=180) /usr/local/lib/python3.12/dist-packages/torch/_inductor/compile_fx.py:322: UserWarning: "
    "TensorFloat32 tensor cores for float32 matrix multiplication available but not enabled. Consider setting "
    "`torch.set_float32_matmul_precision('high')` for better performance.",
    v("GPU KV cache size: 2,359,296 tokens", "10:08:00", proc="(EngineCore pid=120)", where="kv_cache_utils.py:1693"),
    v(SHM, "10:09:10", proc="(EngineCore pid=120)", where="shm_broadcast.py:466"),
    READY,
    stats(0.0, 0.0, 0, t="10:12:10"),
    stats(210.5, 81.7, 1, t="10:13:10"),
    spec(4.21, [0.86, 0.74, 0.63, 0.53, 0.45], "10:13:20"),
]


def lines(source: str, rows: list[str]) -> list[Line]:
    return read_lines(source, "\n".join(rows))


def scrape(
    source: str, running: float, generated: float, preempted: float = 0, drafts=0, draft_tokens=0, acc=0, pos=()
):
    rows = [
        "# TYPE vllm:num_requests_running gauge",
        f'vllm:num_requests_running{{engine="0",model_name="deepseek-v4-flash-0731"}} {running}',
        "# TYPE vllm:num_requests_waiting gauge",
        'vllm:num_requests_waiting{engine="0",model_name="deepseek-v4-flash-0731"} 0.0',
        "# TYPE vllm:generation_tokens counter",
        f'vllm:generation_tokens_total{{engine="0",model_name="deepseek-v4-flash-0731"}} {generated}',
        "# TYPE vllm:num_preemptions counter",
        f'vllm:num_preemptions_total{{engine="0",model_name="deepseek-v4-flash-0731"}} {preempted}',
    ]
    if drafts:
        rows += [
            "# TYPE vllm:spec_decode_num_drafts counter",
            f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="deepseek-v4-flash-0731"}} {drafts}',
            "# TYPE vllm:spec_decode_num_draft_tokens counter",
            f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="deepseek-v4-flash-0731"}} {draft_tokens}',
            "# TYPE vllm:spec_decode_num_accepted_tokens counter",
            f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="deepseek-v4-flash-0731"}} {acc}',
            "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
        ] + [
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="deepseek-v4-flash-0731",'
            f'position="{i}"}} {n}'
            for i, n in enumerate(pos)
        ]
    return Scrape(source, "\n".join(rows) + "\n")


def reply(content, reasoning=None, finish="stop", tool_calls=None) -> str:
    """A chat completion as the gates and probes record it (one JSON line)."""
    message = {"role": "assistant", "content": content, "reasoning_content": reasoning}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    body = {"id": "chatcmpl-1", "object": "chat.completion", "model": "deepseek-v4-flash-0731"}
    body["choices"] = [{"index": 0, "message": message, "finish_reason": finish}]
    body["usage"] = {"prompt_tokens": 41, "completion_tokens": 4096, "total_tokens": 4137}
    return json.dumps(body, ensure_ascii=False)


def tool(arguments: str) -> list[dict]:
    return [{"id": "call_1", "type": "function", "function": {"name": "write_file", "arguments": arguments}}]


def record(rate: float, n: int) -> str:
    """A speed record of one request of a wave (lanebook.speed.records), one JSON line."""
    return json.dumps({"request": n, "completion_tokens": 257, "decode_tokens": 256, "stream_decode_tok_s": rate})


NVRM = (
    "[ 8123.441201] NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) returned "
    "from _memdescAllocInternal(pMemDesc) @ mem_desc.c:1359"
)

# (name, expected id, logs {source: rows}, metrics [Scrape], kernel rows)
CASES = [
    # runtime pitfalls of the recipe
    (
        "breakable graphs auto-enabled",
        "P01",
        {"head.log": HEALTHY_START[:2] + [v("Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1 for DSpark", "10:03:00")]},
        [],
        [],
    ),
    (
        "sticky memory after stop",
        "P04",
        {
            "head-shell.txt": [
                "$ ./stop-deepseek-v4-flash-dspark.sh",
                " Container ds4-f-mia-anemll-0731-vllm-1  Removed",
                "$ free -g",
                "               total        used        free      shared  buff/cache   available",
                "Mem:             121          14         104           0           3         106",
            ]
        },
        [],
        [],
    ),
    (
        "0.80 at 1M context",
        "P07",
        {
            "head.log": [
                v(
                    "ValueError: To serve at least one request with the model's max seq len (1048576), (7.54 GiB KV "
                    "cache is needed, which is larger than the available KV cache memory (7.16 GiB). Based on the "
                    "available memory, the estimated maximum model length is 953088. Try increasing "
                    "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
                    "10:07:00",
                    "ERROR",
                    proc="(EngineCore pid=120)",
                )
            ]
        },
        [],
        [],
    ),
    (
        "JIT during inference with the warmup bypassed",
        "P12",
        {
            "launcher.log": ["POST_READINESS_WARMUP_ENABLED=0 (bypass)"],
            "head.log": HEALTHY_START
            + [
                v(
                    "Triton kernel JIT compilation during inference: _fp8_mqa_logits_kernel. This causes a latency "
                    "spike; consider extending warmup to cover this shape/config.",
                    "10:30:00",
                    "WARNING",
                    "jit_monitor.py:127",
                    "(Worker_TP1 pid=97)",
                )
            ],
        },
        [],
        [],
    ),
    (
        "legacy unit still active",
        "P13",
        {"head-units.txt": ["  aiden-vllm.service   loaded active running   Aiden vLLM serving (legacy)", "", ""]},
        [],
        [],
    ),
    (
        "host memory exhausted during a long prefill",
        "P15",
        {"head.log": HEALTHY_START},
        [],
        [NVRM],
    ),
    (
        "head died, worker orphaned",
        "P16",
        {
            "worker.log": [
                v("Loading weights took 220.10 seconds", "10:04:00", proc="(Worker_TP1 pid=97)"),
                "[rank1]:[W815 11:20:19.000 ProcessGroupNCCL.cpp:1500] [PG ID 0 PG GUID 0 Rank 1] Failed to recv, "
                "got 0 bytes. Connection was likely closed. recvValue failed: Connection reset by peer",
            ]
        },
        [],
        [],
    ),
    # the TP pair hangs or dies
    (
        "TP hang: SHM timeouts after readiness, counters frozen",
        "D01",
        {"head.log": HEALTHY_START + [v(SHM, f"11:0{n}:00", proc="(EngineCore pid=120)") for n in range(3)]},
        [scrape("metrics-1.txt", 3, 51234), scrape("metrics-2.txt", 3, 51234)],
        [],
    ),
    (
        "TP hang: Running with zero throughput",
        "D01",
        {"head.log": HEALTHY_START + [stats(0.0, 0.0, 2, t=f"11:0{n}:00") for n in range(3)]},
        [],
        [],
    ),
    (
        "engine dead mid-stream",
        "D02",
        {
            "head.log": HEALTHY_START
            + [
                v("EngineCore encountered a fatal error.", "11:20:14", "ERROR", "core.py:1138", "(EngineCore pid=120)"),
                v(
                    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace "
                    "(above) for the root cause.",
                    "11:20:19",
                    "ERROR",
                    "serving.py:825",
                ),
            ]
        },
        [],
        [],
    ),
    (
        "worker died on an illegal memory access",
        "D02",
        {
            "head.log": [
                "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:1735 'an illegal memory access was "
                "encountered'",
                v(
                    "Worker proc VllmWorker-1 died unexpectedly, shutting down executor.",
                    "03:15:57",
                    "ERROR",
                    "multiproc_executor.py:284",
                    "(EngineCore pid=684)",
                ),
            ]
        },
        [],
        [],
    ),
    (
        "rank 1 never joins the rendezvous",
        "D03",
        {
            "head.log": [
                v("world_size=2 rank=0 local_rank=0 distributed_init_method=tcp://10.0.0.1:29501", "10:01:00"),
                "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 1/2 clients "
                "joined.",
            ]
        },
        [],
        [],
    ),
    # speculative acceptance
    (
        "low acceptance in the SpecDecoding log lines",
        "D04",
        {"head.log": HEALTHY_START[:8] + [spec(1.62, [0.31, 0.14, 0.09, 0.05, 0.03], f"10:2{n}:00") for n in range(3)]},
        [],
        [],
    ),
    (
        "acceptance at a quarter of a two-token draft, where a healthy drafter keeps about 60 %",
        "D04",
        {"head.log": HEALTHY_START[:8] + [spec(1.51, [0.40, 0.11], f"10:2{n}:00") for n in range(3)]},
        [],
        [],
    ),
    (
        "acceptance collapsed in /metrics per position",
        "D04",
        {"head.log": [READY]},
        [
            scrape("m1.txt", 1, 1000, drafts=1000, draft_tokens=5000, acc=3000, pos=(900, 800, 700, 400, 200)),
            scrape("m2.txt", 1, 1500, drafts=1500, draft_tokens=7500, acc=3004, pos=(902, 801, 701, 400, 200)),
        ],
        [],
    ),
    # RoCE link drift
    (
        "pinned GID index fails on one HCA",
        "D05",
        {
            "worker.log": [
                "spark2:97:231 [0] NCCL INFO NET/IB : Using [0]rocep1s0f0:1/RoCE [1]roceP2p1s0f0:1/RoCE",
                "spark2:97:231 [0] transport/net_ib.cc:1050 NCCL WARN Call to ibv_modify_qp failed with 61 No data "
                "available, on dev roceP2p1s0f0:1, curr state INIT, next state RTR, local GID index 3, local GID "
                "::ffff:10.0.1.2, remote GID ::ffff:10.0.1.1",
            ]
        },
        [],
        [],
    ),
    (
        "RoCE link MTU differs after a reboot",
        "D05",
        {
            "head-ip-link.txt": [
                "4: enp1s0f0np0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 qdisc mq state UP mode DEFAULT",
                "    link/ether 4c:bb:47:00:00:01 brd ff:ff:ff:ff:ff:ff",
            ],
            "worker-ip-link.txt": [
                "4: enp1s0f0np0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc mq state UP mode DEFAULT",
                "    link/ether 4c:bb:47:00:00:02 brd ff:ff:ff:ff:ff:ff",
            ],
        },
        [],
        [],
    ),
    (
        "NCCL unhandled system error at TP init",
        "D05",
        {
            "worker.log": [
                '  File "/usr/local/lib/python3.12/dist-packages/vllm/distributed/parallel_state.py", line 1181, in '
                "init_model_parallel_group",
                "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
            ]
        },
        [],
        [],
    ),
    # startup out of memory
    (
        "OOM loading the drafter",
        "D06",
        {
            "head.log": [
                v(
                    "Loading drafter model...",
                    "18:03:00",
                    proc="(Worker_TP0 pid=180)",
                    where="gpu_model_runner.py:5332",
                ),
                v("EngineCore failed to start.", "18:03:38", "ERROR", "core.py:1349", "(EngineCore pid=120)"),
            ]
        },
        [],
        [
            "[ 2210.100001] NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) "
            "returned from _memdescAllocInternal(pMemDesc) @ mem_desc.c:1359"
        ],
    ),
    (
        "CUDA out of memory at startup",
        "D06",
        {
            "head.log": [
                v(
                    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                    "capacity of 119.70 GiB of which 1.12 GiB is free.",
                    "10:06:00",
                    "ERROR",
                    "multiproc_executor.py:971",
                    "(Worker_TP0 pid=180)",
                )
            ]
        },
        [],
        [],
    ),
    # client-visible output faults
    (
        "Hermes refuses a truncated tool call",
        "D07",
        {
            "hermes.log": [
                "⚠️  Response truncated (finish_reason='length') - model hit max output tokens",
                "⚠️  Truncated tool call detected — retrying API call (1/4)...",
            ]
        },
        [],
        [],
    ),
    (
        "tool call arguments cut at max_tokens",
        "D07",
        {
            "gate-replies.jsonl": [
                reply(None, "Writing the file.", "length", tool('{"path": "a.py", "content": "def f('))
            ]
        },
        [],
        [],
    ),
    (
        "reasoning used up max_tokens, content empty",
        "D08",
        {"probe-reply.json": [reply(None, "We need to write an HTML page with an aquarium...", "length")]},
        [],
        [],
    ),
    (
        "DSML markup leaks into content",
        "D10",
        {"probe-reply.json": [reply('<｜DSML｜tool_calls><｜DSML｜invoke name="get_weather">', None, "stop")]},
        [],
        [],
    ),
    (
        "thinking turned on by a string",
        "P10",
        {"probe-reply.json": [reply("", "The user wants exactly PROMOTE_0731_OK.", "stop")]},
        [],
        [],
    ),
    # scheduler starvation
    (
        "one decode lane starved, no preemption",
        "D11",
        {"wave.jsonl": [record(59.4, 0), record(57.9, 1), record(6.6, 2)]},
        [scrape("m1.txt", 3, 1000, preempted=0), scrape("m2.txt", 3, 1800, preempted=0)],
        [],
    ),
    (
        "long prefill with decode crawling",
        "D11",
        {"head.log": HEALTHY_START + [stats(6521.3, 1.2, 3, 0, t=f"11:1{n}:00") for n in range(2)]},
        [],
        [],
    ),
    # host faults from the kernel log
    (
        "PCIe AER fatal and soft lockups",
        "D12",
        {"head.log": HEALTHY_START},
        [],
        [
            "[86290.112] pcieport 0000:00:00.0: AER: Uncorrectable (Fatal) error message received from 0000:01:00.0",
            "[86291.002] mlx5_core 0000:01:00.0: mlx5_pci_err_detected:1087:(pid 912): err_detected state 2",
            "[86320.441] watchdog: BUG: soft lockup - CPU#3 stuck for 26s! [irq/45-aerdrv:97]",
        ],
    ),
    (
        "NVRM failure right after rendezvous on a new kernel",
        "D09",
        {},
        [],
        [NVRM],
    ),
]

LOOK_ALIKES = [
    ("SHM lines during a cold bind", {"head.log": HEALTHY_START}, [], []),
    (
        "warnings every healthy start prints",
        {"head.log": HEALTHY_START},
        [],
        [
            "[   12.001] mlx5_core 0000:01:00.0: mlx5_pcie_event:301:(pid 0): Detected insufficient power on the "
            "PCIe slot (27W)."
        ],
    ),
    (
        "random-token benchmark lowers acceptance",
        {
            "bench.log": ["$ vllm bench serve --dataset-name random --random-input-len 1024 --num-prompts 100"],
            "head.log": HEALTHY_START + [spec(1.9, [0.45, 0.22, 0.12, 0.07, 0.04], f"10:4{n}:00") for n in range(3)],
        },
        [],
        [],
    ),
    (
        "memory dip during warmup",
        {
            "launcher.log": [
                "[launcher] running scripts/run-post-readiness-warmup.sh",
                "[warmup] post-readiness warmup: C4/K4 shape",
                "Mem:             121         109          10           0           2          12",
                "[warmup] post-readiness warmup done (idle queues, no fatal lines)",
            ]
        },
        [],
        [],
    ),
    (
        "JIT compiles before readiness",
        {
            "head.log": [
                v("Triton kernel JIT compilation during inference: _fp8_mqa_logits_kernel.", "10:06:00", "WARNING"),
                "2026-04-27 00:21:17  [TileLang:tilelang.jit.kernel:INFO] (kernel.py:133): TileLang begins to compile "
                "kernel `mhc_post_tilelang` with `out_idx=None`",
            ]
            + HEALTHY_START[3:]
        },
        [],
        [],
    ),
    (
        "a corrected PCIe error",
        {"head.log": HEALTHY_START},
        [],
        ["[ 5012.3] pcieport 0000:00:1d.0: AER: Corrected error received: 0000:07:00.0"],
    ),
    (
        "counters moving between scrapes",
        {"head.log": HEALTHY_START},
        [scrape("m1.txt", 2, 1000), scrape("m2.txt", 2, 1900)],
        [],
    ),
]


def run(logs: dict, metrics: list, kernel: list, **options):
    log_lines = [line for source, rows in logs.items() for line in lines(source, rows)]
    return diagnose(log_lines, metrics, lines("dmesg.txt", kernel) if kernel else [], **options)


def test_names_the_right_cause_for_at_least_80_percent_of_the_cases():
    assert len(CASES) >= 25
    right, wrong = 0, []
    for name, expected, logs, metrics, kernel in CASES:
        found = run(logs, metrics, kernel)
        if expected in found.ids():
            right += 1
        else:
            wrong.append(f"{name}: expected {expected}, got {found.ids()}")
    share = right / len(CASES)
    print(f"doctor: right cause for {right}/{len(CASES)} cases ({share:.0%})")
    assert share >= 0.8, wrong


@pytest.mark.parametrize("name, logs, metrics, kernel", LOOK_ALIKES, ids=[c[0] for c in LOOK_ALIKES])
def test_no_confirmed_finding_on_a_look_alike(name, logs, metrics, kernel):
    found = run(logs, metrics, kernel)
    assert found.confirmed == [], [f.id for f in found.confirmed]


def test_a_healthy_start_gives_no_finding_and_says_what_it_set_aside():
    found = run({"head.log": HEALTHY_START}, [], [])
    assert found.healthy and found.findings == []
    assert [n.id for n in found.notes] == ["P11", "H01"]
    assert [e.line for e in found.notes[0].evidence] == [4, 7]  # the two SHM lines before readiness


def test_one_prefill_heavy_window_is_a_burst_not_starvation():
    """The launcher's post-readiness warmup (a long prefill, then a C4 wave) can leave one such stats line on a healthy
    lane; a long prefill starving decode leaves one per window while it runs."""
    warmup = stats(1423.9, 4.4, 4, t="10:09:50")
    assert run({"head.log": HEALTHY_START + [warmup]}, [], []).findings == []
    lasting = run({"head.log": HEALTHY_START + [warmup, stats(1388.2, 4.1, 4, t="10:10:00")]}, [], [])
    assert [(f.id, f.confidence) for f in lasting.findings] == [("D11", SUSPECTED)]


def test_look_alikes_are_named_as_harmless_notes():
    assert [n.id for n in run(*LOOK_ALIKES[2][1:]).notes] == ["P11", "H01", "H02"]
    assert [n.id for n in run(*LOOK_ALIKES[3][1:]).notes] == ["H03"]
    assert "H01" in [n.id for n in run(*LOOK_ALIKES[1][1:]).notes]


def test_evidence_is_quoted_exactly_with_where_it_was_read():
    name, expected, logs, metrics, kernel = CASES[2]
    found = run(logs, metrics, kernel).findings[0]
    assert (found.id, found.confidence) == ("P07", CONFIRMED)
    assert [(e.source, e.line, e.text) for e in found.evidence] == [("head.log", 1, logs["head.log"][0])]
    assert found.runbook == "env" and found.source == "seed 000 (the recipe), pitfall 7"


def test_evidence_that_fits_several_causes_gives_one_suspected_finding_each_with_the_check_between():
    found = run({"head.log": HEALTHY_START + [v(SHM, "11:00:00")]}, [], [])
    assert {f.id: f.confidence for f in found.findings} == {"P12": SUSPECTED, "D01": SUSPECTED}
    assert "generation_tokens_total" in symptom("D01").next_check
    assert all(f.to_json()["next_check"] for f in found.findings)
    # two scrapes decide it: frozen counters confirm the hang, moving ones leave a slow compile
    frozen = run({"head.log": HEALTHY_START + [v(SHM, "11:00:00")]}, [scrape("a", 2, 10), scrape("b", 2, 10)], [])
    assert frozen.ids(CONFIRMED) == ["D01"] and "P12" not in frozen.ids()
    moving = run({"head.log": HEALTHY_START + [v(SHM, "11:00:00")]}, [scrape("a", 2, 10), scrape("b", 2, 90)], [])
    assert moving.ids() == ["P12"] and moving.ids(CONFIRMED) == []


def test_nvrm_alone_is_suspected_for_each_cause_it_fits():
    found = run({}, [], [NVRM])
    assert {f.id: f.confidence for f in found.findings} == {"P15": SUSPECTED, "D06": SUSPECTED, "D09": SUSPECTED}
    assert found.findings[0].evidence[0].source == "dmesg.txt"


def test_a_worker_log_placed_by_timestamps_against_the_heads_readiness():
    worker = [v(SHM, "10:05:00", proc="(Worker_TP1 pid=97)"), v(SHM, "11:30:00", proc="(Worker_TP1 pid=97)")]
    found = run({"head.log": HEALTHY_START, "worker.log": worker}, [], [])
    assert [e.line for e in found.notes[0].evidence if e.source == "worker.log"] == [1]
    assert [e.line for f in found.findings for e in f.evidence] == [2, 2]


def test_metrics_evidence_quotes_the_scrape_lines():
    name, expected, logs, metrics, kernel = CASES[7]
    hang = next(f for f in run(logs, metrics, kernel).findings if f.id == "D01")
    quoted = [(e.source, e.text) for e in hang.evidence if e.source.startswith("metrics")]
    assert ("metrics-1.txt", metrics[0].text.splitlines()[1]) in quoted


def test_json_has_the_spec_shape():
    name, expected, logs, metrics, kernel = CASES[9]
    out = run(logs, metrics, kernel).to_json()
    assert out["healthy"] is False
    first = out["findings"][0]
    assert set(first) >= {"id", "confidence", "cause", "evidence", "fix", "runbook", "next_check", "source"}
    assert set(first["evidence"][0]) == {"source", "line", "text"}


def test_the_runbook_page_shows_the_findings_table_and_the_evidence_as_quoted():
    name, expected, logs, metrics, kernel = CASES[2]
    found = run(logs, metrics, kernel)
    page = diagnosis_markdown(found)
    assert page.startswith("| id | confidence | cause | fix | runbook | next check |")
    assert "| P07 " in page and "[env](env.ipynb)" in page and "**sick**: 1 confirmed" in page
    assert f"head.log:1: {logs['head.log'][0]}" in page  # the evidence line, exactly, with where it was read
    healthy = diagnosis_markdown(run({"head.log": HEALTHY_START}, [], []))
    assert "|---|" not in healthy and "**healthy**: no finding (2 harmless note(s))" in healthy


FREE_M = "              total        used        free      shared  buff/cache   available"
NO_SUCH = "Error: No such object: ds4-f-mia-anemll-0731-vllm-dspark-1"
INSPECT = "docker inspect -f '{{.State.StartedAt}}' ds4-f-mia-anemll-0731-vllm-dspark-1"
LEGACY = "  aiden-vllm.service loaded active running legacy vLLM serving stack (aiden-vllm.service)"


def gathered_on(node: str, rows: dict) -> list[Line]:
    """Lines as `lanebook doctor --lane` reads them on a node: each command's output, its source `node:command`."""
    return [line for command, out in rows.items() for line in lines(f"{node}:{command}", out)]


def test_memory_held_where_the_lanes_container_is_not_is_sticky_memory():
    """Read live (no stop line): docker says the lane's container is not there and `free` still shows memory used."""
    sticky = gathered_on(
        "head", {INSPECT: [NO_SUCH], "free -m": [FREE_M, "Mem:  124000  16900  101000  0  6100  107000"]}
    )
    found = diagnose(sticky)
    assert found.ids(CONFIRMED) == ["P04"]
    assert [(e.source, e.text) for e in found.findings[0].evidence] == [
        ("head:free -m", "Mem:  124000  16900  101000  0  6100  107000"),
        (f"head:{INSPECT}", NO_SUCH),
    ]
    idle = gathered_on("head", {INSPECT: [NO_SUCH], "free -m": [FREE_M, "Mem:  124000  4600  113000  0  6100  118000"]})
    assert diagnose(idle).healthy
    elsewhere = gathered_on("worker", {INSPECT: [NO_SUCH]}) + gathered_on(
        "head", {"free -m": [FREE_M, "Mem:  124000  90000  30000  0  6100  31000"]}
    )
    assert diagnose(elsewhere).healthy  # the head's memory is its running lane's: the container missing is the worker's


def test_memory_a_running_legacy_unit_holds_is_that_unit_not_sticky_memory():
    held = gathered_on(
        "head",
        {
            INSPECT: [NO_SUCH],
            "free -m": [FREE_M, "Mem:  124000  45000  73000  0  6100  79000"],
            "systemctl list-units --type=service --state=running --no-pager": [LEGACY],
        },
    )
    found = diagnose(held)
    assert found.ids() == ["P13"] and found.findings[0].evidence[0].text == LEGACY


HUB = "/home/u/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731"
SNAPSHOT = f"{HUB}/snapshots/3f1c0a"
WEIGHTS = "weights index against shards"


def test_a_shard_the_index_names_missing_on_a_node_is_weights_incomplete():
    absent = f"shard absent: {SNAPSHOT}/model-00007-of-00048.safetensors (named in the index)"
    found = diagnose(gathered_on("worker", {WEIGHTS: [absent, "index names 48 shard(s)"]}))
    assert found.ids(CONFIRMED) == ["D13"]
    assert found.findings[0].runbook == "weights" and "*.incomplete" in found.findings[0].fix
    assert [(e.source, e.line, e.text) for e in found.findings[0].evidence] == [(f"worker:{WEIGHTS}", 1, absent)]


def test_an_unfinished_download_or_a_dangling_shard_link_is_weights_incomplete():
    blob = f"incomplete blob: {HUB}/blobs/8e8b4e1cb125e8731c9b238169d7064991caef04ee30fe91ee3b1a656531860b.incomplete"
    dangling = f"shard link dangling: {SNAPSHOT}/model-00009-of-00048.safetensors (target ../../blobs/5dcb5e9e)"
    found = diagnose(gathered_on("worker", {WEIGHTS: ["index names 48 shard(s)", f"{blob} (98417 bytes)"]}))
    assert found.ids(CONFIRMED) == ["D13"] and found.findings[0].evidence[0].line == 2
    assert diagnose(gathered_on("head", {WEIGHTS: [dangling, "index names 48 shard(s)"]})).ids(CONFIRMED) == ["D13"]
    broken = gathered_on("head", {"HF cache symlinks": [f"broken: {SNAPSHOT}/model-00009-of-00048.safetensors"]})
    assert diagnose(broken).ids(CONFIRMED) == ["D13"]


def test_a_dangling_link_to_another_file_is_only_suspected_and_a_whole_tree_is_healthy():
    # the rules alone: retrieval may add what reports about tokenizers resemble (lanebook.verify.doctor_cases)
    broken = gathered_on("head", {"HF cache symlinks": [f"broken: {SNAPSHOT}/tokenizer.json"]})
    other = diagnose(broken, cases=CaseIndex(()))
    assert other.ids(SUSPECTED) == ["D13"] and other.ids(CONFIRMED) == []
    whole = {
        "HF cache symlinks": [f"{SNAPSHOT}/model-00001-of-00048.safetensors -> ../../blobs/a8e1"],
        WEIGHTS: ["index names 48 shard(s)"],
    }
    assert diagnose(gathered_on("head", whole) + gathered_on("worker", whole)).healthy


def test_a_node_ssh_cannot_reach_is_named_with_its_connection_error():
    error = (
        "worker (127.0.0.3) unreachable: NoValidConnectionsError: [Errno None] Unable to connect to port 2222 on "
        "127.0.0.3"
    )
    found = diagnose([Line("worker:ssh", 1, error)])
    assert found.ids(CONFIRMED) == ["D14"]
    assert [(e.source, e.text) for e in found.findings[0].evidence] == [("worker:ssh", error)]
    launcher = (
        "SSH cmd <- 192.168.2.1 FAILED rc=255 (10.0s): ssh: connect to host 192.168.2.1 port 22: Connection timed out"
    )
    assert diagnose(read_lines("launcher.log", launcher)).ids(CONFIRMED) == ["D14"]
    reached = "ssh: connect to host 192.168.2.1 port 22: Connection established"
    assert diagnose(read_lines("launcher.log", reached)).healthy


# D15: the engine processes' CPU as `lanebook doctor --lane` reads it (a `top -b` frame of the container's processes),
# with the facts of MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark#79 and its hotfix PRs (#71, #74): with TP=2 (mp
# executor) VLLM::Worker ~300% and EngineCore ~100% spinning in sched_yield; ~89% in all with busy_loop_s at 2 ms.
TOP = "engine processes' CPU (top)"
TOP_HEADER = "    PID USER      PR  NI    VIRT    RES    SHR S  %CPU  %MEM     TIME+ COMMAND"
LIVE = "docker top ds4-f-mia-anemll-0731-vllm-dspark-1"
SERVE_TP2 = "vllm serve deepseek-ai/DeepSeek-V4-Flash-0731 --tensor-parallel-size 2 --port 8888"
SERVE_TP1 = "vllm serve deepseek-ai/DeepSeek-V4-Flash-0731 --tensor-parallel-size 1 --port 8888"
HOTFIX_ON = "[OK] busy_loop_s = 0.002 — IPC wait sleeps after 2ms instead of spinning 1s."


def top_row(pid: int, cpu: float, command: str, state: str = "R") -> str:
    return f"{pid:>7} root      20   0  187.2g  98.1g  41.0g {state} {cpu:5.1f}  80.1 412:07.33 {command}"


SPINNING = [TOP_HEADER, top_row(2114, 99.7, "VLLM::EngineCore"), top_row(2301, 287.4, "VLLM::Worker_TP0")]
CALM = [TOP_HEADER, top_row(2114, 31.0, "VLLM::EngineCore", "S"), top_row(2301, 58.2, "VLLM::Worker_TP0", "S")]


def spin_lane(rows: list[str], command: str = SERVE_TP2, log: tuple[str, ...] = ()) -> list[Line]:
    head = {"docker logs ds4-f-mia-anemll-0731-vllm-dspark-1": [*log, *HEALTHY_START], LIVE: [command], TOP: rows}
    return gathered_on("head", head)


IDLE = [scrape("local:GET /metrics (scrape 1)", 0, 52000), scrape("local:GET /metrics (scrape 2)", 0, 52000)]
DECODING = [scrape("local:GET /metrics (scrape 1)", 4, 52000), scrape("local:GET /metrics (scrape 2)", 4, 52460)]


def test_engine_processes_spinning_on_an_idle_tp2_lane_is_the_spin_wait_with_quoted_evidence():
    found = diagnose(spin_lane(SPINNING), IDLE)
    assert found.ids() == ["D15"] and found.ids(CONFIRMED) == ["D15"]
    quoted = [(e.source, e.text) for e in found.findings[0].evidence]
    assert quoted[:2] == [(f"head:{TOP}", SPINNING[2]), (f"head:{TOP}", SPINNING[1])]
    assert [t for s, t in quoted[2:]] == [
        'vllm:num_requests_running{engine="0",model_name="deepseek-v4-flash-0731"} 0',
        'vllm:num_requests_running{engine="0",model_name="deepseek-v4-flash-0731"} 0',
    ]
    f = found.findings[0]
    assert f.runbook == "launch" and "busy_loop_s" in f.fix and "VLLM_MQ_SPIN_SECONDS" in f.fix
    assert f.source == "https://github.com/MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark/issues/79"
    # a hotfix that says it could not patch is quoted too, and does not weaken the finding
    failed = "[FAIL] busy_loop_s not set to 0.002"
    not_fixed = diagnose(spin_lane(SPINNING, log=(failed,)), IDLE)
    assert not_fixed.ids(CONFIRMED) == ["D15"] and failed in [e.text for e in not_fixed.findings[0].evidence]


def test_the_same_lane_with_the_spin_fix_and_normal_cpu_gives_no_finding():
    assert diagnose(spin_lane(CALM, log=(HOTFIX_ON,)), IDLE).healthy
    assert diagnose(spin_lane(CALM, log=(HOTFIX_ON,)), DECODING).healthy
    patched = "[gb10-spinwait] patched busy_loop_s 1s -> 2ms in /usr/local/lib/python3.12/dist-packages/vllm/x.py"
    assert diagnose(spin_lane(CALM, log=(patched,)), IDLE).healthy
    # the fix said to be on while the processes still burn: not this cause for sure, only suspected
    still = diagnose(spin_lane(SPINNING, log=(HOTFIX_ON,)), IDLE)
    assert still.ids(SUSPECTED) == ["D15"] and still.ids(CONFIRMED) == []


def test_a_busy_decoding_lane_is_at_most_suspected_with_the_check_that_tells_it_apart():
    for metrics in (DECODING, []):  # decoding, or no scrape to say
        found = diagnose(spin_lane(SPINNING), metrics)
        assert found.ids(SUSPECTED) == ["D15"] and found.ids(CONFIRMED) == []
        check = found.findings[0].to_json()["next_check"]
        assert "mpstat -P ALL" in check and "temperature" in check and "busy_loop_s = 0.002" in check


def test_a_tp1_lane_or_a_lane_without_engine_processes_gives_no_spin_finding():
    one_rank = [TOP_HEADER, top_row(2114, 312.0, "VLLM::EngineCore")]
    assert diagnose(spin_lane(one_rank, SERVE_TP1), IDLE).healthy  # the uni executor forms no queue to spin on
    assert diagnose(spin_lane(SPINNING, SERVE_TP1), IDLE).healthy  # the command's TP=1 wins
    assert diagnose(spin_lane(one_rank, "vllm serve m --port 8888"), IDLE).healthy  # no sign of TP>=2
    other = [TOP_HEADER, top_row(901, 390.0, "python3 train.py"), top_row(2114, 2.0, "VLLM::EngineCore", "S")]
    assert diagnose(spin_lane(other), IDLE).healthy  # another process's CPU is not the engine's
    # the worker node alone spinning (rank 1's Worker) is enough; the node is in the evidence
    worker = gathered_on("worker", {TOP: [TOP_HEADER, top_row(77, 240.3, "VLLM::Worker_TP1")]})
    found = diagnose(spin_lane(CALM) + worker, IDLE)
    assert found.ids(CONFIRMED) == ["D15"] and found.findings[0].evidence[0].source == f"worker:{TOP}"


def test_an_orphan_on_any_worker_rank_is_confirmed():
    """P16 on a four-node lane: the peer-lost line read on worker3 (rank 3), or a saved spark4 log, or a line whose
    process says Worker_TP3, is a worker's; on the head it stays suspected."""
    lost = "[rank3]: Failed to recv, got 0 bytes. Connection was likely closed. Connection reset by peer"
    for source, text in (
        ("worker3:docker logs ds4-f-mia-anemll-0731-tp4-vllm-dspark-1", lost),
        ("spark4.log", "Failed to recv, got 0 bytes. Connection reset by peer"),
        ("node.log", v("Connection reset by peer", "11:20:19", "ERROR", "core.py:1", "(Worker_TP3 pid=97)")),
    ):
        [finding] = [f for f in diagnose(lines(source, [text]), [], []).findings if f.id == "P16"]
        assert finding.confidence == CONFIRMED, source
    on_head = diagnose(lines("head:docker logs x", ["Failed to recv, got 0 bytes. Connection reset by peer"]), [], [])
    assert [f.confidence for f in on_head.findings if f.id == "P16"] == [SUSPECTED]


def test_a_start_that_fails_on_a_loopback_rank_is_that_rank_never_a_death_mid_serve():
    """A Gloo full mesh that fails to 127.0.0.1 while the engine starts: P08 by its own words, and the EngineCore's
    failure that follows is a failed start, not D02 (aws-samples/aws-do-eks#50 shows the lines)."""
    rows = [
        v("Loading weights took 212.31 seconds", "10:04:00", proc="(Worker_TP0 pid=180)", where="default_loader.py:1"),
        "[rank1]:[E1204 22:50:01.164 ProcessGroupGloo.cpp:145] Gloo connectFullMesh failed with "
        "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:152] timed out connecting: SO_ERROR: Connection "
        "refused, remote=[127.0.0.1]:29500 (rank=1, size=2, local=[127.0.0.1])",
        v("EngineCore failed to start.", "10:05:00", level="ERROR", proc="(EngineCore pid=120)"),
        "(APIServer pid=92) vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
    ]
    found = run({"head.log": rows}, [], [])
    assert found.ids(CONFIRMED) == ["P08"] and "D02" not in found.ids()


def test_the_same_death_after_readiness_is_a_death_mid_serve():
    dead = "(APIServer pid=92) vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue."
    assert run({"head.log": [*HEALTHY_START, dead]}, [], []).ids(CONFIRMED) == ["D02"]
    assert run({"head.log": [dead]}, [], []).ids() == ["D02"]  # where the lane was is not known: suspected
    assert run({"head.log": [dead]}, [], []).findings[0].confidence == SUSPECTED


def test_error_lines_no_cause_explains_are_unknown_with_their_layer_never_healthy():
    rows = [
        v("vLLM API server version 0.25.2", "10:00:00"),
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/models/deepseek_v4.py", line 88, in f',
        "AttributeError: 'DeepseekV4Config' object has no attribute 'qk_rope_head_dim'",
    ]
    found = run({"head.log": rows}, [], [], cases=CaseIndex(()))  # the rules alone: the case base may suspect one
    (unknown,) = found.findings
    assert unknown.confidence == "unknown" and not found.healthy and "Python traceback" in unknown.title
    assert unknown.evidence[0].text == "Traceback (most recent call last):" and "traceback" in unknown.next_check
    # the unknown finding's layer, the rules alone (retrieval reading no case: lanebook.verify.doctor_cases)
    nccl = diagnose(
        lines("head.log", ["spark2:1:2 [0] NCCL WARN Error: message truncated : receiving 4096 bytes instead of 2048"]),
        cases=CaseIndex(()),
    )
    assert nccl.findings[0].title.endswith("(NCCL/Gloo)")


def test_an_engine_that_dies_on_the_first_start_after_a_reboot_is_a_failed_start():
    rows = [
        "After a reboot of both nodes the lane comes up no more; the head shows this:",
        "(APIServer pid=92) vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
    ]
    found = run({"post.md": rows}, [], [], cases=CaseIndex(()))  # the rules: phase before cause
    assert "D02" not in found.ids() and found.findings[0].confidence == "unknown"
    assert "D02" not in run({"post.md": rows}, [], []).ids()  # and with the case base's reports


@pytest.mark.parametrize(
    "post",
    [
        "| second | event |\n|---|---|\n| 340 | the engine died on the head |\n",
        "The head logged `shm_broadcast: read cancelled` and stopped answering.\n",
        "Startup ends with **RuntimeError: CUDA driver initialization failed** on the worker.\n",
        "After an hour of serving the worker hung and was OOM-killed; requests were refused.\n",
        "| time | log |\n|---|---|\n| 10:02 | `EngineDeadError: EngineCore encountered an issue.` |\n",
    ],
    ids=["table-words", "inline-code", "bold", "prose", "table-code"],
)
def test_a_failure_stated_only_in_a_table_inline_code_bold_or_words_is_never_healthy(post):
    found = diagnose(read_lines("post.md", post), cases=CaseIndex(()))  # the rules and the registry's words alone
    assert not found.healthy and found.findings[0].confidence in ("unknown", "suspected")
    assert not diagnose(read_lines("post.md", post)).healthy  # and with the case base


def test_a_container_docker_restarted_is_starting_again_until_its_next_readiness():
    """A restarted container keeps its log: the second start's cold-bind SHM lines come after the first start's
    readiness and requests, yet belong to a start (harmless), not to a lane serving and hung."""
    restarted = [line.replace("10:", "11:") for line in HEALTHY_START]
    found = run(
        {"head.log": HEALTHY_START + ['INFO:     127.0.0.1:1 - "GET /v1/models HTTP/1.1" 200 OK'] + restarted}, [], []
    )
    assert found.healthy and [n.id for n in found.notes if n.id == "P11"] == ["P11"], found.findings
    hung = HEALTHY_START + restarted + [v(SHM, f"11:2{n}:00", proc="(EngineCore pid=120)") for n in range(3)]
    assert "D01" in run({"head.log": hung}, [], []).ids()  # after the second readiness it is serving again


def test_a_warning_a_note_names_harmless_names_no_cause_from_its_words():
    """A cold bind's shared-memory warning says processes may be hanging; the note names it harmless, so the
    registry's words read in it name no hang (the doctor read a healthy twin lane so after diagnose relaunched it)."""
    found = run(
        {"head.log": [v(SHM, "10:05:10", proc="(EngineCore_DP0 pid=120)", where="shm_broadcast.py:501")]}, [], []
    )
    assert found.healthy and [n.id for n in found.notes] == ["P11"], found.findings


def test_a_healthy_post_in_words_stays_healthy():
    post = "Both nodes serve; decode holds 40 tok/s at C1 and the TensorFloat32 warning shows at every start.\n"
    assert diagnose(read_lines("post.md", post)).healthy


@pytest.mark.parametrize(
    "post",
    [
        "Since the driver update vLLM fails on the second node and we cannot get the pair to serve.\n",
        "The worker container exits with code 137 a minute after we start the lane.\n",
        "| node | state |\n|---|---|\n| spark2 | does not start, model not found in the cache |\n",
        "Since the update the model gives wrong answers to every tool call the agent makes.\n",
        "The client gets a 401 response on every chat although the key is set in its config.\n",
        "The reply comes back with empty content and the reasoning shows up in the wrong field.\n",
        "Following the two-Spark tutorial no longer works since the image was updated.\n",
        "With NCCL_IB_GID_AUTO on and two HCAs named, the launcher FATALs before vLLM starts.\n",
        "The multi-node job runs in its containers but does not use the IB network.\n",
        "The server starts but runs on CPU only; its log says no GPU detected.\n",
        "All six steps run, then a Python traceback appears after the hooks.\n",
        "Behind Open WebUI the model list is empty, although the endpoint answers.\n",
        "The gateway's replies come back HTTP 502 whenever the prompt is long.\n",
        "Since the new image the answers are garbled, words run together.\n",
        "Two-node training runs at a fraction of the expected speed.\n",
        "Every reply is capped at 1,000 tokens although the model allows far more.\n",
        "After the shards load, nothing happens for an hour.\n",
        "Pointed at that address the agent finds no models.\n",
        "The client stops waiting after a minute and goes on without the answer.\n",
        "One core sits at 100% while the server is idle.\n",
        "Since Tuesday the engine is dying a second after its graphs are captured.\n",
        "With the offline variable set the server still tries to reach the hub.\n",
        "The benchmark gives 0 answer tokens on the reasoning model.\n",
        "Raising the batch size changed nothing at all.\n",
        "The speculative flags are accepted but no drafting happens.\n",
        "Under load the throughput falls below the run without drafts.\n",
        "The pair only works when the second node names its interface by hand.\n",
    ],
    ids=[
        "fails-cannot",
        "exits-with",
        "table-not-found",
        "wrong-answers",
        "http-status",
        "empty-content",
        "works",
        "fatal",
        "not-used",
        "cpu-only",
        "traceback",
        "empty-list",
        "http-status-named",
        "garbled",
        "fraction-of-expected",
        "capped",
        "nothing-happens",
        "finds-none",
        "stops-waiting",
        "busy-idle",
        "dying",
        "still-tries",
        "zero-tokens",
        "changed-nothing",
        "nothing-happens-named",
        "falls-below",
        "only-works-when",
    ],
)
def test_a_post_that_says_it_failed_in_other_words_is_never_healthy(post):
    found = diagnose(read_lines("post.md", post), cases=CaseIndex(()))
    assert not found.healthy and found.findings[0].confidence in ("unknown", "suspected")


@pytest.mark.parametrize(
    "line",
    [
        'INFO:     127.0.0.1:59820 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request',
        "402 Insufficient Balance",
        "ImportError: /x/_C.so: undefined symbol: _ZN3c104cuda9SetDeviceEi",
        "flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi",
        "cudaErrorUnsupportedPtxVersion",
        "IBV_WC_LOC_LEN_ERR",
        "docker: 'compose' is not a docker command.",
        "systemd[1]: vllm.service: Start request repeated too quickly.",
        "NET/IB: No device found.",
        "Tried to allocate 136.00 MiB. GPU 0 has a total capacity of 22.36 GiB of which 120.88 MiB is free.",
    ],
)
def test_a_line_a_program_refuses_with_is_never_healthy(line):
    """A client-error status, a missing symbol, CUDA's and verbs' error codes, a refused command: what a program
    answers when it refuses is an error whatever its words."""
    found = diagnose(read_lines("head.log", line + "\n"), cases=CaseIndex(()))
    assert not found.healthy and found.findings[0].confidence in ("unknown", "suspected", "confirmed")


def test_a_clients_probes_answered_404_beside_served_requests_stay_healthy():
    """Hermes asks a server for the APIs it might offer at every start (GET /api/tags, /v1/props ... 404) and then
    chats on /v1: probes, not failures. A GET answered 404 with no request served is a wrong base URL: an error."""
    probes = [
        f'INFO:     127.0.0.1:43484 - "GET {path} HTTP/1.1" 404 Not Found'
        for path in ("/api/v1/models", "/api/tags", "/v1/props", "/props")
    ]
    served = 'INFO:     127.0.0.1:43490 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
    shm = v(SHM, "10:05:10", proc="(EngineCore_DP0 pid=120)", where="shm_broadcast.py:501")
    found = diagnose(read_lines("head.log", "\n".join([shm, *probes, served]) + "\n"))
    assert found.healthy and [n.id for n in found.notes] == ["P11"], found.findings
    wrong_base = diagnose(read_lines("head.log", '"GET /v1//models HTTP/1.1" 404 Not Found\n'), cases=CaseIndex(()))
    assert not wrong_base.healthy


def test_a_health_poll_answered_503_while_the_server_boots_stays_healthy():
    log = 'INFO:     127.0.0.1:35592 - "GET /health HTTP/1.1" 503 Service Unavailable\n'
    assert diagnose(read_lines("head.log", log)).healthy


def test_routine_log_lines_with_failure_words_stay_healthy():
    log = "(APIServer pid=9) INFO 12-01 10:00:01 [api_server.py:1] Retrying the missing shard check: not found yet\n"
    assert diagnose(read_lines("head.log", log)).healthy  # a log record, not a person's words


def test_a_rendezvous_timed_out_at_a_loopback_master_is_the_address_not_the_worker():
    log = (
        "(EngineCore pid=41) INFO 12-01 10:00:00 [parallel_state.py:1] world_size=2 rank=0 local_rank=0 "
        "distributed_init_method=tcp://127.0.1.1:29501 backend=nccl\n"
        "(EngineCore pid=41) ERROR 12-01 10:10:01 [core.py:88] torch.distributed.DistStoreError: Timed out after 601 "
        "seconds waiting for clients. 1/2 clients joined.\n"
    )
    found = {f.id: f.confidence for f in diagnose(read_lines("head.log", log)).findings}
    assert found["P08"] == CONFIRMED and found["D03"] == SUSPECTED
    alone = log.splitlines()[1] + "\n"
    assert {f.id: f.confidence for f in diagnose(read_lines("head.log", alone)).findings}["D03"] == CONFIRMED


def test_no_kernel_image_alone_is_a_suspected_image_mismatch_a_named_architecture_confirms():
    ambiguous = "RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
    named = "RuntimeError: This kernel only supports sm120.\n"
    assert not diagnose(read_lines("head.log", ambiguous)).confirmed
    assert [f.id for f in diagnose(read_lines("head.log", named)).confirmed] == ["D19"]
