"""lanebook.effective: what a checkout runs — the container Compose creates from the recipe's real compose file
(../shared fixtures) and lanebook's reference, the launcher's profile overrides, the line that wins for each
value, the lane compared with what runs, and the live command compared with the lane."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from recipe_fixtures import COMPOSE, EXAMPLE, checkout, fixture_text, line_of, replace_once

from lanebook.effective import (CheckoutFiles, Effective, LiveMismatch, Location, container_spec, lane_mismatches,
                                live_mismatches, restart_policy, same_value, speculative_config)
from lanebook.errors import LanebookError
from lanebook.nodes import CommandResult
from lanebook.params import lane_with, load_lane
from lanebook.render import speculative_config_line
from lanebook.twin.nodes import TwinAddresses
from lanebook.twin.tree import write_checkout

BREAKABLE_LINE = '      VLLM_USE_BREAKABLE_CUDAGRAPH: "${VLLM_USE_BREAKABLE_CUDAGRAPH:-0}"\n'
HEAD_ENV = {"NODE_RANK": "0", "HOME": "/home/operator"}
ENV = "\n".join(["DSPARK_MODEL=deepseek-ai/DeepSeek-V4-Flash-0731", "SERVED_MODEL_NAME=deepseek-v4-flash-0731",
                 "MASTER_ADDR=127.0.0.2", "VLLM_HOST=127.0.0.2", "GPU_MEMORY_UTILIZATION=0.85",
                 "VLLM_USE_BREAKABLE_CUDAGRAPH=0", "POST_READINESS_WARMUP_ENABLED=1", ""])
START = "start-deepseek-v4-flash-dspark.sh"


def spec_for(tmp_path: Path, compose: str | None = None, env: str = ENV, environ: dict | None = None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    directory = checkout(tmp_path, compose, env)
    return container_spec(directory / COMPOSE, directory / ".env.dspark", "lane", environ or HEAD_ENV)


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


RESTART_LINE = "    restart: ${DSPARK_RESTART_POLICY:-unless-stopped}\n"


def test_the_restart_policy_is_the_compose_lines_after_interpolation(tmp_path):
    assert RESTART_LINE in fixture_text(COMPOSE)
    assert spec_for(tmp_path / "a").restart == "unless-stopped"  # the compose default
    assert spec_for(tmp_path / "b", env=ENV + "DSPARK_RESTART_POLICY=no\n").restart == "no"
    assert spec_for(tmp_path / "c", environ={**HEAD_ENV, "DSPARK_RESTART_POLICY": "on-failure:3"}).restart == "on-failure:3"
    assert spec_for(tmp_path / "d", replace_once(fixture_text(COMPOSE), RESTART_LINE, "")).restart == "no"
    with pytest.raises(LanebookError, match=r"^.*docker-compose.dspark.yml: service 'vllm-dspark': invalid restart "
                                            r"policy: unknown policy 'sometimes'; use one of 'no', 'always', "
                                            r"'on-failure', or 'unless-stopped'$"):
        spec_for(tmp_path / "e", env=ENV + "DSPARK_RESTART_POLICY=sometimes\n")


@pytest.mark.parametrize("value, policy", [(None, "no"), ("", "no"), ("no", "no"), ("always", "always"),
                                           ("unless-stopped", "unless-stopped"), ("on-failure", "on-failure"),
                                           (" on-failure:5 ", "on-failure:5"), ("on-failure:0", "on-failure:0")])
def test_restart_policy_values(value, policy):
    assert restart_policy(value) == policy


@pytest.mark.parametrize("value, error", [
    ("sometimes", "invalid restart policy: unknown policy 'sometimes'; use one of 'no', 'always', 'on-failure', or 'unless-stopped'"),
    ("always:3", "invalid restart policy: maximum retry count can only be used with 'on-failure'"),
    ("on-failure:-1", "invalid restart policy: maximum retry count cannot be negative"),
    ("on-failure:x", "invalid restart policy format: maximum retry count must be an integer"),
    (":3", "invalid restart policy format: no policy provided before colon"),
    (False, "invalid restart policy: unknown policy 'False'; use one of 'no', 'always', 'on-failure', or 'unless-stopped'"),
])
def test_a_restart_policy_the_daemon_refuses_is_its_error(value, error):
    with pytest.raises(LanebookError) as refused:
        restart_policy(value)
    assert str(refused.value) == error


def test_bad_compose_files_are_one_clear_error(tmp_path):
    with pytest.raises(LanebookError, match="not a valid compose file"):
        spec_for(tmp_path / "a", "services: [unclosed\n")
    required = fixture_text(COMPOSE).replace("--master-addr ${MASTER_ADDR}", "--master-addr ${MASTER_ADDR:?set MASTER_ADDR}")
    with pytest.raises(LanebookError, match="required variable MASTER_ADDR"):
        spec_for(tmp_path / "b", required, env=ENV.replace("MASTER_ADDR=127.0.0.2\n", ""))
    with pytest.raises(LanebookError, match="no `exec /usr/local/bin/vllm serve"):
        spec_for(tmp_path / "c", "services:\n  vllm-dspark:\n    image: x\n    command: [bash, -lc, 'echo hi']\n")
    text = fixture_text(COMPOSE)
    start, end = text.index("    environment:\n"), text.index("    command:\n")
    block = text[:start] + "    environment: |\n      HF_HOME=/cache\n" + text[end:]  # found by the property test
    with pytest.raises(LanebookError, match=r"/docker-compose.dspark.yml: service 'vllm-dspark' environment: must be a "
                                            r"map or a list, not str$"):
        spec_for(tmp_path / "d", block)


def test_the_twin_checkout_is_the_example_with_the_lane_rendered(tmp_path):
    lane = load_lane("twin")
    directory = write_checkout(tmp_path, lane, TwinAddresses())
    assert (directory / EXAMPLE).is_file()
    spec = container_spec(directory / COMPOSE, directory / ".env.dspark", lane.launcher.env["PROJECT_NAME"], HEAD_ENV)
    assert spec.name == "ds4-f-mia-anemll-0731-vllm-dspark-1"
    assert (spec.arg("--host"), spec.arg("--port"), spec.arg("--master-addr")) == ("127.0.0.2", "8888", "127.0.0.2")
    assert spec.arg("--max-model-len") == "1048576"
    assert speculative_config(spec)["num_speculative_tokens_per_batch_size"] == [[1, 1, 5], [2, 4, 4], [5, 6, 3]]
    assert spec.environment["VLLM_USE_BREAKABLE_CUDAGRAPH"] == "0" and spec.restart == "unless-stopped"
    assert spec.image.endswith("@sha256:a83948492cf13df455170fb42885f5ef4db54fefe0feff0f841ecbff464ac9d8")  # still pinned
    env = (directory / ".env.dspark").read_text()
    assert env.startswith((directory / EXAMPLE).read_text().rstrip("\n").split("\n\n")[0])  # the example, then edits
    # What the checkout's own launcher makes of it is the lane's memory setting, whichever shape it has.
    eff = Effective(CheckoutFiles.read(directory))
    assert eff.setting("GPU_MEMORY_UTILIZATION").value == "0.85" and lane_mismatches(lane_for_twin(lane), eff) == []


def lane_for_twin(lane):
    from lanebook.twin.tree import twin_env

    return lane_with(lane, env=twin_env(lane, TwinAddresses()))


# --- the launcher's overrides and the line that wins ----------------------------------------------

def example_checkout(tmp_path: Path, extra: str = "", start: str | None = None) -> Path:
    """The fixture compose with its example copied to .env.dspark (plus EXTRA lines), as an operator starts."""
    directory = checkout(tmp_path, env=fixture_text(EXAMPLE) + extra, example=True)
    if start is not None:
        (directory / START).write_text(start)
    return directory


def test_the_profile_key_decides_the_memory_utilization(tmp_path):
    directory = example_checkout(tmp_path)
    eff = Effective(CheckoutFiles.read(directory))
    setting = eff.setting("GPU_MEMORY_UTILIZATION")
    assert setting.value == "0.835" and eff.spec.arg("--gpu-memory-utilization") == "0.835"
    assert setting.where == Location(f"{directory}/.env.dspark", line_of(fixture_text(EXAMPLE), "GPU_MEMORY_UTILIZATION_TEXT="))
    assert setting.via == "the launcher exports GPU_MEMORY_UTILIZATION from GPU_MEMORY_UTILIZATION_TEXT"
    assert [o.key for o in eff.launcher.overrides] == ["GPU_MEMORY_UTILIZATION", "DSPARK_MODEL", "DSPARK_REVISION"]


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
    assert dead.winner.value == "0.835" and "exports GPU_MEMORY_UTILIZATION from GPU_MEMORY_UTILIZATION_TEXT" in dead.reason
    assert eff.spec.arg("--gpu-memory-utilization") == "0.835"


def test_the_start_script_decides_the_launchers_shape(tmp_path):
    profile = "#!/bin/bash\nGPU_MEMORY_UTILIZATION=\"${GPU_MEMORY_UTILIZATION_TEXT:-0.835}\"\nexport GPU_MEMORY_UTILIZATION\n"
    directory = checkout(tmp_path / "a", env=ENV)  # the env file names no profile key; the start script does
    (directory / START).write_text(profile)
    setting = Effective(CheckoutFiles.read(directory)).setting("GPU_MEMORY_UTILIZATION")
    assert (setting.value, setting.where) == ("0.835", Location(f"{directory}/{START}", 2))
    assert "unset: the launcher's default" in setting.via
    plain = example_checkout(tmp_path / "b", extra="GPU_MEMORY_UTILIZATION=0.85\n", start="#!/bin/bash\n. ./.env.dspark\n")
    eff = Effective(CheckoutFiles.read(plain))
    assert eff.launcher.overrides == () and eff.setting("GPU_MEMORY_UTILIZATION").value == "0.85" and not eff.dead_lines


SOURCING_START = '#!/bin/bash\nSCRIPT_DIR="$(cd "$(dirname "$0")" && pwd)"\n. "$SCRIPT_DIR/scripts/lane-env.sh"\napply_memory_profile\n'
LANE_ENV = ('apply_memory_profile() {\n  if [ "${ENABLE_VL_SIDECAR:-0}" = "1" ]; then\n'
            '    GPU_MEMORY_UTILIZATION="${GPU_MEMORY_UTILIZATION_VISION:-0.80}"\n  else\n'
            '    GPU_MEMORY_UTILIZATION="${GPU_MEMORY_UTILIZATION_TEXT:-0.835}"\n  fi\n}\n')


def test_a_launcher_that_lives_partly_in_a_sourced_file_is_read_there(tmp_path):
    directory = checkout(tmp_path, env=ENV)
    (directory / START).write_text(SOURCING_START)
    (directory / "scripts").mkdir()
    (directory / "scripts" / "lane-env.sh").write_text(LANE_ENV)
    files = CheckoutFiles.read(directory)
    assert [f.name for f in files.launcher_files] == [f"{directory}/{START}", f"{directory}/scripts/lane-env.sh"]
    eff = Effective(files)
    setting = eff.setting("GPU_MEMORY_UTILIZATION")
    assert (setting.value, setting.where) == ("0.835", Location(f"{directory}/scripts/lane-env.sh", 5))
    [dead] = eff.dead_lines  # the env file's GPU_MEMORY_UTILIZATION=0.85 never reaches vllm serve
    assert (dead.key, dead.value) == ("GPU_MEMORY_UTILIZATION", "0.85")
    fetched = CheckoutFiles.fetch(LocalNode(tmp_path), "~/checkout")
    assert [f.name for f in fetched.launcher_files] == [f"head:~/checkout/{START}", "head:~/checkout/scripts/lane-env.sh"]


def test_model_and_revision_follow_abliterated(tmp_path):
    text = fixture_text(EXAMPLE)
    official = Effective(CheckoutFiles.read(checkout(tmp_path / "a", env=text + "DSPARK_MODEL=someone/else\n")))
    model = official.setting("DSPARK_MODEL")
    assert (model.value, model.where.line) == ("deepseek-ai/DeepSeek-V4-Flash-0731", line_of(text, "DSPARK_MODEL_OFFICIAL="))
    assert official.spec.arg("--revision") == "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
    assert [d.key for d in official.dead_lines] == ["DSPARK_MODEL"]
    abliterated = Effective(CheckoutFiles.read(checkout(tmp_path / "b", env=replace_once(text, "\nABLITERATED=0\n", "\nABLITERATED=1\n"))))
    assert abliterated.spec.argv[1] == "drowzeys/keys-DeepSeekV4-Flash-GA-0731-Dspark-Abliterated-32-32"
    assert abliterated.spec.arg("--revision") is None  # DSPARK_REVISION_ABLITERATED unset: the tip of that repo
    tip = Effective(CheckoutFiles.read(checkout(tmp_path / "c", env=replace_once(
        text, "DSPARK_REVISION=9e165c30e2704aec5d9d593cce3eebd58bbef1cb\n", "DSPARK_REVISION=\n"))))
    assert tip.spec.arg("--revision") is None  # set but empty: the tip, not the launcher's pin
    pinned = Effective(CheckoutFiles.read(checkout(tmp_path / "d", env=replace_once(
        text, "DSPARK_REVISION=9e165c30e2704aec5d9d593cce3eebd58bbef1cb\n", ""))))
    revision = pinned.variable("DSPARK_REVISION")
    assert pinned.spec.arg("--revision") == "9e165c30e2704aec5d9d593cce3eebd58bbef1cb" and not revision.from_env


def test_a_compose_default_derives_from_another_variable(tmp_path):
    text = replace_once(fixture_text(EXAMPLE), "TP_SOCKET_IFNAME=enp1s0f1np1\n", "")
    eff = Effective(CheckoutFiles.read(checkout(tmp_path, env=text)))
    setting = eff.setting("TP_SOCKET_IFNAME")
    assert (setting.value, setting.where.line) == ("enpXsYfZnpN", line_of(text, "NCCL_SOCKET_IFNAME=enpXsYfZnpN"))
    unset = eff.setting("MAX_NUM_SEQS")
    assert (unset.value, unset.from_env) == ("6", True)
    plain = Effective(CheckoutFiles.read(checkout(tmp_path / "b", env="X=1\n")))
    default = plain.setting("MAX_MODEL_LEN")
    assert (default.value, default.from_env, default.where.file) == ("1048576", False, f"{tmp_path / 'b'}/checkout/{COMPOSE}")
    assert default.where.line == line_of(fixture_text(COMPOSE), "--max-model-len")


def test_a_key_set_twice_leaves_the_first_line_dead(tmp_path):
    eff = Effective(CheckoutFiles.read(checkout(tmp_path, env="MAX_NUM_SEQS=4\nX=1\nMAX_NUM_SEQS=6\n")))
    [dead] = eff.dead_lines
    assert (dead.key, dead.value, dead.where.line, dead.winner.value, dead.reason) == (
        "MAX_NUM_SEQS", "4", 1, "6", "line 3 sets MAX_NUM_SEQS again")


def test_checkout_files_take_either_example_name_and_the_start_script(tmp_path):
    directory = checkout(tmp_path)
    (directory / ".env.dspark.example").write_text("A=1\n")
    (directory / START).write_text("#!/bin/bash\n")
    files = CheckoutFiles.read(directory)
    assert (files.env, files.example.name, files.start.name) == (None, f"{directory}/.env.dspark.example", f"{directory}/{START}")
    (directory / ".env.dspark.example").unlink()
    (directory / EXAMPLE).write_text("A=2\n")
    assert CheckoutFiles.read(directory).example.text == "A=2\n"
    with pytest.raises(LanebookError, match="checkout directory not found"):
        CheckoutFiles.read(tmp_path / "nowhere")
    (directory / COMPOSE).unlink()
    with pytest.raises(LanebookError, match=f"no {COMPOSE} in"):
        CheckoutFiles.read(directory)


class LocalNode:
    """Runs a node command with bash in a local home directory, as the node's shell would."""

    alias = "head"

    def __init__(self, home: Path):
        self.home = home

    def run(self, command: str, timeout: float = 60) -> CommandResult:
        done = subprocess.run(["bash", "-c", command], env={"HOME": str(self.home), "PATH": "/usr/bin:/bin"},
                              capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, done.stderr
        return CommandResult(self.alias, command, done.returncode, done.stdout, done.stderr)


def test_fetch_reads_a_node_checkout_in_one_command(tmp_path):
    directory = checkout(tmp_path, env="NOTE=naïve — ok\r\n", example=True)
    files = CheckoutFiles.fetch(LocalNode(tmp_path), "~/checkout")
    assert files.compose.name == f"head:~/checkout/{COMPOSE}" and files.compose.text == (directory / COMPOSE).read_text()
    assert files.env.text == "NOTE=naïve — ok\r\n" and files.example.name == f"head:~/checkout/{EXAMPLE}"
    assert files.start is None and files.directory is None


# --- the lane against what runs ------------------------------------------------------------------------

@pytest.mark.parametrize("key,lane,running,same", [
    ("GPU_MEMORY_UTILIZATION", "0.85", "0.850", True), ("GPU_MEMORY_UTILIZATION", "0.85", "0.835", False),
    ("MAX_NUM_SEQS", "6", "6", True), ("MAX_NUM_SEQS", "6", None, False), ("SERVED_MODEL_NAME", "a", "a ", False),
    ("DSPARK_VLLM_IMAGE", "ghcr.io/anemll/dspark-vllm-gx10:0.1.1", "ghcr.io/anemll/dspark-vllm-gx10:0.1.1@sha256:ab", True),
    ("DSPARK_VLLM_IMAGE", "ghcr.io/anemll/dspark-vllm-gx10:0.1.1@sha256:ab", "ghcr.io/anemll/dspark-vllm-gx10:0.1.1", False),
    ("DSPARK_VLLM_IMAGE", "ghcr.io/anemll/dspark-vllm-gx10:0.1.2", "ghcr.io/anemll/dspark-vllm-gx10:0.1.1@sha256:ab", False),
])
def test_same_value(key, lane, running, same):
    assert same_value(key, lane, running) is same


def test_the_fixture_example_as_is_against_the_lane(tmp_path):
    eff = Effective(CheckoutFiles.read(example_checkout(tmp_path)))
    found = {m.key: (m.lane, m.running.value) for m in lane_mismatches(load_lane("anemll-0731"), eff)}
    assert found == {
        "GPU_MEMORY_UTILIZATION": ("0.85", "0.835"), "POST_READINESS_WARMUP_ENABLED": ("1", None),
        "MASTER_ADDR": ("10.0.0.1", "head-roce-ip"), "WORKER_HOST": ("10.0.0.2", "worker-host-or-roce-ip"),
        "VLLM_HOST_IP": ("10.0.0.1", "head-roce-ip"), "WORKER_VLLM_HOST_IP": ("10.0.0.2", "worker-roce-ip"),
        "NCCL_SOCKET_IFNAME": ("bond0", "enpXsYfZnpN"), "GLOO_SOCKET_IFNAME": ("bond0", "enp1s0f1np1"),
        "TP_SOCKET_IFNAME": ("bond0", "enp1s0f1np1"),
        "speculative.num_speculative_tokens_per_batch_size": ("[[1,1,5],[2,4,4],[5,6,3]]", "none")}
    # The image is pinned by digest to the lane's tag and the model is derived from ABLITERATED: both are the lane's.


def test_nothing_is_compared_when_the_entrypoint_refuses(tmp_path):
    eff = Effective(CheckoutFiles.read(example_checkout(tmp_path, extra="DEFAULT_THINKING=sometimes\n")))
    assert eff.spec.entrypoint_error[0] == 2 and lane_mismatches(load_lane("anemll-0731"), eff) == []


# --- the live command against the lane ---------------------------------------------------------------

SPEC_543 = ('{"method":"dspark","num_speculative_tokens":5,"draft_sample_method":"probabilistic",'
            '"num_speculative_tokens_per_batch_size":[[1,1,5],[2,4,4],[5,6,3]]}')
LIVE = ("/usr/bin/python3 /usr/local/bin/vllm serve deepseek-ai/DeepSeek-V4-Flash-0731 --served-model-name "
        "deepseek-v4-flash-0731 --host 0.0.0.0 --port 8888 --trust-remote-code --tensor-parallel-size 2 "
        "--max-model-len 1048576 --max-num-seqs 6 --max-num-batched-tokens 8192 --max-cudagraph-capture-size 36 "
        f"--gpu-memory-utilization 0.85 --enable-prefix-caching --speculative-config {SPEC_543} "
        "--default-chat-template-kwargs {\"thinking\":true,\"reasoning_effort\":\"low\"} --nnodes 2 --node-rank 0")


def test_the_live_command_of_the_lane_has_no_mismatch():
    assert live_mismatches(load_lane("anemll-0731"), LIVE) == []


def test_each_live_mismatch_names_the_flag_the_lane_value_and_the_live_value():
    live = (LIVE.replace("--gpu-memory-utilization 0.85", "--gpu-memory-utilization 0.835")
            .replace("--max-num-seqs 6", "--max-num-seqs=4").replace("--max-num-batched-tokens 8192 ", "")
            .replace('"num_speculative_tokens":5', '"num_speculative_tokens":7')
            .replace(',"num_speculative_tokens_per_batch_size":[[1,1,5],[2,4,4],[5,6,3]]', ""))
    found = live_mismatches(load_lane("anemll-0731"), live)
    assert [str(m) for m in found] == [
        "--max-num-seqs: lane 6, live 4",
        "--max-num-batched-tokens: lane 8192, live absent",
        "--gpu-memory-utilization: lane 0.85, live 0.835",
        "--speculative-config num_speculative_tokens: lane 5, live 7",
        "--speculative-config num_speculative_tokens_per_batch_size: lane [[1,1,5],[2,4,4],[5,6,3]], live absent"]
    assert found[0] == LiveMismatch("--max-num-seqs", "6", "4")


def test_a_rollback_lane_wants_no_schedule_live():
    rollback = load_lane("anemll-1m6")
    [mismatch] = [m for m in live_mismatches(rollback, LIVE) if "per_batch_size" in m.flag]
    assert (mismatch.lane, mismatch.live) == ("none", "[[1,1,5],[2,4,4],[5,6,3]]")
    fixed = LIVE.replace(',"num_speculative_tokens_per_batch_size":[[1,1,5],[2,4,4],[5,6,3]]', "")
    assert [m.flag for m in live_mismatches(rollback, fixed)] == ["--served-model-name"]  # 1m6 serves another name


def test_a_live_command_without_a_server_mismatches_everything_the_lane_sets():
    found = live_mismatches(load_lane("anemll-0731"), "")
    assert [m.flag for m in found] == ["--served-model-name", "--max-model-len", "--max-num-seqs",
                                       "--max-num-batched-tokens", "--gpu-memory-utilization",
                                       "--speculative-config num_speculative_tokens",
                                       "--speculative-config num_speculative_tokens_per_batch_size"]
    assert all(m.live is None for m in found)


def test_the_checkouts_own_serve_argv_is_a_live_command_with_no_mismatch(tmp_path):
    """What the effective computation says the server gets, shown as docker top shows it, passes the live check."""
    from lanebook.render import render_checkout

    directory = example_checkout(tmp_path)
    lane = load_lane("anemll-0731")
    render_checkout(lane, directory)
    argv = Effective(CheckoutFiles.read(directory)).spec.argv
    assert live_mismatches(lane, "/usr/bin/python3 /usr/local/bin/vllm " + " ".join(argv)) == []


def test_serve_arguments_are_expanded_by_a_bash_that_can_run_nothing(tmp_path):
    """A compose file handed to lint may come from anyone: its `$(...)`, backticks, case arms, redirections,
    BASH_ENV or exported functions run nothing on the operator's machine, while ${VAR} still expands."""
    from lanebook.effective import serve_argv

    ran = tmp_path / "ran"
    startup = tmp_path / "startup.sh"
    startup.write_text(f"/usr/bin/touch {ran}.bash_env\n")
    script = (f'case "${{DRAFT_SAMPLE_METHOD:-p}}" in *) /usr/bin/touch {ran}.case; touch {ran}.case2 ;; esac; '
              f'exec /usr/local/bin/vllm serve ${{MODEL}} --a $(/usr/bin/touch {ran}.subst) '
              f'--b `/usr/bin/touch {ran}.tick` --c "$(echo x > {ran}.redirect)" --d $(exec /usr/bin/touch {ran}.exec)')
    environment = {"MODEL": "org/m", "BASH_ENV": str(startup), "BASH_FUNC_printf%%": f"() {{ /usr/bin/touch {ran}.fn; }}",
                   "PATH": "/usr/bin:/bin"}
    argv = serve_argv(script, environment)
    assert argv[:3] == ["serve", "org/m", "--a"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["startup.sh"]


def test_a_variable_no_process_environment_can_carry_is_one_clear_error():
    from lanebook.effective import serve_argv

    for environment in ({"X": "a\0b"}, {"A=B": "1"}):
        with pytest.raises(LanebookError, match="no process environment can carry"):
            serve_argv("exec /usr/local/bin/vllm serve m", environment)


def test_a_checkout_under_an_unknown_users_home_is_one_clear_error():
    with pytest.raises(LanebookError, match="no such user's home"):
        CheckoutFiles.read("~0")
