"""The doctor's case base (lanebook.recipe.casebase): enough public reports from enough threads, each from a thread's
URL with a cause that resolves and no id twice; every cause with two or more reports is in the registry with its fix;
a bad case file is one line naming the file, the case and what is wrong; the case files ship with the package."""

from collections import Counter
from pathlib import Path

import pytest
from lanebook.base.redact import redact
from lanebook.recipe import casebase
from lanebook.recipe.casebase import LOOKALIKE, THREAD_URL, CaseBaseError, case_cause, cases, causes, read_cases
from lanebook.recipe.pitfalls import SYMPTOMS, symptom
from lanebook.site.bookcheck import EMOJI

MIN_REPORTS = 250  # the floor: at least 250 reports from at least 150 threads
MIN_THREADS = 150


def test_the_case_base_holds_enough_reports_each_from_a_thread_with_a_cause_that_resolves():
    found = cases()
    assert len(found) >= MIN_REPORTS and len({c.thread for c in found}) >= MIN_THREADS
    assert len({c.id for c in found}) == len(found)
    registry = {s.id for s in SYMPTOMS}
    for c in found:
        assert THREAD_URL.match(c.url), (c.id, c.url)
        assert c.cause == LOOKALIKE or c.cause in registry or case_cause(c.cause), (c.id, c.cause)
        assert c.lines or c.words or c.kernel, c.id
        assert c.cause == LOOKALIKE or casebase.fix_of(c), c.id


def test_every_cause_with_two_reports_is_in_the_registry_with_its_fix_and_one_report_stays_case_only():
    counts = Counter(c.cause for c in cases())
    registry = {s.id: s for s in SYMPTOMS}
    for cause in causes():
        if counts[cause.name] >= 2:
            assert cause.id and cause.id in registry and registry[cause.id].fix == cause.fix, cause.key
            assert registry[cause.id].source == cause.source and THREAD_URL.match(cause.source)
        elif cause.id == "":
            assert counts[cause.key] == 1 and symptom(cause.key).fix == cause.fix  # named by retrieval, with its fix
    assert all(name in registry for name, n in counts.items() if n >= 2 and name != LOOKALIKE)


def test_a_bad_case_file_is_one_line_naming_file_case_and_problem(tmp_path):
    good = "- id: a-case\n  url: https://github.com/o/r/issues/1\n  cause: D05\n  phase: starting\n  words: [x]\n"
    for body, said in (
        (good + "  colour: red\n", "x.yaml case a-case: unknown key 'colour'"),
        (good + good, "x.yaml case a-case: duplicate id"),
        (good.replace("D05", "no-such-cause"), "cause 'no-such-cause' is neither a registry id nor in causes.yaml"),
        (good.replace("issues/1", "blob/main/README.md"), "is not a thread's"),
        (good.replace("starting", "lunch"), "phase 'lunch' is not one of"),
    ):
        path = tmp_path / "x.yaml"
        path.write_text("cases:\n" + body)
        with pytest.raises(CaseBaseError) as raised:
            read_cases([path])
        assert said in str(raised.value), str(raised.value)


def test_a_case_file_read_again_comes_from_its_json_and_a_changed_one_is_parsed_again(tmp_path):
    row = "- id: a-case\n  url: https://github.com/o/r/issues/1\n  cause: D05\n  phase: starting\n  words: [{}]\n"
    path = tmp_path / "x.yaml"
    path.write_text("cases:\n" + row.format("first"))
    assert read_cases([path])[0].words == ("first",)
    (kept,) = (tmp_path / "__pycache__").glob("x.*.json")
    kept.write_text(kept.read_text().replace("first", "from the json"))
    assert read_cases([path])[0].words == ("from the json",)  # the parsed data kept, not the YAML parsed again
    path.write_text("cases:\n" + row.format("second"))
    assert read_cases([path])[0].words == ("second",)
    assert [p.name for p in (tmp_path / "__pycache__").iterdir()] != [kept.name]  # the old one replaced


def test_the_case_files_are_package_data():
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert '"**/*.yaml"' in pyproject and casebase.CASES.is_relative_to(Path(casebase.__file__).parent)
    assert (casebase.CASES / "field.yaml").exists() and casebase.CAUSES.exists()


def test_no_text_of_the_case_base_reads_as_a_secret():
    """The book publishes causes and reports: text the redactor would change would stop the book (and hide words)."""
    read = [(c.key, t) for c in causes() for t in (c.title, c.meaning, c.fix, c.seen, c.source)]
    read += [(c.id, t) for c in cases() for t in (*c.lines, *c.kernel, *c.words, c.fix, c.url)]
    assert [(name, t) for name, t in read if redact(t) != t] == []


def test_no_published_text_of_a_cause_needs_an_emoji_font():
    """The Symptoms page publishes each cause's title, meaning, fix and the line it is seen as, and no mark on a page
    may need an emoji font (a client's warning sign is left out of its line as quoted)."""
    read = [(c.key, t) for c in causes() for t in (c.title, c.meaning, c.fix, c.seen)]
    assert [(name, t) for name, t in read if EMOJI.search(t)] == []
