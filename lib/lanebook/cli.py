"""The `lanebook` command line. Each command is a thin shell over the library; `lanebook twin` drives the
digital twin itself, which the CLI may import as a composition root (the library reaches the twin only
through lanebook.lane.plugins).

Exit codes: 0 pass (or a clean dry run), 1 a verdict or finding failed, or the lane pair is locked by another run, 2 bad
usage or bad parameters (one line, no traceback).
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import List, Optional

import typer

from lanebook.base.errors import LanebookError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Runbooks, node library and digital twin for the DGX Spark DeepSeek-V4-Flash lane.",
)
twin_app = typer.Typer(
    no_args_is_help=True, help="The digital twin: sshd nodes on loopback and a vLLM-compatible server."
)
env_app = typer.Typer(no_args_is_help=True, help="Render a lane's .env.dspark and patch its compose file.")
audit_app = typer.Typer(invoke_without_command=True, help="The audit trail of runs (outputs/runs.jsonl).")
app.add_typer(twin_app, name="twin")
app.add_typer(env_app, name="env")
fleet_app = typer.Typer(no_args_is_help=True, help="Fleets: several lanes promoted by Apache Airflow, canary first.")
lane_app = typer.Typer(no_args_is_help=True, help="Lane files: import one from a checkout an operator already runs.")
app.add_typer(audit_app, name="audit")
app.add_typer(lane_app, name="lane")
app.add_typer(fleet_app, name="fleet")
watch_app = typer.Typer(
    invoke_without_command=True,
    help="Keep a promoted lane served: probe it, repair within the lane file's bounds, page what cannot be fixed.",
)
app.add_typer(watch_app, name="watch")


def _say_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"lanebook {version('lanebook')}")
        raise typer.Exit()


@app.callback()
def _lanebook(
    version: bool = typer.Option(
        False, "--version", callback=_say_version, is_eager=True, help="Print lanebook's version and exit."
    ),
) -> None:
    pass


def _split_csv(value: Optional[str]) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


@twin_app.command("up")
def twin_up(
    faults: Optional[str] = typer.Option(None, "--faults", help="comma-separated fault names (see `twin status`)"),
    fast: bool = typer.Option(False, "--fast", help="shorten cold-bind and JIT waits (never decode rates)"),
):
    """Start the twin (idempotent)."""
    from lanebook.twin import control

    status = control.up(faults=_split_csv(faults), fast=fast)
    control.print_status(status)


@twin_app.command("down")
def twin_down():
    """Stop the twin's nodes and servers; leaves no process behind."""
    from lanebook.twin import control

    control.down()
    typer.echo("twin is down")


@twin_app.command("status")
def twin_status(as_json: bool = typer.Option(False, "--json", help="machine-readable status")):
    """Whether the twin runs, its nodes, API and active faults."""
    from lanebook.twin import control

    status = control.status()
    if as_json:
        typer.echo(json.dumps(status, indent=2))
    else:
        control.print_status(status)


@twin_app.command("fault")
def twin_fault(
    faults: List[str] = typer.Argument(None, help="fault names (see `twin status`); none with --clear"),
    lane_name: str = typer.Option(..., "--lane", help="the twin lane whose nodes meet the faults"),
    clear: bool = typer.Option(False, "--clear", help="clear the lane's faults"),
):
    """Set faults on one twin lane only, from its next action on (engine faults, worker-unreachable, missing-shard);
    the other lanes are untouched."""
    from lanebook.lane.params import load_lane
    from lanebook.twin import control

    if bool(faults) == clear:
        raise LanebookError("name the faults to set, or --clear (not both)")
    control.print_status(control.set_lane_faults(load_lane(lane_name), [] if clear else faults))


@twin_app.command("reboot")
def twin_reboot(node: str = typer.Argument(..., help="head or worker")):
    """Reboot one twin node, as a power cycle between two runbooks: its processes and the lane's containers end
    without clean-up, /dev/shm and the page cache empty, its files stay, its sshd comes back."""
    from lanebook.twin import control

    control.print_status(control.reboot(node))


@contextmanager
def interruption_exits():
    """A run stopped by a signal is already recorded (verdict error): say where, and exit 128 + the signal's number."""
    try:
        yield
    except BaseException as stopped:
        from lanebook.runs.execute import RunInterrupted  # here: a run's kernel starts before lanebook's imports

        if not isinstance(stopped, RunInterrupted):
            raise
        record = stopped.record
        typer.echo(
            f"lanebook: {signal.Signals(stopped.signum).name}: run {record['run_id']} stopped and recorded as "
            f"{record['verdict']} ({record['failed_step']}): {record['output']}",
            err=True,
        )
        # The record is written and the kernel stopped; end here, so nothing the stopped run left behind (the
        # notebook client's kernel poller finding its kernel gone) prints after this line.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + stopped.signum)


def run_exit_code(verdict: str, dry_run: bool) -> int:
    """0 for a pass, or for a clean dry run (which observed nothing, so it is never a pass); 1 for fail or error."""
    return 0 if verdict == ("dry-run" if dry_run else "pass") else 1


@app.command("run")
def run(
    runbook: str = typer.Argument(
        ..., help="weights env launch warmup gates speed diagnose rollback status stop doctor"
    ),
    lane_name: str = typer.Option(..., "--lane", help="lane name under params/ or a lane YAML file"),
    param: List[str] = typer.Option([], "-p", "--param", help="KEY=VALUE runbook parameter (repeatable)"),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="record the commands instead of running them; opens no connection"
    ),
    yes: bool = typer.Option(False, "--yes", help="confirm steps that change a real lane"),
    break_lock: bool = typer.Option(
        False, "--break-lock", help="break the lane pair's lock if it is stale (its holder is dead)"
    ),
):
    """Run a runbook headless with papermill; says each step as it starts (on stderr), then prints the executed
    notebook's path and the verdict."""
    from lanebook.runs.runbook_kernel import kernel_for

    # the kernel boots while lanebook prepares the run
    with interruption_exits(), kernel_for(runbook, connects=not dry_run) as kernel:
        from lanebook.lane.params import load_lane
        from lanebook.runs.execute import parse_params, run_runbook

        record = run_runbook(
            runbook,
            load_lane(lane_name),
            parse_params(param),
            dry_run=dry_run,
            yes=yes,
            break_lock=break_lock,
            kernel=kernel,
            echo=sys.stderr,
        )
    typer.echo(record["output"])
    if dry_run:
        typer.echo("commands the run would send (none were sent):")
        typer.echo("\n".join(f"  {line}" for line in record["commands"]) or "  (none)")
    typer.echo(
        f"verdict: {record['verdict']}" + (f" (failed step: {record['failed_step']})" if record["failed_step"] else "")
    )
    if record.get("failed_check"):
        typer.echo(f"failed: {record['failed_check']}")
    if record.get("fix"):
        typer.echo(f"what to do next: {record['fix']}")
    raise typer.Exit(run_exit_code(record["verdict"], dry_run))


@app.command("promote")
def promote(
    lane_name: str = typer.Option(..., "--lane", help="lane name under params/ or a lane YAML file"),
    resume: bool = typer.Option(
        False, "--resume", help="continue the lane's latest promotion at the runbook that did not pass"
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="every runbook records its commands instead of running them; opens no connection"
    ),
    yes: bool = typer.Option(False, "--yes", help="confirm steps that change a real lane"),
    break_lock: bool = typer.Option(
        False, "--break-lock", help="break the lane pair's lock if it is stale (its holder is dead)"
    ),
    allow_runtime_and_weights: bool = typer.Option(
        False,
        "--allow-runtime-and-weights",
        help="promote a lane that changes both image and weights against its rollback lane (seed 000 advises "
        "against it; lint S07)",
    ),
    fleet_id: Optional[str] = typer.Option(
        None, "--fleet-id", help="the fleet promotion this is a lane of (`lanebook fleet promote` gives it)"
    ),
):
    """The main job, weights → env → launch → warmup → gates → speed: one recorded run each, one promotion id."""
    from lanebook.runs.fleet_dag import check_fleet_id
    from lanebook.runs.promote import promote_shown

    with interruption_exits():
        promotion = promote_shown(
            lane_name,
            resume=resume,
            dry_run=dry_run,
            yes=yes,
            break_lock=break_lock,
            allow_runtime_and_weights=allow_runtime_and_weights,
            fleet_id=check_fleet_id(fleet_id),
        )
    raise typer.Exit(0 if promotion.ok else 1)


@fleet_app.command("promote")
def fleet_promote(
    fleet: str = typer.Argument(..., help="a fleet under params/fleets/ or a fleet YAML file"),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="every lane's promotion a dry run (opens no connection); the DAG shown"
    ),
    yes: bool = typer.Option(False, "--yes", help="confirm, for every lane, the steps that change a real lane"),
):
    """Promote a fleet's lanes through Apache Airflow: the canary alone, then waves of at most wave_size, the next only
    when the last passed within its failure budget. Exit 0 every lane passed (or a clean dry run), 1 the fleet
    stopped or a lane failed, 2 bad input."""
    from lanebook.runs.fleet_dag import promote_fleet_shown

    raise typer.Exit(promote_fleet_shown(fleet, dry_run=dry_run, yes=yes))


@fleet_app.command("status")
def fleet_status(
    fleet: str = typer.Argument(..., help="a fleet under params/fleets/ or a fleet YAML file"),
    as_json: bool = typer.Option(False, "--json"),
):
    """Every lane's latest promotion (id, verdict, when, fleet id, where it stopped) and the fleet's runs."""
    from lanebook.runs.fleet_dag import fleet_status, print_status

    status = fleet_status(fleet)
    if as_json:
        typer.echo(json.dumps(status, indent=2))
    else:
        print_status(status)


@fleet_app.command("gate", hidden=True)
def fleet_gate(
    run_dir: Path = typer.Argument(..., help="the fleet run's folder (outputs/fleets/FLEET/STAMP-ID)"),
    wave: int = typer.Argument(..., help="the wave's index (0: the canary)"),
):
    """The DAG's gate task: exit 0 only when the wave ran and no more of its lanes failed than its failure budget allows
    (a wave that never started, after an earlier gate stopped the fleet, fails its gate too: Airflow runs an all_done
    task whatever its upstream did)."""
    from lanebook.runs.fleet_dag import GO_ON, gate

    decided = gate(run_dir, wave)
    typer.echo(decided.decision())
    raise typer.Exit(0 if decided.gate == GO_ON else 1)


@app.command("lint")
def lint(
    lane_name: Optional[str] = typer.Option(
        None,
        "--lane",
        help="lint what the lane runs: its checkout (from the head over "
        "SSH unless --checkout or --env/--compose is given)",
    ),
    checkout: Optional[Path] = typer.Option(None, "--checkout", help="a local checkout directory"),
    env: Optional[Path] = typer.Option(None, "--env", help="a .env.dspark file"),
    compose: Optional[Path] = typer.Option(None, "--compose", help="a docker-compose.dspark.yml file"),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="open no connection: lint the lane file against the reference checkout"
    ),
    as_json: bool = typer.Option(False, "--json"),
):
    """Check a checkout (or a lane) against the recipe's pitfalls and the values its lane sets."""
    if checkout and (env or compose):
        raise LanebookError("give either --checkout DIR or --env FILE and --compose FILE, not both")
    if bool(env) != bool(compose):
        raise LanebookError("give both --env FILE and --compose FILE")
    if not (lane_name or checkout or env):
        raise LanebookError("give --lane LANE, --checkout DIR, or both --env FILE and --compose FILE")
    from lanebook.lane.params import lane_path, load_lane

    params = load_lane(lane_name) if lane_name else None
    from lanebook.recipe.effective.checkout import CheckoutFiles
    from lanebook.recipe.lint import (
        given_files,
        lint_checkout_files,
        lint_env_and_compose,
        lint_what_lane_runs,
        print_report,
    )

    if params and env:
        report = lint_checkout_files(params, given_files(env, compose), lane_path(lane_name), "given file")
    elif params:
        report = lint_what_lane_runs(params, checkout, dry_run=dry_run, source=lane_path(lane_name))
    elif checkout:
        files = CheckoutFiles.read(checkout)
        if files.env is None:
            raise LanebookError(f"no .env.dspark in {checkout}: give --lane LANE to lint what a render would write")
        report = lint_env_and_compose(files.env.name, files.compose.name)
    else:
        report = lint_env_and_compose(env, compose)
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        print_report(report)
    raise typer.Exit(0 if report.ok else 1)


@env_app.command("render")
def env_render(
    lane_name: str = typer.Option(..., "--lane"),
    checkout: Path = typer.Option(..., "--checkout", help="a checkout directory holding docker-compose.dspark.yml"),
):
    """Write .env.dspark and patch the compose file in DIR so it runs the lane (backups kept, idempotent, diff \
printed)."""
    from lanebook.lane.keys import lane_keys
    from lanebook.lane.params import load_lane
    from lanebook.recipe.render import render_checkout

    params = load_lane(lane_name)
    result = render_checkout(params, checkout, lane_keys(params))
    if result.started_from:
        typer.echo(f"started .env.dspark from {result.started_from} (copy the example, then edit)")
    typer.echo(result.diff or "no change: the checkout already matches the lane")
    if result.notice:
        typer.echo(f"notice: {result.notice}", err=True)
    for mismatch in result.unresolved:
        where = mismatch.running.where
        typer.echo(f"error: {mismatch.message()} ({where.file}:{where.line}); render cannot change it", err=True)
    raise typer.Exit(1 if result.unresolved else 0)


@lane_app.command("import")
def lane_import(
    name: str = typer.Argument(..., help="the new lane's name (params/NAME.yaml)"),
    checkout: str = typer.Option(..., "--checkout", help="a local checkout DIR, or with --head its PATH on the head"),
    head: Optional[str] = typer.Option(None, "--head", help="USER@HOST[:PORT]: read the checkout there, read-only"),
    ssh_config: Optional[str] = typer.Option(
        None, "--ssh-config", help="with --head: the ssh config that reaches it (a file, or a plugin's name)"
    ),
    out: Optional[Path] = typer.Option(None, "--out", help="write the lane file here instead of params/NAME.yaml"),
    rollback: Optional[str] = typer.Option(None, "--rollback", help="the lane to fall back to"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable report"),
):
    """Write a lane file from what an operator's checkout runs (each value's file:line in a comment), never
    overwriting one; then render it into a copy of the checkout and list each line it could not express. Exit 0
    written (byte for byte, or with the lines listed), 2 bad input (nothing written)."""
    from lanebook.ops.lane_import import import_checkout, print_report

    report = import_checkout(name, checkout, head=head, ssh_config=ssh_config, out=out, rollback=rollback)
    print_report(report, as_json=as_json)


@app.command("check")
def check(
    lane_name: str = typer.Option(..., "--lane", help="lane name under params/ or a lane YAML file"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print every probe it would send; opens no connection"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable items"),
):
    """Preflight: everything that would stop a promotion, node by node, each with its fix; changes nothing. Exit 0
    ready, 1 not ready, 2 bad input."""
    from lanebook.lane.params import load_lane
    from lanebook.nodes.ssh import LaneNodes
    from lanebook.verify.preflight import preflight, ready, table

    with LaneNodes(load_lane(lane_name), dry_run=dry_run) as nodes:
        items = preflight(nodes)
        probes = nodes.executor.commands()
    if dry_run and as_json:
        typer.echo(json.dumps({"dry_run": True, "ready": None, "probes": probes}, indent=2))
        raise typer.Exit(0)
    if dry_run:
        typer.echo("probes the check would send (none were sent):")
        typer.echo("\n".join(f"  {line}" for line in probes))
        typer.echo("dry run: nothing was observed")
        raise typer.Exit(0)
    ok = ready(items)
    if as_json:
        typer.echo(json.dumps({"ready": ok, "items": [i.to_json() for i in items]}, indent=2))
    else:
        typer.echo(table(items))
        typer.echo(f"verdict: {'ready' if ok else 'NOT READY'}")
    raise typer.Exit(0 if ok else 1)


@app.command("upgrade")
def upgrade(
    lane_name: str = typer.Option(..., "--lane"),
    old: Optional[Path] = typer.Option(
        None, "--from", help="the checkout the lane runs now (a local directory): plan only, with --to DIR"
    ),
    to: str = typer.Option(
        ...,
        "--to",
        help="with --from: the checkout to move to (a local directory); alone: a commit, branch or tag of "
        "the lane's checkout's own remote, promoted as a new checkout beside the old one",
    ),
    record: bool = typer.Option(False, "--record", help="write the plan under outputs/LANE/ and print its path"),
    as_json: bool = typer.Option(False, "--json"),
    dry_run: bool = typer.Option(False, "--dry-run", help="--to REF: show the commands; opens no connection"),
    yes: bool = typer.Option(False, "--yes", help="--to REF: confirm the upgrade of a real lane"),
):
    """What moving the lane from one recipe checkout to another changes, before anything moves (--from DIR --to DIR:
    neither directory is written; exit 0 same lane or changes, 1 blocked); or the upgrade itself (--to REF): the new
    checkout beside the old on every node, its plan recorded, then the usual promotion on it (exit 0 passed or a dry
    run; 1 blocked or failed, the old checkout untouched)."""
    from lanebook.lane.params import load_lane
    from lanebook.recipe.upgrade_plan import plan_checkouts, print_plan, write_plan

    if old is None:
        from lanebook.runs.upgrade_run import upgrade_shown

        with interruption_exits():
            raise typer.Exit(upgrade_shown(lane_name, to, dry_run=dry_run, yes=yes, as_json=as_json))
    plan = plan_checkouts(load_lane(lane_name), old, Path(to))
    path = write_plan(plan) if record else None
    if as_json:
        typer.echo(json.dumps(plan.to_json(), indent=2))
    else:
        print_plan(plan)
    if path is not None:
        typer.echo(f"recorded: {path}", err=as_json)
    raise typer.Exit(plan.exit_code)


@app.command("speed")
def speed(
    api: Optional[str] = typer.Option(
        None, "--api", help="OpenAI-compatible base URL ending in /v1 (default: the lane's api)"
    ),
    model: Optional[str] = typer.Option(None, "--model", help="the served model (default: the lane's served name)"),
    lane_name: Optional[str] = typer.Option(
        None, "--lane", help="a lane under params/: its api, served model and request"
    ),
    concurrency: str = typer.Option("1,4,6", "--concurrency"),
    max_tokens: int = typer.Option(256, "--max-tokens"),
    workload: str = typer.Option("count", "--workload"),
    trials: int = typer.Option(1, "--trials"),
    json_path: Optional[Path] = typer.Option(
        None, "--json", help="write the speed document (runs, bands) as JSON here"
    ),
):
    """Streaming speed waves: per-stream decode (first to last content chunk), wall aggregate, TTFT, acceptance; and
    each wave's token count and TTFT as the server's /metrics counted them, beside lanebook's."""
    from lanebook.speed.command import speed_command

    try:
        levels = [int(c) for c in _split_csv(concurrency)]
    except ValueError:
        levels = []
    if not levels or any(c < 1 for c in levels):
        raise LanebookError(f"--concurrency must be positive integers like 1,4,6 (got {concurrency!r})")
    raise typer.Exit(
        speed_command(
            api=api,
            model=model,
            concurrency=levels,
            max_tokens=max_tokens,
            workload=workload,
            trials=trials,
            json_path=json_path,
            lane_name=lane_name,
        )
    )


@audit_app.callback()
def audit(
    ctx: typer.Context,
    lane_name: Optional[str] = typer.Option(None, "--lane", help="only this lane's runs"),
    runbook: Optional[str] = typer.Option(None, "--runbook", help="only this runbook's runs"),
    as_json: bool = typer.Option(False, "--json", help="print the records (a JSON list), not the table"),
):
    """List recorded runs (lane, runbook, verdict, duration, key figures, promotion); `audit verify` re-hashes every \
output."""
    if ctx.invoked_subcommand:
        return
    from lanebook.runs.audit import print_runs, read_runs, running_runs

    runs = read_runs(lane_name=lane_name, runbook=runbook)
    if as_json:
        typer.echo(json.dumps(runs, indent=2))
    else:
        print_runs(
            runs, [r for r in running_runs() if lane_name in (None, r["lane"]) and runbook in (None, r["runbook"])]
        )


@audit_app.command("verify")
def audit_verify():
    """Re-hash every recorded output; exit 1 if any differs or is missing."""
    from lanebook.runs.audit import verify

    raise typer.Exit(0 if verify() else 1)


@app.command("doctor")
def doctor(
    lane_name: Optional[str] = typer.Option(
        None, "--lane", help="read the lane's nodes over SSH (read-only: changes nothing, takes no lock)"
    ),
    logs: List[Path] = typer.Option(
        [],
        "--logs",
        help="a saved log: container logs of each rank, the launcher's output, shell output (free, ip link), gate "
        "replies or speed records as JSON lines; give --logs once per file",
    ),
    metrics: List[Path] = typer.Option(
        [], "--metrics", help="a saved /metrics scrape; give two, in the order taken, for rates"
    ),
    dmesg: Optional[Path] = typer.Option(None, "--dmesg", help="the kernel log (dmesg, or journalctl -k)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="with --lane: list the commands, open no connection"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable findings"),
    ask: Optional[str] = typer.Option(
        None,
        "--ask",
        help="also ask a model for its reading: a lane name (its api: and keys) or an OpenAI-compatible URL ending "
        "in /v1; shown beside the findings, never confirmed; prompt and reply recorded under outputs/doctor/",
    ),
    ask_model: Optional[str] = typer.Option(None, "--ask-model", help="the model to ask (default: the first listed)"),
    ask_max_tokens: int = typer.Option(1024, "--ask-max-tokens", min=16, help="with --ask: the longest answer taken"),
    ask_key_env: Optional[str] = typer.Option(
        None, "--ask-key-env", help="with --ask URL: the environment variable holding its API key"
    ),
    ask_key_file: Optional[str] = typer.Option(
        None, "--ask-key-file", help="with --ask URL: a file (mode 0600) holding its API key"
    ),
):
    """Diagnose a sick lane: findings with their evidence, cause, fix and repair runbook, and the public reports like
    it.

    --lane reads every node of the lane (container logs since the last start, free, the kernel log, ip link, RoCE
    GIDs, the HF cache's links, the live command) and two /metrics scrapes, read-only; --logs/--metrics/--dmesg read
    files an operator saved. --ask adds a model's reading (never a finding).

    Exit 0 when no finding is confirmed (suspected findings and harmless notes are printed), 1 when one is, 2 for bad
    usage."""
    from lanebook.verify.doctor import diagnose, folded_evidence, read_inputs
    from lanebook.verify.doctor_report import print_diagnosis, print_reading

    if (ask_model or ask_key_env or ask_key_file) and not ask:
        raise LanebookError("--ask-model, --ask-key-env and --ask-key-file go with --ask")
    if bool(lane_name) == bool(logs):
        raise LanebookError("give either --lane LANE or --logs FILE... (with --metrics/--dmesg)")
    if lane_name and (metrics or dmesg):
        raise LanebookError("--metrics and --dmesg go with --logs; --lane reads them from the nodes")
    if dry_run and not lane_name:
        raise LanebookError("--dry-run goes with --lane (reading files sends nothing)")
    api = None
    if ask and not dry_run:
        from lanebook.verify.doctor_ask import endpoint

        api = endpoint(ask, key_file=ask_key_file, key_env=ask_key_env)  # bad input stops before anything is read
    gathered = None
    if lane_name:
        from lanebook.lane.params import load_lane
        from lanebook.nodes.ssh import LaneNodes
        from lanebook.verify.doctor_gather import gather, print_gathered

        with LaneNodes(load_lane(lane_name), dry_run=dry_run) as nodes:
            gathered = gather(nodes)
            if dry_run:
                typer.echo("\n".join(nodes.executor.commands()))
                typer.echo("dry run: nothing was read, no finding")
                raise typer.Exit(0)
        log_lines, kernel = gathered.logs, gathered.kernel
        diagnosis = gathered.diagnosis()
    else:
        log_lines, scrapes, kernel = read_inputs(logs, metrics, dmesg)
        diagnosis = diagnose(log_lines, scrapes, kernel)
    reading = None
    if api:
        from lanebook.verify.doctor_ask import ask as ask_model_for

        reading = ask_model_for(
            api, folded_evidence(log_lines, kernel), diagnosis, model=ask_model, max_tokens=ask_max_tokens
        )
    if as_json:
        found = diagnosis.to_json() | (gathered.to_json() if gathered else {})
        found |= {"model_reading": reading.to_json()} if reading else {}
        typer.echo(json.dumps(found, indent=2, ensure_ascii=False))
    else:
        if gathered:
            print_gathered(gathered)
        print_diagnosis(diagnosis)
        if reading:
            print_reading(reading)
    raise typer.Exit(1 if diagnosis.confirmed else 0)


@watch_app.callback()
def watch(
    ctx: typer.Context,
    lane_name: Optional[str] = typer.Option(None, "--lane", help="lane name under params/ or a lane YAML file"),
    interval: Optional[float] = typer.Option(None, "--interval", help="seconds between rounds (lane file: watch:)"),
    page_command: Optional[str] = typer.Option(
        None, "--page-command", help="a command that gets each page as JSON on stdin (lane file: page.command)"
    ),
    once: bool = typer.Option(False, "--once", help="probe once and exit: 0 healthy, 1 not"),
):
    """Probe the lane every interval as a client does (/health, /v1/models, a one-token chat, /metrics) and as the pair
    is (SSH, each rank's container, free disk); after watch.fail_after failed rounds open an incident, let the doctor
    name its cause, and repair within the lane file's bounds (restart, then rollback or page). Series and incidents go
    to outputs/watch/LANE/. One watcher per lane."""
    if ctx.invoked_subcommand:
        if lane_name or interval is not None or page_command or once:
            raise LanebookError(
                f"--lane, --interval, --page-command and --once go after `watch {ctx.invoked_subcommand}`"
                " only as it takes them (see --help)"
            )
        return
    if not lane_name:
        raise LanebookError("give --lane LANE (or a subcommand: status, install, uninstall)")
    from lanebook.lane.params import load_lane
    from lanebook.runs.watch import Watcher

    watcher = Watcher(load_lane(lane_name), interval_s=interval, page_command=page_command)
    raise typer.Exit(watcher.once() if once else watcher.run())


@watch_app.command("status")
def watch_status(
    lane_name: str = typer.Option(..., "--lane", help="lane name under params/ or a lane YAML file"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable: state, last_probe, incidents"),
):
    """The lane's watch: its state, whether a watcher runs, the last probe, and every incident with its cause, the
    runs it started and its times (detected, repaired, served again)."""
    from lanebook.lane.params import load_lane
    from lanebook.runs.watch import print_status, watch_status

    status = watch_status(load_lane(lane_name).name)
    if as_json:
        typer.echo(json.dumps(status, indent=2))
    else:
        print_status(status)


@watch_app.command("install")
def watch_install(
    lane_name: str = typer.Option(..., "--lane", help="lane name under params/ or a lane YAML file"),
    system: bool = typer.Option(
        False, "--system", help="a system unit through sudo -n (default: a user unit, with lingering enabled)"
    ),
    lanebook: Optional[str] = typer.Option(
        None, "--lanebook", help="the lanebook command on the head (default: this one)"
    ),
):
    """Write and enable a systemd unit that runs `lanebook watch --lane LANE` on the lane's head, started at boot."""
    from lanebook.lane.params import load_lane
    from lanebook.nodes.ssh import LaneNodes
    from lanebook.runs.watch_unit import install

    with LaneNodes(load_lane(lane_name)) as nodes:
        installed = install(nodes, lanebook=lanebook, system=system)
    typer.echo(f"{installed.unit} written to {nodes.head.alias}:{installed.path}; is-enabled: {installed.enabled}")
    raise typer.Exit(0 if installed.enabled == "enabled" else 1)


@watch_app.command("uninstall")
def watch_uninstall(
    lane_name: str = typer.Option(..., "--lane", help="lane name under params/ or a lane YAML file"),
    system: bool = typer.Option(False, "--system", help="the system unit (default: the user unit)"),
):
    """Stop, disable and remove the lane's watch unit on its head."""
    from lanebook.lane.params import load_lane
    from lanebook.nodes.ssh import LaneNodes
    from lanebook.runs.watch_unit import uninstall

    with LaneNodes(load_lane(lane_name)) as nodes:
        removed = uninstall(nodes, system=system)
    typer.echo(f"{removed.unit} removed from {nodes.head.alias}:{removed.path}; is-enabled: {removed.enabled}")


@app.command("book")
def book(
    out: Optional[Path] = typer.Option(
        None, "--out", help="the site goes to DIR/_build/html (default: book/_build/html)"
    ),
    strict: bool = typer.Option(
        False,
        "--strict",
        help="fail on any Sphinx warning, broken internal link or external load, or a page that says 'not rehearsed', "
        "'seed 0' or shows a local path",
    ),
):
    """Build the jupyter-book site from the recipe and the stored audit trail (offline)."""
    from lanebook.site.book import build_book, show_warnings

    site = build_book(out, strict=strict)
    show_warnings(site)
    typer.echo(f"site: {site.index}")


@app.command("lab")
def lab(port: int = typer.Option(8888, "--port", help="the port on 127.0.0.1 (an error when in use)")):
    """The walkthrough: bring the twin up and serve JupyterLab on loopback in runbooks/ (lane twin by default)."""
    from lanebook.runs.lab import run_lab

    raise typer.Exit(run_lab(port))


@app.command("demo")
def demo():
    """Start the twin, run the main job on the twin lane, build the book, print where things are."""
    from lanebook.demo import run_demo

    raise typer.Exit(run_demo())


def main() -> None:
    # Once the command is done nothing in the heap needs collecting: the OS takes the memory back. Without this the
    # interpreter's last collection over a run's objects (papermill, the notebook client, IPython) took a tenth of a
    # second, more than some checks take.
    atexit.register(gc.freeze)
    try:
        app()
    except LanebookError as exc:
        typer.echo(f"lanebook: {exc}", err=True)
        sys.exit(getattr(exc, "exit_code", 2))  # 1 for a refusal that is not bad usage (lanebook.runs.lock.LockRefused)


if __name__ == "__main__":
    main()
