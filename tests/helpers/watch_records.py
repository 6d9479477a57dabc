"""A small watch series written as `lanebook watch` writes it (lanebook.runs.watch.FILES), for the served lanes page's
tests: eleven probe rounds (one eight days before the rest), an engine incident restarted through three runs, a speed
regression and a degraded link paged, six speed waves (one with no figure) and two skipped attempts, three link
attempts, five page attempts. Secrets are planted where a record could carry one unredacted: a page must show none
of them."""

from __future__ import annotations

import json
from pathlib import Path

T0 = 1796601600.0  # 2026-12-07 00:00:00 UTC
DAY = 86400.0
BEARER = "PLANTEDbearer0123456789abcdef"
API_KEY = "sk-planted0123456789abcdefXYZ"
HOOK_TOKEN = "planted-hook-token-9b8c7d6e5f4a"
SECRETS = (BEARER, API_KEY, HOOK_TOKEN)
SERVED = [True, True, False, False, False, True, True, True, True, True]  # rounds at T0 + 60 s * i
INCIDENT = "20261207T000300Z-a1b2c3"
RUN_IDS = ("w0000001", "w0000002", "w0000003")


def probe(t: float, number: int, served: bool) -> dict:
    failures = [] if served else [f"/health: connection refused; Authorization: Bearer {BEARER}"]
    return {
        "t": t,
        "round": number,
        "lane": "twin",
        "health": 200 if served else None,
        "models": served,
        "chat": served,
        "chat_s": 0.05 if served else None,
        "chat_tokens": 1 if served else 0,
        "metrics": {"running": 0, "waiting": 0, "kv_usage": 0.0, "prompt_tokens": 10, "generation_tokens": 5},
        "ssh": {"head": True, "worker": True},
        "containers": {"head": [] if not served else ["vllm_head"], "worker": ["vllm_worker"]},
        "disk_free_kib": {"head": 10**8, "worker": 10**8},
        "state": "up" if served else "orphaned worker",
        "errors": failures,
        "probe_s": 0.2,
        "served": served,
        "healthy": served,
        "cause": None if served else "orphaned worker",
        "failures": failures,
        "incident": None if served else INCIDENT,
    }


def probes() -> list[dict]:
    early = probe(T0 - 8 * DAY, 1, True)
    return [early] + [probe(T0 + 60 * i, i + 2, served) for i, served in enumerate(SERVED)]


def incidents(run_ids: tuple[str, ...] = RUN_IDS) -> list[dict]:
    engine = {
        "id": INCIDENT,
        "lane": "twin",
        "state": "closed",
        "cause": "orphaned worker",
        "causes": [{"t": T0 + 180, "cause": "orphaned worker"}],
        "summary": f"orphaned worker: the head's rank is gone (key {API_KEY})",
        "first_failed_at": T0 + 120,
        "detected_at": T0 + 180,
        "detection_rounds": 2,
        "interval_s": 60.0,
        "doctor": {
            "confirmed": [
                {
                    "id": "P16",
                    "title": "Head dies mid-TP",
                    "cause": "the head's engine exited",
                    "fix": "relaunch the lane: stop every rank, then launch",
                    "runbook": "launch",
                }  # fmt: skip
            ],
            "suspected": [],
            "not_read": [],
        },
        "probes": [
            {
                "t": T0 + 120 + 60 * i,
                "round": 4 + i,
                "cause": "orphaned worker",
                "failures": [f"/health: connection refused; Authorization: Bearer {BEARER}"],
            }
            for i in range(3)
        ],  # fmt: skip
        "remedies": [
            {
                "action": "restart",
                "t": T0 + 185,
                "finished_at": T0 + 220,
                "ok": True,
                "why": "restart 1 of at most 2 within 600 s",
                "runs": [
                    {"runbook": name, "run_id": run_id, "lane": "twin", "verdict": "pass", "failed_step": None}
                    for name, run_id in zip(("stop", "launch", "gates"), run_ids)
                ],
            }
        ],
        "runs": list(run_ids),
        "waits": [],
        "pages": [
            {"t": T0 + 180, "event": "opened"},
            {"t": T0 + 220, "event": "repaired"},
            {"t": T0 + 300, "event": "served-again"},
        ],  # fmt: skip
        "repaired_at": T0 + 220,
        "served_again_at": T0 + 300,
        "closed_at": T0 + 300,
    }
    regression = {
        "id": "20261207T000500Z-d4e5f6",
        "lane": "twin",
        "state": "closed",
        "cause": "speed regression",
        "summary": "the last 3 speed waves (70, 71, 69 tok/s) all fell below the band's minimum 75 tok/s",
        "detected_at": T0 + 400,
        "closed_at": T0 + 500,
        "pages": [{"t": T0 + 400, "event": "regression"}],
    }
    link = {
        "id": "20261207T000600Z-a7b8c9",
        "lane": "twin",
        "state": "paged",
        "cause": "link degraded",
        "summary": "rail roceP2p1s0f0 to worker carries 13.2 Gb/s",
        "findings": [
            {
                "cause": "rail roceP2p1s0f0 to worker carries 13.2 Gb/s",
                "fix": "power-cycle both nodes",
                "severity": "error",
            }
        ],  # fmt: skip
        "detected_at": T0 + 540,
        "pages": [],
    }
    return [engine, regression, link]


def speed() -> list[dict]:
    def wave(t: float, value: float | None, regression: bool) -> dict:
        return {"t": t, "workload": "probe", "concurrency": 1, "max_tokens": 64, "stream_decode_tok_s": value,
                "band_min": 75.0, "band_median": 82.0, "band_trials": 3, "below": value is None or value < 75.0,
                "errors": int(value is None), "regression": regression, "why": "test"}  # fmt: skip

    return [
        {"t": T0 + 30, "skipped": "clients are being served: requests running 1, waiting 0"},
        wave(T0 + 60, 80.0, False),
        wave(T0 + 150, None, False),  # its request failed: no figure
        wave(T0 + 330, 70.0, False),
        wave(T0 + 360, 71.0, False),
        wave(T0 + 400, 69.0, True),
        {"t": T0 + 450, "skipped": "clients are being served: requests running 1, waiting 0"},
        wave(T0 + 500, 85.0, False),
    ]


def link_report(t: float, second_gbps: float, findings: list[dict]) -> dict:
    def rail(name: str, gbps: float) -> dict:
        end = {"device": name, "state": "ACTIVE", "netdev": "enp1s0f0np0", "mtu": 9000, "operstate": "UP"}
        return {"worker": "worker", "rail": name, "head": end, "worker_end": end, "ib_write_bw": None, "gbps": gbps,
                "not_measured": None}  # fmt: skip

    return {
        "t": t,
        "measured": True,
        "report": {
            "lane": "twin",
            "figures": "twin",
            "measured_at": "2026-12-07T00:00:00+00:00",
            "dry_run": False,
            "ok": not findings,
            "measured": True,
            "not_measured": None,
            "rails": [rail("rocep1s0f0", 95.1), rail("roceP2p1s0f0", second_gbps)],
            "nccl": {"bus_bandwidth_gbs": None, "measured": False, "note": "no all_reduce_perf output"},
            "findings": findings,
        },
        "findings": [f for f in findings if f["severity"] == "error"],
    }


def link() -> list[dict]:
    degraded = {"id": "L01", "severity": "error", "cause": "rail roceP2p1s0f0 to worker carries 13.2 Gb/s",
                "fix": "power-cycle both nodes", "threshold": "40 Gb/s", "source": "PR 108", "worker": "worker",
                "rail": "roceP2p1s0f0", "figure": "13.2 Gb/s"}  # fmt: skip
    return [
        link_report(T0 + 10, 94.0, []),
        {"t": T0 + 240, "measured": False, "why": "link: the worker did not answer"},
        link_report(T0 + 540, 13.2, [degraded]),
    ]


def pages() -> list[dict]:
    to = f"webhook https://hooks.example.invalid/T0/{HOOK_TOKEN}"

    def attempt(t: float, event: str, ok: bool) -> dict:
        return {"t": t, "event": event, "incident": INCIDENT, "to": to, "attempt": 1, "ok": ok,
                "why": "" if ok else f"HTTP 500 from {to}"}  # fmt: skip

    return [
        attempt(T0 + 180, "opened", True),
        attempt(T0 + 220, "repaired", False),
        attempt(T0 + 222, "repaired", True),
        attempt(T0 + 300, "served-again", True),
        attempt(T0 + 400, "regression", True),
    ]


def state() -> dict:
    return {
        "lane": "twin",
        "serving_lane": "twin",
        "pid": 4242,
        "host": "head",
        "started_at": T0 - 8 * DAY,
        "updated_at": T0 + 600,
        "interval_s": 60.0,
        "state": "stopped",
        "rounds": 11,
        "consecutive_failures": 0,
        "open_incident": None,
        "restarts": [T0 + 185],
        "backoff_until": 0.0,
        "last_speed_t": T0 + 500,
        "last_link_t": T0 + 540,
        "last_probe": probe(T0 + 540, 11, True),
    }


def write_watch(outputs: Path, lane: str = "twin", run_ids: tuple[str, ...] = RUN_IDS) -> Path:
    """The series under OUTPUTS/watch/LANE/, as the watcher lays it out (records unredacted: the page redacts); the
    restart's stop, launch and gates runs are RUN_IDS."""
    folder = outputs / "watch" / lane
    (folder / "incidents").mkdir(parents=True, exist_ok=True)

    def lines(name: str, records: list[dict]) -> None:
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in records))

    lines("probes.jsonl", probes())
    lines("speed.jsonl", speed())
    lines("link.jsonl", link())
    lines("pages.jsonl", pages())
    (folder / "state.json").write_text(json.dumps(state()))
    for incident in incidents(run_ids):
        (folder / "incidents" / f"{incident['id']}.json").write_text(json.dumps(incident))
    return folder
