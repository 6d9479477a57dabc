"""The symptom classes in the one registry: ids, a cited source for every D-id, a repair runbook that exists, and
patterns that compile."""

import re
from pathlib import Path

from lanebook.recipe.pitfalls import PITFALLS, SYMPTOMS
from lanebook.recipe.symptoms import NOTE

RUNBOOKS = Path(__file__).resolve().parents[1] / "runbooks"


def test_ids_sources_and_runbooks():
    pitfall_ids = {p.id for p in PITFALLS}
    for s in SYMPTOMS:
        assert re.fullmatch(r"[PDH]\d{2,3}", s.id), s.id
        assert (RUNBOOKS / f"{s.runbook}.py").exists(), (s.id, s.runbook)
        if s.id.startswith("P"):
            assert s.id in pitfall_ids and s.source.startswith("seed 000")
        if s.id.startswith("D"):
            assert s.source.startswith("https://github.com/") and s.kind != NOTE and s.next_check
        if s.id.startswith("H"):
            assert s.kind == NOTE
    assert len({s.id for s in SYMPTOMS}) == len(SYMPTOMS)


def test_every_pattern_compiles():
    for s in SYMPTOMS:
        for p in s.patterns:
            re.compile(p.regex)
