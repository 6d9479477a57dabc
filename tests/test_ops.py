"""Node operations (lanebook.ops): the seed's command lines in dry-run, with no socket opened, and each
operation against the twin over real SSH, failures included."""
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lanebook import nodes, ops, weights
from lanebook.http import WaitTimeout
from lanebook.params import NodeParams, lane_with, load_lane
from twin_helpers import private_twin, process_gone


def every_operation(lane):
    """Call every operation the runbooks use, in recipe order; returns the executor's recorded lines."""
    ops.clean_memory(lane)
    ops.mask_legacy_units(lane)
    ops.check_sticky_uma(lane)
    ops.checkout_ok(lane)
    weights.download_on_head(lane)
    weights.verify_weights(lane.head, lane.params.weights)
    weights.sync_to_workers(lane)
    weights.clean_incomplete_on_workers(lane)
    ops.sync_checkout(lane)
    ops.start_lane(lane)
    ops.wait_lane_ready(lane)
    container = ops.container_name(lane)
    ops.scan_log(lane.head, container)
    ops.schedule_in_live_command(lane.head, container)
    ops.lane_status(lane)
    ops.stop_lane(lane)
    return lane.executor.commands()


def dry_lane(name="anemll-0731"):
    return nodes.Lane(load_lane(name), dry_run=True)


# --- dry-run: the seed's lines, and nothing opened -------------------------------------------------

def test_dry_run_gives_the_seed_lines():
    lines = every_operation(dry_lane())
    text = "\n".join(lines)
    launch = ("head: cd ~/ds4-f-mia-anemll-0731 && PROJECT_NAME=ds4-f-mia-anemll-0731 WAIT_ATTEMPTS=120 "
              "WAIT_SECONDS=15 ./start-deepseek-v4-flash-dspark.sh")
    assert launch in lines
    assert ("head: docker logs ds4-f-mia-anemll-0731-vllm-dspark-1 2>&1 | grep -E "
            "'BREAKABLE|Breakable CUDA|KV cache size") in text
    assert "head: docker top ds4-f-mia-anemll-0731-vllm-dspark-1" in lines
    for alias in ("head", "worker"):  # SHM + page cache on both nodes
        assert f"{alias}: sudo -n sh -c '{ops.SHM_CLEANUP}; sync; echo 3 > /proc/sys/vm/drop_caches'" in lines
        assert f"{alias}: sudo -n sh -c 'systemctl mask --now aiden-vllm.service'" in lines
    assert "head: rsync -aH --partial --info=stats2 ~/ds4-f-mia-anemll-0731/ milo@10.0.0.2:ds4-f-mia-anemll-0731/" in lines
    assert "local: wait for /health: GET http://192.168.1.11:8888/health every 5 s, bound 1800 s" in lines
    assert "--delete " not in text
    # the cleanup comes before the launch, the log gate after it
    assert lines.index(launch) > max(i for i, line in enumerate(lines) if "drop_caches" in line)
    assert lines.index(launch) < next(i for i, line in enumerate(lines) if "docker logs" in line)


def test_dry_run_results_claim_nothing():
    """A dry run observes nothing, so no check in it passes (runbooks show them as not observed)."""
    lane = dry_lane()
    results = [ops.checkout_ok(lane), ops.check_sticky_uma(lane), ops.start_lane(lane), ops.stop_lane(lane),
               weights.verify_weights(lane.head, lane.params.weights)]
    assert not any(r.ok for r in results)
    assert ops.start_lane(lane).summary() == "launcher not run (dry run)"


def test_dry_run_opens_no_socket(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("dry-run opened a socket")

    monkeypatch.setattr(socket.socket, "__init__", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    assert len(every_operation(dry_lane())) > 20


def test_dry_run_without_a_network(tmp_path):
    """The honest proof (NOTES): under `unshare -n` there is no network at all, and the dry run still completes."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-n", "true"]).returncode != 0:
        pytest.skip("unshare -n is not available here (needs root or user namespaces)")
    script = ("import sys, json; sys.path.insert(0, sys.argv[1]); import test_ops; "
              "print(json.dumps(test_ops.every_operation(test_ops.dry_lane())))")
    out = subprocess.run(["unshare", "-n", sys.executable, "-c", script, str(Path(__file__).parent)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = json.loads(out.stdout.strip().splitlines()[-1])
    assert lines == every_operation(dry_lane())


def test_lane_of_n_workers():
    """Workers come from the lane's params: three workers get three rsyncs and three cleanups, the head none."""
    params = load_lane("anemll-0731")
    extra = [NodeParams(alias=f"worker{i}", role="worker", host=f"10.0.0.{i + 1}", user="milo",
                        fabric_ip=f"10.0.0.{i + 1}", jump="head") for i in (2, 3)]
    lane = nodes.Lane(lane_with(params, nodes=[n.model_dump() for n in params.nodes + extra]), dry_run=True)
    assert [w.alias for w in lane.workers] == ["worker", "worker2", "worker3"]
    stats = weights.sync_to_workers(lane)
    assert list(stats) == ["worker", "worker2", "worker3"] and all(s.dry_run for s in stats.values())
    deleted = weights.clean_incomplete_on_workers(lane)
    lines = lane.executor.commands()
    for ip in ("10.0.0.2", "10.0.0.3", "10.0.0.4"):
        assert any(line.startswith("head: rsync ") and f"milo@{ip}:.cache/huggingface/hub/" in line for line in lines)
    assert [line.split(":")[0] for line in lines if "-delete" in line] == ["worker", "worker2", "worker3"]
    assert set(deleted) == {"worker", "worker2", "worker3"}
    ops.clean_memory(lane)
    assert sum("drop_caches" in line for line in lane.executor.commands()) == 4


def test_values_reaching_a_shell_are_quoted():
    lane = nodes.Lane(lane_with(load_lane("twin"), checkout="~/odd dir; rm -rf x",
                                launcher={"env": {"PROJECT_NAME": "p q", "WAIT_ATTEMPTS": 1, "WAIT_SECONDS": 1}}),
                      dry_run=True)
    ops.start_lane(lane)
    ops.scan_log(lane.head, "name with 'quote'", ["a b"])
    line, scan = lane.executor.commands()
    assert line == "head: cd ~/'odd dir; rm -rf x' && PROJECT_NAME='p q' WAIT_ATTEMPTS=1 WAIT_SECONDS=1 ./start-deepseek-v4-flash-dspark.sh"
    assert "docker logs 'name with '\"'\"'quote'\"'\"'' 2>&1" in scan


# --- parsing what the nodes print ----------------------------------------------------------------

def test_kv_cache_tokens_takes_the_latest_boot():
    lines = ["(EngineCore pid=1) INFO [kv_cache_utils.py:1087] GPU KV cache size: 2,201,000 tokens",
             "noise", "(EngineCore pid=9) INFO [kv_cache_utils.py:1087] GPU KV cache size: 2,493,464 tokens"]
    assert ops.kv_cache_tokens(lines) == 2493464
    assert ops.kv_cache_tokens(["Available KV cache memory: 18.08 GiB"]) is None


def test_speculative_config_from_a_command_line():
    cmd = ('vllm serve deepseek-ai/DeepSeek-V4-Flash-0731 --speculative-config {"method":"dspark",'
           '"num_speculative_tokens":5,"num_speculative_tokens_per_batch_size":[[1,1,5],[2,4,4],[5,6,3]]} --port 8888')
    assert ops.speculative_config(cmd)["num_speculative_tokens_per_batch_size"] == [[1, 1, 5], [2, 4, 4], [5, 6, 3]]
    assert ops.speculative_config("vllm serve x --port 1") is None


# --- HTTP waits (real sockets on loopback) ---------------------------------------------------------

class _FlakyHealth(BaseHTTPRequestHandler):
    """503 for the first answers, then 200: a server that comes up while we wait."""

    answers = {"n": 0}

    def do_GET(self):  # noqa: N802 - http.server's name
        self.answers["n"] += 1
        ready = self.answers["n"] > 2
        body = json.dumps({"object": "list", "data": [{"id": "m"}]}).encode() if self.path == "/v1/models" else b""
        self.send_response(200 if ready else 503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def flaky_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FlakyHealth)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_wait_health_shows_progress_until_ready(flaky_server):
    seen = []
    executor = nodes.Executor()
    assert ops.wait_health(flaky_server, timeout_s=20, interval_s=0.1, progress=seen.append, executor=executor)
    assert [p.last for p in seen] == ["HTTP 503", "HTTP 503"] and seen[-1].attempt == 2
    assert ops.wait_models(flaky_server, "m", timeout_s=5, interval_s=0.1)[0]["id"] == "m"
    assert executor.history[-1].node == "local" and executor.history[-1].ok


def test_wait_stops_at_the_bound():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    seen = []
    executor = nodes.Executor()
    started = time.monotonic()
    with pytest.raises(WaitTimeout, match=r"/health: http://127.0.0.1:\d+/health not ready within 1.5 s"):
        ops.wait_health(f"http://127.0.0.1:{port}/v1", timeout_s=1.5, interval_s=0.2, progress=seen.append,
                        executor=executor)
    assert time.monotonic() - started >= 1.5  # it waited its bound (how much longer depends on the machine)
    assert len(seen) >= 3 and seen[-1].last == "ConnectError"
    assert executor.history[-1].exit_code == 1 and "not ready within" in executor.history[-1].stdout


# --- against the twin over SSH -----------------------------------------------------------------------
# A private twin (its own ports and state dir) so that launching, stopping and faults never disturb the
# shared one: legacy-units-active (aiden-vllm.service runs on the head) and sticky-uma (memory stays held
# after a container stops until caches are dropped).

@pytest.fixture(scope="module")
def twin_lane(tmp_path_factory):
    with private_twin(tmp_path_factory.mktemp("twin-ops"), ["legacy-units-active", "sticky-uma"]) as status:
        with nodes.Lane(lane_with(load_lane("twin"), api=status["api"])) as lane:
            yield lane


def shm_entries(node):
    """What the node's /dev/shm holds (the twin's sudo maps /dev/shm to the node's own)."""
    return node.run("sudo -n ls -A /dev/shm").stdout.split()


@pytest.mark.twin
def test_recipe_launch_cycle(twin_lane):
    """Seed 000 "Launch / stop" on the twin: mask legacy units, clean SHM + page cache on both nodes, check
    free memory, launch, wait, grep the log, read the live command, status, a dead head, stop, sticky UMA."""
    lane, head, worker = twin_lane, twin_lane.head, twin_lane.node("worker")
    container = ops.container_name(lane)
    assert container == "ds4-f-mia-anemll-0731-vllm-dspark-1"

    held = ops.check_sticky_uma(lane)  # the active legacy unit holds memory on the head
    assert not held.ok and not held.nodes["head"]["ok"] and held.nodes["worker"]["ok"]
    assert held.nodes["head"]["needed_gib"] == round(0.85 * held.nodes["head"]["total_gib"], 1)

    assert ops.mask_legacy_units(lane) == {"head": ["aiden-vllm.service"], "worker": []}
    assert ops.mask_legacy_units(lane) == {"head": [], "worker": []}
    assert head.run("systemctl is-enabled aiden-vllm.service", check=False).stdout.strip() == "masked"

    for node in (head, worker):
        node.run("sudo -n touch /dev/shm/nccl-stale-segment")
        assert shm_entries(node) == ["nccl-stale-segment"]
    ops.clean_memory(lane)
    ready = ops.check_sticky_uma(lane)
    assert ready.ok
    for alias, figures in ready.nodes.items():
        assert shm_entries(lane.node(alias)) == []
        assert figures["free_gib"] >= figures["available_gib"] - 1  # page cache dropped
    assert ops.checkout_ok(lane).ok

    lines = []
    started = ops.start_lane(lane, on_line=lines.append)
    assert (started.exit_code, started.outcome, started.ok) == (0, "ok", True)
    assert any(line.startswith("start: worker") for line in lines) and lines[-1].startswith("start: ")
    assert lane.executor.history[-1].command.endswith(
        "PROJECT_NAME=ds4-f-mia-anemll-0731 WAIT_ATTEMPTS=120 WAIT_SECONDS=15 ./start-deepseek-v4-flash-dspark.sh")
    models = ops.wait_lane_ready(lane, timeout_s=60, interval_s=0.5)
    assert models[0]["id"] == "deepseek-v4-flash-0731" and models[0]["max_model_len"] == 1048576

    found = ops.scan_log(head, container)
    assert not any("Auto-enabling" in line for line in found["BREAKABLE"])
    low, high = lane.params.gates.kv_cache_tokens
    assert low <= ops.kv_cache_tokens(found["KV cache size"]) <= high

    command = ops.live_command(head, container)
    assert "\n" not in command and "--speculative-config" in command
    assert ops.speculative_config(command)["num_speculative_tokens_per_batch_size"] == [[1, 1, 5], [2, 4, 4], [5, 6, 3]]
    assert ops.schedule_in_live_command(head, container) and ops.schedule_in_live_command(worker, container)

    with pytest.raises(nodes.NodeError, match="not cleaning memory while the lane runs"):
        ops.clean_memory(lane)
    again = ops.start_lane(lane)
    assert (again.exit_code, again.outcome) == (3, "already up")
    status = ops.lane_status(lane)
    assert status.ok and "GPU KV cache size" in status.output
    assert ops.running_containers(lane) == {"head": [container], "worker": [container]}

    free_running = ops.check_sticky_uma(lane).nodes
    head.run(f"docker kill {container}")  # the head dies mid-TP (pitfall 16): the worker is orphaned
    assert ops.lane_status(lane).exit_code == 1
    assert ops.stop_orphaned_workers(lane) == {"worker": [container]}
    assert ops.running_containers(lane) == {"head": [], "worker": []}
    stopped = ops.stop_lane(lane)
    assert stopped.ok and stopped.left_running == {"head": [], "worker": []}

    before = ready.nodes
    sticky = ops.check_sticky_uma(lane, min_free_gib=before["head"]["free_gib"] - 5)
    assert not sticky.ok
    for alias, figures in sticky.nodes.items():  # pitfall 4: memory stays held with no container
        assert figures["free_gib"] <= before[alias]["free_gib"] - 10
        assert figures["free_gib"] > free_running[alias]["free_gib"]
    ops.clean_memory(lane)
    assert ops.check_sticky_uma(lane, min_free_gib=before["head"]["free_gib"] - 5).ok


@pytest.mark.twin
def test_log_and_process_checks_of_a_missing_container(twin_lane):
    with pytest.raises(nodes.NodeError, match="head: no container named no-such-container"):
        ops.scan_log(twin_lane.head, "no-such-container")
    with pytest.raises(nodes.CommandFailed, match="No such container"):
        ops.live_command(twin_lane.head, "no-such-container")


@pytest.mark.twin
def test_directory_and_file_checks(twin_lane):
    head = twin_lane.head
    assert ops.path_exists(head, "~/ds4-f-mia-anemll-0731/.env.dspark")
    assert not ops.path_exists(head, "~/no such dir")
    assert ops.missing_paths(head, ["~/ds4-f-mia-anemll-0731", "~/a b", "/nonexistent/x"]) == ["~/a b", "/nonexistent/x"]
    moved = nodes.Lane(lane_with(twin_lane.params, checkout="~/ds4-not-here"), executor=twin_lane.executor)
    check = ops.checkout_ok(moved)
    assert not check.ok
    assert check.missing["worker"] == ["~/ds4-not-here/docker-compose.dspark.yml", "~/ds4-not-here/.env.dspark",
                                       "~/ds4-not-here/start-deepseek-v4-flash-dspark.sh",
                                       "~/ds4-not-here/status-deepseek-v4-flash-dspark.sh",
                                       "~/ds4-not-here/stop-deepseek-v4-flash-dspark.sh"]


def _md5(node, path):
    return node.run(f"md5sum {nodes.qpath(path)}").stdout.split()[0]


@pytest.mark.twin
def test_rsync_to_workers_interrupted_then_resumed(twin_lane):
    """Cut by our timeout (throttled so it is mid-file), rsync leaves a partial file; the rerun resumes it
    (--partial: matched data > 0), files only the worker has survive (no --delete), and the copy is exact."""
    lane, head, worker = twin_lane, twin_lane.head, twin_lane.node("worker")
    head.run("rm -rf ~/lbt-sync && mkdir -p ~/lbt-sync/sub && head -c 4000000 /dev/urandom > ~/lbt-sync/big.bin"
             " && echo small > ~/lbt-sync/sub/small.txt")
    worker.run("rm -rf ~/lbt-sync && mkdir -p ~/lbt-sync && echo mine > ~/lbt-sync/worker-only.txt")
    with pytest.raises(nodes.CommandTimeout):
        ops.rsync_to_workers(lane, "~/lbt-sync", timeout_s=1.5, bwlimit_kib=1000)
    assert process_gone(head, "rsyn[c] .*lbt-sync")  # hung up (both ends), not left running
    partial = int(worker.run("stat -c %s ~/lbt-sync/big.bin").stdout)
    assert 0 < partial < 4000000

    stats = ops.rsync_to_workers(lane, "~/lbt-sync", timeout_s=60)["worker"]
    assert stats.matched_data >= partial * 0.9 and stats.literal_data < 4000000
    assert stats.total_file_size == 4000006
    assert _md5(worker, "~/lbt-sync/big.bin") == _md5(head, "~/lbt-sync/big.bin")
    assert worker.run("cat ~/lbt-sync/worker-only.txt ~/lbt-sync/sub/small.txt").stdout == "mine\nsmall\n"
    again = ops.rsync_to_workers(lane, "~/lbt-sync/", timeout_s=60)["worker"]
    assert (again.files_transferred, again.literal_data) == (0, 0)  # nothing left to send
    for node in (head, worker):
        node.run("rm -rf ~/lbt-sync")


@pytest.mark.twin
def test_a_lane_that_never_turns_healthy(tmp_path):
    """Fault health-never: the launcher gives up after its attempts (exit 1 → "failed"), and our own wait stops
    at its bound with one clear error, having shown its progress."""
    with private_twin(tmp_path / "twin", ["health-never"]) as status:
        params = lane_with(load_lane("twin"), api=status["api"],
                           launcher={"env": {"PROJECT_NAME": "ds4-f-mia-anemll-0731", "WAIT_ATTEMPTS": 3, "WAIT_SECONDS": 15}})
        with nodes.Lane(params) as lane:
            started = ops.start_lane(lane)
            assert (started.exit_code, started.outcome, started.ok) == (1, "failed", False)
            assert "no healthy API" in started.output and "after 3 attempts" in started.output
            seen = []
            began = time.monotonic()
            with pytest.raises(WaitTimeout, match=r"^/health: http://127\.0\.0\.2:\d+/health not ready within 2 s"):
                ops.wait_health(params.api, timeout_s=2, interval_s=0.25, progress=seen.append, executor=lane.executor)
            assert time.monotonic() - began >= 2
            assert len(seen) >= 4 and seen[-1].elapsed_s >= 2 and "waiting for /health" in seen[-1].line()
            assert seen[-1].last == "HTTP 503"  # the engine answers, unhealthy
            assert ops.stop_lane(lane).ok
