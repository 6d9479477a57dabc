"""`make demo`: the main job on the twin lane, then the book, then where to look."""
from __future__ import annotations

from rich.console import Console

from .paths import RUNBOOKS_DIR, outputs_dir

MAIN_JOB = ("weights", "env", "launch", "warmup", "gates", "speed")

console = Console()


def _stop_lane_left_up() -> None:
    """A demo starts from a stopped lane, so it can be run again (the launch runbook refuses a busy pair)."""
    from . import ops
    from .nodes import Lane
    from .params import load_lane

    with Lane(load_lane("twin")) as lane:
        if any(ops.running_containers(lane).values()):
            console.print("stopping the twin lane an earlier run left up")
            ops.stop_lane(lane)


def run_demo() -> int:
    from .book import build_book
    from .execute import run_runbook
    from .twin import control

    console.rule("twin")
    control.print_status(control.up(faults=[], fast=True))
    _stop_lane_left_up()
    verdicts = {}
    for name in MAIN_JOB:
        if not (RUNBOOKS_DIR / f"{name}.ipynb").exists():
            console.print(f"[yellow]{name}: runbook not written yet — skipped[/]")
            continue
        console.rule(f"runbook {name} (twin lane)")
        record = run_runbook(name, "twin", {})
        verdicts[name] = record["verdict"]
        color = "green" if record["verdict"] == "pass" else "red"
        console.print(f"[{color}]{name}: {record['verdict']}[/]" + (f" — failed step: {record['failed_step']}" if record["failed_step"] else ""))
        console.print(f"  executed notebook: {record['output']}")
        if record["verdict"] != "pass":
            break  # later stages depend on this one
    console.rule("book")
    site = build_book()
    console.print(f"outputs: {outputs_dir()}  (index: {outputs_dir() / 'runs.jsonl'})")
    console.print(f"site:    {site}")
    ok = bool(verdicts) and all(v == "pass" for v in verdicts.values())
    console.print(("[green]demo passed[/]" if ok else "[red]demo failed[/]") + " — all figures are TWIN figures")
    return 0 if ok else 1
