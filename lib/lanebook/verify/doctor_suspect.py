"""The doctor's suspected tier: what a post says in words, tables and numbers, against the registry's own words.

Reports are log lines mixed with prose: "breakable CUDA graphs now auto-enable and decode falls as output grows",
"acceptance sat at a quarter". The registry gives each symptom its vocabulary (phrasings, names and metric names from
the reports it was learnt from) beside its title, what is seen and what it means; a TF-IDF index over those (words
and word pairs, English stop words left out; counted by scikit-learn once, then kept in the user's cache beside the
case base's counts) ranks the symptoms by cosine similarity to the post. Numbers stated in words are checked against
each symptom's band (`Figure`: an acceptance rate under 30 %, a locked-memory limit, a prompt of 128k tokens or
more), and a number in the healthy band (`counter`) takes a symptom out. Every suspicion carries why: the registry
terms and the figures that matched, and the lines they were read in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import AbstractSet, Sequence

from lanebook.recipe.pitfalls import SYMPTOMS
from lanebook.recipe.symptoms import NOTE, Figure, Symptom
from lanebook.verify.doctor_cases import cached_arrays, content_key, count_arrays, count_row, counts_of, idf_of, weighed
from lanebook.verify.doctor_input import Line

MIN_SCORE = 0.12  # cosine similarity under which a post says nothing about a symptom
FIGURE_BONUS = 0.15  # a stated number in a symptom's band
MAX_LINES = 20_000  # lines of one input the tier reads (the start of a long log carries the post)
TOKENS = r"(?u)\b[A-Za-z_][A-Za-z0-9_]+(?:[.-][A-Za-z0-9_]+)*\b"
WORDS = re.compile(TOKENS)
QUARTERS = {"quarter": 25.0, "third": 33.0, "fifth": 20.0}
# A file path's folders say where a file is, not what happened to it: the words the tier reads keep its file name only
# (a healthy HF cache listing shares "cache" and "huggingface" with posts about caches that were lost).
FOLDERS = re.compile(r"(?<![\w:/])(?:~|\.{1,2})?(?:/[\w.@+=-]+){2,}/(?=[\w.@+=-]+)")


@dataclass(frozen=True)
class Suspicion:
    id: str
    score: float
    why: tuple[str, ...]  # matched registry terms, then figures ("acceptance %: 4.4 (under 30)")
    lines: tuple[Line, ...]  # where the matched words or figures were read


def _document(s: Symptom) -> str:
    return " ".join((s.title, s.seen, s.cause, *s.vocabulary, *s.vocabulary))


def terms(text: str, stop: AbstractSet[str]) -> list[str]:
    """The words of TEXT the index counts (lower case, STOP words left out), then each pair of neighbours among
    them: scikit-learn's word analyzer at ngram_range (1, 2)."""
    words = [w for w in WORDS.findall(text.lower()) if w not in stop]
    return words + [f"{a} {b}" for a, b in zip(words, words[1:])]


@dataclass(frozen=True)
class Index:
    symptoms: tuple[Symptom, ...]
    vocabulary: dict[str, int]
    stop: frozenset[str]
    idf: object  # numpy vector
    matrix: object  # scipy CSR, a unit row per symptom
    names: list[str]  # the terms by column

    def vector(self, text: str):
        return weighed(count_row(terms(text, self.stop), self.vocabulary), self.idf)


@lru_cache(maxsize=1)
def _index() -> Index:
    symptoms = tuple(SYMPTOMS)
    documents = [_document(s) for s in symptoms]

    def fit() -> dict:
        import numpy as np
        from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, CountVectorizer

        stop = frozenset(ENGLISH_STOP_WORDS)
        vectorizer = CountVectorizer(analyzer=lambda text: terms(text, stop))
        rows = vectorizer.fit_transform(documents).tocsr()
        return {**count_arrays(vectorizer.vocabulary_, rows), "stop": np.array(sorted(stop), dtype=str)}

    arrays = cached_arrays("registry-counts", content_key(__file__, documents), fit)
    vocabulary, rows = counts_of(arrays)
    idf = idf_of(rows)
    names = [str(t) for t in arrays["terms"]]  # by column, as count_arrays kept them
    return Index(symptoms, vocabulary, frozenset(map(str, arrays["stop"])), idf, weighed(rows, idf), names)


def _value(figure: Figure, raw: str) -> float:
    return QUARTERS.get(raw.lower(), 0.0) if not raw[:1].isdigit() else float(raw)


def _figures(figures: Sequence[Figure], lines: Sequence[Line]) -> list[tuple[str, Line]]:
    found = []
    for figure in figures:
        pattern = re.compile(figure.regex, re.IGNORECASE)
        for at in lines:
            for m in pattern.finditer(at.text):
                value = _value(figure, m["v"])
                if figure.fits(value):
                    band = (
                        f"under {figure.below:g}"
                        if figure.below is not None
                        else f"at least {figure.at_least:g}"
                        if figure.at_least is not None
                        else "named"
                    )
                    found.append((f"{figure.name}: {m['v']} ({band})", at))
                    break
            if found and found[-1][0].startswith(figure.name):
                break
    return found


def suspect(lines: Sequence[Line]) -> list[Suspicion]:
    """The registry's symptoms ranked by how closely the input's words and figures fit them (best first); only those
    at or above MIN_SCORE, each with why. Look-alike classes (notes) are ranked too; the caller treats them so."""
    lines = list(lines)[:MAX_LINES]
    if not lines:
        return []
    index = _index()
    symptoms, matrix, names = index.symptoms, index.matrix, index.names
    query = index.vector(FOLDERS.sub(" ", " ".join(at.text for at in lines)))
    scores = (matrix @ query.T).toarray().ravel()
    both = matrix.multiply(query)  # per symptom, the weight each term shares with the post
    out = []
    for n, s in enumerate(symptoms):
        figures = _figures(s.figures, lines)
        healthy = _figures(s.counter, lines)
        if healthy and not figures:
            continue  # the post's own numbers put it in the healthy band on this count
        score = float(scores[n]) + FIGURE_BONUS * len(figures)
        if score < MIN_SCORE:
            continue
        row = both.getrow(n)
        terms = [names[i] for _, i in sorted(zip(-row.data, row.indices))][:6]  # heaviest first, ties by name
        words = [t for t in terms if " " in t] + [t for t in terms if " " not in t]
        where = [at for at in lines if any(t.split()[0] in at.text.lower() for t in terms[:3])][:2]
        where += [at for _, at in figures if at not in where]
        out.append(Suspicion(s.id, round(score, 3), tuple(words[:6]) + tuple(f for f, _ in figures), tuple(where)))
    return sorted(out, key=lambda x: -x.score)


def top_finding(lines: Sequence[Line]) -> Suspicion | None:
    """The closest fault class (not a look-alike note), or None."""
    return next((r for r in suspect(lines) if _kind(r.id) != NOTE), None)


def _kind(symptom_id: str) -> str:
    return next(s.kind for s in SYMPTOMS if s.id == symptom_id)
