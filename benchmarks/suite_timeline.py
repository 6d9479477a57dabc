"""Each worker's share of a parallel `make test`, from the timeline tests/helpers/suite_timeline.py wrote:

    LANEBOOK_SUITE_TIMELINE=/tmp/timeline.jsonl make test
    .venv/bin/python benchmarks/suite_timeline.py /tmp/timeline.jsonl [--write-order tests/module_seconds.txt]

Per worker: its span and its modules in the order it ran them, each module's time split into setup (fixtures:
twins, lanes, servers), call and teardown, and the CPU its worker's processes used meanwhile (where the worker had a
cgroup of its own). The run's wall time is the longest worker's span; on two cores the CPU total bounds it from
below (total / 2), so the table shows both which modules make the span and which make the work. --write-order
stores each module's seconds in that run, slowest first: the order tests/conftest.py hands modules out in."""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path


def write_order(by_worker: dict[str, dict[str, dict]], order: Path) -> None:
    """ORDER: one line per module, its seconds in the run (setup, call and teardown), slowest first."""
    seconds = {
        name: m["setup"] + m["call"] + m["teardown"] for modules in by_worker.values() for name, m in modules.items()
    }
    lines = [f"{s:7.1f}  {name}" for name, s in sorted(seconds.items(), key=lambda kv: -kv[1])]
    header = "# seconds  module, in a parallel `make test` (benchmarks/suite_timeline.py --write-order)\n"
    order.write_text(header + "\n".join(lines) + "\n")
    print(f"wrote {order}: {len(lines)} modules")


def main() -> int:
    parser = argparse.ArgumentParser(description="each worker's share of a parallel `make test`")
    parser.add_argument("timeline", type=Path, help="what LANEBOOK_SUITE_TIMELINE named")
    parser.add_argument("--write-order", type=Path, metavar="FILE", help="store each module's seconds, slowest first")
    args = parser.parse_args()
    path, order = args.timeline, args.write_order
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        print(f"{path}: empty (run the suite with LANEBOOK_SUITE_TIMELINE={path})")
        return 1
    start = min(r["end"] - r["duration"] for r in rows)
    by_worker: dict[str, dict[str, dict]] = defaultdict(dict)
    last_cpu: dict[str, float] = {}
    for r in sorted(rows, key=lambda r: r["end"]):
        module = r["test"].split("::")[0]
        entry = by_worker[r["worker"]].setdefault(
            module,
            {"first": r["end"] - r["duration"], "last": r["end"], "setup": 0.0, "call": 0.0, "teardown": 0.0, "cpu": 0},
        )
        entry["first"] = min(entry["first"], r["end"] - r["duration"])
        entry["last"] = max(entry["last"], r["end"])
        entry[r["when"]] += r["duration"]
        if r.get("cpu_s") is not None:
            entry["cpu"] += r["cpu_s"] - last_cpu.get(r["worker"], 0.0)  # the cgroup counts from the worker's start
            last_cpu[r["worker"]] = r["cpu_s"]
    total_cpu = 0.0
    for worker in sorted(by_worker):
        modules = sorted(by_worker[worker].items(), key=lambda kv: kv[1]["first"])
        span = max(m["last"] for _, m in modules) - start
        cpu = sum(m["cpu"] for _, m in modules)
        total_cpu += cpu
        print(f"{worker}: {span:7.1f} s over {len(modules)} modules, CPU {cpu:6.1f} s")
        for name, m in modules:
            total = m["setup"] + m["call"] + m["teardown"]
            if total >= 5 or m["cpu"] >= 5:
                print(
                    f"  {m['first'] - start:6.0f}-{m['last'] - start:4.0f} s  {total:6.1f} s "
                    f"(setup {m['setup']:5.1f}, call {m['call']:5.1f}, teardown {m['teardown']:5.1f}) "
                    f"CPU {m['cpu']:6.1f} s  {name}"
                )
    print(f"CPU of all workers: {total_cpu:.1f} s (on two cores at least {total_cpu / 2:.0f} s of wall time)")
    if order is not None:
        write_order(by_worker, order)
    return 0


if __name__ == "__main__":
    sys.exit(main())
