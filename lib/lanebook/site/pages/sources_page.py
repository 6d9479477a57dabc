"""The Sources page: the two operator write-ups this book encodes, each with its title, authors, date and what it
covers (lanebook.recipe.sources), and the lanes whose values come from it. Every citation on the other pages
links here (lanebook.site.pages.links)."""

from __future__ import annotations

from lanebook.lane.params import LaneParams
from lanebook.recipe.sources import SHORTHAND, WRITE_UPS, WriteUp, cited


def _lanes_from(write_up: WriteUp, lanes: list[LaneParams]) -> str:
    names = [f"`{lane.name}`" for lane in lanes if any(cited(m) is write_up for m in SHORTHAND.finditer(lane.source))]
    return ", ".join(names) or "none"


def sources_page(lanes: list[LaneParams]) -> str:
    parts = [
        "# Sources\n\nlanebook encodes two write-ups by the operators of a two-node DGX Spark lane. Their figures "
        "(speeds, KV sizes, failure numbers) and their pitfall list are what the checks, the lane files and the "
        "digital twin must agree with. Every page of this book that cites one links here by its title.\n"
    ]
    for w in WRITE_UPS:
        parts.append(
            f"({w.anchor})=\n## {w.title}\n\n"
            f"- **What it is:** {w.role}.\n"
            f"- **Written by:** {w.authors}.\n"
            f"- **Dated:** {w.dated}.\n"
            f"- **Lanes whose values come from it:** {_lanes_from(w, lanes)} (see the [lane matrix](lanes.md)).\n\n"
            f"{w.covers}\n"
        )
    return "\n".join(parts)
