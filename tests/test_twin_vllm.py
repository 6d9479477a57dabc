"""The twin's `vllm serve` process: vLLM's flag parsing, its boot log and refusals, the TP rendezvous.

The pure parts (sizes, flag spelling, the breakable-graph switch, twin knobs, engine settings from
flags) are checked in-process; boot and rendezvous run `python -m lanebook.twin.vllm serve` as real
subprocesses on free loopback ports, as the docker stand-in runs it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import httpx
import pytest
from helpers.recipe_fixtures import COMPOSE, FIXTURES, need
from helpers.twin_serve import MODEL, OFF, SERVE_ARGS, chat, main, truth, variant  # noqa: F401 - module-scoped server fixtures, used by name
from helpers.waits import eventually
from lanebook.recipe.effective.compose_model import container_spec
from lanebook.twin import vllm
from lanebook.twin.kv import STICKY_UMA_DEFAULT_GIB
from lanebook.twin.vllm import free_port, start_local


# --- Flags, knobs and settings (pure) -------------------------------------------------------------
@pytest.mark.parametrize(
    "text, value", [("1048576", 1048576), ("1m", 10**6), ("1M", 2**20), ("1024K", 2**20), ("8k", 8000), ("0.5M", 2**19)]
)
def test_human_int_reads_vllms_sizes(text, value):
    assert vllm.human_int(text) == value


def test_human_int_refuses_what_is_not_a_size():
    with pytest.raises(argparse.ArgumentTypeError):
        vllm.human_int("1 MB")


def test_underscored_flags_are_vllms_dashed_flags():
    assert vllm.normalize_argv(["--max_model_len=5", "--max_num_seqs", "6", "a_b"]) == [
        "--max-model-len=5",
        "--max-num-seqs",
        "6",
        "a_b",
    ]


@pytest.mark.parametrize(
    "value, enabled, line",
    [
        ("0", False, None),
        (None, True, "Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1"),
        ("", True, "Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1"),
        ("1", True, "Breakable CUDA graphs enabled (VLLM_USE_BREAKABLE_CUDAGRAPH=1)."),
    ],
)
def test_t03_only_0_opts_out_of_breakable_graphs(value, enabled, line):
    env = {} if value is None else {"VLLM_USE_BREAKABLE_CUDAGRAPH": value}
    on, said = vllm.breakable_graphs(env)
    assert on is enabled
    assert (said is None) if line is None else said.startswith(line)


def test_twin_knobs_defaults_the_sticky_fault_and_a_bad_value(capsys):
    plain = vllm.twin_knobs({})
    assert (plain.time_scale, plain.sticky_gib, plain.pace_tok_s, plain.tokens_per_chunk) == (1.0, 0.0, None, 3)
    assert plain.rendezvous_timeout_s == vllm.RENDEZVOUS_TIMEOUT_S
    fast = vllm.twin_knobs({"LANEBOOK_TWIN_TIME_SCALE": "0.001", "LANEBOOK_TWIN_FAULTS": "sticky-uma, head-dies"})
    assert fast.faults == {"sticky-uma", "head-dies"} and fast.sticky_gib == STICKY_UMA_DEFAULT_GIB
    assert fast.rendezvous_timeout_s == vllm.RENDEZVOUS_TIMEOUT_FLOOR_S
    with pytest.raises(SystemExit) as exit_info:
        vllm.twin_knobs({"LANEBOOK_TWIN_TIME_SCALE": "fast"})
    assert exit_info.value.code == 2
    assert "LANEBOOK_TWIN_TIME_SCALE must be a positive number, got 'fast'" in capsys.readouterr().err


def serve_args(*flags: str) -> argparse.Namespace:
    return vllm.build_parser().parse_args(vllm.normalize_argv(["serve", MODEL, *flags]))


def test_engine_config_from_the_recipes_flags_and_env():
    args = serve_args(*SERVE_ARGS[1:])
    config = vllm.engine_config(
        args,
        vllm.twin_knobs({"LANEBOOK_TWIN_FAULTS": "prefix-evict"}),
        {"VLLM_USE_BREAKABLE_CUDAGRAPH": "0"},
        kv_tokens=1000,
    )
    assert (config.max_model_len, config.max_num_seqs, config.max_num_batched_tokens, config.block_size) == (
        1048576,
        6,
        8192,
        256,
    )
    assert config.num_speculative_tokens == 5 and config.k_schedule == ((1, 1, 5), (2, 4, 4), (5, 6, 3))
    assert (config.breakable_cudagraph, config.prefix_evict, config.kv_tokens) == (False, True, 1000)


@pytest.mark.parametrize(
    "flags, error",
    [
        (
            [
                "--speculative-config",
                '{"num_speculative_tokens": 5, "num_speculative_tokens_per_batch_size": [[1, 1, 7]]}',
            ],
            "ValueError: num_speculative_tokens_per_batch_size entry [1, 1, 7]: K must be between 0 and",
        ),
        (["--max-num-partial-prefills", "2"], "NotImplementedError: Concurrent Partial Prefill is not supported."),
    ],
)
def test_engine_config_refusals_fail_the_boot_as_vllm_does(flags, error, capsys):
    with pytest.raises(vllm.BootFailure) as failure:
        vllm.engine_config(serve_args(*flags), vllm.twin_knobs({}), {}, kv_tokens=1000)
    assert failure.value.code == 1
    out = capsys.readouterr().out
    assert "EngineCore failed to start." in out and error in out


# --- Boot (subprocesses) --------------------------------------------------------------------------
def test_unknown_flag_is_refused_like_vllm_argparse():
    result = subprocess.run(
        [sys.executable, "-m", "lanebook.twin.vllm", "serve", MODEL, "--bogus-flag", "1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "vllm: error: unrecognized arguments: --bogus-flag 1" in result.stderr


def test_t01_fixture_recipe_at_080_fails_with_the_kv_figures(tmp_path):
    compose = need(FIXTURES / COMPOSE)
    spec = container_spec(
        compose, FIXTURES / "env.dspark.example", environ={"NODE_RANK": "0", "MASTER_ADDR": "127.0.0.73"}
    )
    assert spec.arg("--gpu-memory-utilization") == "0.80"  # the compose default when the launcher sets nothing
    srv = start_local(
        [*spec.argv[1:], "--nnodes", "1"],
        tmp_path / "vllm.log",
        host="127.0.0.73",
        env={**spec.environment, "LANEBOOK_TWIN_TIME_SCALE": "0.002"},
        wait_s=None,
    )
    assert srv.process.wait(30) == 1
    log = srv.log()
    assert (
        "ValueError: To serve at least one request with the model's max seq len (1048576), (7.54 GiB KV cache "
        "is needed, which is larger than the available KV cache memory (7.16 GiB). Based on the available "
        "memory, the estimated maximum model length is 953088."
    ) in log
    assert (
        log.count("No available shared memory broadcast block found in 60 seconds") >= 1
    )  # not fatal (fact T09): the boot went on to the KV check
    assert "Application startup complete" not in log


def test_t02_t09_boot_log_lines(main):
    log = main.log()
    for line in (
        "GPU KV cache size: 2,493,464 tokens",
        "Maximum concurrency for 1,048,576 tokens per request: 2.38x",
        "Available KV cache memory: 13.29 GiB",
        "Starting vLLM API server 0 on",
        "Application startup complete.",
    ):
        assert line in log
    assert log.index("No available shared memory broadcast block") < log.index("Application startup complete.")
    assert "Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1" not in log


def test_t03_missing_breakable_opt_out_logs_and_slows_decode(main, variant):
    assert "Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1" in variant.log()
    # Each server's best of three decode rates on its own clock: a busy machine only ever slows a server down
    # (beside a full suite, main once decoded 5% below the variant in a single try)
    rates = []
    for srv in (main, variant):
        httpx.delete(f"{srv.url}/twin/requests")
        for _ in range(3):
            chat(srv, "Count from 1 to 400, one number per line.", max_tokens=96, **OFF)
        rates.append(max((r["completion_tokens"] - 1) / (r["t_last"] - r["t_first"]) for r in truth(srv)))
    assert rates[1] < 0.9 * rates[0], rates


# --- Multi-node rendezvous (fact T14: a head that dies leaves its worker orphaned) -----------------
def node_spec(rank: int, master: str, port: int, extra: dict | None = None):
    """The fixture compose's container for a node rank, as the twin's docker stand-in builds it."""
    environ = {
        "NODE_RANK": str(rank),
        "MASTER_ADDR": master,
        "MASTER_PORT": str(port),
        "GPU_MEMORY_UTILIZATION": "0.85",
        "HEADLESS": "1" if rank else "",
    }
    return container_spec(need(FIXTURES / COMPOSE), FIXTURES / "env.dspark.example", environ=environ)


def start_node(tmp_path, rank: int, master: str, port: int, knobs: dict):
    spec = node_spec(rank, master, port)
    return start_local(
        spec.argv[1:], tmp_path / f"node{rank}.log", host=master, env={**spec.environment, **knobs}, wait_s=None
    )


def test_head_without_worker_fails_clearly(tmp_path):
    head = start_node(
        tmp_path,
        0,
        "127.0.0.74",
        free_port("127.0.0.74"),
        {"LANEBOOK_TWIN_TIME_SCALE": "0.002", "LANEBOOK_TWIN_RENDEZVOUS_TIMEOUT_S": "1"},
    )
    assert head.process.wait(30) == 1
    assert "DistStoreError: Timed out after 1 seconds waiting for clients. 1/2 clients joined." in head.log()


def test_worker_joins_and_leaves_with_a_clean_head_stop(tmp_path):
    port = free_port("127.0.0.75")
    knobs = {"LANEBOOK_TWIN_TIME_SCALE": "0.002"}
    head = start_node(tmp_path, 0, "127.0.0.75", port, knobs)
    worker = start_node(tmp_path, 1, "127.0.0.75", port, knobs)
    try:
        head.wait_healthy(30)
        assert "joined the TP group" in head.log()
        assert head.stop() == 0
        assert worker.process.wait(10) == 0
    finally:
        head.stop(), worker.stop()


def test_t14_head_dies_leaves_the_worker_orphaned(tmp_path):
    port = free_port("127.0.0.76")
    knobs = {"LANEBOOK_TWIN_TIME_SCALE": "0.002", "LANEBOOK_TWIN_FAULTS": "head-dies"}
    head = start_node(tmp_path, 0, "127.0.0.76", port, knobs)
    worker = start_node(tmp_path, 1, "127.0.0.76", port, knobs)
    try:
        assert head.process.wait(30) == 1
        assert "Application startup complete." in head.log() and "fault head-dies" in head.log()
        assert eventually(lambda: "NCCL error" in worker.log(), 20)
        lost = [line for line in worker.log().splitlines() if "TCPStore" in line]  # torch's lines, as vllm#32136 shows
        assert (
            lost[0].startswith("[rank1]:[W") and f"remote=[127.0.0.76]:{port}): Failed to recv, got 0 bytes" in lost[0]
        )
        assert '[PG ID 0 PG GUID 0 Rank 1] Failed to check the "should dump" flag on TCPStore' in lost[1]
        time.sleep(0.3)
        assert worker.process.poll() is None  # orphaned, still holding its GPU memory
    finally:
        head.stop(), worker.stop()


def test_a_worker_started_again_cannot_rejoin_the_group_it_left(tmp_path):
    """A rebooted worker's container started again by docker: the head's group lost that rank (its engine died),
    the new rank keeps trying while the head answers, and gives up once the head is gone for the timeout."""
    port = free_port("127.0.0.77")
    knobs = {"LANEBOOK_TWIN_TIME_SCALE": "0.002"}
    head = start_node(tmp_path, 0, "127.0.0.77", port, knobs)
    first = start_node(tmp_path, 1, "127.0.0.77", port, knobs)
    again = None
    try:
        head.wait_healthy(30)
        first.process.kill()
        assert eventually(lambda: head.health() == 503, 20)  # the NCCL communicator lost the rank
        spec = node_spec(1, "127.0.0.77", port)
        again = start_local(
            spec.argv[1:],
            tmp_path / "node1-again.log",
            host="127.0.0.77",
            env={**spec.environment, **knobs, "LANEBOOK_TWIN_RENDEZVOUS_TIMEOUT_S": "1"},
            wait_s=None,
        )
        assert eventually(lambda: "was formed without this rank" in again.log(), 20)
        time.sleep(1.5)  # longer than its timeout: the head still answers, so the rank keeps trying
        assert again.process.poll() is None and head.health() == 503
        assert "joined the TP group (3/2" not in head.log() and "Joined the TP group" not in again.log()
        head.stop()
        assert again.process.wait(10) == 1 and "failed to connect" in again.log()
    finally:
        head.stop(), first.stop()
        if again:
            again.stop()


def four_rank_argv(argv: list[str]) -> list[str]:
    """The fixture compose's command with four ranks, as the four-node compose renders it (TP_SIZE=NNODES=4)."""
    sized = list(argv)
    for flag in ("--tensor-parallel-size", "--nnodes"):
        sized[sized.index(flag) + 1] = "4"
    return sized


def test_the_head_of_four_ranks_serves_only_once_every_headless_rank_joined(tmp_path):
    """The world is what the head was launched with (--tensor-parallel-size, --nnodes): /health stays down with two of
    its three workers joined, turns healthy with the third, and the startup log names world_size=4 as vLLM's
    executor does."""
    master = "127.0.0.77"
    port = free_port(master)
    knobs = {"LANEBOOK_TWIN_TIME_SCALE": "0.002"}
    nodes = []
    try:
        for rank in range(3):
            spec = node_spec(rank, master, port)
            nodes.append(
                start_local(
                    four_rank_argv(spec.argv[1:]),
                    tmp_path / f"node{rank}.log",
                    host=master,
                    env={**spec.environment, **knobs},
                    wait_s=None,
                )
            )
        head = nodes[0]
        assert eventually(lambda: "(3/4 nodes)" in head.log(), 20)
        time.sleep(0.5)  # a cold bind at this clock takes ~1 s: still waiting, not booting
        assert head.health() != 200 and "Starting to load model" not in head.log()
        spec = node_spec(3, master, port)
        nodes.append(
            start_local(
                four_rank_argv(spec.argv[1:]),
                tmp_path / "node3.log",
                host=master,
                env={**spec.environment, **knobs},
                wait_s=None,
            )
        )
        head.wait_healthy(30)
        assert "world_size=4, local_world_size=1" in head.log() and "(4/4 nodes)" in head.log()
        assert "Joined the TP group as node rank 3 (tensor_parallel_size 4)" in nodes[3].log()
        assert head.stop() == 0
        assert all(node.process.wait(10) == 0 for node in nodes[1:])  # a clean stop ends every rank
    finally:
        for node in nodes:
            node.stop()
