"""`vllm serve` as the twin runs it: ``python -m lanebook.twin.vllm serve MODEL [flags]``.

The twin's docker stand-in starts this as the container: the compose ``environment:`` map is the
process env, the compose ``command:`` gives the argv, and stdout/stderr are ``docker logs``. Flags are
refused as vLLM's argparse refuses them; the boot prints vLLM's lines (cold bind with its non-fatal
SHM warnings, KV sizing or the KV ValueError); node rank 0 gathers the headless workers over a plain
TCP rendezvous on --master-addr:--master-port before it serves; a headless worker joins it and stays
up, orphaned, if the head vanishes; a worker that left a formed group cannot join it again. Twin-only knobs come from
LANEBOOK_TWIN_* variables; LANEBOOK_TWIN_REAL_ENGINE=vllm-cpu runs the real vLLM's CPU build instead of the twin
engine (lanebook.twin.vllm_cpu).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from lanebook.base.errors import LanebookError
from lanebook.twin import real_engine, vllm_cpu
from lanebook.twin.engine_core import EngineConfig
from lanebook.twin.kv import MODEL_LEN_1M, STICKY_UMA_DEFAULT_GIB, KvBudget, kv_budget, startup_memory_error
from lanebook.twin.server import (
    HEAD_DIES_AFTER_S,
    SHM_WARNING,
    VLLM_VERSION,
    ServeOptions,
    TwinServer,
    configure_uvicorn_logging,
    log,
)
from lanebook.twin.timing import check_k_schedule

RENDEZVOUS_TIMEOUT_S = 600.0  # torch's TCPStore default wait (scaled by time_scale, floor below)
RENDEZVOUS_TIMEOUT_FLOOR_S = 5.0
HELLO = "lanebook-twin-worker"
FORMED = b"formed"  # the head's answer to a worker when its TP group was formed already
WEIGHT_SHARDS = 48  # the recipe (seed 000) counts 48 model-*-of-*.safetensors shards after the download
VALUE_FLAGS = (
    "--revision --tokenizer --tokenizer-revision --tokenizer-mode --uds --root-path --uvicorn-log-level "
    "--allowed-origins --allowed-methods --allowed-headers --ssl-keyfile --ssl-certfile --ssl-ca-certs "
    "--chat-template --chat-template-content-format --response-role --tool-call-parser --tool-parser-plugin "
    "--reasoning-parser --generation-config --dtype --kv-cache-dtype --quantization --cuda-graph-sizes "
    "--swap-space --cpu-offload-gb --kv-cache-memory-bytes --distributed-executor-backend --data-parallel-size "
    "--data-parallel-size-local --data-parallel-address --data-parallel-rpc-port --data-parallel-start-rank "
    "--api-server-count --moe-backend --attention-backend --load-format --download-dir --config-format "
    "--max-logprobs --max-loras --max-lora-rank --scheduling-policy --prefix-caching-hash-algo "
    "--max-long-partial-prefills --max-seq-len-to-capture --hf-token --config --otlp-traces-endpoint "
    "--logits-processors --pipeline-parallel-size --max-cudagraph-capture-size --seed"
).split()
LIST_FLAGS = "--middleware --lora-modules".split()
JSON_FLAGS = (
    "--reasoning-config --compilation-config --hf-overrides --override-generation-config --limit-mm-per-prompt "
    "--mm-processor-kwargs --structured-outputs-config --kv-transfer-config"
).split()
BOOL_FLAGS = (
    "--trust-remote-code --enable-prefix-caching --enable-prompt-tokens-details --async-scheduling "
    "--enable-chunked-prefill --enable-auto-tool-choice --enable-flashinfer-autotune --headless --enforce-eager "
    "--disable-log-requests --enable-log-requests --disable-log-stats --disable-uvicorn-access-log "
    "--enable-expert-parallel --disable-custom-all-reduce --enable-lora --enable-sleep-mode "
    "--enable-server-load-tracking --enable-force-include-usage --enable-request-id-headers "
    "--disable-fastapi-docs --return-tokens-as-token-ids --enable-log-outputs --enable-tokenizer-info-endpoint "
    "--skip-tokenizer-init --disable-sliding-window --disable-cascade-attn --enable-reasoning"
).split()
SHORT_ALIASES = {
    "--quantization": "-q",
    "--pipeline-parallel-size": "-pp",
    "--data-parallel-size": "-dp",
    "--compilation-config": "-O",
}


class BootFailure(Exception):
    """The engine could not start: logged already; the process exits with ``code``."""

    def __init__(self, code: int = 1):
        super().__init__(code)
        self.code = code


def json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"invalid JSON ({exc}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object: {text!r}")
    return value


def human_int(text: str) -> int:
    """vLLM's human-readable sizes: 1048576, 1m (10^6), 1M (2^20), 1024K (2^10 each)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgG]?)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}")
    number, suffix = float(match.group(1)), match.group(2)
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}[suffix]
    return int(number * scale)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm", allow_abbrev=False)
    parser.add_argument("-v", "--version", action="version", version=VLLM_VERSION)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", prog="vllm serve", allow_abbrev=False)
    serve.add_argument("model_tag", nargs="?")
    serve.add_argument("--model")
    serve.add_argument("--served-model-name", nargs="+")
    serve.add_argument("--host", default="0.0.0.0")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--api-key", nargs="+")
    serve.add_argument("--max-model-len", type=human_int)
    serve.add_argument("--max-num-seqs", type=int, default=256)
    serve.add_argument("--max-num-batched-tokens", type=human_int, default=8192)
    serve.add_argument("--long-prefill-token-threshold", type=int, default=0)
    serve.add_argument("--max-num-partial-prefills", type=int, default=1)
    serve.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    serve.add_argument("--block-size", type=int, default=16)
    serve.add_argument("--speculative-config", type=json_object)
    serve.add_argument("--default-chat-template-kwargs", type=json_object)
    serve.add_argument("-tp", "--tensor-parallel-size", type=int, default=1)
    serve.add_argument("--nnodes", type=int, default=1)
    serve.add_argument("--node-rank", type=int, default=0)
    serve.add_argument("--master-addr", default="127.0.0.1")
    serve.add_argument("--master-port", type=int, default=29501)
    for flag in VALUE_FLAGS:
        serve.add_argument(*([SHORT_ALIASES[flag]] if flag in SHORT_ALIASES else []), flag)
    for flag in LIST_FLAGS:
        serve.add_argument(flag, nargs="+")
    for flag in JSON_FLAGS:
        serve.add_argument(*([SHORT_ALIASES[flag]] if flag in SHORT_ALIASES else []), flag, type=json_object)
    for flag in BOOL_FLAGS:
        serve.add_argument(
            flag, action=argparse.BooleanOptionalAction, default=True if flag == "--enable-prefix-caching" else None
        )
    return parser


def normalize_argv(argv: list[str]) -> list[str]:
    """vLLM accepts --max_model_len as --max-model-len."""
    out = []
    for arg in argv:
        if arg.startswith("--"):
            key, eq, value = arg.partition("=")
            arg = key.replace("_", "-") + eq + value
        out.append(arg)
    return out


@dataclass(frozen=True)
class TwinKnobs:
    """Twin-only settings from LANEBOOK_TWIN_* (the real image has none of these)."""

    time_scale: float
    faults: frozenset
    sticky_gib: float
    pace_tok_s: Optional[float]
    tokens_per_chunk: int
    rendezvous_timeout_s: float


def twin_knobs(env: dict) -> TwinKnobs:
    """Read and check the twin's knobs; a bad value is one clear line and exit 2."""

    def number(name: str, default: Optional[float], allow_zero: bool = False) -> Optional[float]:
        raw = env.get(name, "").strip()
        if not raw:
            return default
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if value < 0 or (value == 0 and not allow_zero):
            print(
                f"vllm (lanebook twin): {name} must be a {'non-negative' if allow_zero else 'positive'} number, "
                f"got {raw!r}",
                file=sys.stderr,
            )
            raise SystemExit(2)
        return value

    faults = frozenset(f.strip() for f in env.get("LANEBOOK_TWIN_FAULTS", "").split(",") if f.strip())
    scale = number("LANEBOOK_TWIN_TIME_SCALE", 1.0)
    sticky = number(
        "LANEBOOK_TWIN_STICKY_GIB", STICKY_UMA_DEFAULT_GIB if "sticky-uma" in faults else 0.0, allow_zero=True
    )
    timeout = number(
        "LANEBOOK_TWIN_RENDEZVOUS_TIMEOUT_S", max(RENDEZVOUS_TIMEOUT_FLOOR_S, RENDEZVOUS_TIMEOUT_S * scale)
    )
    return TwinKnobs(
        time_scale=scale,
        faults=faults,
        sticky_gib=sticky,
        pace_tok_s=number("LANEBOOK_TWIN_PACE_TOK_S", None),
        tokens_per_chunk=int(number("LANEBOOK_TWIN_TOKENS_PER_CHUNK", 3)),
        rendezvous_timeout_s=timeout,
    )


def breakable_graphs(env: dict) -> tuple[bool, Optional[str]]:
    """Whether the Anemll image runs breakable CUDA graphs (the slow decode path), and the line it logs (fact T03).

    The image auto-enables them when VLLM_USE_BREAKABLE_CUDAGRAPH is absent (or empty) in the
    container env; only "0" opts out. The recipe (seed 000, pitfall 1) says to set it in the env file and
    pass it in the compose environment: map, since compose does not hand arbitrary env-file keys to the container.
    """
    value = env.get("VLLM_USE_BREAKABLE_CUDAGRAPH", "").strip()
    if value == "0":
        return False, None
    if not value:
        return True, (
            "Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1 for DeepSeek-V4 DSpark on this platform; "
            "set VLLM_USE_BREAKABLE_CUDAGRAPH=0 to opt out."
        )
    return True, f"Breakable CUDA graphs enabled (VLLM_USE_BREAKABLE_CUDAGRAPH={value})."


def engine_config(args: argparse.Namespace, knobs: TwinKnobs, env: dict, kv_tokens: int) -> EngineConfig:
    """The behaviour settings from flags and env; a bad speculative config fails the boot as vLLM does."""
    spec = args.speculative_config or {}
    k = int(spec.get("num_speculative_tokens", 0) or 0) if spec else 0
    schedule = spec.get("num_speculative_tokens_per_batch_size")
    try:
        k_schedule = check_k_schedule(schedule, k) if schedule is not None else None
    except ValueError as exc:
        log("ERROR", "core.py:708", "EngineCore failed to start.", "EngineCore_DP0")
        print(f"ValueError: {exc}", flush=True)
        raise BootFailure(1) from None
    if args.max_num_partial_prefills > 1:
        log("ERROR", "core.py:708", "EngineCore failed to start.", "EngineCore_DP0")
        print(
            "NotImplementedError: Concurrent Partial Prefill is not supported. We recommend to remove "
            "Concurrent Partial Prefill from your config.",
            flush=True,
        )
        raise BootFailure(1)
    return EngineConfig(
        max_model_len=args.max_model_len or MODEL_LEN_1M,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        long_prefill_token_threshold=args.long_prefill_token_threshold,
        num_speculative_tokens=k,
        k_schedule=k_schedule,
        breakable_cudagraph=breakable_graphs(env)[0],
        block_size=args.block_size,
        enable_prefix_caching=bool(args.enable_prefix_caching),
        prefix_evict="prefix-evict" in knobs.faults,
        drafter_mismatch="drafter-mismatch" in knobs.faults,
        kv_tokens=kv_tokens,
        time_scale=knobs.time_scale,
    )


def serve_options(args: argparse.Namespace, knobs: TwinKnobs, env: dict) -> ServeOptions:
    model_name = args.model_tag or args.model or "Qwen/Qwen3-0.6B"
    keys = list(args.api_key or []) or ([env["VLLM_API_KEY"]] if env.get("VLLM_API_KEY") else [])
    return ServeOptions(
        model=model_name,
        served_model_names=args.served_model_name or [model_name],
        host=args.host,
        port=args.port,
        api_keys=keys,
        default_chat_template_kwargs=args.default_chat_template_kwargs or {},
        reasoning_parser=args.reasoning_parser,
        enable_auto_tool_choice=bool(args.enable_auto_tool_choice),
        enable_prompt_tokens_details=bool(args.enable_prompt_tokens_details),
        access_log=not args.disable_uvicorn_access_log,
        faults=knobs.faults,
        pace_tok_s=knobs.pace_tok_s,
        tokens_per_chunk=knobs.tokens_per_chunk,
        time_scale=knobs.time_scale,
    )


# --- Head ----------------------------------------------------------------------------------------
class Rendezvous:
    """Node rank 0's side of the TP group: headless workers connect, say hello and stay connected."""

    def __init__(self, server: TwinServer, expected: int):
        self.server = server
        self.expected = expected
        self.writers: list[asyncio.StreamWriter] = []
        self.all_joined = asyncio.Event()
        self.closing = False

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            hello = (await asyncio.wait_for(reader.readline(), 10)).decode(errors="replace").split()
        except (asyncio.TimeoutError, OSError):
            writer.close()
            return
        if len(hello) != 2 or hello[0] != HELLO:
            writer.close()
            return
        if self.all_joined.is_set():  # the group was formed: a rank that left (a rebooted worker) cannot rejoin it
            writer.write(FORMED + b"\n")
            writer.close()
            return
        writer.write(b"ok\n")
        await writer.drain()
        self.writers.append(writer)
        log(
            "INFO",
            "parallel_state.py:1165",
            f"Node {hello[1]} joined the TP group ({len(self.writers) + 1}/{self.expected + 1} nodes)",
        )
        if len(self.writers) >= self.expected:
            self.all_joined.set()
        try:
            await reader.read()  # returns at EOF: the worker is gone
        except OSError:
            pass
        if not self.closing:
            log(
                "ERROR",
                "pynccl.py:134",
                f"NCCL error: remote process exited or there was a network error (worker {hello[1]} lost)",
                "Worker_TP0",
            )
            self.server.kill_engine(f"NCCL communicator aborted: worker {hello[1]} lost")

    def shutdown(self) -> None:
        """A clean stop tells the workers to exit instead of leaving them orphaned."""
        self.closing = True
        for writer in self.writers:
            writer.write(b"shutdown\n")
            writer.close()


def world_size(args: argparse.Namespace) -> int:
    """The ranks `vllm serve` was launched for: tensor parallel times pipeline parallel, across --nnodes nodes."""
    pipeline = str(getattr(args, "pipeline_parallel_size", None) or "1")
    return args.tensor_parallel_size * (int(pipeline) if pipeline.isdigit() else 1)


def log_world(args: argparse.Namespace) -> None:
    """The executor's line naming the world it forms, as vLLM's multiproc executor logs it on node rank 0 (the
    head then waits until every other node's headless ranks have joined: Rendezvous)."""
    log(
        "INFO",
        "multiproc_executor.py:153",
        f"DP group leader: node_rank={args.node_rank}, node_rank_within_dp={args.node_rank}, "
        f"master_addr={args.master_addr}, mq_connect_ip={args.host} (local), "
        f"world_size={world_size(args)}, local_world_size={world_size(args) // max(args.nnodes, 1)}",
        "EngineCore_DP0",
    )


async def cold_bind(args: argparse.Namespace, config: EngineConfig) -> float:
    """Weight load, compile and autotune, scaled by time_scale.

    A real cold bind often takes 8-15 minutes, and its "No available shared memory broadcast block found in
    60 seconds" lines during autotune are not fatal (fact T09): the boot goes on after them.
    """
    total = config.cold_bind_s
    started = time.monotonic()
    model_name = args.model_tag or args.model
    log("INFO", "gpu_model_runner.py:2602", f"Starting to load model {model_name}...", "Worker_TP0")
    for quarter in range(1, 5):
        await asyncio.sleep(total * 0.45 / 4)
        done = WEIGHT_SHARDS * quarter // 4
        log(
            "INFO",
            "default_loader.py:268",
            f"Loading safetensors checkpoint shards: {25 * quarter}% Completed | {done}/{WEIGHT_SHARDS}",
            "Worker_TP0",
        )
    log(
        "INFO",
        "gpu_model_runner.py:2653",
        f"Model loading took 80.41 GiB and {time.monotonic() - started:.2f} seconds",
        "Worker_TP0",
    )
    await asyncio.sleep(total * 0.15)
    log("INFO", "monitor.py:34", f"torch.compile takes {total * 0.15:.2f} s in total", "Worker_TP0")
    log(
        "INFO",
        "flashinfer_autotune.py:88",
        "Autotuning FlashInfer / TileLang kernels (--enable-flashinfer-autotune)",
        "Worker_TP0",
    )
    for _ in range(3):
        await asyncio.sleep(total * 0.10)
        log("INFO", "shm_broadcast.py:501", SHM_WARNING, "EngineCore_DP0")
    return started


async def boot(
    args: argparse.Namespace, knobs: TwinKnobs, server: TwinServer, budget: KvBudget, rendezvous: Optional[Rendezvous]
) -> None:
    """Everything between `vllm serve` and "Application startup complete."; raises BootFailure."""
    config = server.core.config
    log_world(args)
    if rendezvous:
        log(
            "INFO",
            "multiproc_executor.py:120",
            f"Waiting for {rendezvous.expected} headless node(s) on {args.master_addr}:{args.master_port}",
        )
        try:
            await asyncio.wait_for(rendezvous.all_joined.wait(), knobs.rendezvous_timeout_s)
        except asyncio.TimeoutError:
            log("ERROR", "core.py:708", "EngineCore failed to start.", "EngineCore_DP0")
            print(
                f"torch.distributed.DistStoreError: Timed out after {knobs.rendezvous_timeout_s:.0f} seconds "
                f"waiting for clients. {len(rendezvous.writers) + 1}/{args.nnodes} clients joined.",
                flush=True,
            )
            raise BootFailure(1) from None
    started = await cold_bind(args, config)
    memory_error = startup_memory_error(args.gpu_memory_utilization, knobs.sticky_gib)
    if memory_error or not budget.fits:
        log("ERROR", "core.py:708", "EngineCore failed to start.", "EngineCore_DP0")
        print(f"ValueError: {memory_error or budget.error_message()}", flush=True)
        log(
            "ERROR",
            "api_server.py:1900",
            "RuntimeError: Engine core initialization failed. See root cause above. "
            "Failed core proc(s): {'EngineCore_DP0': 1}",
        )
        raise BootFailure(1)
    for line in budget.log_lines():
        log("INFO", "kv_cache_utils.py:1087", line, "EngineCore_DP0")
    await asyncio.sleep(config.cold_bind_s * 0.10)
    log(
        "INFO",
        "gpu_model_runner.py:3480",
        f"Graph capturing finished in {config.cold_bind_s * 0.10:.2f} secs",
        "Worker_TP0",
    )
    log(
        "INFO",
        "core.py:210",
        f"init engine (profile, create kv cache, warmup model) took {time.monotonic() - started:.2f} seconds",
        "EngineCore_DP0",
    )
    log("INFO", "api_server.py:1971", f"Starting vLLM API server 0 on http://{args.host}:{args.port}")
    pid = os.getpid()
    for line in (
        f"Started server process [{pid}]",
        "Waiting for application startup.",
        "Application startup complete.",
    ):
        print(f"INFO:     {line}", flush=True)
    server.start_engine()
    server.mark_ready()


async def run_head(args: argparse.Namespace, knobs: TwinKnobs, env: dict) -> int:
    import uvicorn

    options = serve_options(args, knobs, env)
    budget = kv_budget(
        args.gpu_memory_utilization, args.max_model_len or MODEL_LEN_1M, args.block_size, knobs.sticky_gib
    )
    config = engine_config(args, knobs, env, max(budget.kv_tokens, 1))
    server = TwinServer(options, config)
    loop = asyncio.get_running_loop()
    if "head-dies" in knobs.faults:
        server.on_ready.append(
            lambda: loop.call_later(HEAD_DIES_AFTER_S * knobs.time_scale, server.die_head, "after ready")
        )
    rendezvous = None
    listener = None
    if args.nnodes > 1:
        rendezvous = Rendezvous(server, args.nnodes - 1)
        try:
            listener = await asyncio.start_server(rendezvous.handle, args.master_addr, args.master_port)
        except OSError as exc:
            log("ERROR", "core.py:708", "EngineCore failed to start.", "EngineCore_DP0")
            print(
                f"torch.distributed.DistNetworkError: The server socket has failed to listen on "
                f"{args.master_addr}:{args.master_port} ({exc.strerror}).",
                flush=True,
            )
            return 1
    configure_uvicorn_logging(options.access_log)
    uv = uvicorn.Server(
        uvicorn.Config(
            server.app,
            host=args.host,
            port=args.port,
            http="httptools",
            ws="none",
            lifespan="off",
            log_config=None,
            access_log=options.access_log,
            timeout_graceful_shutdown=2,
        )
    )
    serving = loop.create_task(uv.serve())
    booting = loop.create_task(boot(args, knobs, server, budget, rendezvous))
    stats = loop.create_task(server.log_stats_forever())
    code = 0
    await asyncio.wait({serving, booting}, return_when=asyncio.FIRST_COMPLETED)
    if booting.done() and booting.exception():
        failure = booting.exception()
        if not isinstance(failure, BootFailure):
            raise failure
        code = failure.code
        uv.should_exit = True
    booting.cancel()
    await serving
    stats.cancel()
    if rendezvous:
        rendezvous.shutdown()
    if listener:
        listener.close()
    return code


# --- Headless worker -----------------------------------------------------------------------------
def store_lost(rank: int, writer: asyncio.StreamWriter, remote: str) -> None:
    """What torch's c10d prints on a headless rank whose head (the TCPStore's server) is gone, as public reports show it
    (https://github.com/vllm-project/vllm/issues/32136): the store read fails, then the NCCL heartbeat's check."""
    stamp = time.strftime("%m%d %H:%M:%S") + f".{time.time_ns() % 10**9:09d}"
    own = writer.get_extra_info("sockname") or ("0.0.0.0", 0)
    sock = writer.get_extra_info("socket")
    closed = "Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?"
    for line in (
        f"[rank{rank}]:[W{stamp} TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd="
        f"{sock.fileno() if sock else -1}, addr=[{own[0]}]:{own[1]}, remote={remote}): {closed}",
        f"[rank{rank}]:[W{stamp} ProcessGroupNCCL.cpp:1826] [PG ID 0 PG GUID 0 Rank {rank}] Failed to check the "
        f'"should dump" flag on TCPStore, (maybe TCPStore server has shut down too early), with error: {closed}',
    ):
        print(line, flush=True)


async def run_worker(args: argparse.Namespace, knobs: TwinKnobs) -> int:
    """Join the head's TP group and stay up; a vanished head leaves this process orphaned (fact T14).

    On the real pair a head that dies mid tensor-parallel run leaves the worker holding its memory until
    someone stops it; so does this one. A worker started again while its head still runs the group it left
    (the node rebooted, and docker started the container again) cannot rejoin it: it keeps trying for as long
    as the head answers, and gives up only once the head has not been listening for the rendezvous timeout.
    """
    process = f"Worker_TP{args.node_rank}"
    log(
        "INFO",
        "api_server.py:1850",
        f"Launching headless worker: node rank {args.node_rank}/{args.nnodes}, "
        f"head {args.master_addr}:{args.master_port}",
        process,
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + knobs.rendezvous_timeout_s
    refused = False
    while True:
        try:
            reader, writer = await asyncio.open_connection(args.master_addr, args.master_port)
            writer.write(f"{HELLO} {args.node_rank}\n".encode())
            await writer.drain()
            answer = (await asyncio.wait_for(reader.readline(), 10)).strip()
            if answer == b"ok":
                break
            writer.close()
            if answer == FORMED:
                deadline = loop.time() + knobs.rendezvous_timeout_s
                if not refused:
                    log(
                        "WARNING",
                        "parallel_state.py:1165",
                        f"The TP group at {args.master_addr}:{args.master_port} "
                        "was formed without this rank and cannot take it back; "
                        "retrying until the head is started again",
                        process,
                    )
                refused = True
        except (OSError, asyncio.TimeoutError):
            pass
        if loop.time() > deadline:
            log("ERROR", "core.py:708", "Worker failed to start.", process)
            print(
                f"torch.distributed.DistNetworkError: failed to connect to {args.master_addr}:{args.master_port} "
                f"after {knobs.rendezvous_timeout_s:.0f} seconds (the head is not listening).",
                flush=True,
            )
            return 1
        await asyncio.sleep(0.5)
    log(
        "INFO",
        "parallel_state.py:1165",
        f"Joined the TP group as node rank {args.node_rank} (tensor_parallel_size {args.tensor_parallel_size})",
        process,
    )
    log(
        "INFO",
        "default_loader.py:268",
        f"Loading safetensors checkpoint shards: 100% Completed | {WEIGHT_SHARDS}/{WEIGHT_SHARDS}",
        process,
    )
    try:
        message = await reader.read()
    except OSError:  # a killed head resets the connection
        message = b""
    if message.startswith(b"shutdown"):
        log("INFO", "multiproc_executor.py:520", "Head shut down cleanly; headless worker exiting.", process)
        return 0
    store_lost(args.node_rank, writer, f"[{args.master_addr}]:{args.master_port}")
    log(
        "ERROR",
        "pynccl.py:134",
        "NCCL error: remote process exited or there was a network error, "
        "ncclRemoteError: A call failed possibly due to a network error or a remote "
        "process exiting prematurely.",
        process,
    )
    log(
        "WARNING",
        "multiproc_executor.py:560",
        f"Lost the head at {args.master_addr}:{args.master_port}; this "
        "worker keeps its GPU memory until it is stopped.",
        process,
    )
    await asyncio.Event().wait()  # orphaned: runs until stopped
    return 0


# --- Local launch (tests, benchmarks) ------------------------------------------------------------
@dataclass
class LocalServer:
    """A stand-in `vllm serve` running as a local process, its log in a file (what `docker logs` shows)."""

    process: subprocess.Popen
    url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def health(self) -> int:
        """HTTP status of /health, 0 when nothing answers."""
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return 0

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.health() != 200:
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join(self.log().splitlines()[-5:])
                raise LanebookError(f"twin vllm at {self.url} did not become healthy: {tail}")
            time.sleep(0.05)

    def stop(self, timeout_s: float = 10.0) -> Optional[int]:
        """SIGTERM (as `docker stop` sends), then SIGKILL if it lingers; returns the exit code."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout_s)
        return self.process.returncode


def free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def start_local(
    args: list[str], log_path: Path, host: str = "127.0.0.1", env: Optional[dict] = None, wait_s: Optional[float] = 60.0
) -> LocalServer:
    """Start ``vllm serve ARGS --host HOST --port FREE`` here; wait for /health 200 unless ``wait_s`` is None.

    ``env`` plays the container environment: this process's VLLM_* and LANEBOOK_TWIN_* never leak in.
    """
    port = free_port(host)
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "LANEBOOK_TWIN_"))}
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "lanebook.twin.vllm", "serve", *args, "--host", host, "--port", str(port)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**inherited, **(env or {})},
        )
    server = LocalServer(process, f"http://{host}:{port}", log_path)
    if wait_s is not None:
        try:
            server.wait_healthy(wait_s)
        except LanebookError:
            server.stop()
            raise
    return server


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    argv = normalize_argv(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    env = dict(os.environ)
    knobs = twin_knobs(env)
    defaults = vars(parser.parse_args(["serve"]))
    given = {k: v for k, v in vars(args).items() if v != defaults.get(k)}
    refused = real_engine.check_knob(env)
    if refused:
        print(refused, file=sys.stderr)
        return 2
    if real_engine.requested(env):  # the real vLLM (CPU build) serves instead of the twin engine
        return vllm_cpu.run(args, vllm_cpu.explicit(parser, argv, args), env)
    log("INFO", "api_server.py:1896", f"vLLM API server version {VLLM_VERSION}")
    if given.get("api_key"):  # the recipe's hotfix-vllm-redact-api-key-log.sh: the keys never reach the log
        given["api_key"] = [f"<redacted:{len(given['api_key'])} value(s)>"]
    log("INFO", "utils.py:233", f"non-default args: {given}")
    enabled, line = breakable_graphs(env)
    if line:
        log("WARNING", "envs.py:1422", line)
    if enabled:
        log(
            "INFO",
            "cuda_graph.py:77",
            "Breakable CUDA graphs: decode runs the breakable (slow) path.",
            "EngineCore_DP0",
        )
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        if args.headless:
            return runner(run_worker(args, knobs))
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: None)  # uvicorn re-raises the signal it caught; we exit cleanly instead
        return runner(run_head(args, knobs, env))
    except BootFailure as failure:
        return failure.code


if __name__ == "__main__":
    sys.exit(main())
