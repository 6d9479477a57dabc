"""`make demo`: `lanebook promote --lane twin`, then every other runbook rehearsed on the twin in the order an
operator meets them, then the book, then where to look (the book's path is the last line).

After the promotion: `diagnose`, `doctor`, the rollback drill (`rollback`, then `stop` the rollback lane, `launch`
the twin lane) and `status`, so every runbook's page in the book is a rehearsal; then the recorded plan of upgrading
the twin lane's checkout between the twin recipe remote's two commits, and the twin fleet promoted through Airflow
as a dry run (nothing observed, nothing passed). Each verdict is printed as it ends. The demo stops at the first run
not passed and passes only when every runbook exists and every run passed; a missing runbook is named and fails the
demo; the book is built either way.
"""

from __future__ import annotations

import sys
from collections import Counter

from rich.console import Console

from lanebook.base.paths import outputs_dir
from lanebook.runs.promote import MAIN_JOB, missing_runbooks, show_record

console = Console()
TWIN_LANE = "twin"
TWIN_FLEET = "twin-fleet"
ROLLBACK_LANE = "the twin lane's rollback lane"  # resolved from params/twin.yaml's `rollback:` when run
# (runbook, lane, parameters) after the main job, in the operator's order. The diagnose canary keeps its three
# trials a cell (a value is judged only on complete bands) on one workload at C1 and shorter streams: the twin's
# decode rates are the seeds', and its two relaunches are most of the rehearsal's time. The schedule canary is left
# out: a restore writes the kept side into the lane file it ran on, here the repository's params/twin.yaml (the
# suite proves it on a copy). The stepped long-context probe (P15) climbs to 20,000 tokens, not the lane's 1M.
DIAGNOSE_REHEARSAL = {
    "canary_workloads": ["count"],
    "canary_concurrency": [1],
    "canary_max_tokens": 64,
    "boundary_max_tokens": 128,
    "boundary_short_tokens": 32,
    "schedule_canary": False,
    "long_context": True,
    "long_context_tokens": 20000,
}
AFTER_PROMOTION = (
    ("diagnose", TWIN_LANE, DIAGNOSE_REHEARSAL),
    ("doctor", TWIN_LANE, {}),
    ("rollback", TWIN_LANE, {}),
    ("stop", ROLLBACK_LANE, {}),
    ("launch", TWIN_LANE, {}),
    ("status", TWIN_LANE, {}),
)


def demo_runs(rollback_name: str) -> list[tuple[str, str, dict]]:
    """The runs after the main job, the rollback lane named."""
    return [(name, rollback_name if lane == ROLLBACK_LANE else lane, params) for name, lane, params in AFTER_PROMOTION]


def run_label(runbook: str, lane_name: str) -> str:
    return runbook if lane_name == TWIN_LANE else f"{runbook} ({lane_name})"


def demo_labels(rollback_name: str) -> tuple[str, ...]:
    """Every run of the demo, in order, as its closing line names them."""
    return MAIN_JOB + tuple(run_label(name, lane) for name, lane, _ in demo_runs(rollback_name))


def demo_outcome(
    verdicts: list[tuple[str, str]], missing: list[str], job: tuple[str, ...] = MAIN_JOB
) -> tuple[bool, str]:
    """Did the demo pass, and the closing line that says why: every run of the job ran and passed, or not.
    verdicts: (run label, verdict) in the order run."""
    ran = Counter(label for label, _ in verdicts)  # launch runs twice: once in the job, once after the rollback
    not_run = []
    for label in job:
        if ran[label]:
            ran[label] -= 1
        elif label not in missing:
            not_run.append(label)
    failed = [f"{label} {verdict}" for label, verdict in verdicts if verdict != "pass"]
    problems = (
        ([f"missing runbooks (not written yet): {', '.join(missing)}"] if missing else [])
        + ([f"not passed: {', '.join(failed)}"] if failed else [])
        + ([f"not run after that: {', '.join(not_run)}"] if not_run else [])
    )
    if problems:
        return False, f"demo failed — {'; '.join(problems)}"
    return True, f"demo passed: {', '.join(job)} all pass"


def _stop_lanes_left_up(names: list[str]) -> None:
    """A demo starts from stopped lanes, so it can be run again (the launch runbook refuses a busy pair)."""
    from lanebook.lane.params import load_lane
    from lanebook.nodes.ssh import LaneNodes
    from lanebook.ops import launcher

    for name in names:
        with LaneNodes(load_lane(name)) as nodes:
            if any(launcher.running_containers(nodes).values()):
                console.print(f"stopping the {name} lane an earlier run left up")
                launcher.stop_lane(nodes)


def _run_shown(runbook: str, lane_name: str, params: dict) -> dict:
    """One recorded run on the terminal, as `promote` shows each of its runbooks (its steps and waits on stderr)."""
    from lanebook.lane.params import load_lane
    from lanebook.runs.execute import run_runbook

    console.rule(f"runbook {run_label(runbook, lane_name)}")
    record = run_runbook(runbook, load_lane(lane_name), params, echo=sys.stderr)
    show_record(console, record, run_label(runbook, lane_name), soft_wrap=True)
    return record


def record_upgrade_plan() -> None:
    """`lanebook upgrade --lane twin --from JULY31 --to AUGUST22 --record` on two clones of the twin's recipe remote:
    the plan the book's upgrade page shows (the suite proves the on-lane upgrade: tests/test_upgrade_run.py)."""
    import tempfile
    from pathlib import Path

    from lanebook.lane.params import load_lane
    from lanebook.recipe.upgrade_plan import plan_checkouts, print_plan, write_plan
    from lanebook.twin import remote

    console.rule(f"upgrade plan {TWIN_LANE}: recipe July 31 -> August 22")
    with tempfile.TemporaryDirectory(prefix="lanebook-demo-upgrade-") as scratch:
        root = Path(scratch)
        origin, shas = remote.lay_out_remote(root)
        for shape in (remote.JUL31, remote.AUG22):
            remote.clone_at(origin, shas[shape], root / shape)
        plan = plan_checkouts(load_lane(TWIN_LANE), root / remote.JUL31, root / remote.AUG22)
        print_plan(plan)
        console.print(f"plan recorded: {write_plan(plan)}", soft_wrap=True)


def rehearse_fleet() -> bool:
    """`lanebook fleet promote twin-fleet --dry-run`: the DAG written and run by Airflow, every lane's promotion a dry
    run (no connection opened), the fleet's record kept for the book. True when it ended clean."""
    from lanebook.runs.fleet_dag import promote_fleet_shown

    console.rule(f"fleet {TWIN_FLEET} (dry run, through Airflow)")
    return promote_fleet_shown(TWIN_FLEET, dry_run=True) == 0


def run_demo() -> int:
    from lanebook.lane.params import load_lane
    from lanebook.runs.promote import promote_shown
    from lanebook.site.book import build_book, show_warnings
    from lanebook.twin import control

    rollback_name = load_lane(TWIN_LANE).rollback
    runs = demo_runs(rollback_name)
    missing = missing_runbooks(MAIN_JOB + tuple(dict.fromkeys(name for name, _, _ in runs)))
    fleet_clean = False
    console.rule("twin")
    control.print_status(control.up(faults=[], fast=True))
    _stop_lanes_left_up([TWIN_LANE, rollback_name])
    verdicts: list[tuple[str, str]] = []
    if missing:
        console.print(
            f"[red]demo incomplete: {', '.join(missing)} not written yet (runbooks/NAME.ipynb); "
            "nothing is run, and the demo fails[/]"
        )
    else:
        verdicts = [(r["runbook"], r["verdict"]) for r in promote_shown(TWIN_LANE).records]
        for runbook, lane, params in runs if all(v == "pass" for _, v in verdicts) else ():
            record = _run_shown(runbook, lane, params)
            verdicts.append((run_label(runbook, lane), record["verdict"]))
            if record["verdict"] != "pass":
                break  # each run stands on the one before it
        record_upgrade_plan()
        fleet_clean = rehearse_fleet()
    console.rule("book")
    built = build_book()
    show_warnings(built)
    site = built.index
    console.print(f"outputs: {outputs_dir()}  (index: {outputs_dir() / 'runs.jsonl'})", soft_wrap=True)
    ok, line = demo_outcome(verdicts, missing, demo_labels(rollback_name))
    if ok and not fleet_clean:
        ok, line = False, f"demo failed — the {TWIN_FLEET} fleet's dry run through Airflow did not end clean"
    console.print(f"[{'green' if ok else 'red'}]{line}[/] — all figures are TWIN figures")
    if ok:
        console.print(f"lane {TWIN_LANE} is left up and serving, as promoted: {load_lane(TWIN_LANE).api}")
    console.print(f"book:    {site}  (open it in a browser: {site.as_uri()})", soft_wrap=True)  # last: where to look
    return 0 if ok else 1
