"""The doctor's report (lanebook.verify.doctor_report): findings as a terminal table and as Markdown, each with its
evidence as pasted and where it was read, a suspected finding with what matched, an unknown one with what to gather."""

from __future__ import annotations

from lanebook.verify.doctor import diagnose, read_lines
from lanebook.verify.doctor_report import diagnosis_markdown, print_diagnosis


def test_a_suspected_finding_shows_what_matched_and_an_unknown_what_to_gather(capsys):
    suspected = diagnose(read_lines("post.md", "Breakable CUDA graphs now auto-enable and decode throughput drops."))
    page = diagnosis_markdown(suspected)
    assert "**P01 suspected**" in page and "matched: " in page and "**suspect**" in page
    unknown = diagnose(read_lines("log", "Traceback (most recent call last):\nKeyError: 'quux.7.zeta'"))
    page = diagnosis_markdown(unknown)
    assert "**unknown**: 0 confirmed, 0 suspected" in page and "log:1: Traceback (most recent call last):" in page
    print_diagnosis(unknown)
    out = capsys.readouterr().out
    assert "unknown" in out and "traceback" in out.lower()


def test_evidence_is_quoted_as_it_was_pasted():
    pasted = "> vllm-dspark-1  | torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients."
    assert f"post.md:1: {pasted}" in diagnosis_markdown(diagnose(read_lines("post.md", pasted)))
