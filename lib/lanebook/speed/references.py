"""Speed figures others published, kept as references: never lanebook's measurements, never a lane's baseline.

The write-ups cite figures beyond their own streaming table (which is anemll-1m6's stored baseline): MiaAI-Lab's
public numbers that made the 1M/6 canary worth trying, the Patch3 lane's old C1 proof, the 95.9 probe class the
recipe warns against marketing, and the restored lane's best count-300 run. Each is written here once, with who
measured it, under what conditions and which write-up cites it (by title); the book's speed page shows them as
labelled references. Their conditions differ from lanebook's bands (other harnesses, single best runs, other
pairs), so nothing judges a run against them.
"""

from __future__ import annotations

from dataclasses import dataclass

SEED_000 = "Flash-0731 on 2× DGX Spark: current recipe and honest speed (seed 000)"
SEED_003 = "1M/6 canary live (seed 003)"


@dataclass(frozen=True)
class PublishedFigure:
    figure: str  # what it is, in a few words
    value: str  # as the write-up gives it (approximate where it says so)
    unit: str
    measured_by: str
    conditions: str  # workload, concurrency, lane, and what kind of run
    source: str  # the write-up citing it, by title


PUBLISHED_FIGURES: tuple[PublishedFigure, ...] = (
    PublishedFigure(
        "single-stream decode",
        "~72",
        "tok/s",
        "MiaAI-Lab",
        "C1, the updated DSpark recipe on Anemll's GX10 image; from MiaAI-Lab's public tweet",
        SEED_003,
    ),
    PublishedFigure(
        "aggregate decode at six streams",
        "~137",
        "tok/s",
        "MiaAI-Lab",
        "C6 (up to), the same recipe; from MiaAI-Lab's public tweet",
        SEED_003,
    ),
    PublishedFigure(
        "median C1 decode",
        "~66.6",
        "tok/s",
        "MiaAI-Lab",
        "C1 median, the recipe repository README's benchmark table",
        SEED_003,
    ),
    PublishedFigure(
        "Patch3 C1 proof",
        "~60.4",
        "tok/s",
        "the write-up's operators",
        'C1 on the old Patch3 350K/12 lane; the figure the 1m6 gain was read against ("looks 15% faster")',
        SEED_003,
    ),
    PublishedFigure(
        "probe class",
        "95.9",
        "t/s",
        "0xSero",
        "a high-accept probe after the breakable-graph opt-out (PR #14); not the daily number: agent/code work "
        "lives in the 47–70 band",
        SEED_000,
    ),
    PublishedFigure(
        "best count-300 run",
        "90.70",
        "t/s",
        "the write-up's operators",
        "the lane restored to batch 8192 after the 8216 canary; one best count-stream run, not a band",
        SEED_000,
    ),
)
