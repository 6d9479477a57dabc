"""The real vLLM (its CPU build) as the head's serving process, when the container's environment says
LANEBOOK_TWIN_REAL_ENGINE=vllm-cpu (lanebook.twin.real_engine).

The `vllm` stand-in parses `vllm serve` as vLLM does (lanebook.twin.vllm), translates the argv for the CPU build
(the tiny random model, ngram speculation with the lane's K and schedule, GPU-only and multi-node flags dropped,
--enforce-eager) and execs `.tools/vllm-cpu/bin/python -m vllm.entrypoints.openai.api_server`; each change is one
"lanebook twin: vllm-cpu ..." log line, and an unknown flag is refused (exit 2). Once it has answered its first
request the server runs at nice 19 (its processes and its session's autogroup), so the client reading the
streams always comes first. A headless rank (the worker) runs nothing real: it says so and idles until stopped.
Its figures are twin figures. Why nice 19: docs/decisions.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, Optional

from lanebook.base.paths import REPO
from lanebook.base.processes import process_alive, session_processes

VENV = REPO / ".tools" / "vllm-cpu"
TINY_MODEL = VENV / "tiny-model"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
PREFIX = "lanebook twin: vllm-cpu"
# ngram drafting (prompt lookup): the CPU build's speculative method; K and the per-batch schedule are the lane's.
NGRAM = {"method": "ngram", "prompt_lookup_max": 3, "prompt_lookup_min": 1}
SPEC_KEPT = ("num_speculative_tokens", "num_speculative_tokens_per_batch_size")

# Flags passed on as given (by argparse dest).
KEPT = {
    "served_model_name": "--served-model-name",
    "api_key": "--api-key",
    "max_model_len": "--max-model-len",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "enable_chunked_prefill": "--enable-chunked-prefill",
    "trust_remote_code": "--trust-remote-code",
    "generation_config": "--generation-config",
    "default_chat_template_kwargs": "--default-chat-template-kwargs",
    "disable_log_requests": "--disable-log-requests",
    "enable_log_requests": "--enable-log-requests",
}
ONE_RANK = "one rank: vLLM's CPU build runs the model alone on the head, no tensor parallel across nodes"
DROPPED = {
    "tensor_parallel_size": ONE_RANK,
    "pipeline_parallel_size": ONE_RANK,
    "nnodes": ONE_RANK,
    "node_rank": ONE_RANK,
    "master_addr": ONE_RANK,
    "master_port": ONE_RANK,
    "distributed_executor_backend": ONE_RANK,
    "gpu_memory_utilization": "no GPU: the CPU build's KV cache is VLLM_CPU_KVCACHE_SPACE GiB",
    "kv_cache_dtype": "a GPU KV cache format; the CPU build keeps the model's dtype (auto, passed on as given)",
    "block_size": "the CPU attention backend picks its own block size",
    "max_cudagraph_capture_size": "no CUDA graphs on CPU (--enforce-eager)",
    "async_scheduling": "vLLM refuses async scheduling with ngram speculative decoding",
    "tokenizer_mode": "the tiny model's tokenizer is a plain Hugging Face one",
    "tool_call_parser": "the tiny model has no DeepSeek-V4 chat format to parse",
    "enable_auto_tool_choice": "the tiny model has no DeepSeek-V4 chat format to parse",
    "reasoning_parser": "the tiny model has no DeepSeek-V4 chat format to parse",
    "revision": "the tiny model has one revision",
    "quantization": "the tiny model is not quantized",
}
CPU_KV_DTYPE = "auto"  # vLLM's default KV cache dtype, the model's: the one the CPU build runs
LOWEST_PRIORITY = 19  # nice: the client reading the streams always comes first (docs/decisions.md)
AUTOGROUP = Path("/proc/self/autogroup")  # the session's scheduling group; its nice weighs it against other sessions
READY_BOUND_S = 1800.0  # how long the priority helper waits for /health before it gives up (lower_once_ready)
FIRST_REQUEST_BOUND_S = 600.0  # how long after /health it waits for the first finished request before lowering
SERVED = "vllm:request_success_total"  # the server's own count of finished requests, by finished_reason
SOCKET_IFNAMES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME")  # the RoCE interface (bond0)
HANDLED = {"command", "model_tag", "model", "host", "port", "speculative_config", "enable_prefix_caching", "headless"}


class Refused(Exception):
    """A flag the translation does not know: refused, never dropped silently."""


def flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _value_args(option: str, value: Any) -> list[str]:
    if isinstance(value, bool):
        return [option] if value else [f"--no-{option[2:]}"]
    if isinstance(value, dict):
        return [option, json.dumps(value, separators=(",", ":"))]
    if isinstance(value, list):
        return [option, *map(str, value)]
    return [option, str(value)]


def speculative(given: Optional[dict]) -> tuple[Optional[dict], list[str]]:
    """The CPU build's speculative config from the one given: ngram with the given K and per-batch schedule."""
    if not given:
        return None, []
    config = {**NGRAM, **{k: given[k] for k in SPEC_KEPT if k in given}}
    method = given.get("method")
    notes = [f"speculative method {method} -> ngram (no MTP/DSpark drafter on CPU); K and the schedule kept"]
    notes += [
        f"dropped speculative {k}={given[k]!r}: not an ngram setting" for k in given if k not in (*SPEC_KEPT, "method")
    ]
    return config, notes


def explicit(parser: argparse.ArgumentParser, argv: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """The `vllm serve` options written on the command line (by dest, with their parsed values), a default value
    included: `--max-num-batched-tokens 8192` is passed on, `--pipeline-parallel-size 1` is said dropped."""
    serve = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    written = {arg.partition("=")[0] for arg in argv if arg.startswith("-")}
    return {
        action.dest: getattr(args, action.dest)
        for action in serve._actions
        if action.option_strings
        and action.dest != "help"
        and any(o in written or f"--no-{o[2:]}" in written for o in action.option_strings)
    }


def translate(given: dict[str, Any], args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The api_server argv for the CPU build from the `vllm serve` options GIVEN (explicit), and one note per change.
    Raises Refused for a flag not in KEPT, DROPPED or HANDLED."""
    unknown = sorted(flag(d) for d in given if d not in KEPT and d not in DROPPED and d not in HANDLED)
    if unknown:
        raise Refused(f"{PREFIX} does not know how to run {', '.join(unknown)} on the CPU build; refusing")
    model = args.model_tag or args.model
    argv = ["--model", str(TINY_MODEL)]
    notes = [f"model {model} -> the tiny random model {TINY_MODEL} (its replies are gibberish)"]
    if not args.served_model_name:
        argv += ["--served-model-name", str(model)]
        notes.append(f"--served-model-name {model} (vLLM would serve the model under the name it was given)")
    argv += ["--host", args.host, "--port", str(args.port)]
    for dest, option in KEPT.items():
        if dest in given:
            argv += _value_args(option, given[dest])
    argv += ["--enable-prefix-caching" if args.enable_prefix_caching else "--no-enable-prefix-caching"]
    config, spec_notes = speculative(args.speculative_config)
    if config:
        argv += ["--speculative-config", json.dumps(config, separators=(",", ":"))]
    notes += spec_notes
    for dest in DROPPED:
        if dest == "kv_cache_dtype" and given.get(dest) == CPU_KV_DTYPE:
            argv += [flag(dest), CPU_KV_DTYPE]
        elif dest in given:
            shown = " ".join(_value_args(flag(dest), given[dest]))
            notes.append(f"dropped {shown}: {DROPPED[dest]}")
    argv.append("--enforce-eager")
    notes.append("added --enforce-eager: no torch.compile or graph capture on the CPU build")
    return argv, notes


def shown_argv(command: list[str], keys: int) -> list[str]:
    """COMMAND as the container log shows it: the --api-key values replaced, as the recipe's log hotfix shows them
    (hotfix-vllm-redact-api-key-log.sh: `<redacted:N value(s)>`)."""
    if "--api-key" not in command:
        return command
    at = command.index("--api-key")
    return [*command[: at + 1], f"<redacted:{keys} value(s)>", *command[at + 1 + keys :]]


def say(line: str) -> None:
    print(f"{PREFIX}: {line}" if not line.startswith(PREFIX) else line, flush=True)


def idle_worker(args: argparse.Namespace) -> int:
    """A headless rank of this lane: nothing real to run (one rank serves on the head); up and idle until stopped."""
    say(
        f"headless node rank {args.node_rank}/{args.nnodes} runs nothing: {ONE_RANK}; "
        "this container stays up idle until it is stopped"
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        signal.pause()


def session_threads(session: int) -> list[int]:
    """Every thread of every process of SESSION (nice is a thread's: each thread is set)."""
    threads = []
    for pid in session_processes(session):
        try:
            threads += [int(task.name) for task in Path(f"/proc/{pid}/task").iterdir()]
        except OSError:  # ended meanwhile
            continue
    return threads


def lowest_priority(pid: int = 0, autogroup: Path = AUTOGROUP) -> str:
    """Put every thread of the processes of PID's session (0: this process's; the processes they spawn later inherit
    it) and the session's AUTOGROUP at nice 19; the line saying what was set."""
    for thread in session_threads(os.getsid(pid)):
        try:
            os.setpriority(os.PRIO_PROCESS, thread, LOWEST_PRIORITY)
        except OSError:  # ended meanwhile
            pass
    try:
        autogroup.write_text(f"{LOWEST_PRIORITY}\n")
    except OSError as exc:  # no autogroup scheduling on this kernel: the process nice is what Linux weighs
        return f"CPU priority: nice {LOWEST_PRIORITY} (no autogroup to set: {exc.strerror or exc})"
    return f"CPU priority: nice {LOWEST_PRIORITY}, and its session's autogroup ({autogroup.read_text().strip()})"


def run(args: argparse.Namespace, given: dict[str, Any], env: dict[str, str]) -> int:
    """Exec the real server (or idle as a headless rank); returns only on a refusal or a missing install."""
    if args.headless:
        return idle_worker(args)
    python = VENV / "bin" / "python"
    if not (VENV / ".installed").exists():
        say(f"the CPU build is not installed ({VENV}/.installed missing): run `make vllm-cpu`")
        return 1
    try:
        argv, notes = translate(given, args)
    except Refused as exc:
        say(str(exc))
        return 2
    for note in notes:
        say(note)
    env = dict(env)
    for key in SOCKET_IFNAMES:  # Gloo binds the interface named, even for one rank; the twin's nodes have only lo
        if key in env:
            say(f"dropped {key}={env.pop(key)} from the environment: {ONE_RANK}")
    kv = env.get("VLLM_CPU_KVCACHE_SPACE")
    say(f"KV cache: VLLM_CPU_KVCACHE_SPACE={kv} GiB" if kv else "KV cache: VLLM_CPU_KVCACHE_SPACE unset (its default)")
    say(
        "CPU priority: as started while it boots and serves its first request; then nice 19, with its session's "
        "autogroup (a helper of the container's session waits for both)"
    )
    lower_once_ready_beside(f"http://{args.host}:{args.port}")
    command = [str(python), "-m", SERVER_MODULE, *argv]
    say("runs " + " ".join(shown_argv(command, len(args.api_key or []))))
    os.execve(str(python), command, env)
    return 1  # not reached


LOWERING = (
    "import sys; from lanebook.twin.vllm_cpu import lower_once_ready; lower_once_ready(sys.argv[1], int(sys.argv[2]))"
)


def lower_once_ready_beside(url: str) -> None:
    """Start, in this container's session, the helper that lowers the server (this process, once it execs) to nice
    19 once the server at URL is ready and has served a request (lower_once_ready): detached from this process, which
    is about to become the server."""
    server = os.getpid()
    child = os.fork()
    if child == 0:
        try:
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c", LOWERING, url, str(server)])
        finally:
            os._exit(0)
    os.waitpid(child, 0)


def lower_once_ready(
    url: str, server: int, bound_s: float = READY_BOUND_S, first_bound_s: float = FIRST_REQUEST_BOUND_S
) -> None:
    """The server boots and answers its first request at the priority it was started with, then goes to nice 19
    (lowest_priority of its session; why: docs/decisions.md). Waits for URL's /health to answer 200, then for the
    server's own count of finished requests (vllm:request_success_total on /metrics) to leave 0, at most
    FIRST_BOUND_S. Gives up when the server is gone, or after BOUND_S without /health."""
    import time

    deadline = time.monotonic() + bound_s
    while _direct_get(url + "/health") is None:
        if time.monotonic() > deadline or not process_alive(server):
            return
        time.sleep(1.0)
    first_deadline = time.monotonic() + first_bound_s
    while (served := requests_served(url)) < 1 and time.monotonic() < first_deadline:
        if not process_alive(server):
            return
        time.sleep(1.0)
    why = "its first request served" if served >= 1 else f"no request served {first_bound_s:.0f} s after /health"
    say(lowest_priority(server, Path(f"/proc/{server}/autogroup")) + f": {why}")


def _direct_get(url: str) -> str | None:
    """URL's body when it answers 200, never through a proxy; None otherwise (not listening yet, or not ready)."""
    import urllib.request

    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=5) as answer:
            return answer.read().decode() if answer.status == 200 else None
    except (OSError, ValueError):  # urllib's errors are OSErrors
        return None


def requests_served(url: str) -> float:
    """The server's own count of finished requests (every finished_reason), from URL's /metrics; 0 when unread."""
    from lanebook.nodes.prometheus import MetricsUnavailable, parse_metrics

    text = _direct_get(url + "/metrics")
    try:
        return (parse_metrics(text).total(SERVED) or 0.0) if text is not None else 0.0
    except MetricsUnavailable:
        return 0.0
