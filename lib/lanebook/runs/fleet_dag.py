"""`lanebook fleet promote FLEET`: a fleet's lanes promoted by Apache Airflow, the canary first, then waves.

lanebook writes the plan and an Airflow DAG (`plan.json`, `dag.py`) into outputs/fleets/FLEET/UTCSTAMP-FLEETID/ and
runs it with `airflow dags test` from its own venv (`.tools/airflow`, SQLite under outputs/fleets/.airflow); an
Airflow deployment can run the same file. The DAG holds no logic: each lane's task runs `lanebook promote --lane LANE
--fleet-id ID`; after each wave a gate task (trigger rule all_done) runs `lanebook fleet gate RUNDIR WAVE` and fails,
stopping the fleet, when more of the wave's promotions failed than its budget allows (the canary's is 0).
The record, `fleet.json`, gives each lane's promotion, each gate's decision and the fleet's verdict (pass, fail,
stopped, error, dry-run). It is a pure function of the plan and the run records (`fleet_outcome`): each gate writes
it after its wave and `fleet promote` once more at the end, and `lanebook fleet status` reads any fleet the same way.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

from lanebook.base import paths
from lanebook.base.errors import LanebookError
from lanebook.base.files import record_id, utc_stamp, write_atomic
from lanebook.lane.fleet_file import FleetParams, Wave, plan_waves
from lanebook.lane.params import NAME_RE
from lanebook.runs.promote import MAIN_JOB, latest_promotion

AIRFLOW_BIN = paths.REPO / ".tools" / "airflow" / "bin" / "airflow"
PLAN_FILE, DAG_FILE, RECORD_FILE, AIRFLOW_LOG = "plan.json", "dag.py", "fleet.json", "airflow.log"
# How a fleet and a lane end (a lane as its promotion's verdict: pass, fail, error, dry-run), and a wave's gate decides.
PASSED, FAILED, STOPPED, ERROR, DRY_RUN, NOT_RUN, RUNNING, GO_ON = (
    "pass",
    "fail",
    "stopped",
    "error",
    "dry-run",
    "not run",
    "running",
    "go on",
)
# What a lanebook run needs from the environment that Airflow's task would not know: where lanebook records, where
# its twin lives when one is named, and which lanebook (this checkout's library).
PASSED_ENV = ("LANEBOOK_OUTPUTS", "LANEBOOK_TWIN_DIR")


def check_fleet_id(value: Optional[str]) -> Optional[str]:
    """A fleet id as given on the command line: a record id's characters, or one clear error."""
    if value is not None and not NAME_RE.fullmatch(value):
        raise LanebookError(f"--fleet-id must be a fleet run's id (letters, digits, '.', '_', '-'), got {value!r}")
    return value


def fleets_dir() -> Path:
    return paths.outputs_dir() / "fleets"


def airflow_home() -> Path:
    return fleets_dir() / ".airflow"


# --- the plan and its DAG ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FleetPlan:
    """One fleet promotion: the fleet, its id, its waves, whether it is a dry run, and where it is recorded."""

    fleet: str
    fleet_id: str
    dry_run: bool
    waves: tuple[Wave, ...]
    created_at: str
    run_dir: Path
    yes: bool = False  # each lane's promotion confirmed (`--yes`): a real lane's steps that change it need it

    @property
    def dag_id(self) -> str:
        return f"lanebook_fleet_{self.fleet}_{self.fleet_id}"

    def to_json(self) -> dict:
        return {
            "fleet": self.fleet,
            "fleet_id": self.fleet_id,
            "dry_run": self.dry_run,
            "yes": self.yes,
            "dag_id": self.dag_id,
            "created_at": self.created_at,
            "waves": [asdict(w) for w in self.waves],
        }

    @classmethod
    def read(cls, run_dir: Path) -> FleetPlan:
        try:
            data = json.loads((Path(run_dir) / PLAN_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise LanebookError(f"{run_dir} is no fleet run's folder: its {PLAN_FILE} cannot be read ({exc})") from None
        waves = tuple(Wave(w["index"], tuple(w["lanes"]), w["budget"]) for w in data["waves"])
        return cls(
            data["fleet"],
            data["fleet_id"],
            data["dry_run"],
            waves,
            data["created_at"],
            Path(run_dir),
            data.get("yes", False),
        )


def new_plan(fleet: FleetParams, dry_run: bool, yes: bool = False) -> FleetPlan:
    """A new fleet promotion's plan, its folder claimed under outputs/fleets/FLEET/ and plan.json written."""
    from lanebook.runs.audit import now

    fleet_id = record_id()
    run_dir = fleets_dir() / fleet.name / f"{utc_stamp()}-{fleet_id}"
    run_dir.mkdir(parents=True, exist_ok=False)  # claim the name: never overwrite an earlier fleet run
    plan = FleetPlan(fleet.name, fleet_id, dry_run, tuple(plan_waves(fleet)), now(), run_dir, yes)
    write_atomic(run_dir / PLAN_FILE, json.dumps(plan.to_json(), indent=1) + "\n")
    return plan


def lane_task(wave: Wave, lane_name: str) -> str:
    return f"wave{wave.index}-lane-{lane_name}"


def gate_task(wave: Wave) -> str:
    return f"wave{wave.index}-gate"


def lanebook_command(*arguments: str) -> list[str]:
    """This lanebook, as its own interpreter runs it (the task's Airflow has another)."""
    return [sys.executable, "-m", "lanebook.cli", *arguments]


def task_commands(plan: FleetPlan) -> dict[str, tuple[str, list[str]]]:
    """task id -> (what the task is, for its failure message; the command it runs), in the DAG's order."""
    commands = {}
    for wave in plan.waves:
        for lane in wave.lanes:
            promote = ["promote", "--lane", lane, "--fleet-id", plan.fleet_id]
            promote += (["--dry-run"] if plan.dry_run else []) + (["--yes"] if plan.yes else [])
            commands[lane_task(wave, lane)] = (f"lane {lane}", lanebook_command(*promote))
        gate = lanebook_command("fleet", "gate", str(plan.run_dir), str(wave.index))
        commands[gate_task(wave)] = (f"wave {wave.index} gate", gate)
    return commands


def task_environment() -> dict[str, str]:
    """What every task's command gets on top of its worker's environment."""
    lib = str(Path(__file__).resolve().parents[2])  # the lib/ folder this lanebook runs from
    env = {"PYTHONPATH": lib, "PYTHONUNBUFFERED": "1", "LANEBOOK_OUTPUTS": str(paths.outputs_dir())}
    env.update({name: os.environ[name] for name in PASSED_ENV if os.environ.get(name)})
    return env


DAG_TEMPLATE = '''"""{title}

Generated by `lanebook fleet promote` (fleet id {fleet_id}); lanebook's record of it: {plan_file} beside this file.
Wave 0 is the canary alone; each later wave starts only when the gate after the one before it passed: the gate fails
when more of its wave's lanes did not pass than the wave's failure budget. Every task runs a lanebook command:
{commands}
Locally: AIRFLOW_HOME=... airflow dags test {dag_id} -f {dag_file}; or hand this file to an Airflow deployment whose
workers can run the commands above.
"""

import os
import subprocess

import pendulum
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

ENV = {env!r}
TASKS = {{
{tasks}}}


def run_lanebook(task_id):
    """Run the task's lanebook command, its output in the task's log; fail with its last line (where it stopped)."""
    what, command = TASKS[task_id]
    process = subprocess.Popen(
        command, env={{**os.environ, **ENV}}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    last = ""
    for line in process.stdout:
        print(line, end="", flush=True)
        last = line.strip() or last
    if process.wait() != 0:
        raise RuntimeError(f"{{what}}: {{last}}")


with DAG(
    dag_id={dag_id!r},
    description={description!r},
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["lanebook", "fleet"],
) as dag:
    tasks = {{
        task_id: PythonOperator(
            task_id=task_id,
            python_callable=run_lanebook,
            op_args=[task_id],
            trigger_rule="all_done" if task_id.endswith("-gate") else "all_success",
        )
        for task_id in TASKS
    }}
{edges}
'''


def dag_text(plan: FleetPlan) -> str:
    """The DAG file: every task's command as data (no shell: each argument stays one argument), and its edges."""
    commands = task_commands(plan)
    edges = []
    previous_gate: Optional[str] = None
    for wave in plan.waves:
        lanes = [lane_task(wave, lane) for lane in wave.lanes]
        upstream = f"tasks[{previous_gate!r}] >> " if previous_gate else ""
        edges.append(f"    {upstream}[{', '.join(f'tasks[{t!r}]' for t in lanes)}] >> tasks[{gate_task(wave)!r}]")
        previous_gate = gate_task(wave)
    shown = "\n".join(f"  {task_id}: {shlex.join(command)}" for task_id, (_, command) in commands.items())
    kind = "dry run of the fleet" if plan.dry_run else "fleet"
    return DAG_TEMPLATE.format(
        title=f"Fleet {plan.fleet}: lanebook's promotion DAG ({kind}, {len(plan.waves)} waves).",
        fleet_id=plan.fleet_id,
        plan_file=PLAN_FILE,
        commands=shown,
        dag_id=plan.dag_id,
        dag_file=DAG_FILE,
        env=task_environment(),
        tasks="".join(f"    {task_id!r}: {entry!r},\n" for task_id, entry in commands.items()),
        description=f"lanebook fleet {plan.fleet}, fleet id {plan.fleet_id}",
        edges="\n".join(edges),
    )


def write_dag(plan: FleetPlan) -> Path:
    path = plan.run_dir / DAG_FILE
    write_atomic(path, dag_text(plan))
    return path


# --- what the records say --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaneOutcome:
    """A lane's latest promotion (of one fleet run, or any): its verdict and, when it did not pass, where it stopped."""

    lane: str
    verdict: str  # pass, dry-run, fail, error, running, not run
    promotion_id: Optional[str] = None
    fleet_id: Optional[str] = None
    stopped_at: Optional[str] = None  # the runbook that did not pass
    failed_step: Optional[str] = None
    started_at: Optional[str] = None
    finished_at: Optional[str] = None
    dry_run: bool = False
    twin: bool = False

    def describe(self) -> str:
        if self.verdict in (NOT_RUN, RUNNING):
            return f"{self.lane}: {self.verdict}"
        line = f"{self.lane}: promotion {self.promotion_id} {self.verdict}"
        if self.stopped_at:
            line += f" at {self.stopped_at}"
            if self.failed_step:
                line += f" (step {self.failed_step})"
        return line

    def passed(self, dry_run: bool) -> bool:
        return self.verdict == (DRY_RUN if dry_run else PASSED)


def lane_outcome(records: list[dict], lane_name: str, fleet_id: Optional[str] = None) -> LaneOutcome:
    """The lane's latest promotion in RECORDS (oldest first), of the fleet run FLEET_ID when given."""
    chain = latest_promotion(records, lane_name, lambda r: fleet_id is None or r.get("fleet_id") == fleet_id)
    if not chain:
        return LaneOutcome(lane_name, NOT_RUN)
    promotion_id = chain[-1]["promotion_id"]
    first, last = chain[0], chain[-1]
    dry_run = bool(first.get("dry_run"))
    wanted = DRY_RUN if dry_run else PASSED
    latest = {r["runbook"]: r for r in chain}  # a resumed runbook's last run decides
    stopped = next((latest[name] for name in MAIN_JOB if name in latest and latest[name]["verdict"] != wanted), None)
    if stopped is not None:
        verdict = stopped["verdict"]
    elif all(name in latest for name in MAIN_JOB):
        verdict = wanted
    else:
        verdict = RUNNING  # every runbook so far passed and the job is not done
    return LaneOutcome(
        lane_name,
        verdict,
        promotion_id,
        first.get("fleet_id"),
        stopped["runbook"] if stopped else None,
        stopped.get("failed_step") if stopped else None,
        first.get("started_at"),
        last.get("finished_at") if verdict != RUNNING else None,
        dry_run,
        bool(first.get("twin")),
    )


@dataclass(frozen=True)
class WaveOutcome:
    wave: Wave
    lanes: tuple[LaneOutcome, ...]
    gate: str  # go on, stopped, not run (no lane of it ran), running

    @property
    def failed(self) -> list[LaneOutcome]:
        return [o for o in self.lanes if o.verdict not in (PASSED, DRY_RUN, NOT_RUN, RUNNING)]

    def decision(self) -> str:
        """The gate's decision in words, naming each lane that did not pass and where it stopped."""
        kind = "the canary" if self.wave.canary else f"wave {self.wave.index}"
        if self.gate == NOT_RUN:
            return f"{kind} ({', '.join(self.wave.lanes)}) did not start"
        if self.gate == RUNNING:
            return f"{kind} is running"
        failed = self.failed
        counted = f"{len(failed)} of {len(self.lanes)} lane(s) did not pass (failure budget {self.wave.budget})"
        named = "; ".join(o.describe() for o in failed)
        if self.gate == STOPPED:
            return f"{kind} stopped the fleet: {counted}: {named}"
        dry = " (dry runs: nothing observed)" if self.lanes and all(o.dry_run for o in self.lanes) else ""
        return f"{kind} let the fleet go on: {counted}{dry}" + (f": {named}" if named else "")


def wave_outcome(wave: Wave, records: list[dict], fleet_id: str, dry_run: bool) -> WaveOutcome:
    """How a wave ran, from the records: its gate stops the fleet when more lanes did not pass than its budget."""
    lanes = tuple(lane_outcome(records, lane, fleet_id) for lane in wave.lanes)
    if all(o.verdict == NOT_RUN for o in lanes):
        return WaveOutcome(wave, lanes, NOT_RUN)
    if any(o.verdict == RUNNING for o in lanes):
        return WaveOutcome(wave, lanes, RUNNING)
    not_passed = sum(not o.passed(dry_run) for o in lanes)  # a lane whose promotion never recorded counts
    return WaveOutcome(wave, lanes, STOPPED if not_passed > wave.budget else GO_ON)


@dataclass(frozen=True)
class FleetOutcome:
    plan: FleetPlan
    waves: tuple[WaveOutcome, ...]
    verdict: str
    airflow_exit: Optional[int] = None

    @property
    def stopped_by(self) -> Optional[WaveOutcome]:
        return next((w for w in self.waves if w.gate == STOPPED), None)

    def summary(self) -> str:
        plan = self.plan
        head = f"fleet {plan.fleet} ({plan.fleet_id})"
        if self.verdict == PASSED:
            every = ", ".join(lane for wave in plan.waves for lane in wave.lanes)
            return f"{head} passed: every lane's promotion passed ({every})"
        if self.verdict == DRY_RUN:
            return f"{head}: dry run, every lane's promotion a dry run (nothing observed, nothing passed)"
        if self.verdict == STOPPED:
            stop = self.stopped_by
            untouched = [lane for w in self.waves if w.gate == NOT_RUN for lane in w.wave.lanes]
            left = f"; not started: {', '.join(untouched)}" if untouched else ""
            return f"{head} stopped at wave {stop.wave.index}: {stop.decision()}{left}"
        if self.verdict == FAILED:
            failed = "; ".join(o.describe() for w in self.waves for o in w.failed)
            return f"{head} ran every wave, with lanes failed within their budget: {failed}"
        return f"{head}: error: Airflow exited {self.airflow_exit} before the waves were done (see {AIRFLOW_LOG})"

    def to_json(self) -> dict:
        return {
            **self.plan.to_json(),
            "verdict": self.verdict,
            "airflow_exit": self.airflow_exit,
            "summary": self.summary(),
            "waves": [
                {
                    **asdict(w.wave),
                    "gate": w.gate,
                    "decision": w.decision(),
                    "lanes": [asdict(o) for o in w.lanes],
                }
                for w in self.waves
            ],
        }


def fleet_outcome(plan: FleetPlan, records: list[dict], airflow_exit: Optional[int] = None) -> FleetOutcome:
    """The fleet run as the records tell it; AIRFLOW_EXIT: how Airflow ended, when it has (None: still running or
    run elsewhere)."""
    waves = tuple(wave_outcome(w, records, plan.fleet_id, plan.dry_run) for w in plan.waves)
    if any(w.gate == STOPPED for w in waves):
        verdict = STOPPED
    elif all(w.gate == GO_ON for w in waves):
        verdict = FAILED if any(w.failed for w in waves) else DRY_RUN if plan.dry_run else PASSED
    elif airflow_exit is None:
        verdict = RUNNING
    else:
        verdict = ERROR  # Airflow ended and a wave neither passed nor stopped: it never ran, or did not finish
    return FleetOutcome(plan, waves, verdict, airflow_exit)


def gate(run_dir: Path, wave_index: int) -> WaveOutcome:
    """`lanebook fleet gate RUNDIR WAVE`: the wave's gate decided from the records (the DAG's gate task), and the
    fleet's record as it stands after the wave."""
    from lanebook.runs.audit import read_runs

    plan = FleetPlan.read(run_dir)
    wave = next((w for w in plan.waves if w.index == wave_index), None)
    if wave is None:
        raise LanebookError(f"fleet run {plan.fleet_id} has no wave {wave_index} (waves 0-{len(plan.waves) - 1})")
    outcome = fleet_outcome(plan, read_runs())
    write_record(outcome)
    return outcome.waves[plan.waves.index(wave)]


def write_record(outcome: FleetOutcome) -> Path:
    path = outcome.plan.run_dir / RECORD_FILE
    write_atomic(path, json.dumps(outcome.to_json(), indent=1) + "\n")
    return path


def fleet_runs(fleet: str) -> list[dict]:
    """The fleet's runs, oldest first: each run's record (fleet.json), or for a run that has none yet (running, or run
    by another Airflow) what the records say so far."""
    from lanebook.runs.audit import read_runs

    folder = fleets_dir() / fleet
    runs, records = [], None
    for run_dir in sorted(p for p in folder.glob("*") if (p / PLAN_FILE).is_file()) if folder.is_dir() else []:
        try:
            runs.append(json.loads((run_dir / RECORD_FILE).read_text()))
            continue
        except (OSError, ValueError):
            pass
        records = read_runs() if records is None else records
        runs.append(fleet_outcome(FleetPlan.read(run_dir), records).to_json())
    return runs


# --- Airflow ---------------------------------------------------------------------------------------------


def airflow_environment(run_dir: Path) -> dict[str, str]:
    """Airflow's settings for a run: its home (SQLite) under outputs/fleets/.airflow, no example DAGs, the run's folder
    as its DAG folder and its logs in it."""
    return {
        **os.environ,
        "AIRFLOW_HOME": str(airflow_home()),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(run_dir),
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(run_dir / "airflow-logs"),
        "PYTHONUNBUFFERED": "1",  # its output read as it comes: the progress shown
    }


def airflow_binary() -> Path:
    if not AIRFLOW_BIN.exists():
        raise LanebookError(f"Apache Airflow is not installed at {AIRFLOW_BIN}: run `make airflow` (its own venv)")
    return AIRFLOW_BIN


def migrate_once(run_dir: Path) -> None:
    """`airflow db migrate` the first time a fleet runs here (under a lock: two fleets may start at once)."""
    import fcntl

    home = airflow_home()
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".migrate.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (home / ".migrated").exists():
            return
        done = subprocess.run(
            [str(airflow_binary()), "db", "migrate"],
            env=airflow_environment(run_dir),
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
            raise LanebookError(f"airflow db migrate failed in {home}: {tail}")
        (home / ".migrated").touch()


TASK_LINE = re.compile(r"\[DAG TEST\] (starting|end task) task_id=(\S+)")


def run_airflow(plan: FleetPlan, on_task: Callable[[str, str], None]) -> int:
    """`airflow dags test` of the plan's DAG, its output in the run's airflow.log; ON_TASK(event, task_id) as each task
    starts and ends ("starting", "end task"). Airflow's exit code."""
    migrate_once(plan.run_dir)
    command = [str(airflow_binary()), "dags", "test", plan.dag_id, "-f", str(plan.run_dir / DAG_FILE)]
    with open(plan.run_dir / AIRFLOW_LOG, "w") as log:
        process = subprocess.Popen(
            command,
            env=airflow_environment(plan.run_dir),
            cwd=plan.run_dir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for line in process.stdout:
            log.write(line)
            log.flush()
            found = TASK_LINE.search(line)
            if found:
                on_task(found.group(1), found.group(2))
        return process.wait()


# --- on the terminal -------------------------------------------------------------------------------------


def promote_fleet_shown(name: str, dry_run: bool = False, yes: bool = False) -> int:
    """`lanebook fleet promote`: the fleet loaded and validated, its waves, the DAG written (shown in a dry run), run
    by Airflow with each wave and lane shown as it starts and ends, the fleet's record written. 0: every lane passed
    (a dry run: every lane's dry run was clean); 1: the fleet stopped, a lane failed, or Airflow failed."""
    from rich.console import Console
    from rich.markup import escape

    from lanebook.lane.fleet_file import load_fleet
    from lanebook.runs.audit import read_runs

    console = Console()
    fleet = load_fleet(name)
    airflow_binary()  # before anything is written: Airflow must be there
    plan = new_plan(fleet, dry_run, yes)
    kind = " (dry run: every lane's promotion a dry run, nothing observed)" if dry_run else ""
    console.print(f"[bold]fleet {fleet.name}[/], fleet id {plan.fleet_id}{kind}", highlight=False, soft_wrap=True)
    for wave in plan.waves:
        label = "canary" if wave.canary else f"wave {wave.index}"
        console.print(f"  {label}: {', '.join(wave.lanes)} (failure budget {wave.budget})", highlight=False)
    dag = write_dag(plan)
    console.print(f"DAG {plan.dag_id}: {dag}", soft_wrap=True, highlight=False)
    if dry_run:
        console.out(dag.read_text(), highlight=False)
    lanes = {lane_task(wave, lane): lane for wave in plan.waves for lane in wave.lanes}
    waves = {lane_task(wave, lane): wave for wave in plan.waves for lane in wave.lanes}
    waves.update({gate_task(wave): wave for wave in plan.waves})

    def shown(event: str, task_id: str) -> None:
        wave = waves.get(task_id)
        if wave is None:
            return
        if task_id in lanes and event == "starting":
            console.print(f"wave {wave.index}: promoting {lanes[task_id]}", highlight=False)
        elif task_id in lanes:
            console.print(f"  {escape(lane_outcome(read_runs(), lanes[task_id], plan.fleet_id).describe())}")
        elif event != "starting":
            decision = wave_outcome(wave, read_runs(), plan.fleet_id, plan.dry_run)
            colour = "red" if decision.gate == STOPPED else "green"
            console.print(f"[{colour}]gate: {escape(decision.decision())}[/]")

    console.print(f"airflow dags test {plan.dag_id} (its output: {plan.run_dir / AIRFLOW_LOG})", soft_wrap=True)
    exit_code = run_airflow(plan, shown)
    outcome = fleet_outcome(plan, read_runs(), exit_code)
    record = write_record(outcome)
    good = outcome.verdict in (PASSED, DRY_RUN)
    console.print(f"[{'green' if good else 'red'}]{escape(outcome.summary())}[/]", soft_wrap=True)
    console.print(f"fleet record: {record}", soft_wrap=True, highlight=False)
    return 0 if good else 1


def fleet_status(name: str) -> dict:
    """Every lane's latest promotion (any, with its fleet id if it had one) and the fleet's runs."""
    from lanebook.lane.fleet_file import load_fleet
    from lanebook.runs.audit import read_runs

    fleet = load_fleet(name)
    records = read_runs()
    return {
        "fleet": fleet.name,
        "description": fleet.description,
        "lanes": [asdict(lane_outcome(records, lane)) for lane in fleet.lanes],
        "runs": fleet_runs(fleet.name),
    }


def print_status(status: dict) -> None:
    from rich.console import Console
    from rich.markup import escape

    console = Console()
    console.print(f"[bold]fleet {status['fleet']}[/]: {escape(status['description'])}")
    for lane in status["lanes"]:
        outcome = LaneOutcome(**lane)
        when = f" since {outcome.started_at}" if outcome.verdict == RUNNING else ""
        when = when or (f", finished {outcome.finished_at}" if outcome.finished_at else "")
        fleet = f", fleet {outcome.fleet_id}" if outcome.fleet_id else ""
        console.print(f"  {escape(outcome.describe())}{when}{fleet}", soft_wrap=True, highlight=False)
    if not status["runs"]:
        console.print("no fleet run recorded yet")
    for run in status["runs"]:
        console.print(f"run {run['fleet_id']} ({run['created_at']}): {run['verdict']}", highlight=False)
        for wave in run["waves"]:
            console.print(f"  {escape(wave['decision'])}", soft_wrap=True, highlight=False)
