"""The doctor over its whole case base, leave-one-thread-out: for every thread, the retrieval index is rebuilt without
that thread's cases and each of its reports is read by the doctor, as its log and kernel lines only (reports that
quote some) and as the whole post (tests/helpers/field_reports.py assembles it). Right: the doctor's first finding is
the report's cause; a look-alike is right when nothing is confirmed. Prints overall and per-cause figures, the misses
with what the doctor said instead (--misses), and the commit measured. Asserts nothing.

    .venv/bin/python benchmarks/doctor_casebase.py [--misses]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers.field_reports import log_text, named_right, post  # noqa: E402
from lanebook.recipe.casebase import LOOKALIKE, Case, cases  # noqa: E402
from lanebook.verify.doctor import diagnose, read_lines  # noqa: E402
from lanebook.verify.doctor_cases import without_thread  # noqa: E402


def loto(chosen: tuple[Case, ...] | None = None) -> dict:
    """Per report: (case, right as log lines or None when it quotes none, right as a post, what the post gave)."""
    chosen = chosen or cases()
    threads: dict[str, list[Case]] = defaultdict(list)
    for c in chosen:
        threads[c.thread].append(c)
    rows = []
    for thread, members in threads.items():
        index = without_thread(thread, among=chosen)
        for c in members:
            as_post = diagnose(read_lines(f"{c.id}.md", post(c)), cases=index)
            logs = log_text(c)
            as_logs = named_right(c, diagnose(read_lines(f"{c.id}.log", logs), cases=index)) if logs else None
            rows.append((c, as_logs, named_right(c, as_post), [(f.id, f.confidence) for f in as_post.findings][:3]))
    return {"threads": len(threads), "rows": rows}


def _pct(right: int, total: int) -> str:
    return f"{right}/{total} ({100 * right / total:.1f} %)" if total else "0/0"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--misses", action="store_true", help="list every report the post reading missed")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "lib"], capture_output=True, text=True).stdout.strip()
    start = time.perf_counter()
    found = loto()
    took = time.perf_counter() - start
    rows = found["rows"]
    logs = [r for r in rows if r[1] is not None]
    print(f"commit {commit}{' (with uncommitted changes in lib/)' if dirty else ''}")
    print(f"leave-one-thread-out over {len(rows)} reports from {found['threads']} threads ({took:.1f} s)")
    print(f"  as whole posts: {_pct(sum(r[2] for r in rows), len(rows))}")
    print(f"  as log lines only ({len(logs)} reports quote some): {_pct(sum(bool(r[1]) for r in logs), len(logs))}")
    causes = [r for r in rows if r[0].cause != LOOKALIKE]
    look = [r for r in rows if r[0].cause == LOOKALIKE]
    print(
        f"  causes (posts): {_pct(sum(r[2] for r in causes), len(causes))}; look-alikes with nothing confirmed: "
        f"{_pct(sum(r[2] for r in look), len(look))}"
    )
    by_cause: dict[str, list] = defaultdict(list)
    for r in rows:
        by_cause[r[0].cause].append(r)
    print("per cause (posts; log lines):")
    for cause, members in sorted(by_cause.items(), key=lambda x: (-len(x[1]), x[0])):
        with_logs = [r for r in members if r[1] is not None]
        print(
            f"  {cause:40} {_pct(sum(r[2] for r in members), len(members)):18} "
            f"{_pct(sum(bool(r[1]) for r in with_logs), len(with_logs))}"
        )
    if args.misses:
        for c, _, right, said in rows:
            if not right:
                print(f"  missed {c.id} ({c.cause}): {said or 'no finding'}")


if __name__ == "__main__":
    main()
