"""lanebook.recipe.effective.compose_model: the container Compose creates from the recipe's real compose file (../shared
fixtures) and lanebook's reference, and the serve argv the image's script builds, in a bash that can run nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.recipe_fixtures import COMPOSE, ENV, EXAMPLE, checkout, fixture_text, replace_once
from lanebook.base.errors import LanebookError
from lanebook.lane.params import lane_with, load_lane
from lanebook.recipe.effective.checkout import CheckoutFiles
from lanebook.recipe.effective.compose_model import container_spec, restart_policy, serve_argv
from lanebook.recipe.effective.config import Effective
from lanebook.recipe.effective.mismatches import lane_mismatches
from lanebook.recipe.render import speculative_config_line
from lanebook.twin.nodes import TwinAddresses
from lanebook.twin.tree import write_checkout

BREAKABLE_LINE = '      VLLM_USE_BREAKABLE_CUDAGRAPH: "${VLLM_USE_BREAKABLE_CUDAGRAPH:-0}"\n'
HEAD_ENV = {"NODE_RANK": "0", "HOME": "/home/operator"}


def spec_for(tmp_path: Path, compose: str | None = None, env: str = ENV, environ: dict | None = None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    directory = checkout(tmp_path, compose, env)
    return container_spec(directory / COMPOSE, directory / ".env.dspark", "lane", environ or HEAD_ENV)


def speculative(spec) -> dict:
    """The --speculative-config the container's serve argv carries, which must be valid JSON."""
    return json.loads(spec.arg("--speculative-config"))


# --- the container Compose creates (the twin's `docker compose up` reads this) ----------------------


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


@pytest.mark.parametrize(
    "lane_name, schedule", [("anemll-0731", [[1, 1, 5], [2, 4, 4], [5, 6, 3]]), ("anemll-1m6", None)]
)
def test_speculative_config_is_valid_json_with_and_without_the_schedule(tmp_path, lane_name, schedule):
    text = fixture_text(COMPOSE)
    current = next(line.strip() for line in text.splitlines() if line.strip().startswith("SPECULATIVE_CONFIG="))
    config = speculative(spec_for(tmp_path, replace_once(text, current, speculative_config_line(load_lane(lane_name)))))
    assert config["method"] == "dspark" and config["num_speculative_tokens"] == 5
    assert config.get("num_speculative_tokens_per_batch_size") == schedule


@pytest.mark.parametrize("utilization", ["0.80", "0.85"])
def test_gpu_memory_utilization_reaches_the_command(tmp_path, utilization):
    spec = spec_for(tmp_path, env=ENV.replace("GPU_MEMORY_UTILIZATION=0.85", f"GPU_MEMORY_UTILIZATION={utilization}"))
    assert spec.arg("--gpu-memory-utilization") == utilization


def test_shell_environment_wins_over_the_env_file(tmp_path):
    spec = spec_for(
        tmp_path,
        env=ENV + "NODE_RANK=0\nMTP_NUM_TOKENS=5\n",
        environ={"NODE_RANK": "1", "HEADLESS": "1", "VLLM_HOST_IP": "127.0.0.3", "MTP_NUM_TOKENS": "7"},
    )
    assert spec.arg("--node-rank") == "1" and spec.argv[-1] == "--headless"
    assert spec.environment["VLLM_HOST_IP"] == "127.0.0.3"
    assert speculative(spec)["num_speculative_tokens"] == 7 and spec.arg("--max-cudagraph-capture-size") == "48"


def test_entrypoint_refusal_is_the_container_exit(tmp_path):
    spec = spec_for(tmp_path, env=ENV + "DEFAULT_THINKING=sometimes\n")
    code, message = spec.entrypoint_error
    assert code == 2 and "DEFAULT_THINKING must be one of" in message and spec.argv == []


RESTART_LINE = "    restart: ${DSPARK_RESTART_POLICY:-unless-stopped}\n"


def test_the_restart_policy_is_the_compose_lines_after_interpolation(tmp_path):
    assert RESTART_LINE in fixture_text(COMPOSE)
    assert spec_for(tmp_path / "a").restart == "unless-stopped"  # the compose default
    assert spec_for(tmp_path / "b", env=ENV + "DSPARK_RESTART_POLICY=no\n").restart == "no"
    assert (
        spec_for(tmp_path / "c", environ={**HEAD_ENV, "DSPARK_RESTART_POLICY": "on-failure:3"}).restart
        == "on-failure:3"
    )
    assert spec_for(tmp_path / "d", replace_once(fixture_text(COMPOSE), RESTART_LINE, "")).restart == "no"
    with pytest.raises(
        LanebookError,
        match=r"^.*docker-compose.dspark.yml: service 'vllm-dspark': invalid restart "
        r"policy: unknown policy 'sometimes'; use one of 'no', 'always', "
        r"'on-failure', or 'unless-stopped'$",
    ):
        spec_for(tmp_path / "e", env=ENV + "DSPARK_RESTART_POLICY=sometimes\n")


@pytest.mark.parametrize(
    "value, policy",
    [
        (None, "no"),
        ("", "no"),
        ("no", "no"),
        ("always", "always"),
        ("unless-stopped", "unless-stopped"),
        ("on-failure", "on-failure"),
        (" on-failure:5 ", "on-failure:5"),
        ("on-failure:0", "on-failure:0"),
    ],
)
def test_restart_policy_values(value, policy):
    assert restart_policy(value) == policy


@pytest.mark.parametrize(
    "value, error",
    [
        (
            "sometimes",
            (
                "invalid restart policy: unknown policy 'sometimes'; use one of 'no', 'always', 'on-failure', or "
                "'unless-stopped'"
            ),
        ),
        ("always:3", "invalid restart policy: maximum retry count can only be used with 'on-failure'"),
        ("on-failure:-1", "invalid restart policy: maximum retry count cannot be negative"),
        ("on-failure:x", "invalid restart policy format: maximum retry count must be an integer"),
        (":3", "invalid restart policy format: no policy provided before colon"),
        (
            False,
            (
                "invalid restart policy: unknown policy 'False'; use one of 'no', 'always', 'on-failure', or "
                "'unless-stopped'"
            ),
        ),
    ],
)
def test_a_restart_policy_the_daemon_refuses_is_its_error(value, error):
    with pytest.raises(LanebookError) as refused:
        restart_policy(value)
    assert str(refused.value) == error


def test_bad_compose_files_are_one_clear_error(tmp_path):
    with pytest.raises(LanebookError, match="not a valid compose file"):
        spec_for(tmp_path / "a", "services: [unclosed\n")
    required = fixture_text(COMPOSE).replace(
        "--master-addr ${MASTER_ADDR}", "--master-addr ${MASTER_ADDR:?set MASTER_ADDR}"
    )
    with pytest.raises(LanebookError, match="required variable MASTER_ADDR"):
        spec_for(tmp_path / "b", required, env=ENV.replace("MASTER_ADDR=127.0.0.2\n", ""))
    with pytest.raises(LanebookError, match="no `exec /usr/local/bin/vllm serve"):
        spec_for(tmp_path / "c", "services:\n  vllm-dspark:\n    image: x\n    command: [bash, -lc, 'echo hi']\n")
    text = fixture_text(COMPOSE)
    start, end = text.index("    environment:\n"), text.index("    command:\n")
    block = text[:start] + "    environment: |\n      HF_HOME=/cache\n" + text[end:]  # found by the property test
    with pytest.raises(
        LanebookError,
        match=r"/docker-compose.dspark.yml: service 'vllm-dspark' environment: must be a "
        r"map or a list, not str$",
    ):
        spec_for(tmp_path / "d", block)


def test_the_twin_checkout_is_the_example_with_the_lane_rendered(tmp_path):
    params = load_lane("twin")
    directory = write_checkout(tmp_path, params, TwinAddresses())
    assert (directory / EXAMPLE).is_file()
    spec = container_spec(directory / COMPOSE, directory / ".env.dspark", params.launcher.env["PROJECT_NAME"], HEAD_ENV)
    assert spec.name == "ds4-f-mia-anemll-0731-vllm-dspark-1"
    assert (spec.arg("--host"), spec.arg("--port"), spec.arg("--master-addr")) == ("127.0.0.2", "8888", "127.0.0.2")
    assert spec.arg("--max-model-len") == "1048576"
    assert speculative(spec)["num_speculative_tokens_per_batch_size"] == [[1, 1, 5], [2, 4, 4], [5, 6, 3]]
    assert spec.environment["VLLM_USE_BREAKABLE_CUDAGRAPH"] == "0" and spec.restart == "unless-stopped"
    assert spec.image.endswith(
        "@sha256:a83948492cf13df455170fb42885f5ef4db54fefe0feff0f841ecbff464ac9d8"
    )  # still pinned
    env = (directory / ".env.dspark").read_text()
    assert env.startswith((directory / EXAMPLE).read_text().rstrip("\n").split("\n\n")[0])  # the example, then edits
    # What the checkout's own launcher makes of it is the lane's memory setting, whichever shape it has.
    eff = Effective(CheckoutFiles.read(directory))
    assert eff.setting("GPU_MEMORY_UTILIZATION").value == "0.85" and lane_mismatches(lane_for_twin(params), eff) == []


def lane_for_twin(params):
    from lanebook.twin.tree import twin_env

    return lane_with(params, env=twin_env(params, TwinAddresses()))


def test_serve_arguments_are_expanded_by_a_bash_that_can_run_nothing(tmp_path):
    """A compose file handed to lint may come from anyone: its `$(...)`, backticks, case arms, redirections,
    BASH_ENV or exported functions run nothing on the operator's machine, while ${VAR} still expands."""
    ran = tmp_path / "ran"
    startup = tmp_path / "startup.sh"
    startup.write_text(f"/usr/bin/touch {ran}.bash_env\n")
    script = (
        f'case "${{DRAFT_SAMPLE_METHOD:-p}}" in *) /usr/bin/touch {ran}.case; touch {ran}.case2 ;; esac; '
        f"exec /usr/local/bin/vllm serve ${{MODEL}} --a $(/usr/bin/touch {ran}.subst) "
        f'--b `/usr/bin/touch {ran}.tick` --c "$(echo x > {ran}.redirect)" --d $(exec /usr/bin/touch {ran}.exec)'
    )
    environment = {
        "MODEL": "org/m",
        "BASH_ENV": str(startup),
        "BASH_FUNC_printf%%": f"() {{ /usr/bin/touch {ran}.fn; }}",
        "PATH": "/usr/bin:/bin",
    }
    argv = serve_argv(script, environment)
    assert argv[:3] == ["serve", "org/m", "--a"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["startup.sh"]


def test_a_variable_no_process_environment_can_carry_is_one_clear_error():
    for environment in ({"X": "a\0b"}, {"A=B": "1"}):
        with pytest.raises(LanebookError, match="no process environment can carry"):
            serve_argv("exec /usr/local/bin/vllm serve m", environment)


def test_a_command_holding_a_nul_byte_is_one_clear_error():
    with pytest.raises(LanebookError, match="service command holds a NUL byte"):
        serve_argv("exec /usr/local/bin/vllm serve m --served-model-name a\0b", {})
