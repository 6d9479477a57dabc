"""Waiting for a lane's server from the operator's machine (lanebook.ops.readiness): bounded, with progress, recorded;
against a real loopback server that comes up while we wait, a port nothing answers, and a twin whose /health
never turns healthy."""

import json
import socket
import time
from http.server import BaseHTTPRequestHandler

import pytest
from helpers.http_helpers import serving
from helpers.twin_helpers import private_twin
from helpers.waits import eventually
from lanebook.lane.params import lane_with, load_lane
from lanebook.nodes import ssh
from lanebook.nodes.http import WaitTimeout
from lanebook.ops import launcher, readiness


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
    with serving(_FlakyHealth) as root:
        yield f"{root}/v1"


def test_wait_health_shows_progress_until_ready(flaky_server):
    seen = []
    executor = ssh.Executor()
    assert readiness.wait_health(flaky_server, timeout_s=20, interval_s=0.1, progress=seen.append, executor=executor)
    assert [p.last for p in seen] == ["HTTP 503", "HTTP 503"] and seen[-1].attempt == 2
    assert readiness.wait_models(flaky_server, "m", timeout_s=5, interval_s=0.1)[0]["id"] == "m"
    assert executor.history[-1].node == "local" and executor.history[-1].ok


def test_wait_stops_at_the_bound():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    seen = []
    executor = ssh.Executor()
    started = time.monotonic()
    with pytest.raises(WaitTimeout, match=r"/health: http://127.0.0.1:\d+/health not ready within 1.5 s"):
        readiness.wait_health(
            f"http://127.0.0.1:{port}/v1", timeout_s=1.5, interval_s=0.2, progress=seen.append, executor=executor
        )
    assert time.monotonic() - started >= 1.5
    assert len(seen) >= 3 and seen[-1].last == "ConnectError"
    assert executor.history[-1].exit_code == 1 and "not ready within" in executor.history[-1].stdout


def test_dry_run_records_the_waits_and_sends_nothing():
    nodes = ssh.LaneNodes(load_lane("anemll-0731"), dry_run=True)
    assert readiness.wait_lane_ready(nodes) is None
    assert nodes.executor.commands() == [
        "local: wait for /health: GET http://192.168.1.11:8888/health every 5 s, bound 1800 s",
        (
            "local: wait for /v1/models listing deepseek-v4-flash-0731: GET http://192.168.1.11:8888/v1/models "
            "every 5 s, bound 1800 s"
        ),
    ]


@pytest.mark.twin
def test_a_server_whose_health_never_turns(tmp_path):
    """Fault health-never: the launcher sees /health turn healthy, smokes, and its fail-open warmup's first batched
    shape kills the engine, so it reports the lane up; our /health wait is what catches it, stopping at its bound with
    one clear error after showing its progress, while /v1/models still answers."""
    with private_twin(tmp_path / "twin", ["health-never"]) as status:
        with ssh.LaneNodes(lane_with(load_lane("twin"), api=status["api"])) as nodes:
            assert launcher.start_lane(nodes).ok
            seen = []
            with pytest.raises(WaitTimeout, match=r"^/health: http://127\.0\.0\.2:\d+/health not ready within 2 s"):
                readiness.wait_health(
                    nodes.params.api, timeout_s=2, interval_s=0.25, progress=seen.append, executor=nodes.executor
                )
            assert len(seen) >= 4 and seen[-1].last == "HTTP 503" and "waiting for /health" in seen[-1].line()
            assert readiness.wait_models(
                nodes.params.api, nodes.params.served_model_name, timeout_s=10, interval_s=0.25
            )
            assert launcher.stop_lane(nodes).ok


def test_the_readiness_watch_sees_a_booting_server_list_its_model_at_or_after_it_became_ready(tmp_path):
    """While something else waits (the launcher), the watch polls /v1/models and keeps when it first listed the model;
    the twin server's own ready_at (twin-only truth) is the moment it could have."""
    import httpx
    from helpers.twin_serve import NAME, SERVE_ARGS
    from lanebook.twin.vllm import start_local

    srv = start_local(
        SERVE_ARGS,
        tmp_path / "vllm.log",
        host="127.0.0.74",
        wait_s=None,
        env={"VLLM_USE_BREAKABLE_CUDAGRAPH": "0", "LANEBOOK_TWIN_TIME_SCALE": "0.02"},
    )
    seen = []
    try:
        with (
            readiness.ReadinessWatch(f"{srv.url}/v1", NAME, on_seen=seen.append) as watch,
            readiness.ReadinessWatch(f"{srv.url}/v1", "another-model") as other,
        ):
            srv.wait_healthy(60)
            assert eventually(lambda: watch.seen_at is not None, 30)
        ready_at = httpx.get(f"{srv.url}/twin/requests", timeout=10).json()["ready_at"]
    finally:
        srv.stop()
    assert seen == [watch.seen_at] and watch.seen_at >= ready_at
    assert other.seen_at is None  # a server that never lists the model is never "seen ready"
