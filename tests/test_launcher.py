"""Starting and stopping a lane through its checkout's scripts (lanebook.ops.launcher): the seed's command lines in
dry-run, the launcher's codes and messages read into outcomes (the recipe launcher's own lines), and on the
twin the launch cycle and each failure outcome as the twin's launcher produces it."""

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.recipe_dry_run import dry_lane, every_operation
from lanebook.lane.params import lane_with, load_lane
from lanebook.nodes import ssh
from lanebook.ops import launcher, logs

CONTAINER = "ds4-f-mia-anemll-0731-vllm-dspark-1"
LAUNCH = (
    "head: cd ~/ds4-f-mia-anemll-0731 && PROJECT_NAME=ds4-f-mia-anemll-0731 WAIT_ATTEMPTS=120 WAIT_SECONDS=15 "
    "./start-deepseek-v4-flash-dspark.sh"
)


# --- what the launcher says --------------------------------------------------------------------


@pytest.mark.parametrize(
    "code, output, outcome, reason",
    [
        (
            0,
            "DeepSeek V4 Flash DSpark is running: http://127.0.0.1:8888/v1/models\nMinimal chat request succeeded.",
            "ok",
            "Minimal chat request succeeded.",
        ),
        (
            1,
            (
                "Missing /home/milo/ds4/.env.dspark. Copy .env.dspark.example to .env.dspark and edit node-specific "
                "values."
            ),
            "missing env file",
            (
                "Missing /home/milo/ds4/.env.dspark. Copy .env.dspark.example to .env.dspark and edit node-specific "
                "values."
            ),
        ),
        (
            1,
            (
                "./start-deepseek-v4-flash-dspark.sh: line 27: WORKER_HOST: WORKER_HOST must be set in "
                "/home/milo/ds4/.env.dspark"
            ),
            "refused configuration",
            (
                "./start-deepseek-v4-flash-dspark.sh: line 27: WORKER_HOST: WORKER_HOST must be set in "
                "/home/milo/ds4/.env.dspark"
            ),
        ),
        (
            2,
            "Unknown option: --bogus\nUsage: start-deepseek-v4-flash-dspark.sh [--host HOST] [--port PORT]",
            "refused configuration",
            "Unknown option: --bogus",
        ),
        (
            2,
            "VLLM port must be an integer between 1 and 65535: x",
            "refused configuration",
            "VLLM port must be an integer between 1 and 65535: x",
        ),
        (2, "something new the launcher refuses", "refused configuration", "something new the launcher refuses"),
        (
            1,
            "Resolved DSpark profile:\nCannot reach worker with passwordless SSH: 10.0.0.2",
            "worker unreachable",
            "Cannot reach worker with passwordless SSH: 10.0.0.2",
        ),
        (
            1,
            "Missing local Docker image ghcr.io/anemll/dspark-vllm-gx10:0.1.1.\nPull it (e.g. docker pull X)",
            "image missing",
            "Missing local Docker image ghcr.io/anemll/dspark-vllm-gx10:0.1.1.",
        ),
        (1, "Missing worker Docker image X.", "image missing", "Missing worker Docker image X."),
        # the logs printed after the launcher's own line do not decide, whatever they say
        (
            1,
            "Waiting for DSpark vLLM API...\nTimed out waiting for DSpark API. Recent head logs:\n"
            "vllm-dspark-1  | error: Unknown option: --x\nRecent worker logs:",
            "health timeout",
            "Timed out waiting for DSpark API. Recent head logs:",
        ),
        (
            1,
            "Running minimal OpenAI-compatible chat request...\ncurl: (22) The requested URL returned error: 500\n"
            "Minimal chat request failed.\nStartup failed. Recent head logs:\nvllm-dspark-1  | Traceback",
            "failed",
            "Minimal chat request failed.",
        ),
        (130, "Waiting for DSpark vLLM API...", "interrupted", "SIGINT"),
        (129, "", "interrupted", "SIGHUP"),
        (143, "", "interrupted", "SIGTERM"),
        (1, "", "failed", ""),
    ],
)
def test_launcher_outcomes(code, output, outcome, reason):
    assert launcher.launcher_outcome(code, output) == (outcome, reason)


@pytest.mark.parametrize(
    "code, output, said",
    [
        (0, "Minimal chat request succeeded.\r\nPost-readiness warmup: ok\r\n", "Post-readiness warmup: ok"),
        (0, "Post-readiness warmup: SKIPPED (POST_READINESS_WARMUP_ENABLED=0)\n", None),
        (0, "WARN: post-readiness warmup failed (fail-open: the server is up and serving)\n", None),
        (0, "Minimal chat request succeeded.\n", None),  # an older checkout: no hook
        (1, "Post-readiness warmup: ok\nStartup failed.\n", None),  # not an ok launch
    ],
)
def test_the_launchers_warmup_hook_counts_only_when_it_says_ok(code, output, said):
    assert launcher.launcher_result(ssh.CommandResult("head", "start", code, output)).hook_warmed == said


def test_there_is_no_already_up_outcome():
    assert launcher.launcher_outcome(3, "DSpark head container already exists")[0] == "failed"


# --- the lane's state -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "running, state, orphaned",
    [
        ({"head": [CONTAINER], "worker": [CONTAINER]}, "up", {}),
        ({"head": [], "worker": []}, "down", {}),
        ({"head": [], "worker": [CONTAINER]}, "orphaned worker", {"worker": [CONTAINER]}),
        ({"head": [CONTAINER], "worker": []}, "head without its workers", {}),
        ({"head": [], "w1": [CONTAINER], "w2": []}, "orphaned worker", {"w1": [CONTAINER]}),
        ({"head": [CONTAINER], "w1": [CONTAINER], "w2": []}, "head without its workers", {}),
        ({"head": [CONTAINER]}, "up", {}),  # a one-node lane
    ],
)
def test_lane_state_from_the_running_containers(running, state, orphaned):
    assert launcher.state_from_containers(running, "head") == state
    assert launcher.orphaned_workers(running, "head") == orphaned
    seen = launcher.LaneContainers(running, "head")
    assert (seen.state, seen.orphaned, seen.left) == (state, orphaned, {a: n for a, n in running.items() if n})


def test_a_dry_run_observes_no_state_and_records_the_api_questions():
    nodes = ssh.LaneNodes(load_lane("anemll-0731"), dry_run=True)
    containers, answer = launcher.lane_containers(nodes), launcher.ask_api(nodes)
    assert (containers.state, containers.orphaned, containers.summary()) == (
        "not observed (dry run)",
        {},
        "not observed (dry run)",
    )
    assert (answer.healthy, answer.models, answer.model_ids) == (None, None, [])
    assert nodes.executor.commands() == [
        "head: docker ps --format '{{.Names}}'",
        "worker: docker ps --format '{{.Names}}'",
        "local: wait for /health: GET http://192.168.1.11:8888/health every 1 s, bound 5 s",
        "local: wait for /v1/models listing a model: GET http://192.168.1.11:8888/v1/models every 1 s, bound 5 s",
    ]


def test_an_api_that_does_not_answer_is_reported_not_raised():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        nodes = ssh.LaneNodes(lane_with(load_lane("twin"), api=f"http://127.0.0.1:{port}/v1", ssh_config=None))
        answer = launcher.ask_api(nodes, timeout_s=1)
    assert answer.healthy is False and answer.models is None
    assert answer.detail.startswith(f"/health: http://127.0.0.1:{port}/health not ready within 1 s")


# --- dry run ---------------------------------------------------------------------------------------


def test_dry_run_gives_the_seed_lines_and_claims_nothing():
    nodes = ssh.LaneNodes(load_lane("anemll-0731"), dry_run=True)
    started, status, stopped = launcher.start_lane(nodes), launcher.run_status_script(nodes), launcher.stop_lane(nodes)
    assert nodes.executor.commands()[:3] == [
        LAUNCH,
        "head: cd ~/ds4-f-mia-anemll-0731 && PROJECT_NAME=ds4-f-mia-anemll-0731 ./status-deepseek-v4-flash-dspark.sh",
        "head: cd ~/ds4-f-mia-anemll-0731 && PROJECT_NAME=ds4-f-mia-anemll-0731 ./stop-deepseek-v4-flash-dspark.sh",
    ]
    assert not (started.ok or status.ok or stopped.ok)
    assert started.summary() == "launcher not run (dry run)" and started.outcome == "not run"


def test_the_recipe_sequence_in_dry_run():
    """Seed 000 order: memory cleaned and units masked, weights and checkout on every node, then the launcher,
    then the log gate; nothing is ever deleted on the receiving side."""
    lines = every_operation(dry_lane())
    text = "\n".join(lines)
    assert LAUNCH in lines
    assert (
        "head: docker logs ds4-f-mia-anemll-0731-vllm-dspark-1 2>&1 | grep -E 'BREAKABLE|Breakable CUDA|KV cache size"
    ) in text
    assert "head: docker top ds4-f-mia-anemll-0731-vllm-dspark-1" in lines
    assert (
        "head: rsync -aH --partial --info=stats2 ~/ds4-f-mia-anemll-0731/ milo@10.0.0.2:ds4-f-mia-anemll-0731/" in lines
    )
    assert "local: wait for /health: GET http://192.168.1.11:8888/health every 5 s, bound 1800 s" in lines
    assert "--delete " not in text
    assert lines.index(LAUNCH) > max(
        i for i, line in enumerate(lines) if "drop_caches" in line or "systemctl mask" in line
    )
    assert lines.index(LAUNCH) < next(i for i, line in enumerate(lines) if "docker logs" in line)


def test_dry_run_opens_no_socket(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("dry-run opened a socket")

    monkeypatch.setattr(socket.socket, "__init__", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    assert len(every_operation(dry_lane())) > 20


def test_dry_run_without_a_network():
    """The honest proof: under `unshare -n` there is no network at all, and the dry run still completes."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-n", "true"]).returncode != 0:
        pytest.skip("unshare -n is not available here (needs root or user namespaces)")
    script = (
        "import sys, json; sys.path.insert(0, sys.argv[1]); from helpers import recipe_dry_run as r; "
        "print(json.dumps(r.every_operation(r.dry_lane())))"
    )
    out = subprocess.run(
        ["unshare", "-n", sys.executable, "-c", script, str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == every_operation(dry_lane())


def test_values_reaching_a_shell_are_quoted():
    nodes = ssh.LaneNodes(
        lane_with(
            load_lane("twin"),
            checkout="~/odd dir; rm -rf x",
            launcher={"env": {"PROJECT_NAME": "p q", "WAIT_ATTEMPTS": 1, "WAIT_SECONDS": 1}},
        ),
        dry_run=True,
    )
    launcher.start_lane(nodes)
    assert nodes.executor.commands() == [
        "head: cd ~/'odd dir; rm -rf x' && PROJECT_NAME='p q' WAIT_ATTEMPTS=1 WAIT_SECONDS=1 "
        "./start-deepseek-v4-flash-dspark.sh"
    ]


# --- on the twin --------------------------------------------------------------------------------------


@pytest.fixture
def nodes(twin):
    """The twin lane, stopped before and after."""
    with ssh.LaneNodes(load_lane("twin")) as connected:
        launcher.stop_lane(connected)
        yield connected
        launcher.stop_lane(connected)


@pytest.fixture(scope="module")
def stopped_lane(twin):
    """The twin lane stopped once for the launches refused before anything starts (each asserts none did)."""
    with ssh.LaneNodes(load_lane("twin")) as connected:
        launcher.stop_lane(connected)
        yield connected
        launcher.stop_lane(connected)


def pid_of(node, container):
    return json.loads(node.run(f"docker inspect {container}").stdout)[0]["State"]["Pid"]


@pytest.mark.twin
def test_launch_cycle(nodes):
    """Seed 000 "Launch / stop": launch, launch again (no restart), status, a dead head, its orphaned worker, stop."""
    head, worker = nodes.head, nodes.node("worker")
    assert launcher.container_name(nodes) == CONTAINER
    lines = []
    started = launcher.start_lane(nodes, on_line=lines.append)
    assert (started.exit_code, started.outcome, started.ok) == (0, "ok", True), started.output[-2000:]
    assert "Starting DSpark worker on 127.0.0.3..." in lines and "Minimal chat request succeeded." in lines
    assert "  gpu memory utilization: 0.85 (ENABLE_VL_SIDECAR=0: from GPU_MEMORY_UTILIZATION_TEXT)" in lines
    assert nodes.executor.history[-1].command.endswith(
        "PROJECT_NAME=ds4-f-mia-anemll-0731 WAIT_ATTEMPTS=120 WAIT_SECONDS=15 ./start-deepseek-v4-flash-dspark.sh"
    )
    assert "--gpu-memory-utilization 0.85" in logs.live_command(head, CONTAINER)
    pids = pid_of(head, CONTAINER), pid_of(worker, CONTAINER)

    again = launcher.start_lane(nodes)  # no "already up" code: compose up -d leaves the unchanged ranks running
    assert again.outcome == "ok" and f"Container {CONTAINER}  Running" in again.output
    assert (pid_of(head, CONTAINER), pid_of(worker, CONTAINER)) == pids
    status = launcher.run_status_script(nodes)
    assert status.ok and "GPU KV cache size" in status.output
    assert launcher.running_containers(nodes) == {"head": [CONTAINER], "worker": [CONTAINER]}
    occupancy = launcher.pair_occupancy(nodes)
    assert occupancy.this_lane_up and not occupancy.other_lane_up

    assert launcher.lane_containers(nodes).state == "up"
    answer = launcher.ask_api(nodes)
    assert answer.healthy and answer.model_ids == ["deepseek-v4-flash-0731"]
    head.run(f"docker kill {CONTAINER}")  # the head dies mid-TP (pitfall 16): the worker is orphaned
    assert launcher.lane_containers(nodes).orphaned == {"worker": [CONTAINER]}
    dead = launcher.run_status_script(nodes)  # the recipe's script shows the dead head; it does not judge (exit 0)
    assert dead.exit_code == 0 and f"== head: {CONTAINER}: Exited" in dead.output and "(no answer)" in dead.output
    assert launcher.stop_orphaned_workers(nodes) == {"worker": [CONTAINER]}
    assert launcher.running_containers(nodes) == {"head": [], "worker": []}
    stopped = launcher.stop_lane(nodes)
    assert stopped.ok and stopped.launcher.reason == "DeepSeek V4 Flash DSpark stopped."


@pytest.mark.twin
def test_a_launch_that_outlasts_its_wait_is_a_health_timeout(nodes):
    """One attempt, a second apart, cannot see a cold bind through: the launcher's timeout path with both ranks'
    logs."""
    quick = ssh.LaneNodes(
        lane_with(
            nodes.params,
            launcher={"env": {"PROJECT_NAME": "ds4-f-mia-anemll-0731", "WAIT_ATTEMPTS": 1, "WAIT_SECONDS": 1}},
        ),
        executor=nodes.executor,
    )
    timed_out = launcher.start_lane(quick)
    assert (timed_out.exit_code, timed_out.outcome) == (1, "health timeout")
    assert timed_out.reason == "Timed out waiting for DSpark API. Recent head logs:"
    # both ranks' logs as they stood at the timeout: the worker's from the line it logs first (how far it got in its
    # second or so varies with load: one had not yet logged "Launching headless worker", one had logged nothing)
    worker_section = timed_out.output.split("Recent worker logs:\n", 1)[1].splitlines()
    assert all(line.startswith("vllm-dspark-1  | ") for line in worker_section), worker_section
    assert not worker_section or "vLLM API server version" in worker_section[0]
    assert launcher.stop_lane(nodes).ok


def checkout_copy(nodes, name, edit=""):
    """A copy of the twin lane's checkout on the head, `edit` run in it (sed on its .env.dspark, rm...)."""
    nodes.head.run(
        f"rm -rf ~/{name} && cp -a ~/ds4-f-mia-anemll-0731 ~/{name}" + (f" && cd ~/{name} && {edit}" if edit else "")
    )
    return ssh.LaneNodes(lane_with(nodes.params, checkout=f"~/{name}"), executor=nodes.executor)


@pytest.mark.twin
@pytest.mark.parametrize(
    "edit, exit_code, outcome, reason",
    [
        (
            "rm .env.dspark",
            1,
            "missing env file",
            "Copy .env.dspark.example to .env.dspark and edit node-specific values.",
        ),
        ("sed -i /^WORKER_HOST=/d .env.dspark", 1, "refused configuration", "WORKER_HOST: WORKER_HOST must be set in "),
        (
            "sed -i s/^WORKER_HOST=.*/WORKER_HOST=127.0.0.9/ .env.dspark",
            1,
            "worker unreachable",
            "Cannot reach worker with passwordless SSH: 127.0.0.9",
        ),
        (
            "sed -i 's/^DSPARK_VLLM_IMAGE=.*/DSPARK_VLLM_IMAGE=ghcr.io\\/anemll\\/dspark-vllm-gx10:0.1.2/' .env.dspark",
            1,
            "image missing",
            "Missing local Docker image ghcr.io/anemll/dspark-vllm-gx10:0.1.2.",
        ),
        (
            "echo VLLM_PORT=eighty >> .env.dspark",
            2,
            "refused configuration",
            "VLLM port must be an integer between 1 and 65535: eighty",
        ),
    ],
)
def test_failures_read_from_the_twin_launcher(stopped_lane, edit, exit_code, outcome, reason):
    lane = stopped_lane
    copy = checkout_copy(lane, "launcher-test", edit)
    try:
        result = launcher.start_lane(copy)
        assert (result.exit_code, result.outcome) == (exit_code, outcome), result.output[-1500:]
        assert reason in result.reason
        assert launcher.running_containers(lane) == {"head": [], "worker": []}  # refused before anything started
    finally:
        lane.head.run("rm -rf ~/launcher-test")


def test_occupancy_tells_this_lane_a_known_lane_and_another_apart():
    names = {
        "head": ["ds4-a-vllm-dspark-1", "ds4-b-vllm-dspark-1", "other-vllm-1", "prometheus"],
        "worker": ["ds4-a-vllm-dspark-1"],
    }
    pair = launcher.occupancy_of(names, "ds4-a-", ["ds4-b-"])
    assert pair.mine == {"head": ["ds4-a-vllm-dspark-1"], "worker": ["ds4-a-vllm-dspark-1"]}
    assert pair.others == {"head": ["other-vllm-1"], "worker": []} and pair.others_found() == {"head": ["other-vllm-1"]}
    alone = launcher.occupancy_of(names, "ds4-a-")  # without the rollback lane named, its container is another lane's
    assert alone.others_found() == {"head": ["ds4-b-vllm-dspark-1", "other-vllm-1"]} and alone.this_lane_up


def test_steps_of_a_serving_or_down_lane_skip_saying_why():
    from lanebook.steps.runbook import Runbook

    rb = Runbook("status", "anemll-0731", dry_run=True)
    assert launcher.start_step(rb, skip_because="already up") is None
    assert launcher.start_step(rb, skip_because="already up", what="started", skipped="launcher reports B up") is None
    assert launcher.startup_log_step(rb, skip_because="the lane is cleanly down") is None
    launcher.status_api_step(rb, launcher.LANE_DOWN)
    assert [(c.what, c.detail) for c in rb.checks] == [
        ("launcher reports the lane up", "skipped: already up"),
        ("launcher reports B up", "skipped: already up"),
        ("the startup log is clean", "skipped: the lane is cleanly down"),
        ("the API answers with the lane's model", "skipped: the lane is cleanly down"),
    ]
    assert rb.commands() == []


def test_a_dry_run_start_step_records_the_launch_and_observes_nothing():
    from lanebook.steps.runbook import Runbook

    rb = Runbook("launch", "anemll-0731", dry_run=True)
    started = launcher.start_step(rb, timing=True)
    assert started.dry_run and rb.figures == {"launcher_outcome": "not run", "seen_ready_before_launcher_exit_s": None}
    assert rb.commands()[-1] == LAUNCH and rb.checks[-1].outcome == "not observed"


def test_a_four_node_lane_fans_out_to_every_worker_and_runs_its_own_launcher():
    """Dry run of every operation on the four-Spark lane: the weights and the checkout go from the head once to each
    worker's RoCE IP, `*.incomplete` is cleaned and containers are listed on every worker, memory is cleaned on
    every node, and the lane's own scripts start and stop it."""
    commands = every_operation(dry_lane("anemll-0731-tp4"))
    workers = {"worker": "10.0.0.2", "worker2": "10.0.0.3", "worker3": "10.0.0.4"}
    for alias, ip in workers.items():
        sent = [c for c in commands if c.startswith("head: rsync ") and f" milo@{ip}:" in c]
        assert [c.split()[-1] for c in sent] == [
            f"milo@{ip}:.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731/",
            f"milo@{ip}:ds4-f-mia-anemll-0731-tp4/",
        ]
        assert any(c.startswith(f"{alias}: find ") and "-delete" in c for c in commands)
    for alias in ("head", *workers):
        assert f"{alias}: sudo -n sh -c 'rm -rf /dev/shm/*; sync; echo 3 > /proc/sys/vm/drop_caches'" in commands
        assert f"{alias}: docker ps --format '{{{{.Names}}}}'" in commands
    assert sum(c.startswith("head: rsync ") for c in commands) == 6  # once per worker and tree, from the head
    assert any(c.endswith(" ./start-tp4.sh") for c in commands) and any(c.endswith(" ./stop-tp4.sh") for c in commands)


def test_an_orphan_on_any_of_three_workers_is_named():
    """P16 on four nodes: the lane's state from every node's containers, and the orphaned worker named by alias."""
    up = {"head": ["p-vllm-dspark-1"], "worker": ["p-vllm-dspark-1"], "worker2": ["p-vllm-dspark-1"]}
    assert launcher.state_from_containers({**up, "worker3": ["p-vllm-dspark-1"]}, "head") == launcher.LANE_UP
    assert launcher.state_from_containers({**up, "worker3": []}, "head") == launcher.HEAD_ALONE
    orphan = {"head": [], "worker": [], "worker2": [], "worker3": ["p-vllm-dspark-1"]}
    assert launcher.state_from_containers(orphan, "head") == launcher.ORPHANED_WORKER
    assert launcher.orphaned_workers(orphan, "head") == {"worker3": ["p-vllm-dspark-1"]}
    assert launcher.orphaned_workers({**up, "worker3": ["p-vllm-dspark-1"]}, "head") == {}
