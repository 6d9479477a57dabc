"""Reading a lane's logs and live process (lanebook.ops.logs): pure parsing with exact values, and on the twin the
seed's log gate and `docker top` of a running container, a missing container being an error."""

import subprocess

import pytest
from lanebook.base.checks import ExpectedResult
from lanebook.lane.params import load_lane
from lanebook.nodes import ssh
from lanebook.ops import logs
from lanebook.recipe.speculative import speculative_config

TOP = (
    "UID                 PID                 PPID                C                   STIME               "
    "TTY                 TIME                CMD\n"
    "root                4101                4100                0                   07:01               "
    "?                   00:00:00            /bin/bash -c exec /usr/local/bin/vllm serve "
    "deepseek-ai/DeepSeek-V4-Flash-0731 --port 8888\n"
    "root                4102                4101                9                   07:01               "
    "?                   00:03:12            /usr/bin/python3 /usr/local/bin/vllm serve "
    'deepseek-ai/DeepSeek-V4-Flash-0731 --port 8888 --speculative-config {"method":"dspark",'
    '"num_speculative_tokens":5,"num_speculative_tokens_per_batch_size":[[1,1,5],[2,4,4],[5,6,3]]}\n'
    "root                4200                4102                0                   07:02               "
    "?                   00:00:01            python3 -c from multiprocessing.resource_tracker import main\n"
)


def test_kv_cache_tokens_takes_the_latest_boot():
    lines = [
        "(EngineCore pid=1) INFO [kv_cache_utils.py:1087] GPU KV cache size: 2,201,000 tokens",
        "noise",
        "(EngineCore pid=9) INFO [kv_cache_utils.py:1087] GPU KV cache size: 2,493,464 tokens",
    ]
    assert logs.kv_cache_tokens(lines) == 2493464
    assert logs.kv_cache_tokens(["Available KV cache memory: 18.08 GiB"]) is None


def test_the_cpu_builds_kv_line_is_read_only_where_the_lane_names_it():
    """vLLM's CPU build sizes its KV cache as "CPU KV cache size"; the GPU lanes' gate never reads that line."""
    lines = [
        "(EngineCore pid=1237) INFO 12-02 08:54:08 [kv_cache_utils.py:2327] CPU KV cache size: 524,288 tokens, "
        "Maximum concurrency for 2,048 tokens per request: 256.00x"
    ]
    assert logs.kv_cache_tokens(lines) is None
    assert logs.kv_cache_tokens(lines, "CPU KV cache size") == 524288
    cpu, gpu = load_lane("real-vllm-cpu").gates, load_lane("twin").gates
    assert (cpu.kv_cache_line, gpu.kv_cache_line) == ("CPU KV cache size", "GPU KV cache size")
    found = {logs.BREAKABLE_SCAN: [], "Application startup complete": ["x"]}
    expectations, kv = logs.startup_log_expectations({**found, "CPU KV cache size": lines}, cpu)
    assert kv == 524288 and expectations[-1] == ExpectedResult.judged(
        "", "CPU KV cache size in 500,000–530,000 tokens", True, "524,288"
    )
    expectations, kv = logs.startup_log_expectations({**found, "GPU KV cache size": lines}, gpu)
    assert kv is None and not expectations[-1].ok


def test_serving_command_reads_the_api_server_module_and_shows_forked_ranks_once():
    """The CPU build runs as `python -m vllm.entrypoints.openai.api_server`; its supervisor shell's words
    (`lanebook.twin.vllm serve` with the untranslated argv) are not what runs."""
    real = (
        "/work/.tools/vllm-cpu/bin/python -m vllm.entrypoints.openai.api_server --model /m --served-model-name x "
        '--speculative-config {"method":"ngram","num_speculative_tokens":5}'
    )
    head = TOP.splitlines()[0]
    rows = [
        'root  5000  1  0  08:00  ?  00:00:00  sh -c "$@"; code=$? lanebook-container:x python -m lanebook.twin.vllm '
        'serve m --speculative-config {"method":"dspark","num_speculative_tokens":5}',
        f"root  5001  5000  0  08:00  ?  00:00:09  {real}",
        f"root  5002  5001  0  08:00  ?  00:00:09  {real}",
        "root  5003  5001  0  08:00  ?  00:00:20  VLLM::EngineCore",
    ]
    assert logs.serving_command("\n".join([head, *rows])) == real


def test_lines_by_pattern():
    lines = ["Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1", "GPU KV cache size: 1 tokens", "other"]
    assert logs.lines_by_pattern(lines, logs.GATE_LOG_PATTERNS) == {
        "BREAKABLE": ["Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1"],
        "Breakable CUDA": [],
        "KV cache size": ["GPU KV cache size: 1 tokens"],
    }


def test_serving_command_prefers_the_vllm_process_over_its_shell():
    command = logs.serving_command(TOP)
    assert command.startswith("/usr/bin/python3 /usr/local/bin/vllm serve deepseek-ai/DeepSeek-V4-Flash-0731")
    assert "\n" not in command
    assert speculative_config(command)["num_speculative_tokens_per_batch_size"] == [[1, 1, 5], [2, 4, 4], [5, 6, 3]]
    assert logs.serving_command("") == ""
    with pytest.raises(ValueError, match="unexpected `docker top` output"):
        logs.serving_command("Error: no such container\n")


def test_dry_run_lines():
    nodes = ssh.LaneNodes(load_lane("anemll-0731"), dry_run=True)
    logs.scan_log(nodes.head, "ds4-f-mia-anemll-0731-vllm-dspark-1")
    logs.scan_log(nodes.head, "name with 'quote'", ["a b"])
    assert nodes.executor.commands() == [
        (
            "head: docker logs ds4-f-mia-anemll-0731-vllm-dspark-1 2>&1 | grep -E 'BREAKABLE|Breakable CUDA|KV cache "
            "size|No such container'"
        ),
        "head: docker logs 'name with '\"'\"'quote'\"'\"'' 2>&1 | grep -E 'a b|No such container'",
    ]


PLACEHOLDER = (
    'LANEBOOK_TWIN_ENGINE=\'python3 -c "import time; print(\\"GPU KV cache size: 2,400,000 tokens\\", flush=True); '
    "time.sleep(120)\"'"
)
COMPOSE = "docker compose -p logs-test --env-file .env.dspark -f docker-compose.dspark.yml"


@pytest.mark.twin
def test_log_gate_and_live_command_on_the_twin(twin):
    with ssh.LaneNodes(load_lane("twin")) as nodes:
        head = nodes.head
        head.run(f"cd ds4-f-mia-anemll-0731 && NODE_RANK=0 {PLACEHOLDER} {COMPOSE} up -d && sleep 30")
        try:
            found = logs.scan_log(head, "logs-test-vllm-dspark-1")
            assert logs.kv_cache_tokens(found["KV cache size"]) == 2400000 and found["BREAKABLE"] == []
            command = logs.live_command(head, "logs-test-vllm-dspark-1")
            assert "serve deepseek-ai/DeepSeek-V4-Flash-0731" in command
            assert logs.schedule_in_live_command(head, "logs-test-vllm-dspark-1")
        finally:
            head.run(f"cd ds4-f-mia-anemll-0731 && {COMPOSE} down")
        with pytest.raises(ssh.NodeError, match="head: no container named no-such-container"):
            logs.scan_log(head, "no-such-container")
        with pytest.raises(ssh.CommandFailed, match="No such container"):
            logs.live_command(head, "no-such-container")


def test_startup_log_expectations_judge_the_scanned_lines():
    gates = load_lane("anemll-0731").gates
    clean = {
        logs.BREAKABLE_SCAN: ["(APIServer pid=1) INFO [utils.py:233] non-default env: VLLM_USE_BREAKABLE_CUDAGRAPH=0"],
        "Application startup complete": ["INFO:     Application startup complete."],
        "GPU KV cache size": ["GPU KV cache size: 1,000 tokens", "GPU KV cache size: 2,493,464 tokens"],
    }
    expectations, kv = logs.startup_log_expectations(clean, gates)
    assert kv == 2_493_464
    assert expectations == [
        ExpectedResult.judged("", "log does not enable breakable CUDA graphs", True, ""),
        ExpectedResult.judged("", "log has 'Application startup complete'", True, ""),
        ExpectedResult.judged("", "GPU KV cache size in 2,200,000–2,500,000 tokens", True, "2,493,464"),
    ]
    slow = {
        **clean,
        logs.BREAKABLE_SCAN: ["WARNING Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1"],
        "GPU KV cache size": [],
    }
    expectations, kv = logs.startup_log_expectations(slow, gates)
    assert kv is None and [e.ok for e in expectations] == [False, True, False]
    assert expectations[0].detail == "WARNING Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1"


# Every form of "breakable CUDA graphs are on" the public logs show (vllm-project/vllm#49370 and #41834:
# DeepSeek-V4-Flash, the auto-enable line and the torch.compile warning on every rank; forks' "... for DeepSeek V4";
# the twin's own wording), in other cases too, and the opt-out forms that must pass.
BREAKABLE_ON = [
    "(APIServer pid=57) INFO 07-12 02:33:26 [vllm.py:1128] Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1. Set "
    "VLLM_USE_BREAKABLE_CUDAGRAPH=0 to opt out.",
    "(Worker_TP1_EP1 pid=237) WARNING 08-30 09:57:56 [vllm.py:1237] VLLM_USE_BREAKABLE_CUDAGRAPH is set, disabling "
    "vLLM's torch.compile pipeline. Equivalent to -cc.mode=none.",
    "INFO Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1 for DeepSeek V4. Set VLLM_USE_BREAKABLE_CUDAGRAPH=0 to opt out.",
    "Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1 for this architecture, disabling VLLM_USE_AOT_COMPILE=1.",
    "Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1 for DeepSeek-V4 DSpark on this platform; set "
    "VLLM_USE_BREAKABLE_CUDAGRAPH=0 to opt out.",
    "Breakable CUDA graph enabled",
    "Breakable CUDA graphs enabled (VLLM_USE_BREAKABLE_CUDAGRAPH=1).",
    "breakable cudagraph is enabled",
    "Auto-enabled breakable CUDA graphs for DeepseekV4ForCausalLM",
    "Using breakable CUDA graphs for decode",
    "auto-enabling vllm_use_breakable_cudagraph=1",
    "AUTO-ENABLING VLLM_USE_BREAKABLE_CUDAGRAPH=1",
    "(APIServer pid=1) INFO [utils.py:233] non-default env: VLLM_USE_BREAKABLE_CUDAGRAPH=1",
    "{'VLLM_USE_BREAKABLE_CUDAGRAPH': 'true'}",
]
BREAKABLE_OFF = [
    "VLLM_USE_BREAKABLE_CUDAGRAPH=0",
    "(APIServer pid=1) INFO [utils.py:233] non-default env: VLLM_USE_BREAKABLE_CUDAGRAPH=0",
    "{'VLLM_USE_BREAKABLE_CUDAGRAPH': '0'}",
    "Breakable CUDA graphs disabled (VLLM_USE_BREAKABLE_CUDAGRAPH=0)",
    "Breakable CUDA graph is not enabled",
    "Not auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH: the user set it to 0",
]


@pytest.mark.parametrize("line", BREAKABLE_ON)
def test_every_form_of_breakable_graphs_on_fails_the_gate(line):
    gates = load_lane("anemll-0731").gates
    found = {
        logs.BREAKABLE_SCAN: [line],
        "Application startup complete": ["Application startup complete."],
        "GPU KV cache size": ["GPU KV cache size: 2,493,464 tokens"],
    }
    [breakable, *rest] = logs.startup_log_expectations(found, gates)[0]
    assert (breakable.what, breakable.ok, breakable.detail) == (logs.BREAKABLE_GATE, False, line)
    assert all(e.ok for e in rest)


@pytest.mark.parametrize("line", BREAKABLE_OFF)
def test_the_opt_out_forms_pass_the_gate(line):
    assert logs.breakable_on_lines([line]) == []


def test_the_breakable_scan_reads_the_same_in_grep_on_a_node(tmp_path):
    """The node greps any case of "breakable" (the seed's BREAKABLE and Breakable CUDA forms both): every line, on or
    off, reaches the Python judgement."""
    log = tmp_path / "container.log"
    lines = BREAKABLE_ON + BREAKABLE_OFF + ["GPU KV cache size: 2,493,464 tokens"]
    log.write_text("\n".join(lines) + "\n")
    grep = subprocess.run(["grep", "-E", logs.BREAKABLE_SCAN, str(log)], capture_output=True, text=True, check=True)
    assert grep.stdout.splitlines() == lines[:-1]
    assert logs.breakable_on_lines(grep.stdout.splitlines()) == BREAKABLE_ON


FATAL = {
    "CUDA error": [
        "(EngineCore_DP0 pid=212) ERROR 12-01 09:59:21 [core.py:1011] EngineCore encountered a fatal error: "
        "CUDA error: an illegal memory access was encountered",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "(Worker_TP1 pid=301) ERROR 12-01 09:59:20 [gpu_worker.py:88] Cuda failure 'out of memory'",
    ],
    "NCCL error": [
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:317, "
        "unhandled system error"
    ],
    "engine death": [
        "(EngineCore_DP0 pid=212) ERROR 12-01 09:59:21 [core.py:1011] EngineCore encountered a fatal error: "
        "CUDA error: an illegal memory access was encountered",
        "(APIServer pid=1) ERROR 12-01 09:59:21 [async_llm.py:480] AsyncLLM output_handler failed. EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.",
        "(APIServer pid=1) ERROR 12-01 09:59:22 [core_client.py:564] Engine core proc EngineCore_DP0 died "
        "unexpectedly, shutting down client.",
        "(EngineCore_DP0 pid=212) ERROR 12-01 09:59:22 [multiproc_executor.py:149] Worker proc VllmWorker-0 died "
        "unexpectedly, shutting down executor.",
    ],
    "preemption": [
        "WARNING 05-09 00:49:33 scheduler.py:1057 Sequence group 0 is preempted by PreemptionMode.RECOMPUTE mode "
        "because there is not enough KV cache space."
    ],
    "Python crash": ["Fatal Python error: Segmentation fault"],
}
NOT_FATAL = [
    "(EngineCore_DP0 pid=212) INFO 12-01 09:50:01 [shm_broadcast.py:501] No available shared memory broadcast block "
    "found "
    "in 60 seconds. This typically happens when some processes are hanging or doing some time-consuming work.",
    "(APIServer pid=1) ERROR 12-01 09:59:21 [serving_chat.py:1168] Error in chat completion stream generator.",
    "(APIServer pid=1) INFO 12-01 09:40:00 [utils.py:233] non-default args: {'NCCL_SOCKET_IFNAME': 'bond0'}",
    (
        "(EngineCore_DP0 pid=212) INFO 12-01 09:45:00 [cuda_graph.py:77] Breakable CUDA graphs: decode runs the "
        "breakable (slow) path."
    ),
    (
        "(EngineCore_DP0 pid=212) INFO 12-01 09:59:22 [backends.py:215] Compiling a graph for dynamic shape (batch 4, "
        "K 4) takes 0.30 s"
    ),
]


def test_fatal_lines_sort_exact_lines_by_kind_and_leave_non_fatal_ones():
    lines = list(dict.fromkeys(line for group in FATAL.values() for line in group)) + NOT_FATAL
    found = logs.lines_by_pattern(lines, logs.FATAL_LOG_PATTERNS.values())
    assert logs.fatal_lines(found) == FATAL
    assert logs.fatal_lines(logs.lines_by_pattern(NOT_FATAL, logs.FATAL_LOG_PATTERNS.values())) == {}


def test_fatal_patterns_read_the_same_in_grep_on_a_node(tmp_path):
    """scan_log hands the patterns to `grep -E` on the node: it must keep the lines Python's re keeps."""
    log = tmp_path / "container.log"
    lines = list(dict.fromkeys(line for group in FATAL.values() for line in group)) + NOT_FATAL
    log.write_text("\n".join(lines) + "\n")
    grep = subprocess.run(
        ["grep", "-E", "|".join(logs.FATAL_LOG_PATTERNS.values()), str(log)], capture_output=True, text=True, check=True
    )
    assert grep.stdout.splitlines() == lines[: len(lines) - len(NOT_FATAL)]
