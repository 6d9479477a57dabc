"""lanebook.recipe.effective.mismatches: the lane compared with what a checkout runs, and the live command with the
lane."""

from __future__ import annotations

import pytest
from helpers.recipe_fixtures import example_checkout
from lanebook.lane.params import load_lane
from lanebook.recipe.effective.checkout import CheckoutFiles
from lanebook.recipe.effective.config import Effective
from lanebook.recipe.effective.mismatches import (
    LiveMismatch,
    lane_mismatches,
    live_mismatches,
    rank_mismatches,
    same_value,
)

# --- the lane against what runs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key,lane,running,same",
    [
        ("GPU_MEMORY_UTILIZATION", "0.85", "0.850", True),
        ("GPU_MEMORY_UTILIZATION", "0.85", "0.835", False),
        ("MAX_NUM_SEQS", "6", "6", True),
        ("MAX_NUM_SEQS", "6", None, False),
        ("SERVED_MODEL_NAME", "a", "a ", False),
        (
            "DSPARK_VLLM_IMAGE",
            "ghcr.io/anemll/dspark-vllm-gx10:0.1.1",
            "ghcr.io/anemll/dspark-vllm-gx10:0.1.1@sha256:ab",
            True,
        ),
        (
            "DSPARK_VLLM_IMAGE",
            "ghcr.io/anemll/dspark-vllm-gx10:0.1.1@sha256:ab",
            "ghcr.io/anemll/dspark-vllm-gx10:0.1.1",
            False,
        ),
        (
            "DSPARK_VLLM_IMAGE",
            "ghcr.io/anemll/dspark-vllm-gx10:0.1.2",
            "ghcr.io/anemll/dspark-vllm-gx10:0.1.1@sha256:ab",
            False,
        ),
    ],
)
def test_same_value(key, lane, running, same):
    assert same_value(key, lane, running) is same


def test_the_fixture_example_as_is_against_the_lane(tmp_path):
    eff = Effective(CheckoutFiles.read(example_checkout(tmp_path)))
    found = {m.key: (m.lane_value, m.running.value) for m in lane_mismatches(load_lane("anemll-0731"), eff)}
    assert found == {
        "GPU_MEMORY_UTILIZATION": ("0.85", "0.835"),
        "POST_READINESS_WARMUP_ENABLED": ("1", None),
        "MASTER_ADDR": ("10.0.0.1", "head-roce-ip"),
        "WORKER_HOST": ("10.0.0.2", "worker-host-or-roce-ip"),
        "VLLM_HOST_IP": ("10.0.0.1", "head-roce-ip"),
        "WORKER_VLLM_HOST_IP": ("10.0.0.2", "worker-roce-ip"),
        "NCCL_SOCKET_IFNAME": ("bond0", "enpXsYfZnpN"),
        "GLOO_SOCKET_IFNAME": ("bond0", "enp1s0f1np1"),
        "TP_SOCKET_IFNAME": ("bond0", "enp1s0f1np1"),
        "speculative.num_speculative_tokens_per_batch_size": ("[[1,1,5],[2,4,4],[5,6,3]]", "none"),
    }
    # The image is pinned by digest to the lane's tag and the model is derived from ABLITERATED: both are the lane's.


def test_nothing_is_compared_when_the_entrypoint_refuses(tmp_path):
    eff = Effective(CheckoutFiles.read(example_checkout(tmp_path, extra="DEFAULT_THINKING=sometimes\n")))
    assert eff.spec.entrypoint_error[0] == 2 and lane_mismatches(load_lane("anemll-0731"), eff) == []


# --- the live command against the lane ---------------------------------------------------------------

SPEC_543 = (
    '{"method":"dspark","num_speculative_tokens":5,"draft_sample_method":"probabilistic",'
    '"num_speculative_tokens_per_batch_size":[[1,1,5],[2,4,4],[5,6,3]]}'
)
LIVE = (
    "/usr/bin/python3 /usr/local/bin/vllm serve deepseek-ai/DeepSeek-V4-Flash-0731 --served-model-name "
    "deepseek-v4-flash-0731 --host 0.0.0.0 --port 8888 --trust-remote-code --tensor-parallel-size 2 "
    "--kv-cache-dtype nvfp4_ds_mla --max-model-len 1048576 --max-num-seqs 6 --max-num-batched-tokens 8192 "
    "--max-cudagraph-capture-size 36 "
    f"--gpu-memory-utilization 0.85 --enable-prefix-caching --speculative-config {SPEC_543} "
    '--default-chat-template-kwargs {"thinking":true,"reasoning_effort":"low"} --nnodes 2 --node-rank 0'
)


def test_the_live_command_of_the_lane_has_no_mismatch():
    assert live_mismatches(load_lane("anemll-0731"), LIVE) == []


def test_each_live_mismatch_names_the_flag_the_lane_value_and_the_live_value():
    live = (
        LIVE.replace("--gpu-memory-utilization 0.85", "--gpu-memory-utilization 0.835")
        .replace("--max-num-seqs 6", "--max-num-seqs=4")
        .replace("--max-num-batched-tokens 8192 ", "")
        .replace('"num_speculative_tokens":5', '"num_speculative_tokens":7')
        .replace(',"num_speculative_tokens_per_batch_size":[[1,1,5],[2,4,4],[5,6,3]]', "")
    )
    found = live_mismatches(load_lane("anemll-0731"), live)
    assert [str(m) for m in found] == [
        "--max-num-seqs: lane 6, live 4",
        "--max-num-batched-tokens: lane 8192, live absent",
        "--gpu-memory-utilization: lane 0.85, live 0.835",
        "--speculative-config num_speculative_tokens: lane 5, live 7",
        "--speculative-config num_speculative_tokens_per_batch_size: lane [[1,1,5],[2,4,4],[5,6,3]], live absent",
    ]
    assert found[0] == LiveMismatch("--max-num-seqs", "6", "4")


def test_a_rollback_lane_wants_no_schedule_live():
    rollback = load_lane("anemll-1m6")
    [mismatch] = [m for m in live_mismatches(rollback, LIVE) if "per_batch_size" in m.flag]
    assert (mismatch.lane_value, mismatch.live) == ("none", "[[1,1,5],[2,4,4],[5,6,3]]")
    fixed = LIVE.replace(',"num_speculative_tokens_per_batch_size":[[1,1,5],[2,4,4],[5,6,3]]', "")
    assert [m.flag for m in live_mismatches(rollback, fixed)] == ["--served-model-name"]  # 1m6 serves another name


def test_a_live_command_without_a_server_mismatches_everything_the_lane_sets():
    found = live_mismatches(load_lane("anemll-0731"), "")
    assert [m.flag for m in found] == [
        "--served-model-name",
        "--max-model-len",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--gpu-memory-utilization",
        "--kv-cache-dtype",
        "--speculative-config num_speculative_tokens",
        "--speculative-config num_speculative_tokens_per_batch_size",
    ]
    assert all(m.live is None for m in found)


def test_the_kv_cache_dtype_is_checked_live_and_an_absent_flag_is_vllms_default():
    """Both seed lanes run nvfp4_ds_mla (seed 003's lane table); a command without the flag runs vLLM's default, auto,
    which is what the real-vllm-cpu lane says its CPU build runs."""
    params = load_lane("anemll-0731")
    assert [str(m) for m in live_mismatches(params, LIVE.replace("nvfp4_ds_mla", "fp8"))] == [
        "--kv-cache-dtype: lane nvfp4_ds_mla, live fp8"
    ]
    assert [str(m) for m in live_mismatches(params, LIVE.replace(" --kv-cache-dtype nvfp4_ds_mla", ""))] == [
        "--kv-cache-dtype: lane nvfp4_ds_mla, live absent"
    ]
    cpu = load_lane("real-vllm-cpu")
    assert cpu.kv_cache_dtype == "auto"
    live = live_mismatches(cpu, "python -m vllm.entrypoints.openai.api_server")
    assert "--kv-cache-dtype" not in [m.flag for m in live]


def test_a_checkout_whose_command_runs_another_kv_dtype_mismatches_the_lane(tmp_path):
    directory = example_checkout(tmp_path)
    compose = directory / "docker-compose.dspark.yml"
    compose.write_text(compose.read_text().replace("--kv-cache-dtype nvfp4_ds_mla", "--kv-cache-dtype fp8"))
    eff = Effective(CheckoutFiles.read(directory))
    [mismatch] = [m for m in lane_mismatches(load_lane("anemll-0731"), eff) if m.key == "kv_cache_dtype"]
    assert (mismatch.lane_value, mismatch.running.value) == ("nvfp4_ds_mla", "fp8")
    assert eff.compose.lines[mismatch.running.where.line - 1].strip() == "--kv-cache-dtype fp8"


def test_the_checkouts_own_serve_argv_is_a_live_command_with_no_mismatch(tmp_path):
    """What the effective computation says the server gets, shown as docker top shows it, passes the live check."""
    from lanebook.recipe.render import render_checkout

    directory = example_checkout(tmp_path)
    params = load_lane("anemll-0731")
    render_checkout(params, directory)
    argv = Effective(CheckoutFiles.read(directory)).spec.argv
    assert live_mismatches(params, "/usr/bin/python3 /usr/local/bin/vllm " + " ".join(argv)) == []


def test_a_four_node_lane_live_must_run_a_tp_group_of_its_node_count():
    """The four-node shape: every node a rank. A live command of a TP2 pair (the recipe's compose) is two mismatches;
    a two-node lane without the four-node keys is not asked about them."""
    params = load_lane("anemll-0731-tp4")
    assert [str(m) for m in live_mismatches(params, LIVE)] == [
        "--tensor-parallel-size: lane 4, live 2",
        "--nnodes: lane 4, live 2",
    ]
    tp4 = LIVE.replace("--tensor-parallel-size 2", "--tensor-parallel-size 4").replace("--nnodes 2", "--nnodes 4")
    assert live_mismatches(params, tp4) == []
    assert live_mismatches(load_lane("anemll-0731"), tp4) == []


def test_rank_mismatches_read_what_the_compose_really_passes(tmp_path):
    """The recipe's compose writes --tensor-parallel-size 2 and --nnodes 2: a four-node lane runs a TP2 pair there."""
    eff = Effective(CheckoutFiles.read(example_checkout(tmp_path)))
    found = rank_mismatches(load_lane("anemll-0731-tp4"), eff)
    assert [(m.key, m.lane_value, m.running.value, m.running.from_env) for m in found] == [
        ("--tensor-parallel-size", "4", "2", False),
        ("--nnodes", "4", "2", False),
    ]
    assert rank_mismatches(load_lane("anemll-0731"), eff) == []
