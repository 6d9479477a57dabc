"""The fleets: an index of the fleet files, and a page per fleet with each lane's state and latest promotion and the
waves of every fleet run as they ran (lanebook.runs.fleet_dag's records, `fleet.json`, or what the run records say of a
fleet run that has none yet).

Pure over what it is given: the book stages each fleet as fleets/NAME, reached from the index, not the sidebar.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Optional

from lanebook.lane.fleet_file import FleetParams, plan_waves
from lanebook.runs.fleet_dag import DRY_RUN, FAILED, GO_ON, NOT_RUN, PASSED, RUNNING, STOPPED, LaneOutcome
from lanebook.site.pages.markup import badge, md_table, verdict_badge, where_badge, wide

GATE_BADGES = {GO_ON: "pass", STOPPED: "fail", NOT_RUN: "skipped", RUNNING: "warning"}
FLEET_BADGES = {PASSED: "pass", DRY_RUN: "dry-run", FAILED: "fail", STOPPED: "fail", RUNNING: "warning"}


@dataclass(frozen=True)
class PublishedFleet:
    fleet: FleetParams
    lanes: list[LaneOutcome]  # each lane's latest promotion
    twin: dict[str, bool]  # lane -> a twin lane
    runs: list[dict]  # the fleet's runs, oldest first (fleet.json records)

    @property
    def doc(self) -> str:
        return fleet_doc(self.fleet.name)


def fleet_doc(name: str) -> str:
    return f"fleets/{name}"


def lane_state(outcome: LaneOutcome) -> str:
    """A lane's state as its latest promotion left it, in words."""
    if outcome.verdict == NOT_RUN:
        return "never promoted"
    if outcome.verdict == RUNNING:
        return f"promotion running since {outcome.started_at}"
    if outcome.verdict == PASSED:
        return "serving what its latest promotion proved"
    if outcome.verdict == DRY_RUN:
        return "latest promotion a dry run: nothing observed"
    step = f" (step {outcome.failed_step})" if outcome.failed_step else ""
    return f"latest promotion stopped at {outcome.stopped_at}{step}"


def _promotion(outcome: LaneOutcome, links: dict[str, str], from_doc: str) -> str:
    if not outcome.promotion_id:
        return ""
    doc = links.get(outcome.promotion_id)
    if doc is None:
        return f"`{outcome.promotion_id}`"
    return f"[{outcome.promotion_id}]({posixpath.relpath(doc, posixpath.dirname(from_doc))}.ipynb)"


def utc_span(started: Optional[str], finished: Optional[str]) -> str:
    """An ISO UTC start and end, short: `2026-12-02 22:20:08 → 22:20:11` (the end's date only when it differs)."""

    def short(stamp: str) -> str:
        return stamp.replace("T", " ").split("+")[0].split(".")[0]

    if not started:
        return ""
    start = short(started)
    if not finished:
        return f"{start} →"
    end = short(finished)
    return f"{start} → {end[11:] if end[:10] == start[:10] else end}"


def _wave_rows(run: dict) -> list[list[object]]:
    rows = []
    for wave in run["waves"]:
        lanes = ", ".join(
            f"{lane['lane']} {verdict_badge(lane['verdict'])}" if lane["verdict"] != NOT_RUN else f"{lane['lane']}"
            for lane in wave["lanes"]
        )
        label = "canary" if wave["index"] == 0 else f"wave {wave['index']}"
        rows.append([label, lanes, wave["budget"], badge(wave["gate"], GATE_BADGES.get(wave["gate"], "unknown"))])
    return rows


def fleet_page(published: PublishedFleet, links: dict[str, str]) -> str:
    """One fleet: its lanes' states and latest promotions (LINKS: promotion id -> the page of its last run), the waves
    its file plans, and its runs newest first, each wave's lanes, verdicts and gate decision."""
    fleet, doc = published.fleet, published.doc
    waves = plan_waves(fleet)
    parts = [
        "---\norphan: true\n---\n",
        f"# Fleet {fleet.name}\n",
        f"{fleet.description}\n",
        f"The canary **{fleet.canary}** alone first, then waves of at most {fleet.wave_size} lane(s) in the file's "
        f"order, each starting only when the one before it passed within its failure budget ({fleet.failure_budget} "
        "lane(s) of a wave may fail; the canary's budget is 0). Planned: "
        + "; ".join(f"{'canary' if w.canary else f'wave {w.index}'}: {', '.join(w.lanes)}" for w in waves)
        + ".\n",
        "## Lanes\n",
        wide(
            md_table(
                ["lane", "where", "state", "latest promotion", "verdict", "when (UTC)", "fleet"],
                [
                    [
                        o.lane,
                        where_badge(published.twin.get(o.lane, False)),
                        lane_state(o),
                        _promotion(o, links, doc),
                        verdict_badge(o.verdict) if o.verdict != NOT_RUN else "",
                        utc_span(o.started_at, o.finished_at),
                        f"`{o.fleet_id}`" if o.fleet_id else "",
                    ]
                    for o in published.lanes
                ],
            )
        ),
        "## Fleet runs\n",
    ]
    if not published.runs:
        parts.append(f"No fleet run recorded yet. `lanebook fleet promote {fleet.name}` runs one through Airflow.\n")
    for run in reversed(published.runs):
        kind = " " + badge("dry run", "dry-run") if run.get("dry_run") and run["verdict"] != DRY_RUN else ""
        verdict = badge(run["verdict"], FLEET_BADGES.get(run["verdict"], "unknown"))
        parts += [
            f"### Run `{run['fleet_id']}` · {utc_span(run['created_at'], None).rstrip(' →')} UTC\n",
            f"{verdict}{kind} {run['summary']}\n",
            wide(md_table(["wave", "lanes", "failure budget", "gate"], _wave_rows(run))),
            "".join(f"- {wave['decision']}\n" for wave in run["waves"]),
        ]
    return "\n".join(parts)


def fleets_index(fleets: list[PublishedFleet]) -> str:
    """Every fleet file, each linking to its page, with its latest run's verdict."""
    head = (
        "# Fleets\n\nA fleet (`params/fleets/NAME.yaml`) is several lanes, each on nodes of its own, promoted by "
        "Apache Airflow with `lanebook fleet promote`: the canary lane alone first, then waves of at most the wave "
        "size, the next only when the last passed within its failure budget. Every lane's promotion is an ordinary "
        "one (its runs are in the audit trail), carrying the fleet run's id.\n"
    )
    if not fleets:
        return head + "\nNo fleet file under `params/fleets/` yet.\n"

    def latest(published: PublishedFleet) -> Optional[str]:
        run = published.runs[-1] if published.runs else None
        return badge(run["verdict"], FLEET_BADGES.get(run["verdict"], "unknown")) if run else "no run yet"

    rows = [
        [f"[{p.fleet.name}]({p.doc}.md)", ", ".join(p.fleet.lanes), p.fleet.canary, p.fleet.wave_size, latest(p)]
        for p in fleets
    ]
    return head + "\n" + md_table(["fleet", "lanes", "canary", "wave size", "latest run"], rows)
