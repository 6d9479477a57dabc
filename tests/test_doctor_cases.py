"""Retrieval over the case base (lanebook.verify.doctor_cases): lines normalised so the same message from another run
reads the same; the nearest reports vote and a suspected finding names them with their links; retrieval never
confirms; and leave-one-thread-out over a fixed sample of the case base's threads keeps its floor (the whole measure:
benchmarks/doctor_casebase.py)."""

import hashlib
import os
import subprocess
import sys

from helpers.field_reports import named_right, post
from lanebook.recipe.casebase import LOOKALIKE, cases
from lanebook.recipe.symptoms import SYMPTOMS
from lanebook.verify import doctor_suspect
from lanebook.verify.doctor import CONFIRMED, SUSPECTED, diagnose, read_lines
from lanebook.verify.doctor_cases import (
    TOKENS,
    WORD_SHARE,
    CaseIndex,
    cached_counts,
    document,
    normalise,
    without_thread,
)
from sklearn.feature_extraction.text import TfidfVectorizer

LOTO_FLOOR = 0.70  # of the sampled learnable reports named right as posts (0.716 of 169 at 1,420 reports)
SAMPLE = 8  # one thread in SAMPLE, chosen by its URL's hash
REGISTRY = {s.id for s in SYMPTOMS}  # the causes the registry's own rules name


def learnable(case, chosen) -> bool:
    """Whether leave-one-thread-out can name CASE's cause at all: a look-alike, a cause the registry's own rules name,
    or one another thread's reports teach (a cause seen in one thread only leaves nothing to learn it from)."""
    if case.cause == LOOKALIKE or case.cause in REGISTRY:
        return True
    return any(c.cause == case.cause and c.thread != case.thread for c in chosen)


def test_a_message_from_another_run_normalises_the_same():
    one = (
        "(EngineCore pid=652) ERROR 05-20 20:35:26 [core.py:1161] RayWorkerProc rank=[2] died unexpectedly at "
        "192.168.100.11:29500, see /home/a/.cache/vllm/torch_compile_cache/0x7f3a/rank_1/model.py line 12"
    )
    two = (
        "(EngineCore_DP0 pid=9) ERROR 12-01 01:02:03 [core.py:88] RayWorkerProc rank=[1] died unexpectedly at "
        "10.0.0.2:1234, see /root/.cache/vllm/torch_compile_cache/0xdeadbeef/rank_0/model.py line 7"
    )
    assert normalise(one) == normalise(two)
    assert "core.py" not in normalise(one) and "model.py" in normalise(one) and "died unexpectedly" in normalise(one)
    assert normalise("Traceback (most recent call last):") == ""


def test_the_nearest_reports_vote_and_a_suspected_finding_links_them():
    shm = [c for c in cases() if c.cause == "D24"]
    post_text = "Our two-node job stops at init.\n\n```\n" + "\n".join(shm[0].lines) + "\n```\n"
    found = diagnose(read_lines("post.md", post_text), cases=without_thread(shm[0].thread))
    first = found.findings[0]
    assert first.id == "D24" and first.confidence == SUSPECTED and first.similar
    as_json = first.to_json()["similar"]
    assert all(s["url"].startswith("https://") and 0 < s["score"] <= 1 for s in as_json)
    assert {s["id"] for s in as_json} <= {c.id for c in shm[1:]}


def test_retrieval_never_confirms_and_a_lone_shared_word_names_nothing():
    for c in cases()[::16]:
        for f in diagnose(read_lines("post.md", post(c)), cases=without_thread(c.thread)).findings:
            assert not f.similar or f.confidence == SUSPECTED, (c.id, f.id)  # the reports like it come with a suspicion
            assert f.confidence != CONFIRMED or f.evidence, (c.id, f.id)
    lone = diagnose(read_lines("log", "Traceback (most recent call last):\nKeyError: 'quux.7.zeta'"))
    assert [f.confidence for f in lone.findings] == ["unknown"]


def test_a_fold_weighs_its_cases_as_a_fit_on_them_alone_would():
    """Leave-one-thread-out re-weighs counts taken once; its similarities are those of TF-IDF fitted on the fold."""
    chosen = cases()
    for case in chosen[::401]:
        kept = [c for c in chosen if c.thread != case.thread]
        docs = [document(c) for c in kept]
        words = TfidfVectorizer(token_pattern=TOKENS, sublinear_tf=True, lowercase=True)
        chars = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True, lowercase=True)
        word_matrix, char_matrix = words.fit_transform(docs), chars.fit_transform(docs)
        query = document(case)
        fitted = WORD_SHARE * (word_matrix @ words.transform([query]).T).toarray().ravel()
        fitted += (1 - WORD_SHARE) * (char_matrix @ chars.transform([query]).T).toarray().ravel()
        folded, words_query = without_thread(case.thread).similarities(query)
        assert abs(folded - fitted).max() < 1e-9 and words_query.nnz == words.transform([query]).nnz


def test_the_cached_counts_vote_as_a_fit_does_and_spare_a_run_scikit_learn(tmp_path, monkeypatch):
    """The counts kept in the cache give the very similarities of a fit; a second process reads them without
    loading scikit-learn; a cache that cannot be written is passed by."""
    monkeypatch.setenv("LANEBOOK_CACHE", str(tmp_path / "cache"))
    chosen = cases()
    fitted = CaseIndex(chosen)
    written = CaseIndex(chosen, counted=cached_counts(chosen))
    (kept,) = (tmp_path / "cache").glob("case-counts-*.npz")
    read = CaseIndex(chosen, counted=cached_counts(chosen))
    for query in [document(c) for c in chosen[::301]] + ["NCCL WARN NET/IB : Got completion with error 12"]:
        expected = fitted.similarities(query)[0]
        assert abs(written.similarities(query)[0] - expected).max() < 1e-12
        assert abs(read.similarities(query)[0] - expected).max() < 1e-12
    script = (
        "import sys; from lanebook.verify.doctor import diagnose, read_lines; "
        "found = diagnose(read_lines('post.md', 'My lane is slow.\\nWARNING odd scheduler state\\n')); "
        "print(len(found.findings), 'sklearn' in sys.modules)"
    )
    env = {**os.environ, "LANEBOOK_CACHE": str(tmp_path / "cache")}
    for run in ("fits and keeps the registry's counts", "reads both"):
        again = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
        assert again.returncode == 0, again.stderr
    assert again.stdout.split()[1] == "False", again.stdout + again.stderr  # the doctor, whole, without scikit-learn
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("LANEBOOK_CACHE", str(tmp_path / "a-file" / "cache"))  # no folder can be made there
    unwritable = CaseIndex(chosen, counted=cached_counts(chosen))
    assert abs(unwritable.similarities("NCCL error")[0] - fitted.similarities("NCCL error")[0]).max() < 1e-12


def test_the_registry_tier_weighs_terms_as_scikit_learns_tf_idf(tmp_path, monkeypatch):
    """The registry's words and word pairs, stop words out, read from the cache: the similarities of scikit-learn's
    TfidfVectorizer fitted on the same documents."""
    monkeypatch.setenv("LANEBOOK_CACHE", str(tmp_path / "cache"))
    doctor_suspect._index.cache_clear()
    try:
        index = doctor_suspect._index()
        documents = [doctor_suspect._document(s) for s in index.symptoms]
        fitted = TfidfVectorizer(
            token_pattern=doctor_suspect.TOKENS, ngram_range=(1, 2), sublinear_tf=True, stop_words="english"
        )
        matrix = fitted.fit_transform(documents)
        assert sorted(index.vocabulary) == list(fitted.get_feature_names_out())
        for query in [post(c) for c in cases()[::211]] + ["acceptance sat at a quarter; decode falls as output grows"]:
            ours = (index.matrix @ index.vector(query).T).toarray().ravel()
            theirs = (matrix @ fitted.transform([query]).T).toarray().ravel()
            assert abs(ours - theirs).max() < 1e-12
    finally:
        doctor_suspect._index.cache_clear()


def test_leave_one_thread_out_over_a_sample_keeps_its_floor():
    chosen = cases()
    threads = sorted({c.thread for c in chosen if hashlib.sha256(c.thread.encode()).digest()[0] % SAMPLE == 0})
    right = total = 0
    for thread in threads:
        index = without_thread(thread, among=chosen)
        for c in (c for c in chosen if c.thread == thread and learnable(c, chosen)):
            total += 1
            right += named_right(c, diagnose(read_lines(f"{c.id}.md", post(c)), cases=index))
    assert total >= 20 and right / total >= LOTO_FLOOR, (right, total)
    assert any(c.cause == LOOKALIKE for c in chosen)
