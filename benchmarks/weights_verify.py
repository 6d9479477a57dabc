"""Benchmark (printed, not a timed test): verifying the twin's 48-shard hub tree costs one SSH round trip.

Compares, on the running twin's head node over real SSH:
  - an SSH round trip (`true`), the unit of cost;
  - weights.verify_weights: the probe script sent once, everything checked on the node;
  - the per-file way: one `stat` per file of the tree, as a loop of remote commands would do;
  - verify_weights with sha256=True (reads every shard).
Figures are TWIN figures (tiny shards on loopback), never a real lane's. Usage:
  .venv/bin/python benchmarks/weights_verify.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from lanebook.lane.params import load_lane
from lanebook.nodes import ssh
from lanebook.ops import weights
from lanebook.twin import control


def timed(executor: ssh.Executor, action) -> tuple[float, int, object]:
    """(seconds, round trips, result) of one action; round trips = commands the executor sent."""
    before = len(executor.history)
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, len(executor.history) - before, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if not control.status()["running"]:
        control.up(faults=[], fast=True)
    with ssh.LaneNodes(load_lane("twin")) as nodes:
        head, params = nodes.head, nodes.params.weights
        head.run("true")  # connect first: every figure below is on an open connection
        files = head.run(f"find {ssh.qpath(params.hub_dir)} -type f").stdout.split()

        def per_file():
            return [head.run(f"stat -c %s {ssh.q(f)}").stdout for f in files]

        rows = []
        for label, action in (
            ("ssh round trip (true)", lambda: head.run("true")),
            ("verify_weights (one probe)", lambda: weights.verify_weights(head, params)),
            (f"per-file stat ({len(files)} files)", per_file),
            ("verify_weights sha256=True", lambda: weights.verify_weights(head, params, sha256=True)),
        ):
            runs = [timed(nodes.executor, action) for _ in range(args.repeat)]
            seconds = [r[0] for r in runs]
            rows.append((label, runs[0][1], statistics.median(seconds), min(seconds), max(seconds), runs[-1][2]))

    unit = rows[0][2]
    print(
        f"TWIN benchmark — weights verification on the twin's head ({params.shards} shards, {len(files)} files; "
        f"median of {args.repeat}; twin figures, not a real lane's)"
    )
    print(f"{'method':32} {'round trips':>11} {'median s':>9} {'min s':>7} {'max s':>7} {'× ssh rt':>9}")
    for label, trips, median, low, high, _ in rows:
        print(f"{label:32} {trips:>11} {median:>9.3f} {low:>7.3f} {high:>7.3f} {median / unit:>9.1f}")
    report = rows[1][5]
    print(
        f"verify: ok={report.ok} shards={report.shard_count}/{report.expected_shards} size basis={report.size_basis} "
        f"problems={report.problems}; sha256 checked={rows[3][5].sha256_checked}"
    )


if __name__ == "__main__":
    main()
