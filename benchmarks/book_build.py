"""How the book's build time grows with the audit trail: `lanebook book` with 10 and with 100 executed runs.

The runs are real executed notebooks (the records of an outputs dir, by default the checkout's outputs/; when it
has none, one `lanebook promote --lane twin` fills it first), copied under new run ids and times into a temporary
outputs dir
with their own index lines, so every page is built from a real record. Each build is `lanebook book --out DIR`
in a fresh process, as an operator runs it. Prints both times, the growth ratio (at most linear means at most
100/10 = 10) and the cost per added run. Goal: 100 runs in under 60 s on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

from lanebook.base.paths import REPO  # noqa: E402
from lanebook.runs.audit import sha256_file  # noqa: E402

LANEBOOK = Path(sys.executable).parent / "lanebook"
SIZES = (10, 100)


def source_runs(outputs: Path) -> list[tuple[dict, Path]]:
    index = outputs / "runs.jsonl"
    runs = []
    for line in index.read_text().splitlines() if index.exists() else []:
        record = json.loads(line)
        path = outputs / record["output"]
        if path.is_file() and path.stat().st_size:
            runs.append((record, path))
    return runs


def promoted_runs(outputs: Path) -> list[tuple[dict, Path]]:
    """Real runs to copy when OUTPUTS has none: one promotion of the twin lane (a few minutes), into OUTPUTS."""
    print(f"no executed run in {outputs}: lanebook promote --lane twin (a few minutes)", flush=True)
    env = {**os.environ, "LANEBOOK_OUTPUTS": str(outputs)}
    subprocess.run([str(LANEBOOK), "promote", "--lane", "twin"], env=env, capture_output=True, text=True)
    runs = source_runs(outputs)
    if not runs:
        raise SystemExit(f"the promotion recorded no run in {outputs}")
    return runs


def synthetic_trail(runs: list[tuple[dict, Path]], count: int, outputs: Path) -> None:
    """COUNT records in OUTPUTS, copies of RUNS in turn under new ids and times, a new promotion per pass."""
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    promotion = None
    with open(outputs / "runs.jsonl", "w") as index:
        for n in range(count):
            record, path = runs[n % len(runs)]
            if n % len(runs) == 0:
                promotion = uuid.uuid4().hex[:12]
            run_id = "abcdef"[n % 6] + uuid.uuid4().hex[:7]
            started = start + timedelta(minutes=3 * n)
            stamp = started.strftime("%Y%m%dT%H%M%SZ")
            output = Path(record["lane"]) / f"{stamp}-{record['runbook']}-{run_id}.ipynb"
            (outputs / output).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, outputs / output)
            copy = {
                **record,
                "run_id": run_id,
                "started_at": started.isoformat(timespec="seconds"),
                "finished_at": (started + timedelta(minutes=1)).isoformat(timespec="seconds"),
                "output": str(output),
                "sha256": sha256_file(outputs / output),
            }
            if record.get("promotion_id"):
                copy["promotion_id"] = promotion
            index.write(json.dumps(copy) + "\n")


def timed_build(outputs: Path, site: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the build's processes): the CPU figure does not move with other load."""
    env = {**os.environ, "LANEBOOK_OUTPUTS": str(outputs)}
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    built = subprocess.run([str(LANEBOOK), "book", "--out", str(site)], env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - began
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if built.returncode != 0:
        raise SystemExit(f"lanebook book failed:\n{built.stderr[-2000:]}")
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--from", dest="source", type=Path, default=REPO / "outputs", help="outputs dir holding real executed runs"
    )
    args = parser.parse_args()
    runs = source_runs(args.source) or promoted_runs(args.source)
    print(f"copying {len(runs)} executed runs of {args.source} ({', '.join(sorted({r['runbook'] for r, _ in runs}))})")
    times, cpus = {}, {}
    for count in SIZES:
        with tempfile.TemporaryDirectory(prefix="lanebook-bench-book-") as tmp:
            outputs = Path(tmp) / "outputs"
            outputs.mkdir()
            synthetic_trail(runs, count, outputs)
            times[count], cpus[count] = timed_build(outputs, Path(tmp) / "site")
        print(f"{count:4d} runs: book built in {times[count]:6.1f} s ({cpus[count]:.1f} s CPU)")
    small, large = SIZES
    ratio = times[large] / times[small]
    per_run = (times[large] - times[small]) / (large - small)
    print(
        f"growth {small} -> {large} runs: x{ratio:.2f} (linear would be x{large / small:.0f}); "
        f"{per_run:.2f} s per added run; "
        f"CPU x{cpus[large] / cpus[small]:.2f}"
    )
    print(
        f"goal: at most linear and {large} runs under 60 s: "
        f"{'met' if ratio <= large / small and times[large] < 60 else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
