"""The doctor on the public reports it was built from and the real text of the code it reads.

The field reports (lib/lanebook/recipe/cases/field.yaml) were split by thread into a working half and a held-back
half before any rule was written; the rules and the registry's words were built on the working half only, and this
module asserts the working half's score. The held-back half is scored by benchmarks/doctor_heldout.py, which prints
both halves. Posts are assembled from each report's facts (tests/helpers/field_reports.py). Where the code that
prints a message runs here, the message is produced by it: vLLM's CPU build raises its own KV-shortfall error."""

from __future__ import annotations

import ast
import subprocess

import pytest
from helpers.field_reports import LOOKALIKE, doctor_on, reports, score, split_of
from helpers.real_vllm import VLLM_VENV, await_build, missing_reason
from lanebook.verify.doctor import CONFIRMED, diagnose, read_lines

WORK_RIGHT = 38  # of 39 reports with an established cause in the working half (measured; one D22 in words only)


def test_the_split_was_decided_by_each_threads_url_and_is_big_enough():
    rows = reports()
    assert all(r.split == split_of(r.url) for r in rows)
    assert len(rows) >= 60 and len([r for r in rows if r.split == "heldout"]) >= 30
    threads: dict[str, set[str]] = {}
    for r in rows:
        threads.setdefault(r.url, set()).add(r.split)
    assert all(len(splits) == 1 for splits in threads.values())  # a thread is never in both halves
    assert len([r for r in rows if r.cause == LOOKALIKE]) >= 10


def test_the_working_half_is_named_right_and_no_look_alike_is_confirmed():
    found = score("work")
    assert found["right"] >= WORK_RIGHT, found["missed"]
    assert found["confirmed_on_lookalikes"] == 0, found["missed"]


@pytest.mark.parametrize("report", [r for r in reports("work") if r.phase == "starting"], ids=lambda r: r.id)
def test_a_failed_start_is_never_a_death_mid_serve(report):
    assert "D02" not in doctor_on(report).ids()


def test_every_suspected_finding_shows_what_matched():
    for report in reports("work"):
        for f in doctor_on(report).findings:
            if f.confidence == "suspected" and not f.evidence:
                pytest.fail(f"{report.id}: {f.id} suspected with no evidence")
            if f.confidence == "suspected" and f.rank:
                assert f.matched or f.similar, (report.id, f.id)  # the registry's words, or the reports like it


def vllm_kv_errors(*cases: tuple[int, float, float]) -> list[str]:
    """vLLM's own KV-shortfall errors, one per (max_model_len, needed GiB, available GiB), raised by its kv_cache_utils
    check in the CPU build's venv: one process, as importing vLLM costs seconds of CPU."""
    lines = ["from vllm.v1.core.kv_cache_utils import _check_enough_kv_cache_memory as check"]
    for max_model_len, needed_gib, available_gib in cases:
        lines += [
            "try:",
            f"    check({int(available_gib * 2**30)}, lambda: {int(needed_gib * 2**30)}, {max_model_len}, "
            f"lambda m: {max_model_len * 7 // 8})",
            "except ValueError as e:",
            "    print(repr(f'ValueError: {e}'))",
        ]
    run = subprocess.run(
        [str(VLLM_VENV / "bin" / "python"), "-c", "\n".join(lines)], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    errors = [
        ast.literal_eval(line) for line in run.stdout.splitlines() if line.startswith(("'ValueError", '"ValueError'))
    ]
    assert len(errors) == len(cases), run.stdout[-2000:]
    return errors


def test_vllms_own_kv_shortfall_is_read_at_any_max_seq_len_and_as_pasted():
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    await_build()
    one_m, other = vllm_kv_errors((1_048_576, 46.52, 41.07), (262_144, 12.2, 9.75))
    assert "KV cache is needed" in one_m and "(262144)" in other
    prefix = "(EngineCore pid=316) ERROR 12-04 22:50:01 [core.py:708] "
    for message, cause in ((one_m, "P07"), (other, "D06")):
        assert diagnose(read_lines("log", prefix + message)).ids(CONFIRMED) == [cause]
        wrapped = "\n".join(
            "> vllm-dspark-1  | " + (prefix + message)[i : i + 72] if i == 0 else "> " + (prefix + message)[i : i + 72]
            for i in range(0, len(prefix + message), 72)
        )
        post = f"Our lane stopped at startup:\n\n{wrapped}\n\nWhat now?"
        assert diagnose(read_lines("post.md", post)).ids(CONFIRMED) == [cause], post
