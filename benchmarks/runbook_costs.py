"""What running the recipe as runbooks costs and saves, measured on the twin (TWIN figures, printed, never asserted).

    .venv/bin/python benchmarks/runbook_costs.py [readiness] [gates] [resume] [--trials 3]

- readiness: how long after the server became ready lanebook sees it (its ReadinessWatch during the launch),
  against when the recipe's launcher, polling every WAIT_SECONDS, exits. The truth is the twin server's own
  `ready_at` (GET /twin/requests). Goal: lanebook under 1 s.
- gates: `lanebook run gates --lane twin` (papermill, a kernel, an executed notebook and a record) against the
  same gate functions called directly from Python; the ratio of the medians. The direct side runs in this
  process, its modules already imported, so the ratio charges the run with everything it adds: the lanebook
  process and its imports, the kernel and its imports, the notebook saved as each code cell starts, and the record. A
  first round of both sides is shown and not counted (first-use shapes on the twin, fresh .pyc files, cold
  caches): the ratio is the steady cost of every run. Goal: at most 1.3x.
- resume: a promotion that fails at gates (the lane names a Hermes binary that is not there), is fixed and
  resumed, against a full promotion that passes: how much `promote --resume` saves.

Each part brings the twin up (--fast) and leaves the twin lane up. About 2 min for readiness, 1 min for gates
and 10 min for resume on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from lanebook.lane.params import PARAMS_DIR, load_lane
from lanebook.nodes.ssh import LaneNodes
from lanebook.ops import launcher
from lanebook.twin import control
from lanebook.verify import gates, hermes

LANEBOOK = str(Path(sys.executable).parent / "lanebook")


def twin_lane(up: bool) -> None:
    """The twin running, with its lane up or down as asked."""
    control.up(faults=[], fast=True)
    with LaneNodes(load_lane("twin")) as nodes:
        running = any(launcher.running_containers(nodes).values())
        if running and not up:
            launcher.stop_lane(nodes)
        elif up and not running:
            started = launcher.start_lane(nodes)
            if not started.ok:
                sys.exit(f"the twin lane did not start: {started.summary()}")


def readiness(trials: int) -> None:
    params = load_lane("twin")
    lanebook_lags, launcher_lags = [], []
    for trial in range(1, trials + 1):
        twin_lane(up=False)
        with LaneNodes(params) as nodes:
            started = launcher.start_lane(nodes)
        truth = httpx.get(params.api.removesuffix("/v1") + "/twin/requests", timeout=10).json()["ready_at"]
        if not started.ok or started.ready_seen_at is None or truth is None:
            sys.exit(f"trial {trial}: no readiness to measure ({started.summary()})")
        lanebook_lags.append(started.ready_seen_at - truth)
        launcher_lags.append(started.finished_at - truth)
        print(
            f"trial {trial}: server ready → lanebook saw it after {lanebook_lags[-1]:.3f} s; "
            f"the launcher exited after {launcher_lags[-1]:.1f} s",
            flush=True,
        )
    print(
        f"TWIN readiness detection lag, median of {trials}: lanebook {statistics.median(lanebook_lags):.3f} s "
        f"(max {max(lanebook_lags):.3f}, goal < 1 s); recipe launcher (WAIT_SECONDS="
        f"{params.launcher.env.get('WAIT_SECONDS')}) {statistics.median(launcher_lags):.1f} s"
    )


def gates_direct(nodes: LaneNodes) -> list:
    """The gates runbook's checks, called from Python with no notebook around them."""
    p = nodes.params
    checks = (
        gates.models_gate("1", nodes.executor, p)
        + gates.log_gate("2", nodes)
        + gates.exact_smoke_gate("3", nodes.executor, p)
        + gates.tool_smoke_gate("4", nodes.executor, p)
    )
    provider, found = hermes.block_gate("5", nodes, None)
    _, routed = hermes.route_gate("6", nodes, provider)
    return checks + found + routed


def gates_overhead(trials: int) -> None:
    twin_lane(up=True)
    direct, headless = [], []
    with tempfile.TemporaryDirectory() as outputs:
        for trial in range(0, trials + 1):  # trial 0 warms up, untimed: first-use shapes, fresh .pyc, a cold cache
            started = time.monotonic()
            with LaneNodes(load_lane("twin")) as nodes:
                failed = [c for c in gates_direct(nodes) if c.ok is False]
            direct.append(time.monotonic() - started)
            started = time.monotonic()
            done = subprocess.run(
                [LANEBOOK, "run", "gates", "--lane", "twin"],
                capture_output=True,
                text=True,
                env={**os.environ, "LANEBOOK_OUTPUTS": outputs},
            )
            headless.append(time.monotonic() - started)
            if failed or done.returncode != 0:
                sys.exit(f"trial {trial}: gates did not pass ({failed or done.stdout[-500:]})")
            print(f"trial {trial}: direct {direct[-1]:.2f} s, lanebook run gates {headless[-1]:.2f} s", flush=True)
            if trial == 0:
                direct.pop(), headless.pop()  # the warm-up round is shown, not counted
    d, h = statistics.median(direct), statistics.median(headless)
    print(
        f"TWIN gates, median of {trials}: direct {d:.2f} s, `lanebook run gates` {h:.2f} s: "
        f"overhead ratio {h / d:.2f}x (+{h - d:.2f} s for papermill, the kernel, the notebook and its record)"
    )


def promote(lane_file: Path, outputs: str, *args: str) -> tuple[float, int, list[str]]:
    started = time.monotonic()
    done = subprocess.run(
        [LANEBOOK, "promote", "--lane", str(lane_file), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "LANEBOOK_OUTPUTS": outputs},
    )
    runs = [json.loads(line) for line in (Path(outputs) / "runs.jsonl").read_text().splitlines()]
    return time.monotonic() - started, done.returncode, [f"{r['runbook']} {r['verdict']}" for r in runs]


def resume_savings(_: int) -> None:
    with tempfile.TemporaryDirectory() as work:
        good = Path(work) / "twin.yaml"
        good.write_text((PARAMS_DIR / "twin.yaml").read_text())
        broken = Path(work) / "broken" / "twin.yaml"  # the same lane, naming a Hermes binary that is not there
        broken.parent.mkdir()
        broken.write_text(
            good.read_text().replace("  provider: spark-ds4\n", "  provider: spark-ds4\n  bin: /nonexistent/hermes\n")
        )
        twin_lane(up=False)
        full_s, code, runs = promote(good, str(Path(work) / "full"))
        print(f"full promotion: {full_s:.0f} s, exit {code}: {', '.join(runs)}", flush=True)
        twin_lane(up=False)
        outputs = str(Path(work) / "resumed")
        failed_s, code, runs = promote(broken, outputs)
        print(f"promotion failing at gates: {failed_s:.0f} s, exit {code}: {', '.join(runs)}", flush=True)
        broken.write_text(good.read_text())  # the fix: the lane names the installed Hermes again
        resume_s, code, runs = promote(broken, outputs, "--resume")
        print(f"promote --resume after the fix: {resume_s:.0f} s, exit {code}: {', '.join(runs)}", flush=True)
    print(
        f"TWIN promote --resume after a failure at gates: {resume_s:.0f} s against {full_s:.0f} s for a full "
        f"promotion: saves {full_s - resume_s:.0f} s ({resume_s / full_s:.2f}x the time)"
    )


PARTS = {"readiness": readiness, "gates": gates_overhead, "resume": resume_savings}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", metavar="PART", help=f"any of {', '.join(PARTS)} (default: all)")
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}: choose from {', '.join(PARTS)}")
    for part in args.parts or PARTS:
        print(f"== {part}", flush=True)
        PARTS[part](args.trials)


if __name__ == "__main__":
    main()
