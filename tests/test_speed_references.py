"""The figures others published (lanebook.speed.references): each as the write-up it cites gives it, with that
write-up's title, and none of them a figure of a lane's stored baseline."""

import re

import pytest
from helpers.recipe_fixtures import SHARED
from lanebook.lane.params import lane_names
from lanebook.speed.baseline import stored_baseline
from lanebook.speed.references import PUBLISHED_FIGURES, SEED_000, SEED_003

SEED_FILES = {SEED_000: "000_25116b2347ff45eb.txt", SEED_003: "003_5aeb1354e87d3c98.txt"}


def seed_text(source: str) -> str:
    path = SHARED / "seeds" / SEED_FILES[source]
    if not path.is_file():
        pytest.skip(f"the seeds are not here ({path}): the figures cannot be read against them")
    return path.read_text()


@pytest.mark.parametrize("figure", PUBLISHED_FIGURES, ids=lambda f: f.figure)
def test_each_figure_is_the_one_its_write_up_gives(figure):
    text = seed_text(figure.source)
    title = figure.source.rsplit(" (seed", 1)[0]
    assert title in text
    number = figure.value.lstrip("~")
    assert re.search(rf"(?<![\d.]){re.escape(number)}(?![\d])", text), number
    assert (figure.value.startswith("~")) == bool(re.search(rf"(roughly|around)\s+{re.escape(number)}", text)), (
        "approximate exactly where the write-up says so"
    )


def test_no_reference_is_a_baseline_figure():
    """References are beside lanebook's bands, never a lane's baseline (anemll-1m6's holds seed 003's own table)."""
    stored = set()
    for name in lane_names():
        baseline = stored_baseline(name)
        for doc in baseline.documents if baseline else ():
            for run in doc["runs"]:
                stored |= {run["mean_stream_decode_tok_s"], run["wall_aggregate_tok_s"]}
    assert not stored & {float(f.value.lstrip("~")) for f in PUBLISHED_FIGURES}
