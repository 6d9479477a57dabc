"""lanebook.effective: the container env and `vllm serve` argv a checkout gives, read as Compose and the
image would — on the recipe's real compose file (../shared fixtures) and on the twin's own template."""
from __future__ import annotations

from pathlib import Path

import pytest
from recipe_fixtures import COMPOSE, checkout, fixture_text, replace_once

from lanebook.errors import LanebookError
from lanebook.params import load_lane
from lanebook.render import speculative_config_line
from lanebook.effective import container_spec, speculative_config
from lanebook.twin.nodes import TwinAddresses
from lanebook.twin.tree import write_checkout

BREAKABLE_LINE = '      VLLM_USE_BREAKABLE_CUDAGRAPH: "${VLLM_USE_BREAKABLE_CUDAGRAPH:-0}"\n'
HEAD_ENV = {"NODE_RANK": "0", "HOME": "/home/operator"}
ENV = "\n".join(["DSPARK_MODEL=deepseek-ai/DeepSeek-V4-Flash-0731", "SERVED_MODEL_NAME=deepseek-v4-flash-0731",
                 "MASTER_ADDR=127.0.0.2", "VLLM_HOST=127.0.0.2", "GPU_MEMORY_UTILIZATION=0.85",
                 "VLLM_USE_BREAKABLE_CUDAGRAPH=0", "POST_READINESS_WARMUP_ENABLED=1", ""])


def spec_for(tmp_path: Path, compose: str | None = None, env: str = ENV, environ: dict | None = None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    directory = checkout(tmp_path, compose, env)
    return container_spec(directory / COMPOSE, directory / ".env.dspark", "lane", environ or HEAD_ENV)


def test_fixture_compose_gives_the_serve_command(tmp_path):
    spec = spec_for(tmp_path)
    assert spec.name == "lane-vllm-dspark-1" and spec.image.startswith("ghcr.io/anemll/dspark-vllm-gx10:0.1.1")
    assert spec.argv[:2] == ["serve", "deepseek-ai/DeepSeek-V4-Flash-0731"]
    assert spec.arg("--served-model-name") == "deepseek-v4-flash-0731" and spec.arg("--host") == "127.0.0.2"
    assert spec.arg("--max-cudagraph-capture-size") == "36"  # $(( 6 * (5 + 1) )) evaluated as the image does
    assert spec.arg("--node-rank") == "0" and "--headless" not in spec.argv
    assert spec.arg("--default-chat-template-kwargs") == '{"thinking":true,"reasoning_effort":"low"}'
    assert ("/home/operator/.cache/huggingface", "/cache/huggingface") in spec.volumes


def test_t03_breakable_reaches_the_container_only_through_the_compose_line(tmp_path):
    assert spec_for(tmp_path / "a").environment["VLLM_USE_BREAKABLE_CUDAGRAPH"] == "0"
    without_line = replace_once(fixture_text(COMPOSE), BREAKABLE_LINE, "")
    assert "VLLM_USE_BREAKABLE_CUDAGRAPH" not in spec_for(tmp_path / "b", without_line).environment
    # An env-file key the compose environment: map does not name never reaches the container.
    assert "POST_READINESS_WARMUP_ENABLED" not in spec_for(tmp_path / "c").environment


@pytest.mark.parametrize("lane_name, schedule", [("anemll-0731", [[1, 1, 5], [2, 4, 4], [5, 6, 3]]), ("anemll-1m6", None)])
def test_speculative_config_is_valid_json_with_and_without_the_schedule(tmp_path, lane_name, schedule):
    text = fixture_text(COMPOSE)
    current = next(line.strip() for line in text.splitlines() if line.strip().startswith("SPECULATIVE_CONFIG="))
    config = speculative_config(spec_for(tmp_path, replace_once(text, current, speculative_config_line(load_lane(lane_name)))))
    assert config["method"] == "dspark" and config["num_speculative_tokens"] == 5
    assert config.get("num_speculative_tokens_per_batch_size") == schedule


@pytest.mark.parametrize("utilization", ["0.80", "0.85"])
def test_gpu_memory_utilization_reaches_the_command(tmp_path, utilization):
    spec = spec_for(tmp_path, env=ENV.replace("GPU_MEMORY_UTILIZATION=0.85", f"GPU_MEMORY_UTILIZATION={utilization}"))
    assert spec.arg("--gpu-memory-utilization") == utilization


def test_shell_environment_wins_over_the_env_file(tmp_path):
    spec = spec_for(tmp_path, env=ENV + "NODE_RANK=0\nMTP_NUM_TOKENS=5\n",
                    environ={"NODE_RANK": "1", "HEADLESS": "1", "VLLM_HOST_IP": "127.0.0.3", "MTP_NUM_TOKENS": "7"})
    assert spec.arg("--node-rank") == "1" and spec.argv[-1] == "--headless"
    assert spec.environment["VLLM_HOST_IP"] == "127.0.0.3"
    assert speculative_config(spec)["num_speculative_tokens"] == 7 and spec.arg("--max-cudagraph-capture-size") == "48"


def test_entrypoint_refusal_is_the_container_exit(tmp_path):
    spec = spec_for(tmp_path, env=ENV + "DEFAULT_THINKING=sometimes\n")
    code, message = spec.entrypoint_error
    assert code == 2 and "DEFAULT_THINKING must be one of" in message and spec.argv == []


def test_bad_compose_files_are_one_clear_error(tmp_path):
    with pytest.raises(LanebookError, match="not a valid compose file"):
        spec_for(tmp_path / "a", "services: [unclosed\n")
    required = fixture_text(COMPOSE).replace("--master-addr ${MASTER_ADDR}", "--master-addr ${MASTER_ADDR:?set MASTER_ADDR}")
    with pytest.raises(LanebookError, match="required variable MASTER_ADDR"):
        spec_for(tmp_path / "b", required, env=ENV.replace("MASTER_ADDR=127.0.0.2\n", ""))
    with pytest.raises(LanebookError, match="no `exec /usr/local/bin/vllm serve"):
        spec_for(tmp_path / "c", "services:\n  vllm-dspark:\n    image: x\n    command: [bash, -lc, 'echo hi']\n")


def test_the_twin_template_checkout_reads_the_same_way(tmp_path):
    lane = load_lane("twin")
    directory = write_checkout(tmp_path, lane, TwinAddresses())
    spec = container_spec(directory / COMPOSE, directory / ".env.dspark", lane.launcher.env["PROJECT_NAME"], HEAD_ENV)
    assert spec.name == "ds4-f-mia-anemll-0731-vllm-dspark-1"
    assert (spec.arg("--host"), spec.arg("--port"), spec.arg("--master-addr")) == ("127.0.0.2", "8888", "127.0.0.2")
    assert spec.arg("--max-model-len") == "1048576" and spec.arg("--gpu-memory-utilization") == "0.85"
    assert speculative_config(spec)["num_speculative_tokens_per_batch_size"] == [[1, 1, 5], [2, 4, 4], [5, 6, 3]]
    assert spec.environment["VLLM_USE_BREAKABLE_CUDAGRAPH"] == "0"
