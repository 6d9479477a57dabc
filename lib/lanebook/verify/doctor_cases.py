"""Retrieval over the doctor's case base: which public reports a sick lane's evidence resembles, and the cause they
vote for.

Each case (lanebook.recipe.casebase) becomes one document: its log and kernel lines normalised (vLLM's logger prefix
and process tags off; numbers, paths, hex, ids, timestamps, ranks, addresses and pids masked) and its words. Two TF-IDF
indexes are built over them: words, and character n-grams inside words (a message cut, wrapped or spelt a little
differently). scikit-learn counts the terms once; the counts are kept in the user's cache (`cache_dir`), keyed by the
documents and this module, so a doctor run neither loads scikit-learn nor fits again. A query is a bounded summary of
what the doctor read (`summary`: error-shaped lines, lines a rule matched, warnings and prose, each distinct line
once). The k nearest cases vote for their causes, each with its similarity raised to a power, and the causes voted for
are ordered by the query's nearness to each cause's centroid (Rocchio): one near report of a sibling cause no longer
outvotes a family nearer as a whole. Retrieval never confirms: a vote is a `suspected` finding at most.
"""

from __future__ import annotations

import hashlib
import io
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

from lanebook.base.files import write_atomic
from lanebook.base.paths import cache_dir
from lanebook.recipe.casebase import Case, cases
from lanebook.verify.doctor_input import Line

K = 7  # nearest cases that vote
POWER = 4.0  # a case's vote is its similarity to this power: the nearest count most
MIN_SIMILARITY = 0.08  # a case less similar than this casts no vote
WORD_SHARE = 0.5  # the word index's share of a similarity (the rest: character n-grams)
CENTROID_WORD_SHARE = 0.8  # and of a similarity to a cause's centroid (a family's common words tell it apart best)
MAX_SUMMARY_LINES = 400  # distinct lines a query reads
MAX_LINE = 600  # characters of one line a query reads
SHOWN = 3  # reports named per cause
TOKENS = r"(?u)\b[A-Za-z_][A-Za-z0-9_]+\b"
CHAR_NGRAMS = (3, 5)  # character n-grams inside words, shortest and longest
WORD_TERMS = re.compile(TOKENS)
SPACES = re.compile(r"\s\s+")

# vLLM's logger prefix and process tags: `(EngineCore pid=652) ERROR 05-20 20:35:26 [core.py:1161] `.
PREFIX = re.compile(
    r"\((?:[\w.:-]+(?:\s+[\w.:=-]+)*?)\s+pid=\d+(?:,\s*ip=[\w.:]+)?\)\s*"
    r"|\b(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?\s+\[[\w./-]+:\d+\]\s*"
    r"|\[rank\d+\]:\s*"
)
BOILERPLATE = re.compile(
    r"Traceback \(most recent call last\):?|The above exception was the direct cause of the "
    r"following exception:?|During handling of the above exception, another exception occurred:?"
)
MASKS = (
    (re.compile(r"\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"), " "),  # ISO timestamps
    (re.compile(r"\b\d\d:\d\d:\d\d(?:[.,]\d+)?\b"), " "),  # clock times
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), " xid "),  # uuids
    (re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b"), " xip "),  # IPv4 (and port)
    (re.compile(r"\b(?:[0-9a-f]{1,4}:){3,7}[0-9a-f]{1,4}\b", re.I), " xip "),  # IPv6
    (re.compile(r"\b0x[0-9a-f]+\b", re.I), " xhex "),
    (re.compile(r"\b[0-9a-f]{12,}\b", re.I), " xid "),  # hashes, container ids
    (
        re.compile(r"(?:~|\.{1,2})?(?:/[\w.@+-]+){2,}/?"),
        lambda m: " " + m.group(0).rstrip("/").rsplit("/", 1)[-1] + " ",
    ),
    (re.compile(r"\b(pid|tid|rank|local_rank|device|gpu|cuda|node|port)\s*[=:]\s*\[?\d+\]?", re.I), r" \1 "),
    (re.compile(r"\b(rank|gpu|node|spark|worker|tp|dp|pp)\d+\b", re.I), r" \1 "),
    (re.compile(r"\d+(?:\.\d+)?"), " "),  # the remaining numbers
)


def normalise(text: str) -> str:
    """A line as retrieval reads it: the logger prefix and a traceback's header off, variable parts masked, spaces
    collapsed."""
    text = BOILERPLATE.sub(" ", PREFIX.sub(" ", text[:MAX_LINE]))
    for pattern, repl in MASKS:
        text = pattern.sub(repl, text)
    return " ".join(text.split())


def document(case: Case) -> str:
    """A case as the index holds it: its normalised lines and kernel lines, then its words."""
    return "\n".join([*(normalise(t) for t in case.lines + case.kernel), *case.words])


@dataclass(frozen=True)
class Similar:
    """A case the input resembles: its id, thread URL and similarity (0-1)."""

    id: str
    url: str
    score: float

    def to_json(self) -> dict:
        return {"id": self.id, "url": self.url, "score": self.score}


@dataclass(frozen=True)
class Vote:
    """A cause the nearest cases vote for: its score (the sum of their votes), its share of all votes, and the cases
    that cast it, nearest first."""

    cause: str
    score: float
    share: float
    similar: tuple[Similar, ...]
    shared: int = 0  # distinct words the input shares with the nearest of these reports

    @property
    def best(self) -> float:
        return self.similar[0].score if self.similar else 0.0


class CaseIndex:
    """The TF-IDF indexes over a set of cases (`kept`: the rows of CHOSEN it holds, all by default). The terms are
    counted once per set of cases (`counts`); an index weighs them as a fit on its kept cases alone would (sublinear
    tf, smoothed idf from the kept cases' document frequencies, rows of unit length, terms no kept case has left
    out), so a leave-one-thread-out fold costs a re-weighting, not a fit."""

    def __init__(
        self, chosen: Sequence[Case], *, kept: Optional[Sequence[int]] = None, counted: "Optional[Counts]" = None
    ):
        import numpy as np

        chosen = tuple(chosen)
        rows = np.arange(len(chosen)) if kept is None else np.asarray(kept, dtype=int)
        self.cases = tuple(chosen[i] for i in rows)
        if not self.cases:
            return  # an empty index votes for nothing
        counted = counted or counts(chosen)
        self.words, self.chars = counted.words, counted.chars
        self.word_idf = idf_of(counted.word_counts[rows])
        self.char_idf = idf_of(counted.char_counts[rows])
        self.word_matrix = weighed(counted.word_counts[rows], self.word_idf)
        self.char_matrix = weighed(counted.char_counts[rows], self.char_idf)
        self._centroids: dict[str, tuple] = {}

    def centroid(self, cause: str) -> tuple:
        """A cause's centroid over this index's cases (words, characters): the mean of its rows, of unit length."""
        import numpy as np

        if cause not in self._centroids:
            members = [i for i, c in enumerate(self.cases) if c.cause == cause]
            sums = [np.asarray(matrix[members].sum(axis=0)).ravel() for matrix in (self.word_matrix, self.char_matrix)]
            self._centroids[cause] = tuple(v / (np.linalg.norm(v) or 1.0) for v in sums)
        return self._centroids[cause]

    def similarities(self, query: str):
        """Each case's similarity to QUERY (0-1), and the query's word vector."""
        sims, words_query, _ = self._similarities(query)
        return sims, words_query

    def _similarities(self, query: str):
        words_query = weighed(count_row(word_terms(query), self.words), self.word_idf)
        chars_query = weighed(count_row(char_terms(query), self.chars), self.char_idf)
        words = (self.word_matrix @ words_query.T).toarray().ravel()
        chars = (self.char_matrix @ chars_query.T).toarray().ravel()
        return WORD_SHARE * words + (1 - WORD_SHARE) * chars, words_query, chars_query

    def vote(self, query: str, *, k: int = K) -> list[Vote]:
        """The causes the k nearest cases vote for, best first: nearest centroid first, ties by score (look-alikes vote
        too, as `lookalike`)."""
        if not query.strip() or not self.cases:
            return []
        sims, words_query, chars_query = self._similarities(query)
        nearest = [i for i in sims.argsort()[::-1][:k] if sims[i] >= MIN_SIMILARITY]
        by_cause: dict[str, list[int]] = {}
        for i in nearest:
            by_cause.setdefault(self.cases[i].cause, []).append(i)
        total = sum(float(sims[i]) ** POWER for i in nearest) or 1.0
        asked = set(words_query.indices)
        votes = []
        for cause, members in by_cause.items():
            score = sum(float(sims[i]) ** POWER for i in members)
            shown = tuple(Similar(self.cases[i].id, self.cases[i].url, round(float(sims[i]), 3)) for i in members)
            shared = len(asked & set(self.word_matrix[members[0]].indices))
            votes.append(Vote(cause, round(score, 4), round(score / total, 3), shown[:SHOWN], shared))
        near = {v.cause: self._centroid_similarity(v.cause, words_query, chars_query) for v in votes}
        return sorted(votes, key=lambda v: (-near[v.cause], -v.score, -v.best))

    def _centroid_similarity(self, cause: str, words_query, chars_query) -> float:
        words, chars = self.centroid(cause)
        near_words = float((words_query @ words)[0])
        near_chars = float((chars_query @ chars)[0])
        return round(CENTROID_WORD_SHARE * near_words + (1 - CENTROID_WORD_SHARE) * near_chars, 6)


@lru_cache(maxsize=1)
def case_index() -> CaseIndex:
    """The index over the whole case base (built once per process, when first asked, from the cached counts)."""
    chosen = cases()
    return CaseIndex(chosen, counted=cached_counts(chosen))


def without_thread(thread: str, *, among: Optional[Sequence[Case]] = None) -> CaseIndex:
    """An index over the case base (or AMONG) with one thread's cases left out (leave-one-thread-out)."""
    chosen = tuple(among if among is not None else cases())
    return CaseIndex(chosen, kept=[i for i, c in enumerate(chosen) if c.thread != thread])


def word_terms(text: str) -> list[str]:
    """The words of TEXT as the word index counts them: lower case, two characters or more, no digit first."""
    return WORD_TERMS.findall(text.lower())


def char_terms(text: str) -> list[str]:
    """The character n-grams of TEXT inside its words, each word padded with a space either side (scikit-learn's
    char_wb): a word shorter than an n-gram counts once, whole."""
    found: list[str] = []
    low, high = CHAR_NGRAMS
    for word in SPACES.sub(" ", text.lower()).split():
        padded = f" {word} "
        for n in range(low, high + 1):
            found += [padded[i : i + n] for i in range(max(1, len(padded) - n + 1))]
            if len(padded) <= n:
                break
    return found


@dataclass(frozen=True)
class Counts:
    """The term counts of a set of cases' documents: the word and character n-gram vocabularies (term -> column) and a
    row per case."""

    words: dict[str, int]
    chars: dict[str, int]
    word_counts: object  # scipy CSR matrices, one row per case
    char_counts: object


@lru_cache(maxsize=4)
def counts(chosen: tuple[Case, ...]) -> Counts:
    """The counts of CHOSEN's documents, fitted by scikit-learn on the analyzers above."""
    from sklearn.feature_extraction.text import CountVectorizer

    docs = [document(c) for c in chosen]
    words = CountVectorizer(analyzer=word_terms)
    chars = CountVectorizer(analyzer=char_terms)
    word_counts, char_counts = words.fit_transform(docs).tocsr(), chars.fit_transform(docs).tocsr()
    return Counts(words.vocabulary_, chars.vocabulary_, word_counts, char_counts)


def content_key(module: str, documents: Iterable[str]) -> str:
    """What counts fitted on DOCUMENTS depend on: the documents and the MODULE that reads them (its analyzers)."""
    digest = hashlib.sha256(Path(module).read_bytes())
    for text in documents:
        digest.update(b"\0" + text.encode())
    return digest.hexdigest()[:24]


def cached_arrays(name: str, key: str, build: Callable[[], dict]) -> dict:
    """The arrays NAME-KEY.npz in the cache holds (read without pickle), else BUILD's, kept there for the next run. A
    cache that cannot be read or written is passed by: BUILD then answers, as without a cache."""
    import numpy as np

    path = cache_dir() / f"{name}-{key}.npz"
    try:
        with np.load(path, allow_pickle=False) as kept:
            return {k: kept[k] for k in kept.files}
    except (OSError, ValueError, KeyError):
        pass
    arrays = build()
    packed = io.BytesIO()
    np.savez(packed, **arrays)
    try:
        write_atomic(path, packed.getvalue())  # a reader sees the whole file or none
    except OSError:
        pass
    return arrays


def count_arrays(vocabulary: dict[str, int], rows) -> dict:
    """A vocabulary (term -> column) and its CSR rows as plain arrays (cached_arrays keeps them)."""
    import numpy as np

    terms = np.array(sorted(vocabulary, key=vocabulary.get), dtype=str)
    return {"terms": terms, "data": rows.data, "indices": rows.indices, "indptr": rows.indptr}


def counts_of(arrays: dict, prefix: str = "") -> tuple[dict[str, int], object]:
    """count_arrays' vocabulary and CSR rows again."""
    from scipy.sparse import csr_matrix

    vocabulary = {str(t): i for i, t in enumerate(arrays[f"{prefix}terms"])}
    indptr = arrays[f"{prefix}indptr"]
    data = (arrays[f"{prefix}data"], arrays[f"{prefix}indices"], indptr)
    return vocabulary, csr_matrix(data, shape=(len(indptr) - 1, len(vocabulary)))


def cached_counts(chosen: Sequence[Case]) -> Counts:
    """The counts of CHOSEN from the cache, else fitted (counts) and kept there."""

    def fit() -> dict:
        fitted = counts(tuple(chosen))
        words, chars = count_arrays(fitted.words, fitted.word_counts), count_arrays(fitted.chars, fitted.char_counts)
        return {**{f"words_{k}": v for k, v in words.items()}, **{f"chars_{k}": v for k, v in chars.items()}}

    arrays = cached_arrays("case-counts", content_key(__file__, (document(c) for c in chosen)), fit)
    (words, word_counts), (chars, char_counts) = counts_of(arrays, "words_"), counts_of(arrays, "chars_")
    return Counts(words, chars, word_counts, char_counts)


def count_row(terms: list[str], vocabulary: dict[str, int]):
    """One row of counts of TERMS over VOCABULARY (terms it lacks left out)."""
    import numpy as np
    from scipy.sparse import csr_matrix

    columns: dict[int, int] = {}
    for term in terms:
        column = vocabulary.get(term)
        if column is not None:
            columns[column] = columns.get(column, 0) + 1
    ordered = sorted(columns)
    return csr_matrix(
        (np.array([columns[c] for c in ordered], dtype=np.int64), np.array(ordered, dtype=np.int32), [0, len(ordered)]),
        shape=(1, len(vocabulary)),
    )


def idf_of(rows):
    """Smoothed inverse document frequency over ROWS (scikit-learn's: ln((1 + n) / (1 + df)) + 1), 0 for a term no
    row has: a fit on these rows would not know it."""
    import numpy as np

    df = np.bincount(rows.indices, minlength=rows.shape[1])
    return np.where(df > 0, np.log((1 + rows.shape[0]) / (1 + df)) + 1, 0.0)


def weighed(rows, idf):
    """Counts as TF-IDF: 1 + ln(tf), times IDF, each row scaled to unit length; terms weighing 0 dropped. Worked on
    the CSR arrays themselves, as a leave-one-thread-out fold re-weighs every row."""
    import numpy as np
    from scipy.sparse import csr_matrix

    rows = rows.tocsr()
    n = rows.shape[0]
    row_of = np.repeat(np.arange(n), np.diff(rows.indptr))
    data = (1 + np.log(rows.data.astype(float))) * idf[rows.indices]
    kept = data != 0
    data, indices, row_of = data[kept], rows.indices[kept], row_of[kept]
    norms = np.sqrt(np.bincount(row_of, weights=data * data, minlength=n))
    data /= np.where(norms > 0, norms, 1.0)[row_of]
    indptr = np.concatenate(([0], np.cumsum(np.bincount(row_of, minlength=n))))
    return csr_matrix((data, indices, indptr), shape=rows.shape)


def summary(lines: Iterable[Line], wanted: set[tuple[str, int]]) -> str:
    """The query: the lines a rule matched or that look like errors (WANTED, by where they were read), warnings and
    prose, each distinct normalised line once, at most MAX_SUMMARY_LINES."""
    seen: dict[str, None] = {}
    for at in lines:
        if (at.source, at.line) not in wanted:
            continue
        text = normalise(at.text)
        if text and text not in seen:
            seen[text] = None
            if len(seen) >= MAX_SUMMARY_LINES:
                break
    return "\n".join(seen)
