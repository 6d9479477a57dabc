"""How long the doctor takes on 100,000 pasted log lines (the issue asks for under 3 s): a healthy start repeated,
with a few faults mixed in. Prints the figure; asserts nothing about this machine's speed."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from lanebook.verify.doctor import Line, diagnose  # noqa: E402
from test_doctor import HEALTHY_START, NVRM, stats  # noqa: E402

LINES = 100_000


def main() -> None:
    rows = (HEALTHY_START + [stats(120.0, 80.0, 2)] * 9) * (LINES // (len(HEALTHY_START) + 9) + 1)
    rows = rows[: LINES - 1] + ["vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue."]
    logs = [Line("head.log", n, text) for n, text in enumerate(rows, 1)]
    kernel = [Line("dmesg.txt", 1, NVRM)]
    start = time.perf_counter()
    found = diagnose(logs, (), kernel)
    took = time.perf_counter() - start
    print(f"doctor: {len(logs):,} log lines in {took:.2f} s ({len(logs) / took:,.0f} lines/s); findings {found.ids()}")


if __name__ == "__main__":
    main()
