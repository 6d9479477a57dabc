"""`make demo`: `lanebook promote --lane twin` (the main job on the twin lane), then the book, then where to look
(the book's path is the last line).

The demo passes only when every runbook of the main job exists and passed: a runbook not written yet is
named as missing and fails the demo (no promotion is run), and the book is still built.
"""

from __future__ import annotations

from rich.console import Console

from lanebook.base.paths import outputs_dir
from lanebook.runs.promote import MAIN_JOB, missing_runbooks

console = Console()


def demo_outcome(verdicts: dict[str, str], missing: list[str], job: tuple[str, ...] = MAIN_JOB) -> tuple[bool, str]:
    """Did the demo pass, and the closing line that says why: every runbook of the job ran and passed, or not."""
    not_run = [name for name in job if name not in verdicts and name not in missing]
    failed = [f"{name} {verdict}" for name, verdict in verdicts.items() if verdict != "pass"]
    problems = (
        ([f"missing runbooks (not written yet): {', '.join(missing)}"] if missing else [])
        + ([f"not passed: {', '.join(failed)}"] if failed else [])
        + ([f"not run after that: {', '.join(not_run)}"] if not_run else [])
    )
    if problems:
        return False, f"demo failed — {'; '.join(problems)}"
    return True, f"demo passed: {', '.join(job)} all pass"


def _stop_lane_left_up() -> None:
    """A demo starts from a stopped lane, so it can be run again (the launch runbook refuses a busy pair)."""
    from lanebook.lane.params import load_lane
    from lanebook.nodes.ssh import Lane
    from lanebook.ops import launcher

    with Lane(load_lane("twin")) as lane:
        if any(launcher.running_containers(lane).values()):
            console.print("stopping the twin lane an earlier run left up")
            launcher.stop_lane(lane)


def run_demo() -> int:
    from lanebook.runs.promote import promote_shown
    from lanebook.site.book import build_book, show_warnings
    from lanebook.twin import control

    missing = missing_runbooks()
    console.rule("twin")
    control.print_status(control.up(faults=[], fast=True))
    _stop_lane_left_up()
    verdicts: dict[str, str] = {}
    if missing:
        console.print(
            f"[red]main job incomplete: {', '.join(missing)} not written yet (runbooks/NAME.ipynb); "
            "no promotion is run, and the demo fails[/]"
        )
    else:
        verdicts = {r["runbook"]: r["verdict"] for r in promote_shown("twin").records}
    console.rule("book")
    built = build_book()
    show_warnings(built)
    site = built.index
    console.print(f"outputs: {outputs_dir()}  (index: {outputs_dir() / 'runs.jsonl'})", soft_wrap=True)
    ok, line = demo_outcome(verdicts, missing)
    console.print(f"[{'green' if ok else 'red'}]{line}[/] — all figures are TWIN figures")
    console.print(f"book:    {site}  (open it in a browser: {site.as_uri()})", soft_wrap=True)  # last: where to look
    return 0 if ok else 1
