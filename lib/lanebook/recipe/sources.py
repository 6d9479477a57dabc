"""The two operator write-ups lanebook encodes, named once: their titles, authors, dates and what they cover.

The code and ARCHITECTURE.md's glossary cite them by a short id (`shorthand`); a reader of the book is given the
write-up's own title instead (lanebook.site.pages.sources_page: the Sources page, and the link every page's citation
becomes). What each covers is read from the write-ups themselves (../shared/seeds).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class WriteUp:
    shorthand: str  # the id the code and the glossary cite
    anchor: str  # its section on the Sources page
    title: str  # as the write-up gives it
    short_title: str  # what a citation on a page shows
    role: str  # what lanebook calls it in prose
    authors: str
    dated: str
    covers: str


RECIPE = WriteUp(
    shorthand="seed 000",
    anchor="recipe-write-up",
    title="Flash-0731 on 2× DGX Spark: current recipe and honest speed",
    short_title="Flash-0731 on 2× DGX Spark",
    role="the recipe",
    authors="James Meadlock & Milo (Funland dual DGX Spark)",
    dated="created July 31, 2026; last updated August 23, 2026",
    covers=(
        "The current recipe (lane anemll-0731): DeepSeek-V4-Flash-0731 on the Anemll 0.1.1 image, 1M context, 6 "
        "slots, MTP/DSpark K=5 with the 5/4/3 batch-size verify schedule. Weights (download once, rsync once), "
        "checkout and env, launch and stop from the head, Hermes wiring, the gates before calling it live, "
        "rollback to preview weights, seventeen numbered pitfalls (P01–P17 here), follow-up diagnostics "
        "(prefix-cache churn, the C4↔C5 K boundary, the batch 8216 canary, bounded post-readiness warmup) and "
        "measured speed."
    ),
)
CANARY = WriteUp(
    shorthand="seed 003",
    anchor="canary-write-up",
    title="1M/6 canary live",
    short_title="1M/6 canary live",
    role="the canary write-up",
    authors="the same operators (James and Milo's pair; the write-up has no byline)",
    dated="the live canary of July 29, 2026",
    covers=(
        "The earlier move from the Patch3 350K/12 lane (patch3-c12, the rollback lane) to the Anemll 1M/6 lane "
        "(anemll-1m6): the lane table, the GPU_MEMORY_UTILIZATION 0.80 vs 0.85 failure with its figures (7.16 "
        "GiB KV available vs 7.54 GiB needed), the gates (API, tool-call and Hermes route smokes) and the "
        "C1/C4/C6 streaming table with its method note."
    ),
)
WRITE_UPS = (RECIPE, CANARY)
_BY_SHORTHAND = {w.shorthand: w for w in WRITE_UPS}
# "seed 000", "Seed 003's": the shorthand as code and data spell it.
SHORTHAND = re.compile(r"\b[Ss]eed (000|003)\b")


def cited(match: re.Match) -> WriteUp:
    """The write-up a SHORTHAND match names."""
    return _BY_SHORTHAND[f"seed {match.group(1)}"]
