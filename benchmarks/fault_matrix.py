"""The fault matrix, timed: each fault met on its own private fast twin, with the time its runbook takes to detect it
and report it (the meeting run, start to record) against the row's bound (lanebook.twin.fault_matrix). TWIN figures,
printed, never asserted; a row above its bound is flagged, and a row that does not hold says where.

    .venv/bin/python benchmarks/fault_matrix.py [FAULT ...]

About six minutes for the whole matrix, one row after another, on a lightly loaded 2-core machine. Exit 1 when a row is
above its bound or does not hold.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from lanebook.twin.fault_matrix import ROWS, mismatches, over_bound
from lanebook.twin.fault_runs import run_row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("faults", nargs="*", help="rows to run (default: every row)")
    args = parser.parse_args()
    known = [row.fault for row in ROWS]
    unknown = sorted(set(args.faults) - set(known))
    if unknown:
        parser.error(f"unknown row {', '.join(unknown)} (known: {', '.join(known)})")
    rows = [row for row in ROWS if not args.faults or row.fault in args.faults]
    print(f"{'fault':<22} {'runbook':<9} {'verdict':<8} {'detected+reported (s)':>22} {'bound (s)':>10}  holds")
    flagged = 0
    with tempfile.TemporaryDirectory(prefix="lanebook-fault-matrix-") as tmp:
        for row in rows:
            seen = run_row(row, Path(tmp) / row.fault)
            problems = mismatches(row, seen)
            slow = over_bound(row, seen.detection_s)
            flagged += bool(problems) or slow
            print(
                f"{row.fault:<22} {row.runbook:<9} {seen.record['verdict']:<8} {seen.detection_s:>22.1f} "
                f"{row.bound_s:>10g}  {'yes' if not problems else 'NO'}{'  ABOVE BOUND' if slow else ''}",
                flush=True,
            )
            print(f"    shows: {(seen.failure or 'passed').splitlines()[0][:200]}")
            for problem in problems:
                print(f"    {problem}")
    print(f"(twin figures; {len(rows)} rows, {flagged} flagged)")
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
