"""`lanebook run`: execute a runbook notebook headless with papermill and leave an audit record.

Each run writes outputs/LANE/UTCSTAMP-RUNBOOK-ID.ipynb (never overwriting) and appends one line to
outputs/runs.jsonl. The verdict is read back from the executed notebook: the runbook's last cell
emits it, or the failing cell when a step failed (so the figures measured before it are kept, with the
step's "what to do next" as the record's `fix`); a StepFailed is "fail"; any other exception, or a
notebook that never emits a verdict, is "error".
A dry run observed nothing on the lane, so its record says "dry-run" (or "fail" when a check made on
this machine failed), never "pass".
"""
from __future__ import annotations

import json
import subprocess
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import nbformat
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from .audit import append_run, sha256_file
from .errors import LanebookError
from .params import lane_path, load_lane
from .paths import REPO, RUNBOOKS_DIR, outputs_dir
from .redact import redact_data
from .runbook import VERDICT_MIME

RUNBOOKS = ("weights", "env", "launch", "warmup", "gates", "speed", "diagnose", "rollback", "status", "stop")
# Runbooks that change a lane; on a real lane they need --yes (a dry run needs nothing).
CHANGING = {"weights", "env", "launch", "warmup", "diagnose", "rollback", "stop"}  # diagnose: its canary relaunches
# Parameters every runbook takes from `lanebook run` itself, not from -p.
RESERVED = {"lane", "dry_run"}


def parse_params(pairs: list[str]) -> dict[str, Any]:
    """-p KEY=VALUE pairs; values are read as YAML scalars (1 → int, true → bool, text stays text)."""
    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise LanebookError(f"bad parameter {pair!r}: use -p KEY=VALUE")
        try:
            params[key] = YAML(typ="safe").load(value) if value else ""
        except YAMLError:
            raise LanebookError(f"bad parameter {pair!r}: the value is not a YAML scalar (quote it)") from None
    return params


def runbook_path(runbook: str) -> Path:
    if runbook not in RUNBOOKS:
        raise LanebookError(f"unknown runbook '{runbook}' (one of: {' '.join(RUNBOOKS)})")
    path = RUNBOOKS_DIR / f"{runbook}.ipynb"
    if not path.exists():
        raise LanebookError(f"runbook '{runbook}' is not written yet ({RUNBOOKS_DIR.name}/{path.name} missing)")
    return path


def notebook_parameters(path: Path) -> set[str]:
    import papermill

    return set(papermill.inspect_notebook(str(path)).keys())


def _git_commit() -> Optional[str]:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _new_output(lane: str, runbook: str) -> tuple[str, Path]:
    # Hex with a letter first: `-p restore=RUN_ID` is read as YAML, where 12345678 or 1234e567 would be numbers.
    run_id = "abcdef"[uuid.uuid4().int % 6] + uuid.uuid4().hex[:7]
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = outputs_dir() / lane / f"{stamp}-{runbook}-{run_id}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(exist_ok=False)  # claim the name: never overwrite an earlier record
    return run_id, path


def read_verdict(path: Path) -> Optional[dict]:
    """The verdict the runbook's last cell emitted, if it got that far."""
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:  # noqa: BLE001 - an empty or half-written output has no verdict
        return None
    for cell in reversed(nb.cells):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if VERDICT_MIME in data:
                value = data[VERDICT_MIME]
                return json.loads(value) if isinstance(value, str) else dict(value)
    return None


def record_verdict(emitted: Optional[str], dry_run: bool) -> str:
    """The record's verdict from the one the notebook emitted: none is an error, and a dry run is never a pass."""
    if emitted is None:
        return "error"
    return "dry-run" if dry_run and emitted == "pass" else emitted


def run_runbook(runbook: str, lane: str, params: dict[str, Any], *, dry_run: bool = False, yes: bool = False,
                link: Optional[dict] = None, break_lock: bool = False) -> dict:
    """Run one runbook headless and append its record; link: fields tying it to a promotion (promotion_id, ...).
    A runbook that changes the lane holds the lane pair's lock while it runs (lanebook.lock); refused, it leaves
    nothing behind."""
    notebook = runbook_path(runbook)
    lane_params = load_lane(lane)
    accepted = notebook_parameters(notebook) - RESERVED
    unknown = sorted(set(params) - accepted)
    if unknown:
        raise LanebookError(f"unknown parameter(s) for {runbook}: {', '.join(unknown)} (accepted: {', '.join(sorted(accepted)) or 'none'})")
    if runbook in CHANGING and not lane_params.twin and not dry_run and not yes:
        raise LanebookError(f"'{runbook}' changes the real lane {lane_params.name}: add --yes to confirm, or --dry-run to see the commands")
    if "confirm" in accepted:
        params = {"confirm": yes or lane_params.twin, **params}

    run_id, output = _new_output(lane_params.name, runbook)
    lane_arg = str(lane_path(lane).resolve())
    started = _now()
    emitted, failed_step, figures = None, None, {}
    import papermill
    from papermill.exceptions import PapermillExecutionError

    from .lock import LockRefused, hold_lane_pair

    try:
        with hold_lane_pair(lane_params, runbook, run_id, needed=runbook in CHANGING and not dry_run, break_lock=break_lock):
            papermill.execute_notebook(str(notebook), str(output), parameters={"lane": lane_arg, "dry_run": dry_run, **params},
                                       kernel_name="python3", progress_bar=False, cwd=str(REPO),
                                       extra_arguments=["--IPKernelApp.log_level=ERROR"])  # no kernel chatter on the terminal
    except LockRefused:
        output.unlink()  # nothing ran: no record, and the claimed name is given back
        raise
    except PapermillExecutionError as exc:
        if exc.ename == "StepFailed":
            emitted, failed_step = "fail", str(exc.evalue).split(":", 1)[0]
        else:
            failed_step = f"cell {exc.exec_count}: {exc.ename}"
    except Exception as exc:  # noqa: BLE001 - a dead or missing kernel still leaves a record
        failed_step = f"papermill: {type(exc).__name__}: {exc}"[:300]
    result = read_verdict(output)
    if result is not None:
        emitted, figures = result["verdict"], result["figures"]
        failed_step = failed_step or (result.get("failure") or {}).get("step") \
            or next((c["step"] for c in result["checks"] if c["outcome"] == "fail"), None)
    elif emitted is None and failed_step is None:
        failed_step = "no verdict: the notebook ended without rb.finish()"
    verdict = record_verdict(emitted, dry_run)
    record = {
        "run_id": run_id,
        "runbook": runbook,
        "lane": lane_params.name,
        "twin": lane_params.twin,
        "dry_run": dry_run,
        "started_at": started,
        "finished_at": _now(),
        "verdict": verdict,
        "failed_step": failed_step,
        "fix": ((result or {}).get("failure") or {}).get("fix"),  # what to do next, named by the failed step
        "output": str(output.relative_to(outputs_dir())),
        "sha256": sha256_file(output),
        "params": redact_data(params),
        "git_commit": _git_commit(),
        "figures": figures,
        "confirmations": (result or {}).get("confirmations", []),  # who let destructive steps go ahead
        **(link or {}),
    }
    append_run(record)
    commands = result["commands"] if result else []  # a dry run's recorded command lines, for the terminal
    return {**record, "output": str(output), "commands": commands}


def launch_twin_lane_if_down(rb, lane_arg: str) -> None:
    """Runbooks that need the lane up (speed, diagnose) launch a twin lane they find cleanly down, through the
    `launch` runbook (its own record, linked in rb's figures as `launched`, and expected to pass), so they run
    from bare papermill; the twin changes nothing real. A real lane is never launched this way, and a dry run
    launches nothing."""
    from .launcher import LANE_DOWN, ask_api, lane_containers

    lane = rb.lane
    if lane.executor.dry_run or not lane.params.twin or ask_api(lane).healthy or lane_containers(lane).state != LANE_DOWN:
        return
    launched = run_runbook("launch", lane_arg, {})
    rb.record(launched={"run_id": launched["run_id"], "verdict": launched["verdict"]})
    rb.expect(launched["verdict"] == "pass", "the twin lane, found cleanly down, launched by the `launch` runbook",
              f"{launched['output']}: verdict {launched['verdict']}")
