"""The twin checkout's launcher scripts (lanebook/twin/scripts), run over ssh on the session twin as an operator runs
them: the recipe launcher's exit codes and messages, its private normalized copy of .env.dspark, its memory
profile, its signal codes, and status/stop/warmup reading the env file the same way.

Each test works in a copy of the twin lane's checkout on the head (its .env.dspark edited), under its own
Compose project; the worker's rank runs from the lane's own checkout there (WORKER_SCRIPT_DIR)."""

from __future__ import annotations

import json
import subprocess

import pytest
from lanebook.lane.params import load_lane
from lanebook.nodes.ssh import LaneNodes
from lanebook.ops import launcher
from lanebook.twin.tree import HubModel

pytestmark = pytest.mark.twin

LANE_CHECKOUT = "ds4-f-mia-anemll-0731"
COPY = "scripts-test"
PROJECT = "scripts-test"
CONTAINER = f"{PROJECT}-vllm-dspark-1"
START = "./start-deepseek-v4-flash-dspark.sh"
MISSING_ENV = "Copy .env.dspark.example to .env.dspark and edit node-specific values."


def ssh(twin, alias, command, timeout=300):
    return subprocess.run(
        ["ssh", "-F", twin["ssh_config"], alias, command], capture_output=True, text=True, timeout=timeout
    )


FRESH_COPY = (
    f"rm -rf {COPY} && cp -a {LANE_CHECKOUT} {COPY} && echo WORKER_SCRIPT_DIR={LANE_CHECKOUT} >> {COPY}/.env.dspark"
)
DOWN = f"docker compose -p {PROJECT} --env-file .env.dspark -f docker-compose.dspark.yml down -t 1"


@pytest.fixture(scope="module")
def lane_stopped(twin):
    """The twin lane stopped once for the module: its tests start only the copy's Compose project, never the lane's."""
    with LaneNodes(load_lane("twin")) as nodes:
        launcher.stop_lane(nodes)


@pytest.fixture
def copy(twin, lane_stopped):
    """The copy's path on the head (the lane stopped); its containers removed after, on both nodes."""
    ssh(twin, "head", FRESH_COPY)
    yield next(n["home"] for n in twin["nodes"] if n["alias"] == "head") + f"/{COPY}"
    ssh(twin, "head", f"cd {LANE_CHECKOUT} && {DOWN}; rm -rf {COPY}")
    ssh(twin, "worker", f"cd {LANE_CHECKOUT} && {DOWN}")


def run(twin, script, env="", args="", edit=""):
    """Run a script of the copy on the head: (exit code, output merged as a terminal shows it).

    With `edit`, the copy is made afresh and `edit` run in it first; without, the copy is used as it is.
    """
    prefix = f"{FRESH_COPY} && cd {COPY} && {edit} && " if edit else f"cd {COPY} && "
    result = ssh(twin, "head", f"{prefix}PROJECT_NAME={PROJECT} {env} {script} {args} 2>&1")
    return result.returncode, result.stdout


def serve_argv(twin, alias, container=CONTAINER) -> dict:
    """The container's `vllm serve` flags: flag -> value (True for a flag without one), and the whole argv."""
    cmd = json.loads(ssh(twin, alias, f"docker inspect --format '{{{{json .Config.Cmd}}}}' {container}").stdout)
    flags = {
        arg: (nxt if not nxt.startswith("--") else True)
        for arg, nxt in zip(cmd, cmd[1:] + ["--"])
        if arg.startswith("--")
    }
    return flags | {"argv": cmd}


def test_options_are_refused_with_exit_2(twin, copy):
    code, out = run(twin, START, args="--bogus")
    assert code == 2 and out.startswith(
        "Unknown option: --bogus\nUsage: start-deepseek-v4-flash-dspark.sh [--host HOST] [--port PORT]"
    )
    assert run(twin, START, args="--port") == (2, "--port requires a value.\n")
    code, out = run(twin, START, args="--help")
    assert code == 0 and "Command-line options override values from" in out
    assert run(twin, START, edit="echo VLLM_PORT=eighty >> .env.dspark") == (
        2,
        "VLLM port must be an integer between 1 and 65535: eighty\n",
    )
    assert run(twin, START, env="WAIT_SECONDS=0")[0] == 2


def test_both_key_variables_set_are_refused_with_exit_2_as_the_recipe_refuses_them(twin, copy):
    """The recipe's scripts exit 2 naming both variables when VLLM_API_KEY and DSPARK_API_KEYS are both set."""
    keys = "VLLM_API_KEY=lb-one-11111111 \"DSPARK_API_KEYS='lb-two-2222222 lb-three-333333'\""
    both = f"printf '%s\\n' {keys} >> .env.dspark"
    assert run(twin, START, edit=both) == (
        2,
        "VLLM_API_KEY and DSPARK_API_KEYS are both set; set exactly one of them\n",
    )


def test_missing_files_are_exit_1_with_the_recipe_message(twin, copy):
    assert run(twin, START, edit="mv .env.dspark env.bak") == (1, f"Missing {copy}/.env.dspark. {MISSING_ENV}\n")
    assert run(twin, START, edit="mv docker-compose.dspark.yml c.bak") == (
        1,
        f"Missing {copy}/docker-compose.dspark.yml.\n",
    )


@pytest.mark.parametrize("key", ["WORKER_HOST", "MASTER_ADDR", "MASTER_PORT", "DSPARK_VLLM_IMAGE"])
def test_required_keys(twin, copy, key):
    code, out = run(twin, START, edit=f"sed -i /^{key}=/d .env.dspark")
    assert code == 1 and out.rstrip().endswith(f"{key}: {key} must be set in {copy}/.env.dspark")


def test_images_and_the_worker_are_checked_before_anything_starts(twin, copy):
    code, out = run(
        twin,
        START,
        edit="sed -i 's|^DSPARK_VLLM_IMAGE=.*|DSPARK_VLLM_IMAGE=ghcr.io/anemll/dspark-vllm-gx10:0.1.2|' .env.dspark",
    )
    assert code == 1 and out.startswith("Missing local Docker image ghcr.io/anemll/dspark-vllm-gx10:0.1.2.\n")
    code, out = run(twin, START, edit="sed -i s/^WORKER_HOST=.*/WORKER_HOST=127.0.0.9/ .env.dspark")
    assert (code, out) == (1, "Cannot reach worker with passwordless SSH: 127.0.0.9\n")
    assert ssh(twin, "head", "docker ps -a -q").stdout.strip() == ""


def test_the_env_file_is_read_from_a_normalized_private_copy(twin, copy):
    """A .env.dspark saved on Windows (BOM, CRLF) reads as intended, and the operator's file stays byte-identical."""
    crlf = "sed -i 's/$/\\r/' .env.dspark && printf '\\xef\\xbb\\xbf' | cat - .env.dspark > e && mv e .env.dspark"
    ssh(twin, "head", f"{FRESH_COPY} && cd {COPY} && {crlf}")
    before = ssh(twin, "head", f"sha256sum {COPY}/.env.dspark").stdout
    code, out = run(twin, START, env="WAIT_ATTEMPTS=1 WAIT_SECONDS=1")
    assert (code, launcher.launcher_outcome(code, out)[0]) == (1, "health timeout"), out[-2000:]  # both ranks started
    assert ssh(twin, "head", f"sha256sum {COPY}/.env.dspark").stdout == before
    head = serve_argv(twin, "head")
    assert head["--max-model-len"] == "1048576" and head["--served-model-name"] == "deepseek-v4-flash-0731"
    assert not any("\r" in arg or "\ufeff" in arg for arg in head["argv"])


@pytest.mark.parametrize(
    "edit, utilization",
    [
        ("true", "0.85"),  # the twin checkout carries GPU_MEMORY_UTILIZATION_TEXT=0.85, the lane's value
        # an explicit GPU_MEMORY_UTILIZATION line is overridden by the profile (its default here)
        (
            "sed -i /^GPU_MEMORY_UTILIZATION_TEXT=/d .env.dspark && echo GPU_MEMORY_UTILIZATION=0.85 >> .env.dspark",
            "0.835",
        ),
        ("sed -i /^GPU_MEMORY_UTILIZATION_VISION=/d .env.dspark && echo ENABLE_VL_SIDECAR=1 >> .env.dspark", "0.80"),
        ("printf 'ENABLE_VL_SIDECAR=1\\nGPU_MEMORY_UTILIZATION_VISION=0.78\\n' >> .env.dspark", "0.78"),
    ],
)
def test_the_memory_profile_decides_what_vllm_gets(twin, copy, edit, utilization):
    code, out = run(twin, START, env="WAIT_ATTEMPTS=1 WAIT_SECONDS=1", edit=edit)
    assert code == 1 and "Starting DSpark head..." in out, out[-2000:]
    assert f"  gpu memory utilization: {utilization} " in out
    for alias in ("head", "worker"):
        assert serve_argv(twin, alias)["--gpu-memory-utilization"] == utilization


def test_a_pinned_revision_missing_from_the_cache_is_warned_about(twin, copy):
    twin_revision = HubModel("deepseek-ai/DeepSeek-V4-Flash-0731").revision
    code, out = run(
        twin, START, env="WAIT_ATTEMPTS=1 WAIT_SECONDS=1", edit="echo DSPARK_REVISION=deadbeef >> .env.dspark"
    )
    assert (
        "WARN: DSPARK_REVISION=deadbeef of deepseek-ai/DeepSeek-V4-Flash-0731 is not in the local HF cache ("
    ) in out and "the first start downloads the checkpoint (~155 GB)." in out
    assert serve_argv(twin, "head")["--revision"] == "deadbeef"
    code, out = run(
        twin, START, env="WAIT_ATTEMPTS=1 WAIT_SECONDS=1", edit=f"echo DSPARK_REVISION={twin_revision} >> .env.dspark"
    )
    assert "WARN: DSPARK_REVISION" not in out


@pytest.mark.parametrize("signal, code", [("TERM", 143), ("HUP", 129), ("INT", 130)])
def test_signals_end_the_launcher_with_their_codes(twin, copy, signal, code):
    """Signalled while it waits (with its defaults: 100 attempts, 15 s apart), the launcher exits 128 + the signal."""
    command = f"cd {COPY} && echo $$ > launcher.pid && exec env PROJECT_NAME={PROJECT} {START}"
    proc = subprocess.Popen(
        ["ssh", "-F", twin["ssh_config"], "head", command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "(attempt 1/100, next check in 15s)" in line:
                break
        assert any("attempt 1/100, next check in 15s" in line for line in lines), "".join(lines)
        assert ssh(twin, "head", f"kill -{signal} $(cat {COPY}/launcher.pid)").returncode == 0
        assert proc.wait(timeout=60) == code
    finally:
        proc.kill()


def test_status_stop_and_warmup_read_the_env_file_as_the_launcher_does(twin, copy):
    status, stop = "./status-deepseek-v4-flash-dspark.sh", "./stop-deepseek-v4-flash-dspark.sh"
    warmup = "scripts/run-post-readiness-warmup.sh"
    for script in (status, warmup):
        assert run(twin, script, edit="mv .env.dspark env.bak") == (1, f"Missing {copy}/.env.dspark. {MISSING_ENV}\n")
        assert run(twin, script, args="--bogus", edit="true")[0] == 2
    code, out = run(twin, status)
    assert code == 0 and f"== head: {CONTAINER}: not created" in out and "(no answer)" in out  # shown, not judged
    assert run(twin, stop, args="--bogus") == (2, "Unknown argument: --bogus (try --help)\n")
    code, out = run(twin, stop, edit="mv .env.dspark env.bak")
    assert code == 1 and out.rstrip().endswith(
        f"WORKER_HOST: WORKER_HOST must be set in {copy}/.env.dspark or environment"
    )
    code, out = run(twin, stop, edit="sed -i s/^WORKER_HOST=.*/WORKER_HOST=127.0.0.9/ .env.dspark")
    assert code == 1 and "WARN: cannot reach worker 127.0.0.9; its ranks will NOT be stopped." in out
    code, out = run(twin, stop, edit="true")
    assert (code, out.rstrip().splitlines()[-1]) == (0, "DeepSeek V4 Flash DSpark stopped.")


def test_the_launcher_polls_health_as_the_recipe_does(twin, copy):
    """Seed 000's launcher runs its warmup "only after /health and the existing minimal chat smoke": the twin's
    polls /health (where the published launcher polls /v1/models), and the server's own access log shows it."""
    code, out = run(
        twin, START, env="WAIT_ATTEMPTS=600 WAIT_SECONDS=1", edit="echo POST_READINESS_WARMUP_ENABLED=0 >> .env.dspark"
    )
    assert (code, launcher.launcher_outcome(code, out)[0]) == (0, "ok"), out[-2000:]
    assert "DeepSeek V4 Flash DSpark is running: http://127.0.0.2:8888/health\n" in out
    log = ssh(twin, "head", f"docker logs {CONTAINER} 2>&1").stdout
    assert '"GET /health HTTP/1.1" 200' in log and "GET /v1/models" not in log
