"""`lanebook run`: execute a runbook notebook headless with papermill and leave an audit record.

Each run writes outputs/LANE/UTCSTAMP-RUNBOOK-ID.ipynb (never overwriting) and appends one line to
outputs/runs.jsonl. The verdict is read back from the executed notebook (the last cell, or the failing one with the
step's `fix`): a StepFailed is "fail"; any other exception, or no verdict emitted, is "error"; a dry run is "dry-run"
(or "fail" when a check on this machine failed), never "pass". However a run ends it is recorded (a pending record
from the start, lanebook.runs.audit): a dead kernel, Ctrl-C, SIGTERM, SIGHUP or a crash of lanebook is "error",
naming why, with the notebook as far as papermill saved it. Secrets come from the environment: a parameter that
names or holds one is refused.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, TextIO

# nbformat imports jsonschema, which imports the package of every format check it finds installed (jupyter-events
# installs them): rfc3987_syntax builds an Earley parser for "iri" (over a second of every `lanebook run`; the
# Makefile's venv leaves it out, tools/venv-overrides.txt, but an environment lanebook is installed into may hold it),
# isoduration brings arrow, and so on, for checks nothing here makes (nbformat validates notebooks with no format
# checker). A process that runs runbooks goes without them: each import fails and jsonschema leaves that format
# unchecked, as it does when the package is absent. Nothing else installed imports them.
JSONSCHEMA_FORMAT_PACKAGES = (
    "fqdn",
    "rfc3987",
    "rfc3986_validator",
    "rfc3987_syntax",
    "rfc3339_validator",
    "webcolors",
    "jsonpointer",
    "uri_template",
    "isoduration",
)
if "jsonschema" not in sys.modules:
    for name in JSONSCHEMA_FORMAT_PACKAGES:
        sys.modules.setdefault(name, None)

from ruamel.yaml.error import YAMLError  # noqa: E402

from lanebook.base import yamltext  # noqa: E402
from lanebook.base.checks import FAIL  # noqa: E402
from lanebook.base.errors import LanebookError  # noqa: E402
from lanebook.base.files import record_id, utc_stamp  # noqa: E402
from lanebook.base.paths import REPO, RUNBOOKS_DIR, outputs_dir  # noqa: E402
from lanebook.base.redact import RedactedStream, names_secret, redact, redact_data  # noqa: E402
from lanebook.lane.keys import lane_keys  # noqa: E402
from lanebook.lane.params import LaneParams  # noqa: E402
from lanebook.runs.audit import begin_run, discard_run, finish_run, now, verdict_label  # noqa: E402
from lanebook.runs.runbook_kernel import KERNEL_NAME, started_kernel  # noqa: E402

if TYPE_CHECKING:
    from lanebook.steps.runbook import Runbook

RUNBOOKS = (
    "weights",
    "env",
    "launch",
    "warmup",
    "gates",
    "speed",
    "diagnose",
    "rollback",
    "status",
    "stop",
    "doctor",
)
# Runbooks that change a lane; they need --yes where the lane's policy.confirm_changes holds (a dry run never).
CHANGING = {"weights", "env", "launch", "warmup", "diagnose", "rollback", "stop"}  # diagnose: its canary relaunches
# Parameters every runbook takes from `lanebook run` itself, not from -p.
RESERVED = {"lane", "dry_run"}


def refuse_unconfirmed(what: str, params: LaneParams, *, dry_run: bool, yes: bool) -> None:
    """Stop WHAT (a runbook, promote, upgrade) before it changes a lane whose policy.confirm_changes holds, unless
    the operator said --yes; a dry run changes nothing, so it needs no yes."""
    if params.policy.confirm_changes and not dry_run and not yes:
        raise LanebookError(
            f"{what} changes the lane {params.name}: add --yes to confirm, or --dry-run to see the commands"
        )


def parse_params(pairs: list[str]) -> dict[str, Any]:
    """-p KEY=VALUE pairs; values are read as YAML scalars (1 → int, true → bool, text stays text)."""
    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise LanebookError(f"bad parameter {pair!r}: use -p KEY=VALUE")
        try:
            params[key] = json.loads(json.dumps(yamltext.load(value), allow_nan=False)) if value else ""
        except (YAMLError, ValueError, TypeError):  # a bad tag or date, a cycle, inf: not JSON, so not a parameter
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


def _new_output(lane_name: str, runbook: str) -> tuple[str, Path]:
    run_id = record_id()
    stamp = utc_stamp()
    path = outputs_dir() / lane_name / f"{stamp}-{runbook}-{run_id}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(exist_ok=False)  # claim the name: never overwrite an earlier record
    return run_id, path


def refuse_secret_parameters(params: dict[str, Any]) -> None:
    """Secrets come from the environment, never as parameters: papermill writes parameters into the executed
    notebook, which is published. A key naming a secret, or a value redaction would change, is refused."""
    for key, value in params.items():
        if names_secret(key) or redact(str(value)) != str(value):
            env_name = "HF_TOKEN" if str(value).startswith("hf_") else key.upper()
            raise LanebookError(
                f"-p {key}: secrets are never runbook parameters (they would be stored in the executed "
                f"notebook); set {env_name} in the environment instead, where the runbook reads it"
            )


def read_verdict(path: Path) -> Optional[dict]:
    """The verdict the runbook's last cell emitted, if it got that far."""
    import nbformat  # here, not at the top: a run's kernel starts before lanebook imports what the run needs

    from lanebook.steps.runbook import VERDICT_MIME

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


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread like SIGINT's KeyboardInterrupt, so a stopped run records itself."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by a signal after its record was written (verdict error); carries the record."""

    def __init__(self, record: dict, signum: int):
        super().__init__(f"{signal.Signals(signum).name}: run {record['run_id']} recorded as {record['verdict']}")
        self.record, self.signum = record, signum


@contextmanager
def signals_raised():
    """SIGTERM and SIGHUP raise Interrupted while a notebook runs (SIGINT already raises KeyboardInterrupt);
    only the main thread can take signals, so elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise Interrupted(signum)

    previous = {signum: signal.signal(signum, interrupt) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def signals_deferred():
    """Hold SIGINT, SIGTERM and SIGHUP while the record is written, so a second Ctrl-C cannot cut it short."""
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


@dataclass(frozen=True)
class Outcome:
    """How papermill's execution ended: the verdict it implies (None: read it from the notebook), the step or
    cell that stopped it, and why the run did not finish when it did not (noted on the notebook)."""

    emitted: Optional[str] = None
    failed_step: Optional[str] = None
    unfinished: Optional[str] = None


def execute_notebook(
    notebook: Path, output: Path, parameters: dict[str, Any], kernel: object, echo: Optional[TextIO] = None
) -> Outcome:
    """Run the notebook with papermill into OUTPUT (saved as each code cell starts) on KERNEL (started ahead: see
    lanebook.runs.runbook_kernel); how it ended, never raising for it. ECHO: where to say, as the run goes, each step
    as it starts and what the cells print (lanebook.runs.papermill_engine)."""
    import papermill
    from nbclient.exceptions import DeadKernelError
    from papermill.exceptions import PapermillExecutionError

    from lanebook.runs.papermill_engine import ENGINE_NAME

    try:
        papermill.execute_notebook(
            str(notebook),
            str(output),
            parameters=parameters,
            kernel_name=KERNEL_NAME,
            engine_name=ENGINE_NAME,
            progress_bar=False,
            stdout_file=echo,
            stderr_file=echo,
            cwd=str(REPO),
            km=kernel,
            shutdown_kernel="immediate",  # when a signal stops the client: nothing in a kernel's teardown is kept
        )
    except PapermillExecutionError as exc:
        if exc.ename == "StepFailed":
            return Outcome("fail", str(exc.evalue).split(":", 1)[0])
        return Outcome(None, f"cell {exc.exec_count}: {exc.ename}")
    except DeadKernelError as exc:
        return Outcome(None, f"the kernel died: {exc}", unfinished="the notebook's kernel died")
    except Exception as exc:  # noqa: BLE001 - a missing kernel, a broken notebook: still a record
        why = f"papermill: {type(exc).__name__}: {exc}"[:300]
        return Outcome(None, why, unfinished=why)
    return Outcome()


def run_result(outcome: Outcome, output: Path, dry_run: bool) -> dict:
    """The record's result fields from how papermill ended and what the notebook emitted."""
    emitted, failed_step = outcome.emitted, outcome.failed_step
    result = read_verdict(output)
    if result is not None:
        emitted = result["verdict"]
        failed_step = (
            failed_step
            or (result.get("failure") or {}).get("step")
            or next((c["step"] for c in result["checks"] if c["outcome"] == FAIL), None)
        )
    elif emitted is None and failed_step is None:
        failed_step = "no verdict: the notebook ended without rb.finish()"
    failed = next((c for c in (result or {}).get("checks", []) if c["outcome"] == FAIL), None)
    failed_check = None if failed is None else failed["what"] + (f": {failed['detail']}" if failed["detail"] else "")
    return {
        "verdict": record_verdict(emitted, dry_run),
        "failed_step": failed_step,
        # what was expected and what was seen instead, for a terminal that never opens the notebook
        "failed_check": failed_check,
        "fix": ((result or {}).get("failure") or {}).get("fix"),  # what to do next, named by the failed step
        "figures": (result or {}).get("figures", {}),
        "confirmations": (result or {}).get("confirmations", []),  # who let destructive steps go ahead
        "commands": (result or {}).get("commands", []),  # a dry run's recorded command lines, for the terminal
    }


def stopped_result(exc: BaseException, output: Path) -> tuple[dict, str]:
    """The result of a run stopped by a signal, a refusal or a crash of lanebook itself: error, saying which;
    the figures the notebook emitted before it, if any."""
    if isinstance(exc, KeyboardInterrupt):
        name = signal.Signals(exc.signum).name if isinstance(exc, Interrupted) else "SIGINT"
        why = f"interrupted: {name}" + (" (Ctrl-C)" if name == "SIGINT" else "")
    elif isinstance(exc, LanebookError):  # a refusal named by the library, not a bug
        why = f"stopped: {exc}"[:300]
    else:
        why = f"crash: {type(exc).__name__}: {exc}"[:300]
    emitted = read_verdict(output) or {}
    return {
        "verdict": "error",
        "failed_step": why,
        "failed_check": None,
        "fix": None,
        "figures": emitted.get("figures", {}),
        "confirmations": emitted.get("confirmations", []),
    }, why


def start_record(
    runbook: str, params: LaneParams, notebook_params: dict[str, Any], dry_run: bool, link: Optional[dict]
) -> dict:
    """Claim the run's output name and write its pending record (so even a killed run is recorded)."""
    run_id, output = _new_output(params.name, runbook)
    return begin_run(
        {
            "run_id": run_id,
            "runbook": runbook,
            "lane": params.name,
            "twin": params.twin,
            "dry_run": dry_run,
            "started_at": now(),
            "finished_at": None,
            "duration_s": None,
            "verdict": None,
            "failed_step": None,
            "failed_check": None,
            "fix": None,
            "output": str(output.relative_to(outputs_dir())),
            "sha256": None,
            "params": redact_data(notebook_params),
            "git_commit": _git_commit(),
            "figures": {},
            "confirmations": [],
            **(link or {}),
        }
    )


def end_record(pending: dict, result: dict, began: float, unfinished: Optional[str] = None) -> dict:
    """Write the run's one index line (signals held meanwhile); returns the record."""
    with signals_deferred():
        return finish_run(
            pending, {"finished_at": now(), "duration_s": round(time.monotonic() - began, 1), **result}, unfinished
        )


def run_runbook(
    runbook: str,
    lane_params: LaneParams,
    params: dict[str, Any],
    *,
    dry_run: bool = False,
    yes: bool = False,
    link: Optional[dict] = None,
    break_lock: bool = False,
    kernel: object = None,
    echo: Optional[TextIO] = None,
) -> dict:
    """Run one runbook headless and append its record; link: fields tying it to a promotion (promotion_id, ...);
    kernel: the runbook's kernel, started ahead by the caller (lanebook.runs.runbook_kernel), else started here.
    A runbook that changes the lane holds the lane pair's lock while it runs (lanebook.runs.lock); refused, it leaves
    nothing behind.

    However the run ends, it leaves its record: a signal (SIGINT, SIGTERM, SIGHUP) or a crash is recorded as
    error and then raised again (a signal as RunInterrupted, carrying the record). The notebook's kernel loads the
    lane from the file LANE_PARAMS was loaded from. ECHO: a stream told each step as it starts, and what the cells
    print (a terminal's stderr), so a long run is not silent."""
    notebook = runbook_path(runbook)
    if lane_params.file is None:
        raise LanebookError(f"lane {lane_params.name} was built in memory: a runbook runs a lane loaded from its file")
    refuse_secret_parameters(params)
    lane_keys(lane_params)  # a keyed lane's keys read and checked first, and redacted from everything this run writes
    if kernel is not None:
        return _run_on(kernel, notebook, runbook, lane_params, params, dry_run, yes, link, break_lock, echo)
    with started_kernel(notebook, connects=not dry_run) as kernel:  # it boots while the run is checked and begun
        return _run_on(kernel, notebook, runbook, lane_params, params, dry_run, yes, link, break_lock, echo)


def _run_on(
    kernel: object,
    notebook: Path,
    runbook: str,
    lane_params: LaneParams,
    params: dict[str, Any],
    dry_run: bool,
    yes: bool,
    link: Optional[dict],
    break_lock: bool,
    echo: Optional[TextIO],
) -> dict:
    accepted = notebook_parameters(notebook) - RESERVED
    unknown = sorted(set(params) - accepted)
    if unknown:
        raise LanebookError(
            f"unknown parameter(s) for {runbook}: {', '.join(unknown)} (accepted: "
            f"{', '.join(sorted(accepted)) or 'none'})"
        )
    if runbook in CHANGING:
        refuse_unconfirmed(f"'{runbook}'", lane_params, dry_run=dry_run, yes=yes)
    if "confirm" in accepted:
        params = {"confirm": yes or not lane_params.policy.confirm_changes, **params}

    from lanebook.runs.lock import LockRefused, hold_lane_pair

    began = time.monotonic()
    pending = start_record(runbook, lane_params, params, dry_run, link)
    output = outputs_dir() / pending["output"]
    parameters = {"lane": str(lane_params.file), "dry_run": dry_run, **params}
    try:
        # The lock outside: while the notebook runs, SIGTERM raises Interrupted here (recorded), not the lock's exit.
        with (
            hold_lane_pair(
                lane_params,
                runbook,
                pending["run_id"],
                needed=runbook in CHANGING and not dry_run,
                break_lock=break_lock,
            ),
            signals_raised(),
        ):
            outcome = execute_notebook(notebook, output, parameters, kernel, RedactedStream(echo) if echo else None)
        result = run_result(outcome, output, dry_run)
    except LockRefused:
        discard_run(pending)  # nothing ran: no record, and the claimed name is given back
        raise
    except BaseException as exc:
        stopped, why = stopped_result(exc, output)
        record = end_record(pending, stopped, began, unfinished=why)
        if isinstance(exc, KeyboardInterrupt):
            raise RunInterrupted({**record, "output": str(output)}, getattr(exc, "signum", signal.SIGINT)) from exc
        raise
    commands = result.pop("commands")
    record = end_record(pending, result, began, unfinished=outcome.unfinished)
    return {**record, "output": str(output), "commands": commands}


def nested_row(summary: dict, link: str) -> str:
    """A nested run as one row of a runs table (its runbook, lane, verdict, failed step, and its record linked)."""
    return (
        "| runbook | lane | verdict | failed step | record |\n|---|---|---|---|---|\n"
        f"| {summary['runbook']} | {summary['lane']} | {verdict_label(summary['verdict'])} | "
        f"{summary['failed_step'] or ''} | [{summary['run_id']}]({link}) |"
    )


def nested_step(rb: Runbook, runbook: str, *, target: Optional[LaneParams] = None) -> dict:
    """Run RUNBOOK on the runbook's lane (or `target`, another lane) as a nested run with its own record (rollback
    runs the rollback lane's gates), show it as a row linking that record, and expect its verdict to pass (dry-run in
    a dry run). The nested run's summary."""
    params = rb.params if target is None else target
    summary = run_runbook(runbook, params, {}, dry_run=rb.dry_run, yes=True)
    rb.record(
        **{
            f"{runbook}_verdict": summary["verdict"],
            f"{runbook}_run_id": summary["run_id"],
            f"{runbook}_output": summary["output"],
        }
    )
    rb.show(
        markdown=nested_row(summary, f"../{Path(summary['output']).relative_to(outputs_dir())}")
    )  # from outputs/LANE/
    print(f"{runbook} record: {summary['output']}")
    wanted = "dry-run" if rb.dry_run else "pass"
    failed_at = f" at {summary['failed_step']}" if summary["failed_step"] else ""
    rb.expect(
        summary["verdict"] == wanted,
        what=f"{params.name}'s {runbook} verdict is {wanted}",
        detail=f"{summary['verdict']}{failed_at}",
        local=True,
    )
    return summary
