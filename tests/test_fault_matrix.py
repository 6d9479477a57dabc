"""The fault matrix (lanebook.twin.fault_matrix): every row run against the twin (lanebook.twin.fault_runs: a private
fast twin per row with its fault, three rows at a time in processes of their own) and held to its row — the record's
verdict and failed step, the message naming the pitfall, the repair run passing, the state of the nodes afterwards,
no file lost, the doctor's expected finding with its evidence quoted; and the matrix as data and as the book's page,
exactly."""

from __future__ import annotations

import pytest
from lanebook.twin.control import FAULTS
from lanebook.twin.fault_matrix import (
    NODE_REBOOTS,
    ROWS,
    FaultRow,
    Observed,
    mismatches,
    over_bound,
    render_page,
    row_problems,
)
from lanebook.twin.fault_runs import concurrent_rows, failure_message, lost, shown_text

JOBS = 3  # rows at a time: most of a row is waiting on the twin (cold bind, paced decode), not computing


# --- against the twin ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def observed(tmp_path_factory):
    with concurrent_rows(ROWS, tmp_path_factory.mktemp("fault-matrix"), JOBS) as futures:
        yield futures


@pytest.mark.twin
@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.fault)
def test_the_fault_ends_as_its_row_says(row, observed):
    seen = observed[row.fault].result()
    assert mismatches(row, seen) == [], (seen.failure, seen.record)


# --- the matrix as data ---------------------------------------------------------------------------


def test_every_twin_fault_and_the_reboot_have_one_well_formed_row():
    assert sorted(row.fault for row in ROWS) == sorted([*FAULTS, NODE_REBOOTS])
    assert [problem for row in ROWS for problem in row_problems(row)] == []


def test_a_malformed_row_is_named():
    row = FaultRow("no-such-fault", "status", "later", "pass", "2 containers", "x", "P16", "somewhere", 10)
    assert row_problems(row) == [
        "no-such-fault: not a twin fault",
        "no-such-fault: unknown setup 'later'",
        "no-such-fault: unknown state check 'somewhere'",
        "no-such-fault: a failed step exactly when the verdict is fail",
    ]
    assert row_problems(FaultRow("head-dies", "weights", "none", "pass", None, "x", "P16", "lane up", 10)) == [
        "head-dies: the registry does not say `weights` meets P16"
    ]
    notes = FaultRow("sticky-uma", "launch", "none", "pass", None, "x", None, "lane up", 10, doctor="H01")
    assert row_problems(notes) == ["sticky-uma: H01 is no finding of the doctor's registry"]
    before = FaultRow("sticky-uma", "launch", "none", "pass", None, "x", None, "lane up", 10, doctor_before=True)
    assert row_problems(before) == ["sticky-uma: the doctor reads the lane before the run, but no finding is expected"]


def test_every_row_but_those_nothing_runs_for_expects_a_doctor_finding():
    """None only where nothing the doctor reads shows the fault (the reason is a comment at the row)."""
    assert sorted(row.fault for row in ROWS if row.doctor is None) == [
        "link-degraded",
        "prefix-evict",
        "ssh-drop-mid-rsync",
    ]


HEAD_DIES = FaultRow(
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
)
P16_FOUND = {
    "healthy": False,
    "findings": [
        {
            "id": "P16",
            "confidence": "confirmed",
            "evidence": [
                {
                    "source": "worker:docker logs ds4-f-mia-anemll-0731-vllm-dspark-1",
                    "line": 12,
                    "text": "[rank1]:[W1202 11:42:15.1 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(...)",
                }
            ],
        }
    ],
    "notes": [],
    "not_read": [],
}


def seen(**changes) -> Observed:
    base = dict(
        record={
            "verdict": "fail",
            "failed_step": "2 containers",
            "twin": True,
            "fix": "run `stop`, then `launch`",
            "failed_check": "no orphaned worker (P16): the head's container is gone",
            "sha256": "ab12",
        },
        output_sha256="ab12",
        failure="2 containers: no orphaned worker (P16: the head's container is gone)",
        report="",
        repair_record={"runbook": "stop", "verdict": "pass", "failed_step": None},
        state_ok=True,
        state_detail="down: head: none; worker: none",
        lost_files=[],
        detection_s=4.2,
        doctor=P16_FOUND,
    )
    return Observed(**{**base, **changes})


def test_an_observation_that_holds_has_no_mismatch():
    assert mismatches(HEAD_DIES, seen()) == []
    assert not over_bound(HEAD_DIES, 30.0) and over_bound(HEAD_DIES, 30.1)


def test_every_mismatch_is_named():
    wrong = seen(
        record={"verdict": "pass", "failed_step": None, "twin": False, "fix": None, "sha256": "ab12"},
        output_sha256="cd34",
        failure="2 containers: the head does not run without its workers",
        repair_record={"runbook": "stop", "verdict": "fail", "failed_step": "1 stop script"},
        state_ok=False,
        state_detail="up: head: a; worker: b",
        lost_files=["worker:x.safetensors"],
        doctor={"findings": [{"id": "D02", "evidence": []}], "not_read": ["worker: free -m: exit 1"]},
    )
    assert mismatches(HEAD_DIES, wrong) == [
        "record: verdict 'pass', failed_step None (expected 'fail', '2 containers')",
        "record: not marked twin",
        "record: the executed notebook does not hash to the record's sha256",
        (
            "message: 'no orphaned worker (P16' not in the failure: '2 containers: the head does not run without its "
            "workers'"
        ),
        "record: a failure with no fix",
        "record: a failure that does not say which check failed",
        "pitfall: P16 named neither in the failure nor in the fix",
        "repair: `stop` verdict 'fail', failed_step '1 stop script' (expected pass)",
        "fix: does not name `stop`: None",
        "state after (lane cleanly down): up: head: a; worker: b",
        "files lost: worker:x.safetensors",
        "doctor: no P16 among its findings ['D02']; not read: ['worker: free -m: exit 1']",
    ]


def test_the_doctors_finding_must_quote_its_evidence_with_where_it_was_read():
    unquoted = {"findings": [{"id": "P16", "evidence": [{"source": "local:GET /metrics", "line": 0, "text": "x"}]}]}
    assert mismatches(HEAD_DIES, seen(doctor=unquoted)) == [
        "doctor: P16 without its evidence quoted with where it was read: "
        "[{'source': 'local:GET /metrics', 'line': 0, 'text': 'x'}]"
    ]
    assert mismatches(HEAD_DIES, seen(doctor=None)) == ["doctor: not run (expected P16)"]


def test_a_passing_row_looks_for_its_message_in_the_report():
    row = FaultRow(
        "legacy-units-active", "launch", "none", "pass", None, "(was active)", "P13", "units masked, lane up", 90
    )
    passed = seen(
        record={"verdict": "pass", "failed_step": None, "twin": True, "fix": None, "sha256": "ab12"},
        failure="",
        report="`PASS` **no legacy unit active** — head: aiden-vllm.service masked, inactive (was active)",
        repair_record=None,
    )
    assert mismatches(row, passed) == []
    assert mismatches(row, seen(**{**passed.__dict__, "report": "nothing"})) == [
        "message: '(was active)' not in the report: ''"
    ]


def test_the_twin_plugin_adds_the_page_to_the_book():
    from lanebook.lane.plugins import load_registry
    from lanebook.twin import fault_matrix

    assert load_registry().book_pages["faults"]() == fault_matrix.render_page()


def test_the_book_page_is_the_table():
    page = render_page((HEAD_DIES,))
    assert page.startswith("# Fault matrix\n\n")
    assert page.endswith(
        "| fault | what it does | before the run | runbook | verdict | failed step | message | pitfall | then "
        "| state afterwards | bound (s) | the doctor finds |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n"
        "| `head-dies` | engine: the head dies mid-TP, leaving the worker orphaned | the lane started by its launcher; "
        "the head's engine dies a few seconds after ready | `status` | fail | 2 containers | `no orphaned worker (P16` "
        "| P16 Head dies mid-TP | `stop` passes | no container of the lane on any node | 30 "
        "| P16 Head died mid-TP, worker orphaned (after the run) |\n"
    )
    assert render_page().count("\n| `") == len(ROWS)


# --- reading what a run left ----------------------------------------------------------------------


def test_the_failure_and_the_report_are_read_from_the_executed_notebook():
    notebook = {
        "cells": [
            {"outputs": [{"output_type": "stream", "name": "stdout", "text": ["launcher ok\n", "ready\n"]}]},
            {"outputs": [{"output_type": "display_data", "data": {"text/markdown": "`PASS` **checkout present**"}}]},
            {
                "outputs": [
                    {"output_type": "error", "ename": "StepFailed", "evalue": "3 start: /health answers 200 (503)"}
                ]
            },
            {"source": "no outputs"},
        ]
    }
    assert failure_message(notebook) == "3 start: /health answers 200 (503)"
    assert shown_text(notebook) == (
        "launcher ok\nready\n\n`PASS` **checkout present**\n\nStepFailed: 3 start: /health answers 200 (503)"
    )
    assert failure_message({"cells": []}) == ""


def test_lost_files_are_those_gone_except_unfinished_downloads():
    before = {"head": {"a", "b"}, "worker": {"blobs/x.incomplete", "c"}}
    after = {"head": {"a", "b", "b.bak-1"}, "worker": set()}
    assert lost(before, after) == ["worker:c"]
