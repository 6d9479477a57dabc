"""A week of faults on the twin, compressed, with and without `lanebook watch`: how soon each fault is seen, how soon
a client is served again, what the watch chose and paged, what a client saw, and what the watch costs the lane.
Every figure is a TWIN figure (a fast twin on loopback), never a real lane's.

    unshare -n sh -c 'ip link set lo up && LANEBOOK_TWIN_DIR=/tmp/twin-watch-week \\
        exec .venv/bin/python benchmarks/watch_week.py [--seed N] [--week-min M] [--quiet-week-share F]'

About 32 minutes on a 2-core machine: the watched week (~26 min: each relaunch of the twin lane takes its ~40 s of
real time, which no compression shortens), then the same week's first part with no watcher. It needs a network
namespace and a twin dir of its own (the twin binds fixed loopback addresses): it refuses to run without
LANEBOOK_TWIN_DIR. It starts the twin (`twin up --fast`), launches lane `twin`, and leaves the twin down.

The week: faults of ten kinds at seeded random times over `--week-min` minutes of real time (a week compressed by
7 d / that), injected one episode at a time (a fault whose time comes before the last episode ended waits for it, and
a fault a relaunch fixes also waits until no restart is inside the policy's window, so every episode meets the policy
afresh; the waits are printed): head and worker reboots (`twin.control.reboot`), the engine dying while serving,
a rank hang and the head dying mid-TP (the twin server's POST /twin/inject), sticky memory met by the restart
(twin fault sticky-uma, then an engine death), a worker that does not answer SSH (lane fault worker-unreachable), a
degraded rail (the ConnectX-7 boot fault on the worker's second rail), a slow speed regression (every engine step
slower, growing over a minute) and a full head disk (node condition disk-full). For the four a relaunch cannot fix,
this script plays the operator: after the page (or a timeout) it takes the fault away (the rail's fault cleared as a
power cycle would; the regression's slowdown taken back as a revert would). The last episode is one that restarts
cannot fix (a shard lost from the worker's weights, then an engine death): the policy rolls back to `twin-1m6`.

The watch runs as `lanebook watch` on a copy of params/twin.yaml under a temporary dir (params/ is never edited) with
the week's cadence: the probe interval stays in real seconds (`--interval`, a round itself takes a fraction of a
second), `speed_every` (6 h) and `link_every` (1 d) are compressed with the week, the restart window is real seconds
long enough for two failed relaunches. An independent client (a thread of this process, its own HTTP connection)
sends small chats in spells with idle gaps between them (so a speed wave has idle rounds to run in), bounded by the
week's end. Results: a table and outputs/bench/watch_week-STAMP.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
LANE = "twin"
WEEK_S = 7 * 86400.0
SPEED_EVERY_WEEK_S = 6 * 3600.0  # the watch's default cadences (WatchParams), compressed with the week
LINK_EVERY_WEEK_S = 86400.0
OPERATOR_S = 5.0  # how long after the page the operator takes an unfixable fault away (real seconds)
CLIENT_MAX_TOKENS = 8
CLIENT_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Kind:
    name: str
    fixable: bool  # a relaunch serves the lane again
    cause: str  # the cause the watch should name (verify.watch_probe's words)
    what: str


KINDS = [
    Kind("head-reboot", True, "engine down", "the head node reboots"),
    Kind("worker-reboot", True, "engine down", "the worker node reboots"),
    Kind("engine-dies", True, "engine down", "the engine core dies while serving (/health 503)"),
    Kind("rank-hang", True, "not served", "a rank wedges: /health 200, no token moves"),
    Kind("orphaned-worker", True, "orphaned worker", "the head's rank dies mid-TP, the worker's left running"),
    Kind("sticky-memory", True, "engine down", "the engine dies and its stop leaves ~12 GiB held (sticky UMA)"),
    Kind("worker-unreachable", False, "node unreachable", "the worker's sshd does not answer"),
    Kind("link-degraded", False, "link degraded", "the worker's second RoCE rail carries ~13 Gb/s"),
    Kind("speed-regression", False, "speed regression", "every engine step slower, growing over a minute"),
    Kind("disk-full", False, "disk full", "the head's disk has 2 GiB left"),
]
ROLLBACK = Kind("restarts-run-out", True, "engine down", "a shard lost on the worker, then the engine dies")
BY_NAME = {k.name: k for k in KINDS + [ROLLBACK]}


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


# --- the twin, driven as an operator and a fault injector would ------------------------------------------------------


def lanebook(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run([str(BIN / "lanebook"), *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise SystemExit(f"lanebook {' '.join(args)} failed ({done.returncode}): {(done.stdout + done.stderr)[-800:]}")
    return done


def api_root(params) -> str:
    return params.api.rstrip("/").removesuffix("/v1")


def inject_http(params, body: dict) -> Optional[str]:
    """POST /twin/inject; None when injected, else why not (the lane was not serving)."""
    try:
        response = httpx.post(f"{api_root(params)}/twin/inject", json=body, timeout=5.0)
    except httpx.HTTPError as exc:
        return f"not injected: {type(exc).__name__} (the lane was not serving)"
    return None if response.status_code == 200 else f"not injected: HTTP {response.status_code}"


def set_twin_fault(name: str, on: bool) -> None:
    """A twin-wide fault (in the twin's state) switched while it runs: sticky-uma acts at the next container stop."""
    from lanebook.twin import control
    from lanebook.twin.nodes import read_state, write_state

    lay = control.layout()
    with control._twin_lock(lay, "nodes"):
        state = read_state(lay)
        faults = [f for f in state.get("faults", []) if f != name] + ([name] if on else [])
        write_state(lay, {**state, "faults": faults})


def set_rail(degraded: bool) -> None:
    from lanebook.twin import control
    from lanebook.twin.standins.base import read_json, write_json
    from lanebook.twin.standins.machine import NodeMachine

    machine = NodeMachine(control.layout().node("worker"))
    if degraded:
        machine.degrade_rail(control.DEGRADED_RAIL, control.DEGRADED_RAIL_GBPS)
    else:  # what the documented recovery (a power cycle of the worker) leaves: the rail at full rate
        found = read_json(machine.rdma_file, {})
        write_json(machine.rdma_file, {**found, "degraded": {}})


def cut_worker_ssh() -> None:
    """The worker stops answering SSH: its sshd stopped (lane fault worker-unreachable) and its open sessions cut, as
    a hung node or a lost network drops them (the watch keeps its connections open between rounds)."""
    from lanebook.twin import control
    from lanebook.twin.nodes import read_state

    pid = read_state(control.layout()).get("pids", {}).get("worker")
    sessions = control._descendants(int(pid), control._process_table()) if pid else set()
    control.set_lane_faults(LANE, ["worker-unreachable"])
    control._kill(sessions, signal.SIGKILL)


def inject(kind: str, params) -> Optional[str]:
    """Put the fault in; None when it went in, else why not."""
    from lanebook.twin import control

    if kind == "head-reboot":
        control.reboot("head")
    elif kind == "worker-reboot":
        control.reboot("worker")
    elif kind == "engine-dies":
        return inject_http(params, {"fault": "engine-dies"})
    elif kind == "rank-hang":
        return inject_http(params, {"fault": "tp-hang"})
    elif kind == "orphaned-worker":
        return inject_http(params, {"fault": "head-dies"})
    elif kind == "sticky-memory":
        set_twin_fault("sticky-uma", True)
        return inject_http(params, {"fault": "engine-dies"})
    elif kind == "worker-unreachable":
        cut_worker_ssh()
    elif kind == "link-degraded":
        set_rail(True)
    elif kind == "speed-regression":
        return inject_http(params, {"slowdown": {"to": 1.5, "over_s": 60}})
    elif kind == "disk-full":
        control.set_node_conditions("head", ["disk-full"])
    elif kind == "restarts-run-out":
        control.set_lane_faults(LANE, ["missing-shard"])
        return inject_http(params, {"fault": "engine-dies"})
    return None


def take_away(kind: str, params) -> None:
    """The operator's fix of a fault a relaunch cannot fix (and the twin-wide sticky-uma, after its episode)."""
    from lanebook.twin import control

    if kind == "worker-unreachable":
        control.set_lane_faults(LANE, [])
    elif kind == "link-degraded":
        set_rail(False)
    elif kind == "speed-regression":
        inject_http(params, {"slowdown": None})
    elif kind == "disk-full":
        control.set_node_conditions("head", [])
    elif kind == "sticky-memory":
        set_twin_fault("sticky-uma", False)


# --- the independent client -----------------------------------------------------------------------------------------


class Client(threading.Thread):
    """Small chats in spells (a request, a short pause, the next) with idle gaps, from its own connection, until the
    deadline or stop(); every request recorded as it saw it."""

    def __init__(self, params, *, seed: int, deadline: float):
        super().__init__(name="week-client", daemon=True)
        self.params, self.deadline = params, deadline
        self.rng = random.Random(seed)
        self.seen: list[dict] = []
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        url = self.params.api.rstrip("/") + "/chat/completions"
        body = {**self.params.request, "model": self.params.served_model_name, "max_tokens": CLIENT_MAX_TOKENS}
        n = 0
        with httpx.Client(timeout=CLIENT_TIMEOUT_S) as client:
            while not self._halt.is_set() and time.time() < self.deadline:
                spell_end = time.time() + self.rng.uniform(6, 15)
                while not self._halt.is_set() and time.time() < min(spell_end, self.deadline):
                    n += 1
                    started = time.time()
                    entry = {"start": started, "ok": False, "tokens": 0}
                    try:
                        response = client.post(
                            url, json={**body, "messages": [{"role": "user", "content": f"client note {n}: ack"}]}
                        )
                        data = response.json() if response.status_code == 200 else None
                        entry["ok"] = bool(data and data.get("choices"))
                        entry["tokens"] = int(((data or {}).get("usage") or {}).get("completion_tokens") or 0)
                        entry["why"] = None if entry["ok"] else f"HTTP {response.status_code}"
                    except (httpx.HTTPError, ValueError) as exc:
                        entry["why"] = type(exc).__name__
                    entry["end"] = time.time()
                    self.seen.append(entry)
                    self._halt.wait(self.rng.uniform(0.3, 1.0) if entry["ok"] else 1.0)
                self._halt.wait(self.rng.uniform(10, 20))  # idle: nobody asks anything


def availability(seen: list[dict], since: float = 0.0, until: float = float("inf")) -> Optional[float]:
    asked = [r for r in seen if since <= r["start"] < until]
    return sum(r["ok"] for r in asked) / len(asked) if asked else None


def client_back(seen: list[dict], after: float) -> Optional[float]:
    """When the client was served again after its last failure following AFTER (its first request if none failed)."""
    later = sorted((r for r in seen if r["start"] >= after), key=lambda r: r["start"])
    failed = [r for r in later if not r["ok"]]
    if not failed:
        return None
    ok_after = [r for r in later if r["ok"] and r["start"] > failed[-1]["start"]]
    return ok_after[0]["end"] if ok_after else None


# --- the watch's files ---------------------------------------------------------------------------------------------


def read_lines(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except OSError:
        return []


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


class WatchFiles:
    def __init__(self, outputs: Path):
        self.dir = outputs / "watch" / LANE

    def state(self) -> dict:
        return read_json(self.dir / "state.json")

    def incidents(self) -> list[dict]:
        folder = self.dir / "incidents"
        found = [read_json(p) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []
        return sorted((i for i in found if i), key=lambda i: i.get("detected_at") or 0)

    def probes(self) -> list[dict]:
        return read_lines(self.dir / "probes.jsonl")

    def speed(self) -> list[dict]:
        return read_lines(self.dir / "speed.jsonl")

    def pages(self) -> list[dict]:
        return read_lines(self.dir / "pages.jsonl")

    def link(self) -> list[dict]:
        return read_lines(self.dir / "link.jsonl")


WATCHER: list[subprocess.Popen] = []  # the running watcher: a wait ends at once when it has exited


class WatcherExited(Exception):
    pass


def wait_until(check, timeout_s: float, poll_s: float = 0.5):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if WATCHER and WATCHER[0].poll() is not None:
            raise WatcherExited(f"the watcher exited ({WATCHER[0].returncode})")
        found = check()
        if found:
            return found
        time.sleep(poll_s)
    return None


# --- the weeks ------------------------------------------------------------------------------------------------------


@dataclass
class Episode:
    kind: str
    planned_t: float  # seconds into the week
    injected_at: float = 0.0
    waited_s: float = 0.0
    not_injected: Optional[str] = None
    taken_away_at: Optional[float] = None
    ended_at: float = 0.0
    incidents: list = field(default_factory=list)


def schedule(seed: int, week_s: float, counts: dict[str, int]) -> list[Episode]:
    rng = random.Random(seed)
    kinds = [name for name, n in counts.items() for _ in range(n)]
    rng.shuffle(kinds)
    times = sorted(rng.uniform(0, week_s * 0.93) for _ in kinds)
    episodes = [Episode(kind, t) for kind, t in zip(kinds, times)]
    episodes.append(Episode(ROLLBACK.name, week_s * 0.95))  # last: the watch serves the rollback lane after it
    return episodes


def write_lane(tmp: Path, *, interval_s: float, scale: float, within_s: float, pages: Path) -> Path:
    data = yaml.safe_load((REPO / "params" / f"{LANE}.yaml").read_text())
    data["watch"] = {
        "interval_s": interval_s,
        "fail_after": 2,
        "speed_every": round(SPEED_EVERY_WEEK_S / scale, 1),
        "link_every": round(LINK_EVERY_WEEK_S / scale, 1),
        "restart": {"max": 2, "within_s": int(within_s)},
        "then": "rollback",
        "backoff_s": 5,
    }
    data["page"] = {"command": f"cat >> {pages}", "min_interval_s": 30}
    path = tmp / "lane" / f"{LANE}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def fresh_lane() -> None:
    lanebook("twin", "down", check=False)
    lanebook("twin", "up", "--fast")
    launched = lanebook("run", "launch", "--lane", LANE, check=False)
    if "verdict: pass" not in launched.stdout:
        raise SystemExit(f"the twin lane did not launch: {launched.stdout[-600:]}")


def watched_week(args, tmp: Path, params, episodes: list[Episode], scale: float) -> dict:
    outputs = tmp / "outputs-watched"
    os.environ["LANEBOOK_OUTPUTS"] = str(outputs)
    pages_file = tmp / "pages.jsonl"
    lane_file = write_lane(tmp, interval_s=args.interval, scale=scale, within_s=args.restart_window, pages=pages_file)
    files = WatchFiles(outputs)
    fresh_lane()
    log = open(tmp / "watch.log", "w")
    watcher = subprocess.Popen(
        [str(BIN / "lanebook"), "watch", "--lane", str(lane_file)], stdout=log, stderr=subprocess.STDOUT
    )
    WATCHER[:] = [watcher]
    start = time.time()
    client = Client(params, seed=args.seed + 1, deadline=start + args.week_min * 60 * 3)
    client.start()
    say(f"watched week: watcher pid {watcher.pid}, client started; {len(episodes)} faults")
    try:
        wait_until(lambda: files.state().get("state") == "healthy", 60)
        for ep in episodes:
            run_episode(ep, args, params, files, start, watcher)
        time.sleep(args.interval * 3)  # the last episode's closing rounds
    except WatcherExited as exc:
        say(f"{exc}: the week stops here; its log: {(tmp / 'watch.log').read_text()[-600:]}")
    finally:
        WATCHER.clear()
        end = time.time()
        if watcher.poll() is None:
            watcher.send_signal(signal.SIGTERM)
            try:
                watcher.wait(timeout=30)
            except subprocess.TimeoutExpired:
                watcher.kill()
        log.close()
        client.stop()
        client.join(timeout=CLIENT_TIMEOUT_S + 5)
    return {
        "start": start,
        "end": end,
        "client": client.seen,
        "files": files,
        "lane_file": lane_file,
        "pages_file": pages_file,
        "outputs": outputs,
    }


def restarts_in_window(files: WatchFiles, window_s: float) -> int:
    now = time.time()
    return sum(1 for t in files.state().get("restarts", []) if now - t < window_s)


def settled(files: WatchFiles) -> bool:
    state = files.state()
    return state.get("state") == "healthy" and not state.get("open_incident")


def run_episode(ep: Episode, args, params, files: WatchFiles, start: float, watcher) -> None:
    kind = BY_NAME[ep.kind]
    due = start + ep.planned_t
    wait_until(lambda: settled(files), 300)
    if kind.fixable:
        wait_until(lambda: restarts_in_window(files, args.restart_window) == 0, args.restart_window + 5)
    wait_until(lambda: time.time() >= due, max(0.0, due - time.time()) + 1)
    ep.injected_at = time.time()
    ep.waited_s = max(0.0, ep.injected_at - due)
    before = {i["id"] for i in files.incidents()}
    say(f"{ep.kind}: injecting ({kind.what}) at week+{ep.injected_at - start:.0f} s"
        + (f", {ep.waited_s:.0f} s after its time" if ep.waited_s > 1 else ""))  # fmt: skip
    ep.not_injected = inject(ep.kind, params)
    if ep.not_injected:
        say(f"  {ep.not_injected}")

    def new_incidents() -> list[dict]:
        return [i for i in files.incidents() if i["id"] not in before]

    def paged_with(cause: str):
        sent = {p.get("incident") for p in files.pages() if p.get("ok")}
        return [i for i in new_incidents() if i.get("cause") == cause and (i.get("pages") or i["id"] in sent)]

    if kind.fixable and kind is not ROLLBACK:
        found = wait_until(lambda: [i for i in new_incidents() if i.get("closed_at")], args.episode_timeout)
        if not found:
            say("  no incident closed within the episode's time")
        take_away(ep.kind, params)
    elif kind is ROLLBACK:
        wait_until(lambda: files.state().get("serving_lane") != LANE and settled(files), args.episode_timeout * 2)
        from lanebook.twin import control

        control.set_lane_faults(LANE, [])
    else:
        timeout = {
            "link-degraded": 2 * LINK_EVERY_WEEK_S / args.scale + 60,
            "speed-regression": 8 * SPEED_EVERY_WEEK_S / args.scale + 90,
        }.get(ep.kind, 60)
        found = wait_until(lambda: paged_with(kind.cause), timeout)
        if not found:
            say(f"  not paged with {kind.cause} within {timeout:.0f} s")
        else:
            time.sleep(OPERATOR_S)
        ep.taken_away_at = time.time()
        take_away(ep.kind, params)
        if ep.kind in ("worker-unreachable", "disk-full"):
            wait_until(lambda: settled(files), 60)
    ep.ended_at = time.time()
    ep.incidents = [i["id"] for i in new_incidents()]
    say(f"  episode over after {ep.ended_at - ep.injected_at:.0f} s; incidents: {len(ep.incidents)}")


def quiet_week(args, tmp: Path, params, episodes: list[Episode]) -> dict:
    """The same week's first part with no watcher: the faults at their times, the operator taking away the four
    unfixable ones after the watched week's delay; nothing relaunches the lane."""
    os.environ["LANEBOOK_OUTPUTS"] = str(tmp / "outputs-quiet")
    fresh_lane()
    length = args.week_min * 60 * args.quiet_week_share
    part = [Episode(ep.kind, ep.planned_t) for ep in episodes if ep.planned_t < length and ep.kind != ROLLBACK.name]
    start = time.time()
    client = Client(params, seed=args.seed + 1, deadline=start + length)
    client.start()
    say(f"week with no watcher: {len(part)} faults over {length:.0f} s")
    pending: list[tuple[float, Episode]] = []
    for ep in part:
        due = start + ep.planned_t
        while time.time() < due:
            for when, other in list(pending):
                if time.time() >= when:
                    take_away(other.kind, params)
                    other.taken_away_at = time.time()
                    pending.remove((when, other))
            time.sleep(0.2)
        ep.injected_at = time.time()
        ep.not_injected = inject(ep.kind, params)
        say(f"{ep.kind}: injected at week+{ep.injected_at - start:.0f} s" + (f" ({ep.not_injected})" if
            ep.not_injected else ""))  # fmt: skip
        if not BY_NAME[ep.kind].fixable or ep.kind == "sticky-memory":
            pending.append((ep.injected_at + args.operator_delay, ep))
    while time.time() < start + length:
        time.sleep(0.5)
    for _, ep in pending:
        take_away(ep.kind, params)
    client.stop()
    client.join(timeout=CLIENT_TIMEOUT_S + 5)
    return {"start": start, "end": time.time(), "client": client.seen, "episodes": part}


# --- the figures ----------------------------------------------------------------------------------------------------


def incident_figures(ep: Episode, week: dict, interval_s: float) -> dict:
    files: WatchFiles = week["files"]
    by_id = {i["id"]: i for i in files.incidents()}
    found = [by_id[i] for i in ep.incidents if i in by_id]
    kind = BY_NAME[ep.kind]
    probes = {p["round"]: p for p in files.probes()}
    pages = [p for p in files.pages() if p.get("incident") in set(ep.incidents) and p.get("ok")]
    main = next((i for i in found if i.get("cause") == kind.cause), found[0] if found else None)
    detected = None
    if main is not None:
        opening = [p for p in probes.values() if p["t"] == main.get("detected_at")]
        detected = (main["detected_at"] + (opening[0].get("probe_s") or 0.0)) if opening else main.get("detected_at")
    remedies = [r for i in found for r in i.get("remedies", [])]
    served_again = max((i["served_again_at"] for i in found if i.get("served_again_at")), default=None)
    relaunched = [r["action"] for r in remedies if r["action"] in ("restart", "rollback")]
    causes = sorted({c["cause"] for i in found for c in i.get("causes", [{"cause": i.get("cause")}])})
    back = client_back([r for r in week["client"] if r["start"] < ep.ended_at + 30], ep.injected_at - 0.5)
    wrong = []
    if not kind.fixable and relaunched:
        wrong.append(f"relaunched ({', '.join(relaunched)}) for {kind.name}, which a relaunch cannot fix")
    if kind.fixable and main is not None and not relaunched and not served_again:
        wrong.append(f"no relaunch for {kind.name}, which a relaunch fixes, and never served again")
    if kind.fixable and kind is not ROLLBACK and any(r["action"] == "rollback" for r in remedies):
        wrong.append(f"rolled back for {kind.name} with restarts left")
    if kind.fixable:
        ok = served_again is not None and not wrong and len([a for a in relaunched if a == "restart"]) <= 2
        if kind is ROLLBACK:
            ok = ok and any(r["action"] == "rollback" and r.get("ok") for r in remedies)
        should = "served again" + (" on the rollback lane" if kind is ROLLBACK else "")
    else:
        ok = bool(main) and main.get("cause") == kind.cause and bool(pages or main.get("pages")) and not relaunched
        should = f"paged ({kind.cause}), nothing relaunched"
    expected = {kind.cause, "node unreachable"} if ep.kind in ("head-reboot", "worker-reboot") else {kind.cause}
    if kind.fixable:  # a relaunchable incident may pass through the other relaunchable causes on its way back
        expected |= {"engine down", "not served", "orphaned worker"}
    stray = [f"{i.get('cause')} ({i.get('summary', '')[:80]})" for i in found if i.get("cause") not in expected]
    return {
        "kind": ep.kind,
        "planned_s": round(ep.planned_t, 1),
        "waited_s": round(ep.waited_s, 1),
        "injected_at": round(ep.injected_at, 3),
        "not_injected": ep.not_injected,
        "incidents": len(found),
        "causes": causes,
        "detection_s": None if detected is None else round(detected - ep.injected_at, 2),
        "detection_intervals": None if detected is None else round((detected - ep.injected_at) / interval_s, 2),
        "served_again_s": None if served_again is None else round(served_again - ep.injected_at, 2),
        "client_served_again_s": None if back is None else round(back - ep.injected_at, 2),
        "remedies": [f"{r['action']}:{'ok' if r.get('ok') else 'failed'}" for r in remedies],
        "pages": sorted({p["event"] for p in pages} | {p["event"] for i in found for p in i.get("pages", [])}),
        "other_incidents": stray,
        "should": should,
        "as_it_should": bool(ok),
        "wrong": wrong,
    }


def load_figures(week: dict, interval_s: float, scale: float) -> dict:
    from lanebook.speed.bands import speed_document
    from lanebook.speed.baseline import stored_baseline

    files: WatchFiles = week["files"]
    duration = week["end"] - week["start"]
    probes = files.probes()
    waves = [s for s in files.speed() if "workload" in s]
    skipped = [s for s in files.speed() if "skipped" in s]
    probe_tokens = sum(p.get("chat_tokens") or 0 for p in probes)
    wave_tokens = sum(s["max_tokens"] for s in waves)  # at most max_tokens each (the twin gives them all)
    client_tokens = sum(r["tokens"] for r in week["client"])
    # The lane's throughput: the best wall aggregate of its stored baseline (what it was promoted at, measured).
    baseline = stored_baseline(LANE)
    document = baseline.document("probe") or baseline.documents[0]
    bands = speed_document(document, "baseline")["bands"]
    capacity = max(
        (b.get("wall_aggregate_tok_s") or {}).get("median") or 0 for b in bands if isinstance(b, dict)
    ) or max(((b.get("mean_stream_decode_tok_s") or {}).get("median") or 0) for b in bands)
    per_round = probe_tokens / max(1, len(probes))
    per_wave = wave_tokens / max(1, len(waves))
    real_rate = per_round / interval_s + per_wave / SPEED_EVERY_WEEK_S  # uncompressed waves: one each 6 h
    in_flight, overlapped = 0, 0
    for wave in waves:
        t0 = wave["t"]
        rate = wave.get("stream_decode_tok_s") or wave["band_min"] / 3  # a wave that failed ran to its bound
        t1 = t0 + 2 + wave["max_tokens"] / rate
        in_flight += any(r["start"] <= t0 < r["end"] for r in week["client"])
        overlapped += sum(1 for r in week["client"] if r["start"] < t1 and r["end"] > t0)
    return {
        "rounds": len(probes),
        "probe_tokens": probe_tokens,
        "speed_waves": len(waves),
        "speed_waves_skipped_busy": len(skipped),
        "speed_wave_tokens": wave_tokens,
        "client_tokens": client_tokens,
        "share_of_tokens_generated_in_the_compressed_week": round(
            (probe_tokens + wave_tokens) / max(1, probe_tokens + wave_tokens + client_tokens), 5
        ),
        "lane_throughput_tok_s": round(capacity, 2),
        "watch_tok_s_as_run": round((probe_tokens + wave_tokens) / duration, 4),
        "watch_tok_s_uncompressed": round(real_rate, 5),
        "share_of_lane_throughput_uncompressed": round(real_rate / capacity, 6) if capacity else None,
        "share_of_lane_throughput_as_run": round((probe_tokens + wave_tokens) / duration / capacity, 6)
        if capacity
        else None,
        "waves_started_while_a_client_request_was_in_flight": in_flight,
        "client_requests_overlapping_a_wave": overlapped,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--week-min", type=float, default=20.0, help="real minutes the week's faults spread over")
    parser.add_argument("--interval", type=float, default=4.0, help="the watch's probe interval, real seconds")
    parser.add_argument("--restart-window", type=float, default=75.0, help="restart.within_s, real seconds")
    parser.add_argument("--episode-timeout", type=float, default=180.0)
    parser.add_argument("--operator-delay", type=float, default=20.0, help="no watcher: when the operator clears")
    parser.add_argument("--quiet-week-share", type=float, default=0.25, help="the no-watcher week's share of it")
    parser.add_argument("--counts", default="", help="KIND=N,... (default: 2 of each kind, 1 regression)")
    parser.add_argument("--skip-quiet", action="store_true", help="no no-watcher week")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda signum, frame: (_ for _ in ()).throw(KeyboardInterrupt("SIGTERM")))
    if not os.environ.get("LANEBOOK_TWIN_DIR"):
        parser.error("run it in a network namespace of its own with a twin dir of its own (see the docstring)")
    counts = {k.name: 2 for k in KINDS}
    counts["speed-regression"] = 1
    for item in filter(None, args.counts.split(",")):
        name, _, n = item.partition("=")
        if name not in counts:
            parser.error(f"unknown kind {name} (known: {', '.join(counts)})")
        counts[name] = int(n)
    week_s = args.week_min * 60
    args.scale = scale = WEEK_S / week_s
    from lanebook.lane.params import load_lane

    params = load_lane(LANE)
    episodes = schedule(args.seed, week_s, counts)
    wall = time.time()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    say(
        f"TWIN figures. A week compressed x{scale:.0f} into {args.week_min:g} min: speed_every 6 h -> "
        f"{SPEED_EVERY_WEEK_S / scale:.1f} s, link_every 1 d -> {LINK_EVERY_WEEK_S / scale:.1f} s; probe interval "
        f"{args.interval:g} s real (not compressed); restart window {args.restart_window:g} s real"
    )
    with tempfile.TemporaryDirectory(prefix="lanebook-watch-week-") as tmp_name:
        tmp = Path(tmp_name)
        try:
            week = watched_week(args, tmp, params, episodes, scale)
            kept = REPO / "outputs" / "bench" / f"watch_week-{stamp}-raw"
            shutil.copytree(week["outputs"] / "watch", kept / "watch")
            shutil.copy(tmp / "watch.log", kept / "watch.log")
            (kept / "week.json").write_text(
                json.dumps(
                    {
                        "episodes": [vars(e) for e in episodes],
                        "client": week["client"],
                        "start": week["start"],
                        "end": week["end"],
                    },
                    default=str,
                )  # fmt: skip
            )
            rows = [incident_figures(ep, week, args.interval) for ep in episodes]
            load = load_figures(week, args.interval, scale)
            watch_log = (tmp / "watch.log").read_text()[-20000:]
            pages = read_lines(week["pages_file"])
            quiet = None if args.skip_quiet else quiet_week(args, tmp, params, episodes)
        finally:
            lanebook("twin", "down", check=False)
    watched_avail = availability(week["client"])
    quiet_avail = availability(quiet["client"]) if quiet else None
    kinds = {}
    for row in rows:
        kinds.setdefault(row["kind"], []).append(row)

    def median(values):
        values = [v for v in values if v is not None]
        return round(statistics.median(values), 2) if values else None

    print()
    print("TWIN figures: lanebook watch over a compressed week (fast twin, loopback)")
    print(f"{'kind':<19} {'n':>2} {'detect s':>9} {'(intervals)':>11} {'served again s':>15} {'remedies':<30} "
          f"{'pages':<34} as it should")  # fmt: skip
    for name, group in kinds.items():
        remedies = sorted({"+".join(r["remedies"]) or "none" for r in group})
        pages = sorted({",".join(r["pages"]) or "none" for r in group})
        print(
            f"{name:<19} {len(group):>2} {str(median(r['detection_s'] for r in group)):>9} "
            f"{str(median(r['detection_intervals'] for r in group)):>11} "
            f"{str(median(r['served_again_s'] for r in group)):>15} {'; '.join(remedies)[:30]:<30} "
            f"{'; '.join(pages)[:34]:<34} {sum(r['as_it_should'] for r in group)}/{len(group)}"
        )
    wrong = [w for r in rows for w in r["wrong"]]
    print()
    print(f"faults injected: {sum(not r['not_injected'] for r in rows)} of {len(rows)}, {len(kinds)} kinds; "
          f"ending as they should: {sum(r['as_it_should'] for r in rows)} of {len(rows)}; wrong remedies: "
          f"{len(wrong)}")  # fmt: skip
    for w in wrong:
        print(f"  wrong: {w}")
    for row in rows:
        for other in row["other_incidents"]:
            print(f"  an incident of another cause during {row['kind']}: {other}")
        if not row["as_it_should"]:
            print(f"  {row['kind']} at week+{row['injected_at'] - week['start']:.0f} s did not end as it should "
                  f"({row['should']}): causes {row['causes']}, remedies {row['remedies']}, pages {row['pages']}"
                  + (f"; {row['not_injected']}" if row["not_injected"] else ""))  # fmt: skip
    print(f"availability seen by the client: watched {watched_avail:.4f} ({len(week['client'])} requests over "
          f"{week['end'] - week['start']:.0f} s)" + (f"; no watcher {quiet_avail:.4f} ({len(quiet['client'])} "
          f"requests over {quiet['end'] - quiet['start']:.0f} s, the week's first {args.quiet_week_share:.0%})"
          if quiet else ""))  # fmt: skip
    uncompressed, as_run = load["share_of_lane_throughput_uncompressed"], load["share_of_lane_throughput_as_run"]
    of_generated = load["share_of_tokens_generated_in_the_compressed_week"]
    shares = (
        f"{uncompressed:.4%} of the lane's throughput ({load['lane_throughput_tok_s']} tok/s, its stored baseline) at "
        f"the uncompressed cadence, {as_run:.3%} as run (waves x{scale:.0f} denser), {of_generated:.2%} of the tokens "
        "generated in the run"
    )
    print(
        f"the watch's load: {load['rounds']} rounds ({load['probe_tokens']} tokens), {load['speed_waves']} speed "
        f"waves ({load['speed_wave_tokens']} tokens, {load['speed_waves_skipped_busy']} skips said); {shares}"
    )
    print(f"speed waves started while a client request was in flight: "
          f"{load['waves_started_while_a_client_request_was_in_flight']}; client requests that arrived during a "
          f"wave: {load['client_requests_overlapping_a_wave']}")  # fmt: skip
    took = time.time() - wall
    print(f"wall time {took / 60:.1f} min")
    result = {
        "twin": True,
        "note": "TWIN figures (a fast twin on loopback), never a real lane's",
        "command": "benchmarks/watch_week.py " + " ".join(sys.argv[1:]),
        "seed": args.seed,
        "week_min": args.week_min,
        "scale": round(scale, 1),
        "cadence": {
            "interval_s": args.interval,
            "speed_every_s": round(SPEED_EVERY_WEEK_S / scale, 1),
            "link_every_s": round(LINK_EVERY_WEEK_S / scale, 1),
            "restart_window_s": args.restart_window,
        },
        "episodes": rows,
        "availability": {
            "watched": watched_avail,
            "watched_requests": len(week["client"]),
            "watched_s": round(week["end"] - week["start"], 1),
            "no_watcher": quiet_avail,
            "no_watcher_requests": len(quiet["client"]) if quiet else None,
            "no_watcher_s": round(quiet["end"] - quiet["start"], 1) if quiet else None,
            "no_watcher_faults": [
                {"kind": e.kind, "at_s": round(e.injected_at - quiet["start"], 1), "not_injected": e.not_injected}
                for e in quiet["episodes"]
            ]
            if quiet
            else None,
        },
        "wrong_remedies": wrong,
        "load": load,
        "pages_received": len(pages),
        "wall_s": round(took, 1),
        "watch_log_tail": watch_log[-4000:],
    }
    out = REPO / "outputs" / "bench" / f"watch_week-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"result: {out.relative_to(REPO)}")
    return 0 if not wrong and all(r["as_it_should"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
