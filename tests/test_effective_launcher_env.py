"""lanebook.recipe.effective.launcher_env: the launcher's profile overrides, read from the start script (or the env
file),
and the line that wins for the values they decide."""

from __future__ import annotations

from helpers.recipe_fixtures import ENV, EXAMPLE, START, checkout, example_checkout, fixture_text, line_of, replace_once
from lanebook.recipe.effective.checkout import CheckoutFiles, Location
from lanebook.recipe.effective.config import Effective
from lanebook.recipe.effective.launcher_env import worker_exports, worker_words


def test_the_profile_key_decides_the_memory_utilization(tmp_path):
    directory = example_checkout(tmp_path)
    eff = Effective(CheckoutFiles.read(directory))
    setting = eff.setting("GPU_MEMORY_UTILIZATION")
    assert setting.value == "0.835" and eff.spec.arg("--gpu-memory-utilization") == "0.835"
    assert setting.where == Location(
        f"{directory}/.env.dspark", line_of(fixture_text(EXAMPLE), "GPU_MEMORY_UTILIZATION_TEXT=")
    )
    assert setting.via == "the launcher exports GPU_MEMORY_UTILIZATION from GPU_MEMORY_UTILIZATION_TEXT"
    assert [o.key for o in eff.launcher_overrides.overrides] == [
        "GPU_MEMORY_UTILIZATION",
        "DSPARK_MODEL",
        "DSPARK_REVISION",
    ]


def test_the_vision_sidecar_switches_to_the_vision_profile(tmp_path):
    text = replace_once(fixture_text(EXAMPLE), "\nENABLE_VL_SIDECAR=0\n", "\nENABLE_VL_SIDECAR=1\n")
    directory = checkout(tmp_path, env=text)
    setting = Effective(CheckoutFiles.read(directory)).setting("GPU_MEMORY_UTILIZATION")
    assert (setting.value, setting.where.line) == ("0.80", line_of(text, "GPU_MEMORY_UTILIZATION_VISION="))


def test_a_gpu_memory_line_is_dead_where_the_launcher_reads_the_profile(tmp_path):
    directory = example_checkout(tmp_path, extra="GPU_MEMORY_UTILIZATION=0.85\n")
    eff = Effective(CheckoutFiles.read(directory))
    [dead] = eff.dead_lines
    env_lines = (directory / ".env.dspark").read_text().splitlines()
    assert (dead.key, dead.value, dead.where.line) == ("GPU_MEMORY_UTILIZATION", "0.85", len(env_lines))
    assert (
        dead.winner.value == "0.835"
        and "exports GPU_MEMORY_UTILIZATION from GPU_MEMORY_UTILIZATION_TEXT" in dead.reason
    )
    assert eff.spec.arg("--gpu-memory-utilization") == "0.835"


def test_the_start_script_decides_the_launchers_shape(tmp_path):
    profile = (
        '#!/bin/bash\nGPU_MEMORY_UTILIZATION="${GPU_MEMORY_UTILIZATION_TEXT:-0.835}"\nexport GPU_MEMORY_UTILIZATION\n'
    )
    directory = checkout(tmp_path / "a", env=ENV)  # the env file names no profile key; the start script does
    (directory / START).write_text(profile)
    setting = Effective(CheckoutFiles.read(directory)).setting("GPU_MEMORY_UTILIZATION")
    assert (setting.value, setting.where) == ("0.835", Location(f"{directory}/{START}", 2))
    assert "unset: the launcher's default" in setting.via
    plain = example_checkout(
        tmp_path / "b", extra="GPU_MEMORY_UTILIZATION=0.85\n", start="#!/bin/bash\n. ./.env.dspark\n"
    )
    eff = Effective(CheckoutFiles.read(plain))
    assert (
        eff.launcher_overrides.overrides == ()
        and eff.setting("GPU_MEMORY_UTILIZATION").value == "0.85"
        and not eff.dead_lines
    )


def test_model_and_revision_follow_abliterated(tmp_path):
    text = fixture_text(EXAMPLE)
    official = Effective(CheckoutFiles.read(checkout(tmp_path / "a", env=text + "DSPARK_MODEL=someone/else\n")))
    model = official.setting("DSPARK_MODEL")
    assert (model.value, model.where.line) == (
        "deepseek-ai/DeepSeek-V4-Flash-0731",
        line_of(text, "DSPARK_MODEL_OFFICIAL="),
    )
    assert official.spec.arg("--revision") == "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
    assert [d.key for d in official.dead_lines] == ["DSPARK_MODEL"]
    abliterated = Effective(
        CheckoutFiles.read(checkout(tmp_path / "b", env=replace_once(text, "\nABLITERATED=0\n", "\nABLITERATED=1\n")))
    )
    assert abliterated.spec.argv[1] == "drowzeys/keys-DeepSeekV4-Flash-GA-0731-Dspark-Abliterated-32-32"
    assert abliterated.spec.arg("--revision") is None  # DSPARK_REVISION_ABLITERATED unset: the tip of that repo
    tip = Effective(
        CheckoutFiles.read(
            checkout(
                tmp_path / "c",
                env=replace_once(
                    text, "DSPARK_REVISION=9e165c30e2704aec5d9d593cce3eebd58bbef1cb\n", "DSPARK_REVISION=\n"
                ),
            )
        )
    )
    assert tip.spec.arg("--revision") is None  # set but empty: the tip, not the launcher's pin
    pinned = Effective(
        CheckoutFiles.read(
            checkout(
                tmp_path / "d", env=replace_once(text, "DSPARK_REVISION=9e165c30e2704aec5d9d593cce3eebd58bbef1cb\n", "")
            )
        )
    )
    revision = pinned.variable("DSPARK_REVISION")
    assert pinned.spec.arg("--revision") == "9e165c30e2704aec5d9d593cce3eebd58bbef1cb" and not revision.from_env


# A launcher's worker start, in the recipe's shape (its words, shortened): what it passes the worker's Compose.
WORKER_LAUNCHER = """#!/usr/bin/env bash
WORKER_VLLM_HOST_IP="${WORKER_VLLM_HOST_IP:-$WORKER_HOST}"
WORKER_NCCL_SOCKET_IFNAME="${WORKER_NCCL_SOCKET_IFNAME:-$NCCL_SOCKET_IFNAME}"
REMOTE_WORKER_DIR="$(printf '%q' "$WORKER_DIR")"
remote_nccl_env() {
  printf "NCCL_SOCKET_IFNAME='%s' VLLM_PORT='%s'" \\
    "$WORKER_NCCL_SOCKET_IFNAME" \\
    "$VLLM_PORT"
}
remote_compose() {
  ssh "$WORKER_HOST" "$REMOTE_COMPOSE $(remote_nccl_env) $*"
}
""" + (
    "remote_compose \"NODE_RANK=1 HEADLESS=1 VLLM_HOST_IP='$WORKER_VLLM_HOST_IP' "
    "GPU_MEMORY_UTILIZATION='$GPU_MEMORY_UTILIZATION' DSPARK_REVISION='${DSPARK_REVISION:-}' "
    "docker compose -p 'x' --env-file .env.dspark -f docker-compose.dspark.yml up -d\"\n"
)


def test_the_worker_gets_what_the_launchers_worker_line_and_nccl_env_pass():
    files = CheckoutFiles.from_texts({"docker-compose.dspark.yml": "services: {}\n", START: WORKER_LAUNCHER}, "c/")
    assert worker_words(files) == {
        "NCCL_SOCKET_IFNAME": "$WORKER_NCCL_SOCKET_IFNAME",
        "VLLM_PORT": "$VLLM_PORT",
        "NODE_RANK": "1",
        "HEADLESS": "1",
        "VLLM_HOST_IP": "$WORKER_VLLM_HOST_IP",
        "GPU_MEMORY_UTILIZATION": "$GPU_MEMORY_UTILIZATION",
        "DSPARK_REVISION": "${DSPARK_REVISION:-}",
    }
    values = {
        "WORKER_HOST": "10.0.0.2",
        "NCCL_SOCKET_IFNAME": "bond0",
        "VLLM_PORT": "8888",
        "GPU_MEMORY_UTILIZATION": "0.85",
    }
    assert worker_exports(files, values) == {
        "NCCL_SOCKET_IFNAME": "bond0",
        "VLLM_PORT": "8888",
        "NODE_RANK": "1",
        "HEADLESS": "1",
        "VLLM_HOST_IP": "10.0.0.2",
        "GPU_MEMORY_UTILIZATION": "0.85",
        "DSPARK_REVISION": "",
    }
    no_launcher = CheckoutFiles.from_texts({"docker-compose.dspark.yml": "services: {}\n"}, "c/")
    assert worker_words(no_launcher) == {"NODE_RANK": "1", "HEADLESS": "1"}
