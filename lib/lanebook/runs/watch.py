"""`lanebook watch`: keep a promoted lane served. One process per lane probes it every interval
(verify.watch_probe), opens an incident after `watch.fail_after` failed rounds in a row, has the doctor read the lane
(read-only) to name the cause, and repairs within the lane file's bounds (`decide`, pure): what a relaunch cannot fix
(a node not answering, a full disk, a degraded link, a speed regression) is paged, never relaunched; otherwise a
restart (stop where any of the lane's containers run, launch, gates: recorded runs carrying `incident_id`) at most
`restart.max` within `restart.within_s`, after a doubling back-off, then `then: rollback` (once; the watch then
follows the rollback lane) or `then: page`. A remedy holds the lane-pair lock; while another run holds it the watch
waits and says so. An incident closes only on a healthy round (a client served). Every `speed_every` one C1 probe
wave against the stored band, never while clients are served; every `link_every` and after each remedy the link
(verify.link, where this build has it). The files under outputs/watch/LANE/ and their formats: FILES below.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, TextIO

from lanebook.base.errors import LanebookError
from lanebook.base.files import record_id, utc_stamp, write_atomic
from lanebook.base.paths import outputs_dir
from lanebook.base.redact import redact, redact_data
from lanebook.lane.keys import lane_keys
from lanebook.lane.params import LaneParams, WatchParams, load_lane
from lanebook.nodes.http import direct_client
from lanebook.nodes.ssh import LaneNodes
from lanebook.runs.pager import Pager, webhook_url
from lanebook.verify import watch_probe as wp

FILES = """On disk, under outputs/watch/LANE/ (LANE: the watched lane's name), every file written by this process only:

  probes.jsonl    one compact JSON object per round, oldest first:
                  t (epoch s), round, lane (the lane probed: the rollback lane after a rollback), health (HTTP status
                  of /health or null), models (bool: /v1/models lists the served model), chat (bool: the one-token
                  chat answered), chat_s, chat_tokens, metrics ({running, waiting, kv_usage, prompt_tokens,
                  generation_tokens}, each a number or null; null when /metrics did not answer), ssh ({alias: bool}),
                  containers ({alias: [the lane's container names]}), disk_free_kib ({alias: KiB or null}), state
                  (up, down, orphaned worker, head without its workers; null when a node did not answer), errors
                  ([str]), probe_s, served (bool), healthy (bool), cause (null or one of verify.watch_probe's causes),
                  failures ([str]), incident (the open incident's id or null)
  incidents/ID.json  one JSON object per incident, rewritten atomically as it moves on:
                  id, lane, state (open, repairing, waiting, needs operator, closed), cause (the latest), causes
                  ([{t, cause}] as they changed), summary (one line), first_failed_at (t of the first failed round),
                  detected_at (t it opened), detection_rounds, interval_s, doctor ({confirmed: [{id, title, cause,
                  fix, runbook}], suspected: [ids], not_read: [str]} or {error}), probes ([{t, round, cause,
                  failures}], the failed rounds, at most 50), remedies ([{action, t, finished_at, ok, why, runs:
                  [{runbook, run_id, lane, verdict, failed_step}]}]), runs ([run ids]), waits ([{t, why}], at most
                  50), pages ([{t, event}]), repaired_at (t the last remedy passed, or null), served_again_at,
                  closed_at (both t of the healthy round that closed it, or null). A speed regression or a degraded
                  link is an incident of its own, paged once and never repaired, closed by a wave within the band or a
                  healthy link measurement: id, lane, state (paged, closed), cause (speed regression, link degraded),
                  summary, detected_at, closed_at, pages, and for the link findings ([{cause, fix}])
  speed.jsonl     one object per speed attempt: t, and either skipped (why) or workload, concurrency, max_tokens,
                  stream_decode_tok_s, band_min, band_median, band_trials, below (bool), errors; plus regression
                  (bool) and why (the test's verdict)
  link.jsonl      one object per link attempt: t, measured (bool), why (when nothing ran), report (verify.link's
                  LinkReport.to_json() without its thresholds), findings ([{cause, fix, severity}]: the errors, paged)
  pages.jsonl     one object per page attempt: t, event, incident, to (command or webhook), attempt, ok, why
  state.json      the watcher's state: lane, serving_lane, pid, host, started_at, updated_at, interval_s, state
                  (healthy, failing, incident, repairing, waiting for the lock, needs operator, stopped), rounds,
                  consecutive_failures, open_incident, restarts ([t]), backoff_until, last_speed_t, last_link_t,
                  regression_incident, link_incident (the open paged incidents' ids, or null),
                  last_probe (the last probes.jsonl object)
  watch.lock      held (flock) by the running watcher: a second watcher of the lane is refused

No API key, token or webhook URL is in any of them (every object is redacted before it is written).
"""

KEPT = 50  # probes and waits an incident keeps (the series keeps every round)
BACKOFF_CAP_S = 3600.0
SPEED_WORKLOAD = "probe"


def watch_dir(lane_name: str) -> Path:
    return outputs_dir() / "watch" / lane_name


def _line(obj: dict) -> str:
    return json.dumps(redact_data(obj), separators=(",", ":"), sort_keys=True) + "\n"


def _append(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as out:
        out.write(_line(obj))


def _write_json(path: Path, obj: dict) -> None:
    write_atomic(path, json.dumps(redact_data(obj), indent=1, sort_keys=True) + "\n")


# --- policy (pure) ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """What the watch does about an open incident this round: restart, rollback, page (and wait), or wait."""

    action: str  # restart | rollback | page | wait
    why: str


def recent(restarts: list[float], now: float, within_s: float) -> list[float]:
    return [t for t in restarts if now - t < within_s]


def backoff_s(policy: WatchParams, remedies: int) -> float:
    """The wait after the REMEDIES-th remedy of an incident: backoff_s, doubled after each, at most an hour."""
    return min(policy.backoff_s * 2 ** max(remedies - 1, 0), BACKOFF_CAP_S)


def decide(
    cause: str,
    *,
    now: float,
    policy: WatchParams,
    restarts: list[float],
    backoff_until: float,
    rolled_back: bool,
    can_roll_back: bool,
) -> Decision:
    """The lane's policy applied to an open incident's current cause (module docstring)."""
    if not wp.relaunch_can_fix(cause):
        return Decision("page", f"{cause}: a relaunch cannot fix it; paged, nothing relaunched")
    if now < backoff_until:
        return Decision("wait", f"backing off for {backoff_until - now:.0f} s more after the last remedy")
    done = recent(restarts, now, policy.restart.within_s)
    if len(done) < policy.restart.max:
        return Decision("restart", f"restart {len(done) + 1} of at most {policy.restart.max} within "
                        f"{policy.restart.within_s} s")  # fmt: skip
    if policy.then == "rollback" and can_roll_back and not rolled_back:
        return Decision("rollback", f"{len(done)} restarts within {policy.restart.within_s} s did not serve it again: "
                        "rolling back, as the lane file says")  # fmt: skip
    return Decision(
        "page",
        f"{len(done)} restarts within {policy.restart.within_s} s did not serve it again"
        + (" and the rollback was done" if rolled_back else "")
        + ": the operator is needed",
    )


# --- the watcher ------------------------------------------------------------------------------------------------


class AlreadyWatched(LanebookError):
    """A second watcher of a lane: refused before anything runs."""


def _holder(path: Path) -> str:
    try:
        data = json.loads(path.read_text())
        return f"pid {data.get('pid')} on {data.get('host')} since {data.get('since')}"
    except (OSError, ValueError):
        return "another process"


class Watcher:
    """Watches one lane (module docstring). `clock`/`sleep` are time.time/time.sleep but for tests."""

    def __init__(
        self,
        params: LaneParams,
        *,
        interval_s: Optional[float] = None,
        page_command: Optional[str] = None,
        echo: Optional[TextIO] = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.lane = params  # the lane watched: its name names the folder
        self.serving = params  # the lane probed: the rollback lane after a rollback
        self.policy = params.watch
        self.interval_s = float(interval_s if interval_s is not None else self.policy.interval_s)
        if self.interval_s <= 0:
            raise LanebookError(f"--interval must be positive seconds, got {interval_s!r}")
        lane_keys(params)  # a keyed lane's keys read first, and redacted from everything written
        url = webhook_url(params.page, where=f"lane {params.name}")
        self.echo = echo if echo is not None else sys.stdout
        self.clock, self.sleep = clock, sleep
        self.dir = watch_dir(params.name)
        self.pager = Pager(
            params, command=page_command or params.page.command, url=url, log=lambda e: _append(self.file("pages"), e)
        )
        self.nodes: Optional[LaneNodes] = None
        self.state: dict = {}
        self.incident: Optional[dict] = None
        self.previous: Optional[dict] = None
        self.own_tokens = 0.0  # tokens the watch's own speed wave generated since the last round
        self.stopping = ""  # the signal that asked the watch to stop, once one has
        self._lock_fd: Optional[int] = None

    # --- files ---
    def file(self, name: str) -> Path:
        return self.dir / {"pages": "pages.jsonl", "probes": "probes.jsonl", "speed": "speed.jsonl",
                           "link": "link.jsonl", "state": "state.json", "lock": "watch.lock"}[name]  # fmt: skip

    def incident_path(self, incident_id: str) -> Path:
        return self.dir / "incidents" / f"{incident_id}.json"

    def say(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S", time.gmtime(self.clock()))
        print(redact(f"watch {self.lane.name} {stamp}: {text}"), file=self.echo, flush=True)

    # --- one watcher per lane ---
    def claim(self) -> None:
        """Take the lane's watch lock, or refuse in one line (AlreadyWatched)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.file("lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise AlreadyWatched(
                f"lane {self.lane.name} is already watched by {_holder(path)}: one watcher per lane "
                f"(`lanebook watch status --lane {self.lane.name}`)"
            ) from None
        os.ftruncate(fd, 0)
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": since}).encode())
        self._lock_fd = fd

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # --- state ---
    def load_state(self) -> None:
        try:
            self.state = json.loads(self.file("state").read_text())
        except (OSError, ValueError):
            self.state = {}
        self.state.update(
            lane=self.lane.name,
            pid=os.getpid(),
            host=socket.gethostname(),
            started_at=round(self.clock(), 3),
            interval_s=self.interval_s,
        )
        self.state.setdefault("rounds", 0)
        self.state.setdefault("consecutive_failures", 0)
        self.state.setdefault("restarts", [])
        self.state.setdefault("backoff_until", 0.0)
        self.state.setdefault("last_speed_t", None)
        self.state.setdefault("last_link_t", None)
        serving = self.state.get("serving_lane")
        if serving and serving != self.lane.name:
            self.serving = load_lane(serving)
        self.state["serving_lane"] = self.serving.name
        opened = self.state.get("open_incident")
        if opened:
            try:
                self.incident = json.loads(self.incident_path(opened).read_text())
            except (OSError, ValueError):
                self.state["open_incident"] = None

    def save_state(self, state: Optional[str] = None) -> None:
        if state:
            self.state["state"] = state
        self.state["updated_at"] = round(self.clock(), 3)
        _write_json(self.file("state"), self.state)

    def save_incident(self) -> None:
        if self.incident is not None:
            _write_json(self.incident_path(self.incident["id"]), self.incident)

    # --- the loop ---
    def open_nodes(self) -> LaneNodes:
        if self.nodes is None or self.nodes.params is not self.serving:
            if self.nodes is not None:
                self.nodes.close()
            self.nodes = LaneNodes(self.serving)
        return self.nodes

    def probe(self) -> dict:
        self.state["rounds"] += 1
        with direct_client() as client:
            record = wp.probe_round(
                self.open_nodes(),
                client,
                number=self.state["rounds"],
                now=self.clock(),
                timeout_s=wp.round_timeout_s(self.interval_s),
            )
        record["incident"] = self.incident["id"] if self.incident else None
        _append(self.file("probes"), record)
        self.state["last_probe"] = record
        return record

    def once(self) -> int:
        """One round, recorded; 0 healthy, 1 not. Nothing is repaired."""
        self.claim()
        try:
            self.load_state()
            record = self.probe()
            self.say(wp.detail(record))
            self.save_state("healthy" if record["healthy"] else "failing")
            return 0 if record["healthy"] else 1
        finally:
            self.close()

    def run(self, *, rounds: Optional[int] = None) -> int:
        """Probe every interval until stopped (SIGTERM or SIGINT: state `stopped`, exit 0); ROUNDS: stop after so
        many (tests). A stop is raised where the watch is and also remembered: one that a library swallowed on the
        way up still ends the watch before its next round."""
        self.claim()
        handled = (signal.SIGTERM, signal.SIGINT)
        previous = {signum: signal.getsignal(signum) for signum in handled}
        if threading_main():
            for signum in handled:
                signal.signal(signum, self._stop)
        try:
            self.load_state()
            self.say(
                f"watching {self.serving.name} every {self.interval_s:g} s (fail after {self.policy.fail_after}, "
                f"restart at most {self.policy.restart.max} within {self.policy.restart.within_s} s, then "
                f"{self.policy.then}; pages to {', '.join(self.pager.targets) or 'nowhere'})"
            )
            done = 0
            while (rounds is None or done < rounds) and not self.stopping:
                started = time.monotonic()
                self.round()
                done += 1
                if (rounds is not None and done >= rounds) or self.stopping:
                    break
                self.sleep(max(0.0, self.interval_s - (time.monotonic() - started)))
            if self.stopping:
                self.say("stopped")
            return 0
        except KeyboardInterrupt:
            self.say("stopped")
            return 0
        finally:
            self.save_state("stopped")
            if threading_main():
                for signum, handler in previous.items():
                    signal.signal(signum, handler)
            self.pager.flush(timeout_s=10.0)
            self.close()

    def _stop(self, signum, frame):
        self.stopping = signal.Signals(signum).name
        raise KeyboardInterrupt(self.stopping)

    def close(self) -> None:
        if self.nodes is not None:
            self.nodes.close()
            self.nodes = None
        self.release()

    def round(self) -> dict:
        record = self.probe()
        own = record.get("chat_tokens", 0) + self.own_tokens
        self.own_tokens = 0.0
        if record["healthy"]:
            self.healthy(record)
        else:
            self.failed(record)
        if record["healthy"] and self.incident is None:
            self.speed_due(record, own_tokens=own)
            self.link_due(record, own_tokens=own)
        self.previous = record
        self.save_state()
        return record

    # --- incidents ---
    def healthy(self, record: dict) -> None:
        if self.state["consecutive_failures"]:
            self.say("served again" if self.incident else f"healthy again ({wp.detail(record)})")
        self.state["consecutive_failures"] = 0
        self.state.pop("first_failed_at", None)
        self.state.pop("failed_rounds", None)
        if self.incident is not None:
            now = record["t"]
            self.incident.update(state="closed", served_again_at=now, closed_at=now)
            self.say(
                f"incident {self.incident['id']} closed: served again {now - self.incident['first_failed_at']:.1f} s "
                f"after the first failed round ({self.incident['cause']})"
            )
            self.page("served-again")
            self.save_incident()
            self.incident = None
            self.state["open_incident"] = None
        self.state["state"] = "healthy"

    def failed(self, record: dict) -> None:
        self.state["consecutive_failures"] += 1
        self.state.setdefault("first_failed_at", record["t"])
        failed_rounds = self.state.setdefault("failed_rounds", [])
        failed_rounds.append(_probe_summary(record))
        del failed_rounds[:-KEPT]
        if self.incident is None:
            if self.state["consecutive_failures"] < self.policy.fail_after:
                self.say(f"round failed ({self.state['consecutive_failures']} of {self.policy.fail_after}): "
                         f"{wp.detail(record)}")  # fmt: skip
                self.state["state"] = "failing"
                return
            self.open_incident(record)
        else:
            self.incident["probes"] = (self.incident["probes"] + [_probe_summary(record)])[-KEPT:]
            if record["cause"] != self.incident["cause"]:
                self.incident["cause"] = record["cause"]
                self.incident["causes"].append({"t": record["t"], "cause": record["cause"]})
                self.incident["summary"] = wp.detail(record)
                self.say(f"incident {self.incident['id']}: the cause is now {record['cause']}")
        self.act(record)
        self.save_incident()

    def open_incident(self, record: dict) -> None:
        now = record["t"]
        first = self.state.get("first_failed_at", now)
        self.incident = {
            "id": f"{utc_stamp()}-{record_id()}",
            "lane": self.serving.name,
            "state": "open",
            "cause": record["cause"],
            "causes": [{"t": now, "cause": record["cause"]}],
            "summary": wp.detail(record),
            "first_failed_at": first,
            "detected_at": now,
            "detection_rounds": self.state["consecutive_failures"],
            "interval_s": self.interval_s,
            "doctor": None,
            "probes": list(self.state.get("failed_rounds", [])),
            "remedies": [],
            "runs": [],
            "waits": [],
            "pages": [],
            "repaired_at": None,
            "served_again_at": None,
            "closed_at": None,
        }
        self.state["open_incident"] = self.incident["id"]
        self.state["state"] = "incident"
        self.say(f"incident {self.incident['id']} opened: {self.incident['summary']}")
        self.incident["doctor"] = self.doctor()
        named = [f["title"] for f in self.incident["doctor"].get("confirmed", [])]
        if named:
            self.incident["summary"] += f" (doctor: {'; '.join(named[:3])})"
            self.say(f"doctor: {'; '.join(named[:3])}")
        self.save_incident()
        self.page("opened")

    def doctor(self) -> dict:
        """What the doctor reads on the lane (read-only, no lock), kept short: confirmed findings, suspected ids,
        what it could not read."""
        from lanebook.verify.doctor_gather import gather

        try:
            nodes = self.open_nodes()
            gathered = gather(nodes)
            nodes.executor.history.clear()
            diagnosis = gathered.diagnosis()
        except Exception as exc:  # noqa: BLE001 - the doctor failing never stops the watch
            return {"error": redact(f"{type(exc).__name__}: {exc}")[:300]}
        return {
            "confirmed": [
                {"id": f.id, "title": f.title, "cause": f.cause, "fix": f.fix, "runbook": f.runbook}
                for f in diagnosis.confirmed
            ],
            "suspected": [f.id for f in diagnosis.findings if f.confidence != "confirmed"][:10],
            "not_read": gathered.not_read[:10],
        }

    def wait(self, why: str) -> None:
        self.incident["waits"] = (self.incident["waits"] + [{"t": round(self.clock(), 3), "why": why}])[-KEPT:]
        self.say(why)

    def page(self, event: str, note: str = "") -> None:
        if self.incident is not None and self.pager.page(self.incident, event, note=note):
            self.incident["pages"].append({"t": round(self.clock(), 3), "event": event})

    def act(self, record: dict) -> None:
        decision = decide(
            self.incident["cause"],
            now=self.clock(),
            policy=self.policy,
            restarts=self.state["restarts"],
            backoff_until=self.state["backoff_until"],
            rolled_back=any(r["action"] == "rollback" for r in self.incident["remedies"]),
            can_roll_back=bool(self.lane.rollback) and self.serving is self.lane,
        )
        if decision.action == "wait":
            self.incident["state"] = "waiting"
            self.state["state"] = "incident"
            return
        if decision.action == "page":
            needs = wp.relaunch_can_fix(self.incident["cause"])
            self.incident["state"] = "needs operator" if needs else "waiting"
            self.state["state"] = "needs operator" if needs else "incident"
            if not self.incident.get("paged_why") == decision.why:
                self.incident["paged_why"] = decision.why
                self.say(decision.why)
            self.page("needs-operator", note=decision.why)
            return
        self.remedy(decision, record)

    def remedy(self, decision: Decision, record: dict) -> None:
        from lanebook.runs.lock import LockRefused, lane_pair_lock

        incident_id = self.incident["id"]
        entry = {"action": decision.action, "t": round(self.clock(), 3), "why": decision.why, "runs": [], "ok": False}
        try:
            with lane_pair_lock(self.serving, "watch", incident_id):
                self.incident.pop("waiting_for_lock", None)
                self.incident["state"] = self.state["state"] = "repairing"
                self.save_incident()
                self.save_state()
                self.say(f"incident {incident_id}: {decision.why}")
                if decision.action == "restart":
                    entry["ok"] = self.restart(entry, record)
                else:
                    entry["ok"] = self.roll_back(entry)
        except LockRefused as exc:
            self.incident["state"], self.state["state"] = "waiting", "waiting for the lock"
            if not self.incident.get("waiting_for_lock"):  # said once a wait, not every round of it
                self.incident["waiting_for_lock"] = True
                self.wait(f"incident {incident_id}: {decision.action} waits for the lane pair: {exc}")
            return
        entry["finished_at"] = round(self.clock(), 3)
        self.incident["remedies"].append(entry)
        self.incident["runs"] += [r["run_id"] for r in entry["runs"]]
        if decision.action == "restart":
            self.state["restarts"] = recent(self.state["restarts"], self.clock(), self.policy.restart.within_s) + [
                entry["t"]
            ]
        self.state["backoff_until"] = self.clock() + backoff_s(self.policy, len(self.incident["remedies"]))
        self.incident["state"] = "open"
        if entry["ok"]:
            self.incident["repaired_at"] = entry["finished_at"]
            self.say(f"incident {incident_id}: {decision.action} passed; waiting for a client to be served")
            self.page("repaired")
            self.link_due(None, own_tokens=0.0, after_remedy=True)
        else:
            failed = next((r for r in entry["runs"] if r["verdict"] != "pass"), None)
            self.say(
                f"incident {incident_id}: {decision.action} did not pass"
                + (f" ({failed['runbook']}: {failed['verdict']} at {failed['failed_step']})" if failed else "")
            )

    def _run(self, entry: dict, runbook: str, params: LaneParams) -> bool:
        from lanebook.runs.execute import run_runbook

        link = {"incident_id": self.incident["id"], "watch": self.lane.name}
        try:
            record = run_runbook(runbook, params, {}, yes=True, link=link)
        except LanebookError as exc:
            entry["runs"].append({"runbook": runbook, "run_id": None, "lane": params.name, "verdict": "error",
                                  "failed_step": redact(str(exc))[:200]})  # fmt: skip
            return False
        entry["runs"].append(
            {
                "runbook": runbook,
                "run_id": record["run_id"],
                "lane": params.name,
                "verdict": record["verdict"],
                "failed_step": record["failed_step"],
            }
        )
        self.say(f"  {runbook} run {record['run_id']}: {record['verdict']}")
        return record["verdict"] == "pass"

    def restart(self, entry: dict, record: dict) -> bool:
        """Stop what is left of the lane (when any of its containers run), launch it, then its gates."""
        if any((record.get("containers") or {}).values()) or record.get("state") is None:
            self._run(entry, "stop", self.serving)  # a failed stop still lets the launch try
        return self._run(entry, "launch", self.serving) and self._run(entry, "gates", self.serving)

    def roll_back(self, entry: dict) -> bool:
        """The rollback runbook (it stops the lane, launches its rollback lane and runs that lane's gates); passed, the
        watch follows the rollback lane."""
        ok = self._run(entry, "rollback", self.serving)
        if ok:
            self.serving = load_lane(self.lane.rollback)
            self.state["serving_lane"] = self.serving.name
            self.incident["lane"] = self.serving.name
            self.say(f"now watching the rollback lane {self.serving.name}")
        return ok

    # --- speed and link ---
    def speed_due(self, record: dict, *, own_tokens: float) -> None:
        every = self.policy.speed_every
        last = self.state.get("last_speed_t")
        if not every or (last is not None and record["t"] - last < every):
            return
        busy = wp.clients_busy(self.previous, record, own_tokens=own_tokens)
        if busy:
            if not self.state.get("speed_skip_said"):
                _append(self.file("speed"), {"t": record["t"], "skipped": f"clients are being served: {busy}"})
                self.say(f"speed probe skipped: clients are being served ({busy})")
                self.state["speed_skip_said"] = True
            return
        self.state["speed_skip_said"] = False
        self.state["last_speed_t"] = record["t"]
        sample = self.speed_wave(record["t"], before=(record.get("metrics") or {}).get("generation_tokens"))
        if "skipped" not in sample:
            samples = [s for s in _read_lines(self.file("speed")) if "skipped" not in s] + [sample]
            judgment = wp.speed_regression(samples, k=self.policy.speed_samples)
            sample.update(regression=judgment.regression, why=judgment.why)
        _append(self.file("speed"), sample)
        opened = self.state.get("regression_incident")
        if sample.get("regression") and not opened:
            self.say(f"speed regression: {sample['why']}")
            regression = {
                "id": f"{utc_stamp()}-{record_id()}",
                "lane": self.serving.name,
                "state": "paged",
                "cause": wp.SPEED_REGRESSION,
                "summary": sample["why"],
                "detected_at": record["t"],
                "closed_at": None,
                "pages": [{"t": record["t"], "event": "regression"}],
            }
            _write_json(self.incident_path(regression["id"]), regression)
            self.state["regression_incident"] = regression["id"]
            self.pager.page(regression, "regression", note=sample["why"])
        elif opened and "below" in sample and not sample["below"]:  # a wave within the band again: it closes
            try:
                regression = json.loads(self.incident_path(opened).read_text())
            except (OSError, ValueError):
                regression = None
            if regression is not None:
                regression.update(state="closed", closed_at=record["t"])
                _write_json(self.incident_path(opened), regression)
            self.state["regression_incident"] = None
            self.say("speed back within the band")

    def generation_tokens(self) -> Optional[float]:
        """The lane's generation-token counter now (/metrics), or None where it does not answer."""
        from lanebook.nodes.prometheus import metrics_url

        try:
            with direct_client() as client:
                response = client.get(metrics_url(self.serving.api), timeout=wp.round_timeout_s(self.interval_s))
            return wp.metrics_figures(response.text)["generation_tokens"] if response.status_code == 200 else None
        except Exception:  # noqa: BLE001 - a scrape that fails only leaves the wave unchecked
            return None

    def speed_wave(self, now: float, *, before: Optional[float] = None) -> dict:
        """One C1 wave of the probe workload at the baseline's max_tokens, against the stored band's C1 cell; a wave
        that a client's request shared (tokens generated beyond its own since BEFORE, the round's counter) is no
        sample."""
        from rich.console import Console

        from lanebook.speed.bands import speed_document
        from lanebook.speed.baseline import stored_baseline
        from lanebook.speed.command import run_speed

        baseline = stored_baseline(self.serving.name)
        document = baseline and (baseline.document(SPEED_WORKLOAD) or baseline.documents[0])
        band = next((b for b in speed_document(document, "baseline")["bands"] if b["concurrency"] == 1), None) if (
            document) else None  # fmt: skip
        figure = (band or {}).get("mean_stream_decode_tok_s")
        if not figure:
            return {"t": now, "skipped": f"no stored C1 band for lane {self.serving.name}"}
        try:
            result = run_speed(
                self.serving.api,
                self.serving.served_model_name,
                document["workload"],
                [1],
                1,
                int(document["max_tokens"]),
                lane_request=self.serving.request,
                twin=self.serving.twin,
                console=Console(file=io.StringIO()),
                timeout_s=wp.wave_timeout_s(int(document["max_tokens"]), figure["min"], interval_s=self.interval_s),
                idle_timeout_s=wp.round_timeout_s(self.interval_s),
            )
        except LanebookError as exc:
            return {"t": now, "skipped": redact(f"the wave did not run: {exc}")[:300]}
        run = result.document()["runs"][0]
        wave_tokens = float(run.get("decode_tokens") or 0) + 1
        self.own_tokens += wave_tokens
        disturbed = wp.wave_disturbed(before, self.generation_tokens(), wave_tokens)
        if disturbed:
            return {"t": now, "skipped": f"no sample: {disturbed}"}
        value = run.get("mean_stream_decode_tok_s")
        return {
            "t": now,
            "workload": document["workload"],
            "concurrency": 1,
            "max_tokens": int(document["max_tokens"]),
            "stream_decode_tok_s": value,
            "band_min": figure["min"],
            "band_median": figure["median"],
            "band_trials": band["trials"],
            "below": wp.below_band(value, figure["min"]),
            "errors": run.get("errors", 0),
        }

    def link_due(self, record: Optional[dict], *, own_tokens: float, after_remedy: bool = False) -> None:
        every = self.policy.link_every
        last = self.state.get("last_link_t")
        now = self.clock()
        if not after_remedy and (not every or (last is not None and now - last < every)):
            return
        if record is not None and wp.clients_busy(self.previous, record, own_tokens=own_tokens):
            return  # the link measurement loads the link the lane's TP traffic uses
        self.state["last_link_t"] = now
        try:
            from lanebook.verify import link as link_check
        except ImportError:
            link_check = None
        if link_check is None or not hasattr(link_check, "measure_link"):
            entry = {"t": round(now, 3), "measured": False, "why": "link: not measured (no link check in this build)"}
            _append(self.file("link"), entry)
            return
        try:
            report = link_check.measure_link(self.open_nodes(), self.serving)
            self.open_nodes().executor.history.clear()
        except Exception as exc:  # noqa: BLE001 - a link check that fails is said, never fatal
            _append(self.file("link"), {"t": round(now, 3), "measured": False, "why": redact(str(exc))[:300]})
            return
        shown = report.to_json() if hasattr(report, "to_json") else {"figures": getattr(report, "figures", {})}
        shown = json.loads(json.dumps(shown, default=str))
        # A degraded or down rail (an error) is paged; a warning is kept in the series, not paged.
        findings = [
            {"cause": str(getattr(f, "cause", f)), "fix": str(getattr(f, "fix", "")), "severity": f.severity}
            for f in getattr(report, "findings", [])
            if getattr(f, "severity", "error") == "error"
        ]
        _append(self.file("link"), {"t": round(now, 3), "measured": bool(getattr(report, "measured", True)),
                                    "report": {k: v for k, v in shown.items() if k != "thresholds"},
                                    "findings": findings})  # fmt: skip
        opened = self.state.get("link_incident")
        if findings and not opened:
            why = "; ".join(f["cause"] for f in findings)
            self.say(f"link degraded: {why}")
            degraded = {
                "id": f"{utc_stamp()}-{record_id()}",
                "lane": self.serving.name,
                "state": "paged",
                "cause": wp.LINK_DEGRADED,
                "summary": why,
                "findings": findings,
                "detected_at": round(now, 3),
                "closed_at": None,
                "pages": [{"t": round(now, 3), "event": "link"}],
            }
            _write_json(self.incident_path(degraded["id"]), degraded)
            self.state["link_incident"] = degraded["id"]
            self.pager.page(degraded, "link", note=why)
        elif opened and not findings and shown.get("measured", True):  # measured healthy again: the incident closes
            try:
                degraded = json.loads(self.incident_path(opened).read_text())
            except (OSError, ValueError):
                degraded = None
            if degraded is not None:
                degraded.update(state="closed", closed_at=round(now, 3))
                _write_json(self.incident_path(opened), degraded)
            self.state["link_incident"] = None
            self.say("link healthy again")


def _probe_summary(record: dict) -> dict:
    return {"t": record["t"], "round": record["round"], "cause": record["cause"], "failures": record["failures"][:5]}


def _read_lines(path: Path) -> list[dict]:
    found = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return found


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


# --- what `watch status` says ------------------------------------------------------------------------------------


def watched(lane_name: str) -> bool:
    """Whether a watcher holds the lane's watch lock now."""
    path = watch_dir(lane_name) / "watch.lock"
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def incidents(lane_name: str) -> list[dict]:
    """Every incident of the lane, oldest first."""
    folder = watch_dir(lane_name) / "incidents"
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return sorted(found, key=lambda i: i.get("detected_at") or 0)


def watch_status(lane_name: str) -> dict:
    """The lane's watch: its state, whether a watcher runs, the last probe, and every incident (cause, runs,
    times)."""
    try:
        state = json.loads((watch_dir(lane_name) / "state.json").read_text())
    except (OSError, ValueError):
        state = {}
    running = watched(lane_name)
    return {
        "lane": lane_name,
        "watching": running,
        "state": state.get("state", "never watched") if running or state.get("state") else "never watched",
        "serving_lane": state.get("serving_lane"),
        "pid": state.get("pid") if running else None,
        "last_probe": state.get("last_probe"),
        "rounds": state.get("rounds", 0),
        "restarts": state.get("restarts", []),
        "incidents": [
            {
                "id": i.get("id"),
                "state": i.get("state"),
                "cause": i.get("cause"),
                "summary": i.get("summary"),
                "runs": i.get("runs", []),
                "first_failed_at": i.get("first_failed_at"),
                "detected_at": i.get("detected_at"),
                "repaired_at": i.get("repaired_at"),
                "served_again_at": i.get("served_again_at"),
                "closed_at": i.get("closed_at"),
            }
            for i in incidents(lane_name)
        ],
    }


def _when(t: Optional[float]) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def print_status(status: dict, echo: Optional[TextIO] = None) -> None:
    out = echo or sys.stdout
    watcher = f"watched (pid {status['pid']})" if status["watching"] else "no watcher running"
    print(f"lane {status['lane']}: {status['state']}, {watcher}; {status['rounds']} rounds", file=out)
    probe = status.get("last_probe")
    if probe:
        print(f"last probe {_when(probe.get('t'))} UTC: {wp.detail(probe)}", file=out)
    if not status["incidents"]:
        print("no incident", file=out)
    for i in status["incidents"]:
        print(
            f"incident {i['id']} [{i['state']}] {i['cause']}: detected {_when(i['detected_at'])}, repaired "
            f"{_when(i['repaired_at'])}, served again {_when(i['served_again_at'])}; runs "
            f"{', '.join(r for r in i['runs'] if r) or 'none'}",
            file=out,
        )
