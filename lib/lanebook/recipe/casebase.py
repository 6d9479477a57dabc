"""The doctor's case base: public failure reports, each with the cause its thread established and the fix, as facts.

A case is one person's failure as posted in a public thread: the log and kernel lines it quotes verbatim, what it
states in our own short words, the phase it struck in, the cause and fix the thread established, and the thread's
URL. The cases live in `recipe/cases/*.yaml` (package data); their causes are registry ids (P, D), `lookalike` for a
healthy lane that only looked sick, or a key of the causes table `recipe/cases/causes.yaml`. That table is the one
source of the causes the case base adds: a cause with two or more reports carries a D-id there and enters the
registry as a symptom (`registry_symptoms`, listed by lanebook.recipe.pitfalls); a cause with one report stays a
case-only cause, which retrieval (lanebook.verify.doctor_cases) can still name with its fix.

Loading validates: an unknown key, a duplicate id, a cause that resolves to nothing or a URL that is no thread is
one CaseBaseError naming the file and the case.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

from lanebook.base.errors import LanebookError
from lanebook.base.files import write_atomic
from lanebook.base.yamltext import load
from lanebook.recipe.symptoms import FINDING, SYMPTOMS, Symptom

CASES = Path(__file__).resolve().parent / "cases"
CAUSES = CASES / "causes.yaml"
LOOKALIKE = "lookalike"
CASE_KEYS = {"id", "url", "cause", "fix", "phase", "lines", "kernel", "words", "stack"}
CAUSE_KEYS_ORDER = ("key", "id", "title", "meaning", "fix", "source", "runbook", "seen")
CAUSE_KEYS = set(CAUSE_KEYS_ORDER)
PHASES = {"install", "starting", "serving", "stopping", "client"}
# A thread: an issue, pull request or discussion, a forum topic, a Q&A question, a hub discussion (a comment anchor is
# allowed). A repository's front page, a file or a search is not one.
THREAD_URL = re.compile(
    r"https://(?:"
    r"github\.com/[\w.-]+/[\w.-]+/(?:issues|pull|discussions)/\d+"
    r"|forums\.developer\.nvidia\.com/t/[\w%-]+(?:/\d+)+"
    r"|discuss\.(?:vllm\.ai|pytorch\.org|ray\.io)/t/[\w%-]+(?:/\d+)+"
    r"|huggingface\.co/(?:[\w.-]+/)?[\w.-]+/[\w.-]+/discussions/\d+"
    r"|(?:www\.|old\.)?reddit\.com/r/\w+/comments/\w+(?:/[\w%-]*)*"
    r"|(?:\w+\.)?stackoverflow\.com/questions/\d+(?:/[\w%-]*)?"
    r"|(?:\w+\.)?stackexchange\.com/questions/\d+(?:/[\w%-]*)?"
    r"|gitlab\.com/[\w./-]+/-/issues/\d+"
    r")/?(?:#[\w-]+)?$"
)
SEEN = "Log lines and words like those of the reports the cause was learnt from (`lanebook doctor` names the nearest)."
NEXT_CHECK = (
    "Read the reports the doctor names as like yours: where your lines and words differ from theirs, it is not this."
)


class CaseBaseError(LanebookError):
    """A case file or the causes table is not as the case base wants it (one line naming the file and the case)."""


@dataclass(frozen=True)
class CaseCause:
    """A cause the case base adds to the registry's: its key, its D-id once two or more reports show it ('' while one
    does), its title, what it means, the fix, the first thread it was seen in, and the repair runbook."""

    key: str
    id: str
    title: str
    meaning: str
    fix: str
    source: str
    runbook: str = "diagnose"
    seen: str = ""

    @property
    def name(self) -> str:
        """What a finding and a case call it: the D-id, or the key of a case-only cause."""
        return self.id or self.key

    def symptom(self) -> Symptom:
        return Symptom(
            self.name,
            self.title,
            self.seen or SEEN,
            self.meaning,
            self.fix,
            self.runbook,
            NEXT_CHECK,
            source=self.source,
            kind=FINDING,
        )


@dataclass(frozen=True)
class Case:
    """One public report: its id, thread URL, cause (a registry id, a case-only cause's key, or `lookalike`), the fix
    its thread established ('' where the cause's own fix is the fix), the phase, and its facts."""

    id: str
    url: str
    cause: str
    fix: str
    phase: str
    lines: tuple[str, ...] = ()
    kernel: tuple[str, ...] = ()
    words: tuple[str, ...] = ()
    stack: str = ""
    file: str = ""

    @property
    def thread(self) -> str:
        """The thread the report was posted in: its URL without a comment anchor (leave-one-thread-out groups by it)."""
        return self.url.split("#", 1)[0].rstrip("/")


@lru_cache(maxsize=1)
def causes() -> tuple[CaseCause, ...]:
    """The causes table, in its order, checked: known keys, unique keys and ids, D-ids after the registry's."""
    rows = _load(CAUSES).get("causes") or []
    found: list[CaseCause] = []
    registry = {s.id for s in SYMPTOMS}
    seen: set[str] = set()
    for n, row in enumerate(rows, 1):
        where = f"{CAUSES.name} cause {n}"
        if not isinstance(row, dict):
            raise CaseBaseError(f"{where}: not a mapping")
        unknown = sorted(set(row) - CAUSE_KEYS)
        if unknown:
            raise CaseBaseError(f"{where}: unknown key {unknown[0]!r}")
        missing = [k for k in ("key", "title", "meaning", "fix", "source") if not row.get(k)]
        if missing:
            raise CaseBaseError(f"{where}: {missing[0]} is missing")
        cause = CaseCause(**{"id": "", **{k: str(v).strip() for k, v in row.items()}})
        if not re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)+", cause.key):
            raise CaseBaseError(f"{where}: key {cause.key!r} is not kebab-case")
        if cause.id and (not re.fullmatch(r"D\d{2,3}", cause.id) or cause.id in registry):
            raise CaseBaseError(f"{where}: id {cause.id!r} is not a new D-id")
        for name in (cause.key, cause.id):
            if name and name in seen:
                raise CaseBaseError(f"{where}: {name} appears twice")
            seen.add(name)
        found.append(cause)
    return tuple(found)


def case_cause(name: str) -> Optional[CaseCause]:
    """The case-base cause called NAME (its D-id or its key), or None."""
    return _by_name().get(name)


@lru_cache(maxsize=1)
def _by_name() -> dict[str, CaseCause]:
    return {n: c for c in causes() for n in (c.key, c.id) if n}


def registry_symptoms() -> tuple[Symptom, ...]:
    """The case-base causes with a D-id, as registry symptoms (the registry lists them after its own)."""
    return tuple(c.symptom() for c in causes() if c.id)


def case_files() -> list[Path]:
    return sorted(p for p in CASES.glob("*.yaml") if p != CAUSES)


@lru_cache(maxsize=1)
def cases() -> tuple[Case, ...]:
    """Every case in the case base, checked (see the module's docstring), files in name order."""
    return read_cases(case_files())


def read_cases(paths: list[Path]) -> tuple[Case, ...]:
    """The cases of PATHS (case files), checked against the registry and the causes table."""
    registry = {s.id for s in SYMPTOMS}
    out: list[Case] = []
    ids: dict[str, str] = {}
    for path in paths:
        for n, row in enumerate(_load(path).get("cases") or [], 1):
            case = _case(path.name, n, row, registry)
            if case.id in ids:
                raise CaseBaseError(f"{path.name} case {case.id}: duplicate id (also in {ids[case.id]})")
            ids[case.id] = path.name
            out.append(case)
    return tuple(out)


def _case(file: str, n: int, row: object, registry: set[str]) -> Case:
    where = f"{file} case {n}"
    if not isinstance(row, dict):
        raise CaseBaseError(f"{where}: not a mapping")
    where = f"{file} case {row.get('id') or n}"
    unknown = sorted(set(row) - CASE_KEYS)
    if unknown:
        raise CaseBaseError(f"{where}: unknown key {unknown[0]!r}")
    for key in ("id", "url", "cause", "phase"):
        if not row.get(key):
            raise CaseBaseError(f"{where}: {key} is missing")
    url = str(row["url"]).strip()
    if not THREAD_URL.match(url):
        raise CaseBaseError(f"{where}: url {url} is not a thread's")
    cause = str(row["cause"]).strip()
    if cause != LOOKALIKE and cause not in registry:
        known = case_cause(cause)
        if known is None:
            raise CaseBaseError(f"{where}: cause {cause!r} is neither a registry id nor in {CAUSES.name}")
        cause = known.name
    phase = str(row["phase"]).strip()
    if phase not in PHASES:
        raise CaseBaseError(f"{where}: phase {phase!r} is not one of {', '.join(sorted(PHASES))}")
    texts = {}
    for key in ("lines", "kernel", "words"):
        value = row.get(key) or ()
        if isinstance(value, str) or not all(isinstance(v, (str, int, float)) for v in value):
            raise CaseBaseError(f"{where}: {key} is not a list of lines")
        texts[key] = tuple(str(v) for v in value)
    return Case(
        str(row["id"]).strip(),
        url,
        cause,
        str(row.get("fix") or "").strip(),
        phase,
        texts["lines"],
        texts["kernel"],
        texts["words"],
        str(row.get("stack") or "").strip(),
        file,
    )


def fix_of(case: Case) -> str:
    """The fix a case's thread established, else its cause's own."""
    if case.fix:
        return case.fix
    known = case_cause(case.cause)
    if known:
        return known.fix
    return next((s.fix for s in SYMPTOMS if s.id == case.cause), "")


def _load(path: Path) -> dict:
    """A case file's data. The YAML parser reads the case base in seconds, so the data is kept as JSON beside it in
    __pycache__, named by the file's sha256: a changed file is parsed again, an unwritable folder only costs time."""
    try:
        raw = path.read_bytes()
        cached = path.parent / "__pycache__" / f"{path.stem}.{hashlib.sha256(raw).hexdigest()[:20]}.json"
        if cached.is_file():
            try:
                return json.loads(cached.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                pass  # unreadable: parsed again below
        data = load(raw.decode("utf-8"))
    except Exception as exc:  # a YAMLError, or a file that cannot be read
        raise CaseBaseError(f"{path.name}: {exc}") from None
    if isinstance(data, dict):
        try:
            cached.parent.mkdir(exist_ok=True)
            for old in cached.parent.glob(f"{path.stem}.*.json"):
                old.unlink(missing_ok=True)
            write_atomic(cached, json.dumps(data))
        except OSError:
            pass
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise CaseBaseError(f"{path.name}: not a mapping")
    return data
