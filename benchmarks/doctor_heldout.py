"""The doctor on the public field reports, both halves: the working half its rules were built on, and the held-back
half scored once. Prints, per half, the reports with an established cause named right (the doctor's first finding is
that cause) and the look-alikes given a confirmed finding, and lists every miss with what the doctor said instead.
Posts are assembled from each report's facts (tests/helpers/field_reports.py). Asserts nothing.

    .venv/bin/python benchmarks/doctor_heldout.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers.field_reports import score  # noqa: E402


def main() -> None:
    for split in ("work", "heldout"):
        found = score(split)
        right, causes = found["right"], found["causes"]
        wrong, lookalikes = found["confirmed_on_lookalikes"], found["lookalikes"]
        print(
            f"{split}: named right {right}/{causes} ({100 * right / causes:.0f} %); confirmed on look-alikes "
            f"{wrong}/{lookalikes} ({100 * wrong / lookalikes:.0f} %)"
        )
        for report_id, cause, said in found["missed"]:
            print(f"  missed {report_id} ({cause}): {said or 'no finding'}")


if __name__ == "__main__":
    main()
