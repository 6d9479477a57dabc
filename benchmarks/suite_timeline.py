"""Each worker's share of a parallel `make test`, from the timeline tests/suite_timeline.py wrote:

    LANEBOOK_SUITE_TIMELINE=/tmp/timeline.jsonl make test
    .venv/bin/python benchmarks/suite_timeline.py /tmp/timeline.jsonl

Per worker: its span and its modules in the order it ran them, each module's time split into setup (fixtures:
twins, lanes, servers), call and teardown. The run's wall time is the longest worker's span; this shows which
modules make it."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: python benchmarks/suite_timeline.py TIMELINE.jsonl")
        return 2
    path = Path(sys.argv[1])
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        print(f"{path}: empty (run the suite with LANEBOOK_SUITE_TIMELINE={path})")
        return 1
    start = min(r["end"] - r["duration"] for r in rows)
    by_worker: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in rows:
        module = r["test"].split("::")[0]
        entry = by_worker[r["worker"]].setdefault(
            module, {"first": r["end"] - r["duration"], "last": r["end"], "setup": 0.0, "call": 0.0, "teardown": 0.0}
        )
        entry["first"] = min(entry["first"], r["end"] - r["duration"])
        entry["last"] = max(entry["last"], r["end"])
        entry[r["when"]] += r["duration"]
    for worker in sorted(by_worker):
        modules = sorted(by_worker[worker].items(), key=lambda kv: kv[1]["first"])
        span = max(m["last"] for _, m in modules) - start
        print(f"{worker}: {span:7.1f} s over {len(modules)} modules")
        for name, m in modules:
            total = m["setup"] + m["call"] + m["teardown"]
            if total >= 5:
                print(
                    f"  {m['first'] - start:6.0f}-{m['last'] - start:4.0f} s  {total:6.1f} s "
                    f"(setup {m['setup']:5.1f}, call {m['call']:5.1f}, teardown {m['teardown']:5.1f})  {name}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
