"""How long the doctor takes (the issue asks for under 3 s on 100,000 pasted lines, under 5 s on a lane with 10,000
log lines per rank; retrieval over the case base must keep a few seconds). Prints the figures; asserts nothing about
this machine's speed.

    .venv/bin/python benchmarks/doctor_speed.py            # pasted: 100,000 lines through the diagnosis
    .venv/bin/python benchmarks/doctor_speed.py --lane     # the twin lane, 10,000 log lines per rank (TWIN figures)

--lane brings the twin up (--fast) and its lane up, has each rank's container log grow to at least 10,000 lines of
the engine's own periodic stats line (appended to the container's log as the engine's output is), then times
`lanebook doctor --lane twin` end to end: its process, SSH to both nodes, every read, the two /metrics scrapes
(3 s apart by design: rates, not levels) and the diagnosis. The lines stay in the log until the lane restarts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from lanebook.verify.doctor import Line, diagnose, read_lines  # noqa: E402
from test_doctor import HEALTHY_START, NVRM, stats  # noqa: E402

LINES = 100_000
LANE_LINES = 10_000
LANEBOOK = str(Path(sys.executable).parent / "lanebook")


def pasted() -> None:
    """Twice: ending in an engine death the rules confirm, and ending in a failure in words and an NCCL error no rule
    confirms, where the suspected tier (the registry's words and retrieval over the case base) reads its bounded
    summary of the whole paste."""
    rows = (HEALTHY_START + [stats(120.0, 80.0, 2)] * 9) * (LINES // (len(HEALTHY_START) + 9) + 1)
    endings = {
        "confirmed": ["vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue."],
        "retrieval": [
            "The worker died after 20 minutes and the head hung.",
            "RuntimeError: NCCL error: unhandled cuda error, NCCL version 2.21.5",
        ],
    }
    for name, ending in endings.items():
        pasted = "\n".join(rows[: LINES - len(ending)] + ending)
        kernel = [Line("dmesg.txt", 1, NVRM)] if name == "confirmed" else []
        start, cpu = time.perf_counter(), time.process_time()
        logs = read_lines("head.log", pasted)  # folded as pasted text is: quotes, prefixes, wraps
        found = diagnose(logs, (), kernel)
        took, cpu = time.perf_counter() - start, time.process_time() - cpu
        print(
            f"doctor ({name}): {LINES:,} pasted lines folded and read in {took:.2f} s ({LINES / took:,.0f} lines/s; "
            f"{cpu:.2f} s of CPU, the rest waiting for a core); findings {found.ids()}"
        )


def lane(trials: int) -> None:
    from lanebook.lane.params import load_lane
    from lanebook.nodes.ssh import LaneNodes
    from lanebook.ops import launcher
    from lanebook.twin import control
    from lanebook.twin.standins.runtime import containers

    status = control.up(faults=[], fast=True)
    with LaneNodes(load_lane("twin")) as nodes:
        if not all(launcher.running_containers(nodes).values()):
            started = launcher.start_lane(nodes)
            if not started.ok:
                sys.exit(f"the twin lane did not start: {started.summary()}")
    line = stats(120.0, 80.0, 2) + "\n"
    for node in status["nodes"]:
        for container in containers(Path(node["root"])):
            if container.running:
                have = container.log.read_bytes().count(b"\n")
                with open(container.log, "a") as log:
                    log.write(line * max(0, LANE_LINES - have))
                print(f"{node['alias']}: {container.name}'s log holds {max(have, LANE_LINES):,} lines")
    took = []
    for trial in range(1, trials + 1):
        start = time.perf_counter()
        run = subprocess.run([LANEBOOK, "doctor", "--lane", "twin", "--json"], capture_output=True, text=True)
        took.append(time.perf_counter() - start)
        found = json.loads(run.stdout) if run.stdout.startswith("{") else {}
        ids = [f["id"] for f in found.get("findings", [])]
        print(
            f"trial {trial}: `lanebook doctor --lane twin` in {took[-1]:.2f} s (exit {run.returncode}); findings {ids}"
        )
    median = sorted(took)[len(took) // 2]
    print(f"TWIN: the doctor on a lane with {LANE_LINES:,} log lines per rank: median {median:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lane", action="store_true", help="the twin lane with 10,000 log lines per rank")
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    lane(args.trials) if args.lane else pasted()


if __name__ == "__main__":
    main()
