"""The fault matrix: every twin fault, the runbook that meets it and what that run must end in.

One row per fault of `lanebook twin up --faults` (control.FAULTS) and one for a node rebooting between two runbooks
(control.reboot): on a private fast twin with that fault, what happens first (`setup`), the runbook that meets the
fault with its short parameters, the verdict and failed step its record must carry, the message it must show (naming
the pitfall where the registry has one), the runbook its fix names (run next, it must pass), the state the nodes
must be in afterwards, and a bound in seconds for detecting the fault and reporting it (the meeting run, start to
record, on the fast twin); and the finding `lanebook doctor --lane` must give for it with its evidence quoted (read
after the meeting run, or before it where that run repairs the fault). tests/test_fault_matrix.py runs every row
(lanebook.twin.fault_runs) and holds it to this data; benchmarks/fault_matrix.py times them against their bounds;
the book's fault page is this table. The twin's figures are twin figures, never a real lane's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from lanebook.recipe.pitfalls import SYMPTOMS, pitfall
from lanebook.recipe.symptoms import FINDING
from lanebook.twin.control import FAULTS

NODE_REBOOTS = "worker-reboots"  # not a fault of `twin up`: control.reboot("worker") between two runbooks

# What happens on the twin before the meeting runbook (lanebook.twin.fault_runs carries them out).
SETUPS = {
    "none": "nothing: the fault is there from `twin up`",
    "started": "the lane started by its launcher",
    "started, head dead": "the lane started by its launcher; the head's engine dies a few seconds after ready",
    "started and stopped": "the lane started, then stopped by the checkout's stop script alone (no cache drop)",
    "started, worker rebooted": "the lane started by its launcher, then the worker rebooted (control.reboot): docker "
    "starts its container again (restart: unless-stopped), and its new rank cannot rejoin "
    "the TP group the head's engine lost it from",
    "started, requests hung": "the lane started by its launcher, then four long streaming requests sent and left "
    "running until /metrics shows them running with no token moving",
    "started, a wave served": "the lane started by its launcher, then two streaming requests served to the end and "
    "the engine's next stats lines logged",
}
# What the nodes must show after the meeting run and its repair (every row also checks that no file of the
# weights or the checkout was lost on any node, except *.incomplete blobs).
STATE_CHECKS = {
    "nothing started": "no container of the lane on the head",
    "lane cleanly down": "no container of the lane on any node",
    "lane up": "every node runs the lane's container and /health answers 200",
    "left for stop": "the lane's containers still run (their logs readable) and /health does not answer 200",
    "worker tree whole": "the worker's weights verify shard by shard (sha256), no *.incomplete left",
    "units masked, lane up": "the legacy units masked and inactive on every node, and the lane up",
    "hung, left for stop": "the lane's containers run and /health answers 200, while /metrics shows requests running "
    "and no token generated between two reads",
}
DOCTOR_FINDS = {FINDING}  # the doctor's expected id is a finding, never a harmless note


@dataclass(frozen=True)
class FaultRow:
    fault: str
    runbook: str
    setup: str
    verdict: str
    failed_step: Optional[str]
    message: str  # a fragment of the failure the run shows (of its report, when it passes)
    pitfall: Optional[str]  # the registry's id; a failure names it in its message or fix
    state_after: str  # a key of STATE_CHECKS
    bound_s: float  # detection and report: the meeting run, start to record, on the fast twin
    params: tuple[str, ...] = ()  # -p KEY=VALUE, short on purpose
    repair: Optional[str] = None  # the runbook the fix names, run next: it must pass
    doctor: Optional[str] = None  # the finding `lanebook doctor --lane` gives (a symptom id); None: why, at the row
    doctor_before: bool = False  # the doctor reads the lane before the meeting run (that run repairs the fault)

    @property
    def about(self) -> str:
        return "the worker reboots between two runbooks" if self.fault == NODE_REBOOTS else FAULTS[self.fault]


ROWS: tuple[FaultRow, ...] = (
    # The doctor's finding is None only where nothing it reads shows the fault: a transfer fault rsync resumes
    # (ssh-drop-mid-rsync), a cache that forgets (prefix-evict) and a rail that carries a fraction of its rate
    # (link-degraded). A weights fault shows in the node's tree, read
    # before the run that repairs it. The others yield their id on the twin.
    FaultRow(
        "worker-unreachable",
        "launch",
        "none",
        "fail",
        "prerequisites",
        "unreachable",
        None,
        "nothing started",
        30,
        doctor="D14",  # every read on the worker fails to connect: the connection error is the evidence
    ),
    FaultRow(
        "missing-shard",
        "launch",
        "none",
        "fail",
        "prerequisites",
        "weights complete on worker",
        None,
        "worker tree whole",
        30,
        repair="weights",
        doctor="D13",  # the worker's index names shard 7, absent from its snapshot
        doctor_before=True,  # the weights repair completes the tree
    ),
    FaultRow(
        "incomplete-shards",
        "weights",
        "none",
        "pass",
        None,
        "only *.incomplete files were deleted",
        None,
        "worker tree whole",
        30,
        doctor="D13",  # the worker's *.incomplete blobs and the shards their index names but the snapshot lacks
        doctor_before=True,  # the weights runbook finishes the tree
    ),
    FaultRow(
        "ssh-drop-mid-rsync",
        "weights",
        "none",
        "pass",
        None,
        "sent in 2 run(s)",
        None,
        "worker tree whole",
        30,
        doctor=None,  # a transfer fault rsync resumes; no lane runs during it
    ),
    FaultRow(
        "health-never",
        "launch",
        "none",
        "fail",
        "3 start",
        "/health answers 200",
        None,
        "left for stop",
        90,
        doctor="D02",
    ),
    FaultRow(
        "head-dies",
        "status",
        "started, head dead",
        "fail",
        "2 containers",
        "no orphaned worker (P16",
        "P16",
        "lane cleanly down",
        30,
        repair="stop",
        doctor="P16",
    ),
    FaultRow(
        "engine-dies-mid-bench",
        "speed",
        "started",
        "fail",
        "2 waves probe",
        "EngineCore encountered an issue",
        None,
        "left for stop",
        60,
        params=("workloads=probe", "concurrency=4"),
        doctor="D02",
    ),
    FaultRow(
        "sticky-uma",
        "launch",
        "started and stopped",
        "pass",
        None,
        "enough free memory on every node",
        "P04",
        "lane up",
        90,
        doctor="P04",
        doctor_before=True,
    ),
    FaultRow(
        "legacy-units-active",
        "launch",
        "none",
        "pass",
        None,
        "(was active)",
        "P13",
        "units masked, lane up",
        90,
        doctor="P13",
        doctor_before=True,
    ),
    FaultRow(
        "prefix-evict",
        "diagnose",
        "started",
        "fail",
        "1 prefix cache A→B→A",
        "A→B→A eviction reproduced",
        None,
        "lane up",
        45,
        params=("canary=False", "prefix_lines=120"),
        doctor=None,  # a cache that forgets shows in no log line or counter the doctor reads; the probe measures it
    ),
    FaultRow(
        "tp-hang",
        "doctor",
        "started, requests hung",
        "fail",
        "2 findings",
        "D01 TP pair hang",
        None,
        "hung, left for stop",
        45,
        doctor="D01",
    ),
    FaultRow(
        "drafter-mismatch",
        "doctor",
        "started, a wave served",
        "fail",
        "2 findings",
        "D04 Low speculative acceptance",
        None,
        "lane up",
        45,
        doctor="D04",
    ),
    FaultRow(
        "link-degraded",
        "status",
        "none",
        "fail",
        "5 link",
        "L01 rail roceP2p1s0f0 to worker carries",
        None,
        "nothing started",
        30,
        params=("link=True",),
        # nothing the doctor reads shows it: the link negotiates 200 Gb/s with clean counters, and the mlx5 27 W line
        # shows on healthy links too (dgx-spark-playbooks PR 108); only a measurement does, the status step's
        doctor=None,
    ),
    FaultRow(
        NODE_REBOOTS,
        "status",
        "started, worker rebooted",
        "fail",
        "3 api",
        "/health answers 200",
        None,
        "lane cleanly down",
        30,
        repair="stop",
        doctor="D02",
    ),
)


@dataclass(frozen=True)
class Observed:
    """What one row's runs showed: the meeting run's record and failure message, its repair's record, the
    state check of the nodes after, files lost, how long the meeting run took, and what the doctor found."""

    record: dict
    output_sha256: str  # the executed notebook's, hashed after the run
    failure: str  # the StepFailed message the run showed ("" when it passed)
    report: str  # everything the executed notebook showed
    repair_record: Optional[dict]
    state_ok: bool
    state_detail: str
    lost_files: Sequence[str]
    detection_s: float
    doctor: Optional[dict] = None  # `lanebook doctor --lane --json`'s answer: findings, notes, read, not_read


def mismatches(row: FaultRow, seen: Observed) -> list[str]:
    """Where what was observed differs from the row, one line each; [] when the row holds."""
    found = []
    record = seen.record
    if (record.get("verdict"), record.get("failed_step")) != (row.verdict, row.failed_step):
        found.append(
            f"record: verdict {record.get('verdict')!r}, failed_step {record.get('failed_step')!r} "
            f"(expected {row.verdict!r}, {row.failed_step!r})"
        )
    if record.get("twin") is not True:
        found.append("record: not marked twin")
    if record.get("sha256") != seen.output_sha256:
        found.append("record: the executed notebook does not hash to the record's sha256")
    shown = seen.failure if row.verdict == "fail" else seen.report
    if row.message not in shown:
        found.append(
            f"message: {row.message!r} not in {'the failure' if row.verdict == 'fail' else 'the report'}: "
            f"{seen.failure[:300]!r}"
        )
    if row.verdict == "fail" and not record.get("fix"):
        found.append("record: a failure with no fix")
    if row.verdict == "fail" and not record.get("failed_check"):
        found.append("record: a failure that does not say which check failed")
    if row.pitfall and row.verdict == "fail" and row.pitfall not in seen.failure + (record.get("fix") or ""):
        found.append(f"pitfall: {row.pitfall} named neither in the failure nor in the fix")
    if row.repair:
        repaired = seen.repair_record or {}
        if repaired.get("runbook") != row.repair or repaired.get("verdict") != "pass":
            found.append(
                f"repair: `{row.repair}` verdict {repaired.get('verdict')!r}, failed_step "
                f"{repaired.get('failed_step')!r} (expected pass)"
            )
        if f"`{row.repair}`" not in (record.get("fix") or ""):
            found.append(f"fix: does not name `{row.repair}`: {record.get('fix')!r}")
    if not seen.state_ok:
        found.append(f"state after ({row.state_after}): {seen.state_detail}")
    if seen.lost_files:
        found.append(f"files lost: {', '.join(seen.lost_files[:5])}")
    if row.doctor:
        found += _doctor_mismatches(row.doctor, seen.doctor)
    return found


def _doctor_mismatches(expected: str, answer: Optional[dict]) -> list[str]:
    """The expected finding among the doctor's, with evidence quoted: each line's text and where it was read."""
    if answer is None:
        return [f"doctor: not run (expected {expected})"]
    findings = {f["id"]: f for f in answer.get("findings", [])}
    if expected not in findings:
        return [
            f"doctor: no {expected} among its findings {sorted(findings) or '(none)'}; "
            f"not read: {answer.get('not_read')}"
        ]
    evidence = findings[expected].get("evidence") or []
    if not evidence or not all(e.get("source") and e.get("line", 0) > 0 and e.get("text") for e in evidence):
        return [f"doctor: {expected} without its evidence quoted with where it was read: {evidence!r}"]
    return []


def row_problems(row: FaultRow) -> list[str]:
    """What is wrong with a row as data (names that do not exist, a pitfall the runbook does not meet)."""
    found = []
    if row.fault != NODE_REBOOTS and row.fault not in FAULTS:
        found.append(f"{row.fault}: not a twin fault")
    if row.setup not in SETUPS:
        found.append(f"{row.fault}: unknown setup {row.setup!r}")
    if row.state_after not in STATE_CHECKS:
        found.append(f"{row.fault}: unknown state check {row.state_after!r}")
    if (row.verdict == "pass") != (row.failed_step is None):
        found.append(f"{row.fault}: a failed step exactly when the verdict is fail")
    if row.pitfall and row.runbook not in pitfall(row.pitfall).runbooks:
        found.append(f"{row.fault}: the registry does not say `{row.runbook}` meets {row.pitfall}")
    kinds = {s.id: s.kind for s in SYMPTOMS}
    if row.doctor and kinds.get(row.doctor) not in DOCTOR_FINDS:
        found.append(f"{row.fault}: {row.doctor} is no finding of the doctor's registry")
    if row.doctor_before and not row.doctor:
        found.append(f"{row.fault}: the doctor reads the lane before the run, but no finding is expected")
    return found


def over_bound(row: FaultRow, detection_s: float) -> bool:
    return detection_s > row.bound_s


def _cell(text: object) -> str:
    """Text for a Markdown table cell: its pipes and asterisks (`*.incomplete`) taken literally."""
    return str(text).replace("|", "\\|").replace("*", "\\*").replace("\n", " ")


def _doctor_cell(row: FaultRow) -> str:
    if not row.doctor:
        return "-"
    title = next(s.title for s in SYMPTOMS if s.id == row.doctor)
    return f"{row.doctor} {_cell(title)} ({'before' if row.doctor_before else 'after'} the run)"


def render_page(rows: Sequence[FaultRow] = ROWS) -> str:
    """The matrix as the book's page, one table row per fault."""
    lines = [
        "# Fault matrix",
        "",
        "Every fault the twin can inject (`lanebook twin up --faults NAME`) and a node rebooting between two "
        "runbooks, each met by the runbook named here on a private fast twin. `make test` runs every row "
        "(`tests/test_fault_matrix.py`) and holds it to exactly this table: the record's verdict and failed step, "
        "the message the run shows, the runbook its fix names (run next, it must pass) and the state of the nodes "
        "afterwards. Every row also checks that no file of the weights or the checkout was lost on any node, "
        "except `*.incomplete` blobs. The bound is for detecting the fault and reporting it (the meeting run, "
        "start to record, on the fast twin); `benchmarks/fault_matrix.py` prints each row's time against it. "
        "The last column is the finding `lanebook doctor --lane` must give with its evidence quoted (log lines, "
        "/metrics samples, kernel or command lines, each with where it was read), reading the lane after the "
        "meeting run, or before it where that run repairs the fault; `-` where nothing runs to show the fault. "
        "These are twin runs: their times are twin figures, never a real lane's.",
        "",
        "| fault | what it does | before the run | runbook | verdict | failed step | message | pitfall "
        "| then | state afterwards | bound (s) | the doctor finds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        runbook = f"`{row.runbook}`" + "".join(f" `-p {p}`" for p in row.params)
        lines.append(
            " | ".join(
                [
                    f"| `{row.fault}`",
                    _cell(row.about),
                    _cell(SETUPS[row.setup]),
                    runbook,
                    row.verdict,
                    _cell(row.failed_step or "-"),
                    f"`{row.message}`",
                    f"{row.pitfall} {_cell(pitfall(row.pitfall).title)}" if row.pitfall else "-",
                    f"`{row.repair}` passes" if row.repair else "-",
                    _cell(STATE_CHECKS[row.state_after]),
                    f"{row.bound_s:g}",
                    f"{_doctor_cell(row)} |",
                ]
            )
        )
    return "\n".join(lines) + "\n"
