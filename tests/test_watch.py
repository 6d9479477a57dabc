"""`lanebook watch` (lanebook.runs.watch). The policy, pure: what a cause and the restarts so far decide, the back-off.
A second watcher of a lane refused in one line. Then on the session twin, the twin lane served once for the module
and the watch run as an operator types it: `--once` healthy exits 0 and records the round; the unit installed on
the twin head (lingering, enabled, accepted by systemd-analyze verify) and removed; a worker that does not answer
SSH pages its cause (the page command gets JSON on stdin, the webhook a POST) and relaunches nothing, and closes
once it answers again, with a planted API key and webhook token in no file under outputs/watch and no line printed;
the head's engine killed opens an incident after two rounds, the doctor names it, a restart through the stop,
launch and gates runbooks (each recorded with the incident id) serves the lane again, and `watch status --json`
reports the incident closed with its times."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers.lanebook_runs import LANEBOOK
from helpers.waits import eventually
from lanebook.lane.params import load_lane
from lanebook.nodes import ssh
from lanebook.ops import launcher
from lanebook.runs import watch
from lanebook.runs.watch import AlreadyWatched, Watcher, backoff_s, decide
from lanebook.runs.watch_unit import unit_name
from lanebook.verify import watch_probe as wp

POLICY = load_lane("twin").watch  # restart at most 2 within 600 s, then rollback; back-off 5 s
KEY = "planted-api-key-5f2c9a7e1d3b"
TOKEN = "planted-hook-token-9b8c7d6e5f4a"


def decided(cause: str, *, now: float = 1000.0, restarts=(), backoff_until: float = 0.0, rolled_back=False):
    return decide(
        cause,
        now=now,
        policy=POLICY,
        restarts=list(restarts),
        backoff_until=backoff_until,
        rolled_back=rolled_back,
        can_roll_back=True,
    )


def test_what_a_relaunch_cannot_fix_is_paged_whatever_the_restarts_left():
    for cause in (wp.NODE_UNREACHABLE, wp.DISK_FULL, wp.LINK_DEGRADED, wp.SPEED_REGRESSION):
        assert decided(cause).action == "page"
    assert decided(wp.NODE_UNREACHABLE).why == "node unreachable: a relaunch cannot fix it; paged, nothing relaunched"


def test_restarts_are_bounded_in_their_window_then_the_policy_rolls_back_then_pages():
    assert decided(wp.ENGINE_DOWN).why == "restart 1 of at most 2 within 600 s"
    assert decided(wp.ORPHANED, restarts=[990.0]).action == "restart"
    assert decided(wp.ENGINE_DOWN, restarts=[300.0, 990.0]).action == "restart"  # 300 is outside the window
    assert decided(wp.ENGINE_DOWN, restarts=[500.0, 990.0]).action == "rollback"
    exhausted = decided(wp.ENGINE_DOWN, restarts=[500.0, 990.0], rolled_back=True)
    assert (exhausted.action, exhausted.why) == (
        "page",
        "2 restarts within 600 s did not serve it again and the rollback was done: the operator is needed",
    )
    assert decided(wp.ENGINE_DOWN, backoff_until=1004.0).action == "wait"


def test_the_back_off_doubles_after_each_remedy_up_to_an_hour():
    assert [backoff_s(POLICY, n) for n in (1, 2, 3)] == [5, 10, 20]
    assert backoff_s(POLICY, 30) == 3600


def test_a_second_watcher_of_a_lane_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(tmp_path))
    first = Watcher(load_lane("twin"))
    first.claim()
    try:
        with pytest.raises(AlreadyWatched, match=r"^lane twin is already watched by pid \d+ on .*: one watcher per"):
            Watcher(load_lane("twin")).claim()
        done = subprocess.run(
            [LANEBOOK, "watch", "--lane", "twin", "--once"],
            capture_output=True,
            text=True,
            env={**os.environ, "LANEBOOK_OUTPUTS": str(tmp_path)},
            timeout=60,
        )
        assert (done.returncode, done.stdout, len(done.stderr.splitlines())) == (2, "", 1), done.stderr
    finally:
        first.release()
    assert not watch.watched("twin")


def test_a_then_rollback_without_a_rollback_lane_is_refused_as_the_lane_loads(tmp_path):
    lane = tmp_path / "lane.yaml"
    lane.write_text((Path(load_lane("twin-1m6").file).read_text()).replace("  then: page\n", "  then: rollback\n"))
    done = subprocess.run([LANEBOOK, "watch", "--lane", str(lane), "--once"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "watch.then: rollback needs a rollback lane (rollback:), and this lane names none" in done.stderr


# --- on the twin ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(twin, tmp_path_factory):
    """The twin lane served for the module (by the launcher: the launch runbook has its own tests), stopped after;
    the watch's outputs in a folder of the module's."""
    outputs = tmp_path_factory.mktemp("watch-outputs")
    with ssh.LaneNodes(load_lane("twin")) as nodes:
        assert launcher.start_lane(nodes).ok
        yield outputs
        launcher.stop_lane(nodes)


def lanebook(outputs: Path, *args: str, timeout: float = 120, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [LANEBOOK, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "LANEBOOK_OUTPUTS": str(outputs), **env},
    )


def watcher(outputs: Path, *args: str, **env) -> subprocess.Popen:
    return subprocess.Popen(
        [LANEBOOK, "watch", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "LANEBOOK_OUTPUTS": str(outputs), **env},
    )


def stopped(proc: subprocess.Popen) -> tuple[str, str]:
    """SIGTERM, then the watcher's exit; one that does not stop is killed, so its lock holds up no other test."""
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the watcher did not stop within 60 s of SIGTERM; its stderr ends: {err[-2000:]}")
    assert proc.returncode == 0, err
    return out, err


def lane_incidents(outputs: Path, lane: str = "twin") -> list[dict]:
    folder = outputs / "watch" / lane / "incidents"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


@pytest.mark.twin
def test_once_on_a_served_lane_exits_0_and_records_the_round(served):
    done = lanebook(served, "watch", "--lane", "twin", "--once")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "healthy: served in" in done.stdout
    record = json.loads((served / "watch" / "twin" / "probes.jsonl").read_text().splitlines()[-1])
    assert (record["healthy"], record["served"], record["state"], record["ssh"]) == (
        True,
        True,
        "up",
        {"head": True, "worker": True},
    )
    assert record["metrics"]["running"] == 0 and record["chat_tokens"] == 1


@pytest.mark.twin
def test_a_stop_a_library_swallows_still_ends_the_watch_before_its_next_round(served, tmp_path, monkeypatch):
    """The SIGTERM arrives where something catches the KeyboardInterrupt it raises (as invoke did, spending it on a
    ^C to the remote command): the watch remembers it, ends after the round it is in, and says `stopped`."""
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(tmp_path))
    swallowed = []

    def sleep(seconds: float) -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except KeyboardInterrupt as stop:
            swallowed.append(str(stop))

    said, before = io.StringIO(), signal.getsignal(signal.SIGTERM)
    assert Watcher(load_lane("twin"), interval_s=0.5, echo=said, sleep=sleep).run() == 0
    rounds = (tmp_path / "watch" / "twin" / "probes.jsonl").read_text().splitlines()
    assert (swallowed, len(rounds)) == (["SIGTERM"], 1) and said.getvalue().endswith(": stopped\n"), said.getvalue()
    assert json.loads((tmp_path / "watch" / "twin" / "state.json").read_text())["state"] == "stopped"
    assert signal.getsignal(signal.SIGTERM) is before and not watch.watched("twin")


@pytest.mark.twin
def test_once_on_a_head_with_a_full_disk_exits_1_naming_it_a_cause_no_relaunch_fixes(served):
    from lanebook.twin import control

    control.set_node_conditions("head", ["disk-full"])
    try:
        done = lanebook(served, "watch", "--lane", "twin", "--once")
    finally:
        control.set_node_conditions("head", [])
    assert done.returncode == 1 and "disk full: free disk below 5 GiB on head" in done.stdout, done.stdout
    record = json.loads((served / "watch" / "twin" / "probes.jsonl").read_text().splitlines()[-1])
    assert (record["served"], record["cause"], wp.relaunch_can_fix(record["cause"])) == (True, wp.DISK_FULL, False)


@pytest.mark.twin
def test_the_unit_is_installed_on_the_twin_head_enabled_lingering_and_verified_then_removed(served):
    from lanebook.twin import control

    lay = control.layout()
    done = lanebook(served, "watch", "install", "--lane", "twin")
    assert done.returncode == 0 and done.stdout.strip().endswith("is-enabled: enabled"), done.stdout + done.stderr
    unit = lay.home("head") / ".config" / "systemd" / "user" / unit_name("twin")
    assert (unit.parent / "default.target.wants" / unit.name).is_symlink()
    lingering = list((lay.node("head") / "var" / "lib" / "systemd" / "linger").iterdir())
    assert [p.read_text().strip() for p in lingering] == [str(lay.home("head"))]
    assert f'watch --lane "{load_lane("twin").file}"' in unit.read_text()
    if shutil.which("systemd-analyze"):
        checked = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
        assert checked.returncode == 0 and unit.name not in checked.stderr, checked.stderr
    gone = lanebook(served, "watch", "uninstall", "--lane", "twin")
    assert gone.returncode == 0 and gone.stdout.strip().endswith("is-enabled: not-found"), gone.stdout + gone.stderr
    assert not unit.exists()


@pytest.mark.twin
def test_a_worker_that_does_not_answer_is_paged_with_its_cause_and_nothing_is_relaunched(served, tmp_path):
    from lanebook.twin import control

    hook_log = tmp_path / "hook.jsonl"
    hook = subprocess.Popen(
        [
            str(Path(LANEBOOK).parent / "python"),
            "-c",
            "import http.server, sys\n"
            "class H(http.server.BaseHTTPRequestHandler):\n"
            "    def do_POST(self):\n"
            "        body = self.rfile.read(int(self.headers['Content-Length']))\n"
            f"        open({str(hook_log)!r}, 'ab').write(body + b'\\n')\n"
            "        self.send_response(204); self.end_headers()\n"
            "    def log_message(self, *a): pass\n"
            "s = http.server.HTTPServer(('127.0.0.1', 0), H)\n"
            "print(s.server_address[1], flush=True)\n"
            "s.serve_forever()\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    port = int(hook.stdout.readline())
    lane = tmp_path / "twin.yaml"  # the twin lane, keyed by a planted key, paging to a webhook with a planted token
    lane.write_text(
        load_lane("twin").file.read_text().replace("page:\n  min_interval_s: 30\n", "")
        + "auth: {VLLM_API_KEY: {key_env: LANEBOOK_PLANTED_KEY}}\n"
        + "page: {webhook_url_env: LANEBOOK_PLANTED_HOOK, min_interval_s: 30}\n"
    )
    pages = tmp_path / "pages.jsonl"
    runs_before = (served / "runs.jsonl").read_text() if (served / "runs.jsonl").exists() else ""
    env = {"LANEBOOK_PLANTED_KEY": KEY, "LANEBOOK_PLANTED_HOOK": f"http://127.0.0.1:{port}/hook/{TOKEN}"}
    control.set_lane_faults(load_lane("twin"), ["worker-unreachable"])
    proc = watcher(served, "--lane", str(lane), "--interval", "0.5", "--page-command", f"cat >> {pages}", **env)
    try:
        assert eventually(lambda: pages.exists() and "needs-operator" in pages.read_text(), 60), proc.stderr
        control.set_lane_faults(load_lane("twin"), [])
        assert eventually(lambda: [i["state"] for i in lane_incidents(served)] == ["closed"], 60)
    finally:
        control.set_lane_faults(load_lane("twin"), [])
        out, err = stopped(proc)
        hook.terminate()
        hook.wait(timeout=10)
    incident = lane_incidents(served)[0]
    assert (incident["cause"], incident["remedies"], incident["runs"]) == (wp.NODE_UNREACHABLE, [], [])
    assert incident["served_again_at"] and incident["repaired_at"] is None
    assert ((served / "runs.jsonl").read_text() if (served / "runs.jsonl").exists() else "") == runs_before
    sent = [json.loads(line) for line in pages.read_text().splitlines()]
    assert [p["event"] for p in sent][:2] == ["opened", "needs-operator"]
    assert sent[1]["incident"]["cause"] == wp.NODE_UNREACHABLE and sent[1]["note"].startswith("node unreachable: ")
    posted = [json.loads(line) for line in hook_log.read_text().splitlines()]
    assert {p["event"] for p in posted} >= {"opened", "needs-operator"}
    shutil.rmtree(served / "watch" / "twin" / "incidents")  # the next test counts its own
    written = [p.read_text() for p in (served / "watch").rglob("*") if p.is_file()]
    for secret in (KEY, TOKEN):
        assert not [text for text in [out, err, pages.read_text(), *written] if secret in text], secret


@pytest.mark.twin
def test_an_engine_death_is_restarted_through_the_runbooks_and_served_again(served):
    proc = watcher(served, "--lane", "twin", "--interval", "1")
    try:
        assert eventually(lambda: (served / "watch" / "twin" / "state.json").exists(), 30)
        with ssh.LaneNodes(load_lane("twin")) as nodes:
            killed_at = time.time()
            nodes.head.run(f"docker kill {launcher.container_name(nodes)}")
        assert eventually(lambda: [i["state"] for i in lane_incidents(served)] == ["closed"], 180), proc.stderr.read()
        second = lanebook(served, "watch", "--lane", "twin", "--once")  # refused while this one watches
        assert second.returncode == 2 and "already watched" in second.stderr
    finally:
        out, _ = stopped(proc)
    incident = lane_incidents(served)[0]
    assert incident["cause"] == wp.ORPHANED and incident["detection_rounds"] == 2
    assert incident["doctor"]["confirmed"], incident["doctor"]  # the doctor names it: the head died mid-TP
    assert incident["detected_at"] - killed_at < 4 * incident["interval_s"] + 5  # two rounds and their probes
    runs = {r["run_id"]: r for r in map(json.loads, (served / "runs.jsonl").read_text().splitlines())}
    started = [runs[run_id] for run_id in incident["runs"]]
    assert [r["runbook"] for r in started] == ["stop", "launch", "gates"]
    assert {r["incident_id"] for r in started} == {incident["id"]}
    assert started[1]["verdict"] == "pass"
    assert incident["served_again_at"] >= incident["remedies"][0]["finished_at"] > incident["detected_at"]
    status = json.loads(lanebook(served, "watch", "status", "--lane", "twin", "--json").stdout)
    assert (status["watching"], status["state"], status["last_probe"]["healthy"]) == (False, "stopped", True)
    assert [(i["id"], i["cause"], i["runs"], i["served_again_at"]) for i in status["incidents"]] == [
        (incident["id"], wp.ORPHANED, incident["runs"], incident["served_again_at"])
    ]
    assert f"incident {incident['id']} closed: served again" in out


def test_a_regression_is_three_waves_below_the_band_paged_once_and_closed_by_a_wave_within_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(tmp_path))
    pages = tmp_path / "pages.jsonl"
    watcher = Watcher(load_lane("twin"), page_command=f"cat >> {pages}", echo=open(os.devnull, "w"))
    watcher.load_state()
    waves = iter([70.0, 90.0, 70.0, 71.0, 72.0, 69.0, 85.0])

    def wave(now: float, *, before=None) -> dict:
        value = next(waves)
        return {"t": now, "stream_decode_tok_s": value, "band_min": 80.0, "band_trials": 3, "below": value < 80.0}

    monkeypatch.setattr(watcher, "speed_wave", wave)
    idle = {"t": 0.0, "metrics": {"running": 0.0, "waiting": 0.0, "generation_tokens": 10.0}}
    for n in range(7):
        watcher.speed_due({**idle, "t": 1000.0 * (n + 1)}, own_tokens=0)
    watcher.pager.flush(10)
    samples = [json.loads(line) for line in (tmp_path / "watch" / "twin" / "speed.jsonl").read_text().splitlines()]
    assert [s["regression"] for s in samples] == [False, False, False, False, True, True, False]
    found = lane_incidents(tmp_path)
    assert [(i["cause"], i["state"], i["detected_at"], i["closed_at"]) for i in found] == [
        (wp.SPEED_REGRESSION, "closed", 5000.0, 7000.0)
    ]
    assert [json.loads(line)["event"] for line in pages.read_text().splitlines()] == ["regression"]
    busy = {"t": 9000.0, "metrics": {"running": 1.0, "waiting": 0.0, "generation_tokens": 10.0}}
    watcher.speed_due(busy, own_tokens=0)  # skipped, and said so in the series, while a client is served
    last = json.loads((tmp_path / "watch" / "twin" / "speed.jsonl").read_text().splitlines()[-1])
    assert last == {"t": 9000.0, "skipped": "clients are being served: requests running 1, waiting 0"}


def test_a_degraded_link_is_one_incident_paged_once_and_closed_by_a_healthy_measurement(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from lanebook.verify import link as link_check

    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(tmp_path))
    pages = tmp_path / "pages.jsonl"
    watcher = Watcher(load_lane("twin"), page_command=f"cat >> {pages}", echo=open(os.devnull, "w"))
    watcher.load_state()
    nodes = SimpleNamespace(executor=SimpleNamespace(history=[]))
    monkeypatch.setattr(watcher, "open_nodes", lambda: nodes)
    degraded = SimpleNamespace(
        cause="rail roceP2p1s0f0 carries 13 Gb/s", fix="power-cycle the worker", severity="error"
    )
    reports = iter([[degraded], [degraded], [degraded], []])

    def measured(nodes, params):
        findings = next(reports)
        return SimpleNamespace(findings=findings, to_json=lambda: {"measured": True, "findings": len(findings)})

    monkeypatch.setattr(link_check, "measure_link", measured)
    for _ in range(4):
        watcher.link_due(None, own_tokens=0.0, after_remedy=True)
    watcher.pager.flush(10)
    found = lane_incidents(tmp_path)
    assert [(i["cause"], i["state"], len(i["pages"])) for i in found] == [(wp.LINK_DEGRADED, "closed", 1)]
    assert [json.loads(line)["event"] for line in pages.read_text().splitlines()] == ["link"]
