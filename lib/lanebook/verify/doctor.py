"""The lane doctor's diagnosis: from what a sick lane shows to its cause and fix, as a pure function of records.

Inputs are log lines (lanebook.verify.doctor_input folds pasted text), /metrics scrapes in order and kernel-log lines.
Each finding comes from the one registry (lanebook.recipe.pitfalls.SYMPTOMS): cause, evidence as pasted and where it
was read, confidence, fix, repair runbook; look-alikes come back as notes. `confirmed` needs log evidence that defines
a cause, `suspected` is evidence that only fits; phase comes before cause; error-shaped lines no cause explains give
an `unknown` finding, and "healthy" means no error-shaped line at all.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import AbstractSet, Iterable, Optional, Sequence

import ahocorasick

from lanebook.base.errors import LanebookError
from lanebook.nodes.prometheus import (
    ACCEPTED_PER_POSITION,
    ACCEPTED_TOKENS,
    DRAFT_TOKENS,
    DRAFTS,
    PREEMPTIONS,
    RUNNING,
    MetricsUnavailable,
    Snapshot,
    parse_metrics,
)
from lanebook.recipe.casebase import LOOKALIKE
from lanebook.recipe.pitfalls import SYMPTOMS, Symptom, symptom
from lanebook.recipe.symptoms import (
    CONTEXT,
    CUDA_OOM,
    FREE_ADMISSION,
    GLOO_LOOPBACK,
    GLOO_MESH,
    GRAPH_CAPTURE,
    IBV_NOMEM,
    KERNEL,
    KERNEL_NAMED,
    LOG,
    MEMLOCK,
    NOTE,
    PROSE_FAILURE,
    SOCKET_RETRY,
    Pattern,
)
from lanebook.verify.doctor_cases import CaseIndex, Similar, summary
from lanebook.verify.doctor_input import Line, fold, is_prose

CONFIRMED, SUSPECTED, HARMLESS, UNKNOWN = "confirmed", "suspected", "harmless", "unknown"
STARTING, SERVING, STOPPING, REBOOTED = "starting", "serving", "stopping", "after a reboot"
GENERATION = "vllm:generation_tokens_total"
LOW_MEAN_ACCEPTANCE = 2.5  # DSpark K=5 runs ~4 on natural text (vllm-ascend's golden per-position 0.82/0.62/...)
LOW_SHARE = 0.4  # accepted share of the K drafted tokens under which acceptance is low (healthy DSpark: ~0.6)
COLLAPSED_POSITION = 0.05  # every position at or under this: the drafter contributes nothing
STICKY_GIB = 8.0  # used memory with no lane running; the seed saw 10-16 GiB stick
MEMLOCK_ENOUGH_KB = 1_000_000  # a locked-memory limit under this (kB) cannot hold RDMA registrations
STARVED_SPREAD = 4.0  # fastest / slowest per-request decode rate in one wave
SPIN_NODE_CPU = 200.0  # vLLM engine processes' %CPU on one node: ~333-400% spinning, ~89% with the 2 ms fix (D15)
MAX_EVIDENCE = 5
MIN_TERMS = 2  # registry terms a post must share with a class for the retrieval alone to name it
MIN_NAMING_SCORE = 0.18  # and the cosine similarity it must reach (the ranking itself starts lower)
REGISTRY_WEIGHT = 1.0  # a registry class's score against a vote's (share x nearest similarity) in one ranking
NAME_SIMILARITY = 0.15  # the nearest report of a voted cause must be this similar for retrieval to name it
NAME_SHARE = 0.3  # and the cause must hold this share of the nearest reports' votes
NAME_STRENGTH = 0.05  # and the two together (nearest similarity x share): a weak vote split many ways names nothing
MAX_CHOSEN = 2000  # distinct lines the suspected tier reads
DIGITS = re.compile(r"\d+")
MIN_SHARED = 2  # distinct words the input must share with the nearest such report (one word is a coincidence)
SERVING_ONLY = {"D02", "P15"}  # causes that strike a serving lane only: retrieval never names them on a failed start
# Where a worker rank's line was read (rank 1..N-1: `worker3:docker logs ...`, spark4.log) and its own line's rank
WORKER_SOURCE = re.compile(r"(?i)worker|spark[2-9]|rank ?[1-9]\d*\b|tp[1-9]\d*\b")
WORKER_TEXT = re.compile(r"Worker_TP[1-9]\d*|rank[1-9]\d*\b")
ROCE_IF = re.compile(r"^(en[pP]\d|enP\d|bond|rocep|ib)")
ROUTINE_RECORD = re.compile(r"^(?:INFO|DEBUG)\b|\b(?:INFO|DEBUG) \d\d-\d\d \d\d:\d\d|^[ID]\d{4} ")
TIMESTAMP = re.compile(r"\b(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d)")
MARKERS = re.compile(r"<｜DSML｜|<\|DSML\||</?think>|<｜tool▁calls▁begin｜>")
LAYERS = (
    ("kernel", re.compile(r"NVRM|\bXid\b|BUG:|Oops|AER:|watchdog:|kernel:|Call trace|pcieport|mlx5_core")),
    ("NCCL/Gloo", re.compile(r"NCCL|Gloo|gloo|ibv_|ProcessGroup|c10d|TCPStore|DistStore|RDMA|RoCE")),
    ("CUDA", re.compile(r"CUDA|cuda|cudaError|cuBLAS|CUBLAS|cudnn|device-side assert")),
    ("client", re.compile(r"HTTP/1|status code|\b[45]\d\d\b (?:Bad|Not|Internal|Service)|curl:|openai\.|APIError")),
    ("launcher", re.compile(r"(?i)docker|compose|launcher|run-recipe|sparkrun|ssh:|\.sh\b|systemd|container")),
)
GATHER = {
    "kernel": "`journalctl -k -b` and `journalctl -k -b -1` on every node (the previous boot too), `uname -r`, "
    "`nvidia-smi -q | head -40`.",
    "NCCL/Gloo": "Both ranks' logs with NCCL_DEBUG=INFO, each container's NCCL_*/GLOO_*/VLLM_HOST_IP environment, "
    "`ip -br addr` and `show_gids` on every node.",
    "CUDA": "The full traceback from the rank that failed first (with CUDA_LAUNCH_BLOCKING=1 if it repeats), the "
    "image's CUDA and torch versions, `nvidia-smi` on every node.",
    "client": "The request body and the full response (status, body), and the server's log lines at the same time.",
    "launcher": "The launcher's full output, `docker ps -a` and `docker logs` of every rank's container, `docker "
    "compose config` on the head.",
    "Python traceback": "The whole traceback from its first line and the lines above it on every rank (`docker logs "
    "--tail 500` on each node).",
}


@dataclass(frozen=True)
class Scrape:
    """One /metrics scrape: where it was read and its raw text (samples are quoted from it)."""

    source: str
    text: str

    @property
    def snapshot(self) -> Snapshot:
        return parse_metrics(self.text)

    def quote(self, name: str) -> Line:
        """The first line of the scrape exposing sample NAME, for evidence."""
        for n, text in enumerate(self.text.splitlines(), 1):
            if text.startswith(name):
                return Line(self.source, n, text)
        return Line(self.source, 0, f"{name} not exposed")


@dataclass(frozen=True)
class Evidence:
    source: str
    line: int
    text: str

    def to_json(self) -> dict:
        return {"source": self.source, "line": self.line, "text": self.text}

    @classmethod
    def of(cls, at: Line) -> "Evidence":
        return cls(at.source, at.line, at.quoted)


@dataclass
class Finding:
    id: str
    title: str
    confidence: str  # confirmed | suspected | harmless (a note)
    cause: str
    fix: str
    runbook: str
    next_check: str
    source: str
    evidence: list[Evidence] = field(default_factory=list)
    more: int = 0  # evidence lines beyond those quoted
    matched: list[str] = field(default_factory=list)  # a suspected finding's matched words and figures
    rank: float = 0.0  # the retrieval's score, which orders suspected findings
    similar: list[Similar] = field(default_factory=list)  # the case base's reports like this input, nearest first

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "title": self.title,
            "confidence": self.confidence,
            "cause": self.cause,
            "evidence": [e.to_json() for e in self.evidence],
            "more_evidence": self.more,
            "fix": self.fix,
            "runbook": self.runbook,
            "next_check": self.next_check if self.confidence in (SUSPECTED, UNKNOWN) else "",
            "source": self.source,
            "matched": list(self.matched),
            "similar": [s.to_json() for s in self.similar],
        }


@dataclass
class Diagnosis:
    findings: list[Finding]
    notes: list[Finding]

    @property
    def confirmed(self) -> list[Finding]:
        return [f for f in self.findings if f.confidence == CONFIRMED]

    @property
    def healthy(self) -> bool:
        return not self.findings

    def ids(self, confidence: Optional[str] = None) -> list[str]:
        return [f.id for f in self.findings if confidence is None or f.confidence == confidence]

    def to_json(self) -> dict:
        return {
            "healthy": self.healthy,
            "findings": [f.to_json() for f in self.findings],
            "notes": [n.to_json() for n in self.notes],
        }


# --- the one pass -----------------------------------------------------------------------------------------


class _Patterns:
    """The registry's patterns for one stream, compiled once, each tried on a line only when the line holds one of
    its literal hints (a `(?i)` pattern's hints against the lower-cased line); the few without hints on every line.
    The hints are found in one pass over the line with an Aho-Corasick automaton (pyahocorasick), overlaps included."""

    def __init__(self, patterns: Iterable[Pattern]):
        self.compiled: dict[str, re.Pattern] = {}
        exact: dict[str, list[str]] = {}
        lower: dict[str, list[str]] = {}
        self.bare: list[str] = []
        for p in patterns:
            if p.key in self.compiled:
                continue
            self.compiled[p.key] = re.compile(p.regex)
            folded = p.regex.startswith("(?i)")
            for hint in p.hints:
                (lower if folded else exact).setdefault(hint.lower() if folded else hint, []).append(p.key)
            if not p.hints:
                self.bare.append(p.key)
        self.exact = _automaton(exact)
        self.lower = _automaton(lower)

    def keys(self, text: str) -> list[str]:
        found = [key for _, keys in self.exact.iter(text) for key in keys] if self.exact else []
        if self.lower:
            found += [key for _, keys in self.lower.iter(text.lower()) for key in keys]
        return list(dict.fromkeys(found)) + self.bare if found else self.bare


def _automaton(by_hint: dict[str, list[str]]):
    if not by_hint:
        return None
    automaton = ahocorasick.Automaton()
    for hint, keys in by_hint.items():
        automaton.add_word(hint, tuple(keys))
    automaton.make_automaton()
    return automaton


def _registry_patterns(stream: str) -> list[Pattern]:
    found = [p for s in SYMPTOMS for p in s.patterns if p.stream == stream]
    if stream == LOG:
        found += list(CONTEXT) + [GLOO_MESH, SOCKET_RETRY, MEMLOCK, KERNEL_NAMED, GRAPH_CAPTURE, CUDA_OOM]
        found += [p for s in SYMPTOMS for p in s.patterns if p.stream == KERNEL]  # dmesg lines pasted into a post
    return found


LOG_PATTERNS = _Patterns(_registry_patterns(LOG))
KERNEL_PATTERNS = _Patterns(_registry_patterns(KERNEL))
assert {GLOO_LOOPBACK.key, IBV_NOMEM.key, FREE_ADMISSION.key} <= set(LOG_PATTERNS.compiled)


PROSE_ONLY = {PROSE_FAILURE.key}  # patterns only a person's words are read for (is_prose)


@dataclass(frozen=True)
class Hit:
    key: str
    at: Line
    match: re.Match


def _scan(lines: Iterable[Line], patterns: _Patterns, json_too: bool):
    hits: list[Hit] = []
    records: list[tuple[Line, dict]] = []
    for at in lines:
        text = at.text
        keys = patterns.keys(text)
        if at.alt:
            keys = list(dict.fromkeys(keys + patterns.keys(at.alt)))
        for key in keys:
            if key in PROSE_ONLY and not is_prose(at):
                continue  # a person's words: what a log record says in them is read by the rules, not as prose
            pattern = patterns.compiled[key]
            m = pattern.search(text) or (pattern.search(at.alt) if at.alt else None)
            if m:
                hits.append(Hit(key, at, m))
        if json_too and text[:1] == "{":
            try:
                value = json.loads(text)
            except ValueError:
                continue
            if isinstance(value, dict):
                records.append((at, value))
    return hits, records


# --- context: phases per source ---------------------------------------------------------------------------


class Context:
    """Where a line falls: before or after readiness, inside the warmup, after a stop (per source, by line number;
    a source without a readiness line, like the worker's log, is placed by its timestamps against the head's)."""

    def __init__(self, hits: list[Hit]):
        self.by_key: dict[str, list[Hit]] = {}
        for h in hits:
            self.by_key.setdefault(h.key, []).append(h)
        self.readies = self._lines("ready")  # every readiness line, in order: a restarted engine is ready again
        self.ready = {source: lines[0] for source, lines in self.readies.items()}  # each source's first
        self.boots = self._lines("boot")  # where each start of the engine begins
        ready_stamps = [stamp for h in self.get("ready") if (stamp := _stamp(h.at.text))]
        self.ready_stamp = min(ready_stamps) if ready_stamps else None
        self.warmups = self._intervals("warmup_start", "warmup_end")
        self.stops = {h.at.source: h.at.line for h in self.get("stopped")}
        self.servings = self._lines("serving", "serving_tokens")
        self.said_serving = bool(self.get("serving_words"))
        self.said_starting = bool(self.get("starting_words")) or bool(self.get("starting"))

    def phase(self, at: Line) -> Optional[str]:
        """Where the lane was when `at` was logged: serving (after readiness, or after a request was answered or
        tokens generated in the same log), stopping (after a stop), after a reboot or starting (nothing says it ever
        served, and a start's own lines or the post's words say so), or None when nothing tells."""
        if self.after_stop(at):
            return STOPPING
        if self.after_ready(at) or self._since_boot(self.servings, at) is not None:
            return SERVING
        if self.any_ready:
            return STARTING  # before this source's readiness line
        if self.said_serving and not self.get("starting"):
            return SERVING
        if self.get("reboot_words"):
            return REBOOTED  # the first start after a reboot: a failure here is a failed start
        if self.said_starting:
            return STARTING
        return None

    def get(self, key: str) -> list[Hit]:
        return self.by_key.get(key, [])

    def _lines(self, *keys: str) -> dict[str, list[int]]:
        """Each source's line numbers where KEYS matched, in order."""
        out: dict[str, list[int]] = {}
        for h in sorted((h for key in keys for h in self.get(key)), key=lambda h: h.at.line):
            out.setdefault(h.at.source, []).append(h.at.line)
        return out

    def _since_boot(self, lines: dict[str, list[int]], at: Line) -> Optional[int]:
        """The last of LINES in at's source before it and after the start it belongs to (None: none). Both lists are
        in line order (_lines), so each is searched by bisection: a long log asks this of every line."""
        boots = self.boots.get(at.source, [])
        starts = bisect_right(boots, at.line)
        boot = boots[starts - 1] if starts else -1
        found = lines.get(at.source, [])
        before = bisect_left(found, at.line)
        return found[before - 1] if before and found[before - 1] > boot else None

    def _intervals(self, start: str, end: str) -> dict[str, list[tuple[int, float]]]:
        out: dict[str, list[tuple[int, float]]] = {}
        ends = {}
        for h in self.get(end):
            ends.setdefault(h.at.source, []).append(h.at.line)
        for h in self.get(start):
            after = [n for n in ends.get(h.at.source, []) if n > h.at.line]
            out.setdefault(h.at.source, []).append((h.at.line, min(after) if after else float("inf")))
        return out

    @property
    def any_ready(self) -> bool:
        return bool(self.ready)

    def after_ready(self, at: Line) -> bool:
        """Whether the engine that logged AT was ready by then: a readiness line in its source after the start AT
        belongs to (a log that restarted is starting again until it is ready again)."""
        if at.source in self.ready:
            return self._since_boot(self.readies, at) is not None
        stamp = _stamp(at.text)
        return bool(stamp and self.ready_stamp and stamp > self.ready_stamp)

    def in_warmup(self, at: Line) -> bool:
        return any(a < at.line < b for a, b in self.warmups.get(at.source, []))

    def after_stop(self, at: Line) -> bool:
        stop = self.stops.get(at.source)
        if stop is None or at.line <= stop or self.ready.get(at.source, 0) > stop:
            return False
        restarts = (*self.readies.get(at.source, []), *self.boots.get(at.source, []))
        return not any(stop < n < at.line for n in restarts)  # the engine started or was ready again since


def _stamp(text: str) -> Optional[str]:
    m = TIMESTAMP.search(text)
    return m.group(1) if m else None


# --- collecting findings ----------------------------------------------------------------------------------


class Findings:
    def __init__(self) -> None:
        self.items: dict[str, Finding] = {}

    def add(self, symptom_id: str, confidence: str, evidence: Sequence[Line], next_check: str = "") -> None:
        s: Symptom = symptom(symptom_id)
        if s.kind == NOTE:
            confidence = HARMLESS
        item = self.items.get(symptom_id)
        if item is None:
            item = self.items[symptom_id] = Finding(
                s.id, s.title, confidence, s.cause, s.fix, s.runbook, next_check or s.next_check, s.source
            )
        elif item.confidence == SUSPECTED and confidence == CONFIRMED:
            item.confidence = CONFIRMED
        for at in evidence:
            e = Evidence.of(at)
            if e in item.evidence:
                continue
            if len(item.evidence) < MAX_EVIDENCE:
                item.evidence.append(e)
            else:
                item.more += 1

    @property
    def any_confirmed(self) -> bool:
        return any(f.confidence == CONFIRMED for f in self.items.values())

    @property
    def explained(self) -> set[tuple[str, int]]:
        """Where the lines a note named harmless are (source, line): read, and said to be no failure."""
        return {(e.source, e.line) for f in self.items.values() if f.confidence == HARMLESS for e in f.evidence}

    def diagnosis(self) -> Diagnosis:
        order = {s.id: n for n, s in enumerate(SYMPTOMS)}
        rank = {CONFIRMED: 0, SUSPECTED: 1, UNKNOWN: 2}
        found = sorted(
            (f for f in self.items.values() if f.confidence != HARMLESS),
            key=lambda f: (rank[f.confidence], -f.rank, order.get(f.id, len(order))),
        )
        notes = sorted((f for f in self.items.values() if f.confidence == HARMLESS), key=lambda f: order[f.id])
        return Diagnosis(found, notes)


# --- the rules --------------------------------------------------------------------------------------------


def diagnose(
    logs: Iterable[Line] = (),
    metrics: Sequence[Scrape] = (),
    kernel: Iterable[Line] = (),
    *,
    cases: Optional[CaseIndex] = None,
) -> Diagnosis:
    """Findings for what a lane showed: its log lines, /metrics scrapes (in the order taken) and kernel-log lines.
    CASES: the case base's index retrieval reads (None: the whole case base's, built when first needed)."""
    logs = list(logs)
    log_hits, records = _scan(logs, LOG_PATTERNS, json_too=True)
    kernel_hits, _ = _scan(kernel, KERNEL_PATTERNS, json_too=False)
    ctx = Context(log_hits)
    kx: dict[str, list[Hit]] = {}
    for h in kernel_hits + [h for h in log_hits if h.key in KERNEL_PATTERNS.compiled]:
        kx.setdefault(h.key, []).append(h)
    out = Findings()
    moving = _metrics_rules(metrics, ctx, out)
    _startup_rules(ctx, kx, out)
    _hang_rules(ctx, moving, out)
    _acceptance_rules(ctx, out)
    _reply_rules(records, ctx, out)
    _starvation_rules(records, ctx, moving, out)
    _roce_rules(ctx, out)
    _memory_rules(ctx, out)
    _host_rules(kx, out)
    _spin_rules(ctx, moving, out)
    _node_rules(ctx, out)
    _notes_rules(ctx, out)
    if not out.any_confirmed:
        explained = out.explained | _probes(ctx)  # harmless lines: no evidence of a cause, nor a sign of failure
        _suspected_tier(
            _chosen(logs, kernel, log_hits, explained),
            out,
            cases,
            _phase_of(ctx),
            failing=_shows_failure(ctx, explained),
        )
    _unknown_rule(ctx, out)
    return out.diagnosis()


def _shows_failure(ctx: Context, explained: AbstractSet[tuple[str, int]] = frozenset()) -> bool:
    """Whether the input shows any sign of a failure: an error-shaped line, a failure stated in words (a person's, in
    prose) or a telling line (a warning, a refusal, something missing). Without one, the case base's reports never
    name a cause: a healthy lane's gathered rows share file and module names with reports of sick ones. Docker's
    answer that the lane's container is not there is a state the rules read (sticky memory or not), a record a
    program logged at INFO or DEBUG level is routine however it is worded, and a line EXPLAINED as harmless (a note's,
    a client's probe) is harmless: none is a failure."""
    prose = _prose_failures(ctx)
    states = _docker_states(ctx) | explained
    telling = [
        h for h in ctx.get("telling") if (h.at.source, h.at.line) not in states and not ROUTINE_RECORD.search(h.at.text)
    ]
    shaped = [h for h in ctx.get("error_shaped") if (h.at.source, h.at.line) not in states]
    return bool(shaped or ctx.get("stated_failure") or prose or telling)


def _docker_states(ctx: Context) -> set[tuple[str, int]]:
    """Where docker answered that the lane's container is not there: a state the rules read, never an error."""
    return {(h.at.source, h.at.line) for h in ctx.get("no_container")}


PROBE = re.compile(r'"(?:GET|HEAD) \S+ HTTP/\d(?:\.\d)?" 404\b')


def _probes(ctx: Context) -> set[tuple[str, int]]:
    """Where a client's GET found no such path on a server that answered requests (a 200 on /v1/ in the same input):
    a client probing for the APIs a server might offer (Hermes does at every start), not a failure. Without a served
    request, a GET answered 404 stays an error: a client whose base URL is wrong never gets further."""
    if not ctx.get("serving"):
        return set()
    return {(h.at.source, h.at.line) for h in ctx.get("error_shaped") if PROBE.search(h.at.text)}


def _prose_failures(ctx: Context) -> list[Hit]:
    """Failures a person states in words: prose_failure hits in prose (a sentence, a table row), not log records."""
    return ctx.get(PROSE_FAILURE.key)  # _scan reads prose alone for it


CONTEXT_KEYS = {p.key for p in CONTEXT}
SUMMARY_KEYS = {"error_shaped", "stated_failure", "telling"}  # context lines retrieval reads beside the rules' own


def _chosen(
    logs: list[Line], kernel: list[Line], hits: list[Hit], explained: AbstractSet[tuple[str, int]] = frozenset()
) -> list[Line]:
    """The bounded, folded summary the suspected tier reads: the error-shaped lines and failures in words first, then
    the kernel lines, the lines a rule or a telling word matched and the prose; each line once however its numbers
    differ, at most MAX_CHOSEN (a long healthy log repeats itself: its ten-thousandth stats line says nothing new).
    Lines a note EXPLAINED (source, line) are left out: what a rule named harmless is no evidence of a cause."""
    where = lambda at: (at.source, at.line)  # noqa: E731
    logs = [at for at in logs if where(at) not in explained]
    kernel = [at for at in kernel if where(at) not in explained]
    first = {where(h.at) for h in hits if h.key in ("error_shaped", "stated_failure")}
    wanted = {where(h.at) for h in hits if h.key not in CONTEXT_KEYS or h.key in SUMMARY_KEYS}
    wanted |= {where(at) for at in kernel}
    ordered = [at for at in logs if where(at) in first]
    ordered += [at for at in [*logs, *kernel] if where(at) not in first and (where(at) in wanted or is_prose(at))]
    seen: set[str] = set()
    read: set[str] = set()
    out: list[Line] = []
    for at in ordered:
        if at.text in read:
            continue
        read.add(at.text)
        key = DIGITS.sub("", at.text)
        if key not in seen:
            seen.add(key)
            out.append(at)
            if len(out) >= MAX_CHOSEN:
                break
    return out


def _phase_of(ctx: Context) -> Optional[str]:
    """Where the lane was at its first error-shaped line (None: nothing tells, or no such line)."""
    first = ctx.get("error_shaped")[:1] or ctx.get("stated_failure")[:1]
    return ctx.phase(first[0].at) if first else None


def _suspected_tier(
    chosen: list[Line], out: Findings, cases: Optional[CaseIndex], phase: Optional[str], *, failing: bool = True
) -> None:
    """The suspected tier, one ranking from two retrievals: the registry's words and figures (doctor_suspect) and the
    case base's nearest reports (doctor_cases), each cause scored by both. It orders the suspected findings the rules
    gave and names the best-voted cause as suspected when its reports are near enough, with the reports it resembles;
    with no vote, the closest registry class as before. It never confirms."""
    from lanebook.verify.doctor_cases import case_index  # scikit-learn loads only where no line confirmed a cause
    from lanebook.verify.doctor_suspect import suspect

    if not chosen:
        return
    ranked = [r for r in suspect(chosen) if symptom(r.id).kind != NOTE]
    by_id = {r.id: r for r in ranked}
    query = summary(chosen, {(at.source, at.line) for at in chosen})
    votes = (cases if cases is not None else case_index()).vote(query)
    by_vote = {v.cause: v for v in votes}

    def rank(cause: str) -> float:
        registry = by_id[cause].score if cause in by_id else 0.0
        vote = by_vote[cause].share * by_vote[cause].best if cause in by_vote else 0.0
        return round(REGISTRY_WEIGHT * registry + vote, 4)

    for f in out.items.values():
        if f.confidence == SUSPECTED:
            f.rank = rank(f.id)
            if f.id in by_id:
                f.matched = list(by_id[f.id].why)
            if f.id in by_vote:
                f.similar = list(by_vote[f.id].similar)
    if phase in (STARTING, REBOOTED):  # phase before cause: a start that failed is no death or slowness mid-serve
        votes = [v for v in votes if v.cause not in SERVING_ONLY]
    top = votes[0] if votes else None
    harmless = by_vote[LOOKALIKE].best if LOOKALIKE in by_vote else 0.0  # the nearest look-alike's similarity
    if (
        top
        and failing
        and top.cause != LOOKALIKE
        and top.best > harmless
        and top.best >= NAME_SIMILARITY
        and top.share >= NAME_SHARE
        and top.shared >= MIN_SHARED
        and top.best * top.share >= NAME_STRENGTH
    ):
        if top.cause not in out.items:
            out.add(top.cause, SUSPECTED, _nearest_lines(chosen, top))
        item = out.items[top.cause]
        item.rank = max(item.rank, rank(top.cause))
        item.similar = list(top.similar)
        if top.cause in by_id:
            item.matched = list(by_id[top.cause].why)
        return
    if any(f.confidence == SUSPECTED for f in out.items.values()) or not ranked:
        return
    if top and top.cause == LOOKALIKE and top.share >= NAME_SHARE:
        return  # the post reads like the reports of healthy lanes that only looked sick
    best = ranked[0]
    figures = [w for w in best.why if ":" in w]
    if not figures and (len(best.why) < MIN_TERMS or best.score < MIN_NAMING_SCORE):
        return  # a word or two in common is not a post about this class
    out.add(best.id, SUSPECTED, list(best.lines))
    item = out.items[best.id]
    item.rank, item.matched = best.score, list(best.why)
    if best.id in by_vote:
        item.similar = list(by_vote[best.id].similar)


def _nearest_lines(chosen: list[Line], vote) -> list[Line]:
    """The input's lines that share the most words with the reports a vote names (its evidence), at most three."""
    from lanebook.recipe.casebase import cases as all_cases
    from lanebook.verify.doctor_cases import document

    names = {s.id for s in vote.similar}
    words = {w for c in all_cases() if c.id in names for w in re.findall(r"[a-z_]{4,}", document(c).lower())}
    scored = sorted(
        ((len(words & set(re.findall(r"[a-z_]{4,}", at.text.lower()))), n) for n, at in enumerate(chosen)),
        key=lambda x: (-x[0], x[1]),
    )
    return [chosen[n] for score, n in scored[:3] if score > 0] or chosen[:1]


def _layer(text: str) -> str:
    for layer, pattern in LAYERS:
        if pattern.search(text):
            return layer
    return "Python traceback"


def _unknown_rule(ctx: Context, out: Findings) -> None:
    """Error-shaped lines that no finding explains: an `unknown` finding with the first such line, its layer and what
    to gather next; a failure stated in words (died, hung, killed, ...) counts as one. A lane whose log holds none is
    healthy."""
    if any(f.confidence in (CONFIRMED, SUSPECTED) for f in out.items.values()):
        return
    quoted = {(e.source, e.line) for f in out.items.values() for e in f.evidence}
    quoted |= _docker_states(ctx) | _probes(ctx)
    stated = ctx.get("stated_failure") + _prose_failures(ctx)
    shaped = ctx.get("error_shaped") + stated  # error-shaped lines first, then failures in words
    errors = list({(h.at.source, h.at.line): h.at for h in shaped if (h.at.source, h.at.line) not in quoted}.values())
    if not errors:
        return
    first = errors[0]
    layer = _layer(first.text)
    item = out.items["unknown"] = Finding(
        "unknown",
        f"An error no known cause explains ({layer})",
        UNKNOWN,
        f"The first error line comes from the {layer} layer; the registry has no cause whose evidence it holds.",
        "Gather what is named below and run the doctor on it again; file it with the evidence if it stays unknown.",
        "diagnose",
        GATHER[layer],
        "",
    )
    item.evidence = [Evidence.of(at) for at in errors[:MAX_EVIDENCE]]
    item.more = max(0, len(errors) - MAX_EVIDENCE)


@dataclass
class Moving:
    """What two scrapes say (None: not known)."""

    generating: Optional[bool] = None  # generation tokens moved
    running: Optional[bool] = None  # requests running in both scrapes
    preempted: Optional[bool] = None
    idle: Optional[bool] = None  # no request running in either scrape and no token generated between them
    evidence: list[Line] = field(default_factory=list)


def _metrics_rules(metrics: Sequence[Scrape], ctx: Context, out: Findings) -> Moving:
    moving = Moving()
    if len(metrics) < 2:
        return moving
    first, last = metrics[0], metrics[-1]
    a, b = first.snapshot, last.snapshot
    delta = b.minus(a)
    gen = delta.total(GENERATION)
    run_a, run_b = a.total(RUNNING), b.total(RUNNING)
    if gen is not None:
        moving.generating = gen > 0
    if run_a is not None and run_b is not None:
        moving.running = run_a > 0 and run_b > 0
        moving.idle = run_a == 0 and run_b == 0 and not gen
    pre = delta.total(PREEMPTIONS)
    if pre is not None:
        moving.preempted = pre > 0
    moving.evidence = [first.quote(RUNNING), last.quote(RUNNING), first.quote(GENERATION), last.quote(GENERATION)]
    if moving.running and moving.generating is False:
        out.add("D01", CONFIRMED, moving.evidence)
    drafts, accepted, drafted = delta.total(DRAFTS), delta.total(ACCEPTED_TOKENS), delta.total(DRAFT_TOKENS)
    if drafts and drafted and accepted is not None:
        per_pos = {int(k): v / drafts for k, v in delta.by_label(ACCEPTED_PER_POSITION, "position").items()}
        mean_len = 1 + accepted / drafts
        quotes = [first.quote(ACCEPTED_TOKENS), last.quote(ACCEPTED_TOKENS), first.quote(DRAFTS), last.quote(DRAFTS)]
        _judge_acceptance(mean_len, list(per_pos.values()), quotes, ctx, out)
    return moving


def _judge_acceptance(
    mean_len: float, per_pos: list[float], evidence: list[Line], ctx: Context, out: Findings, k: int = 0
):
    """Acceptance against its band: collapsed (every position at or under 5 %, or a mean length of about one token)
    is confirmed; low is suspected. With K draft positions known, low is a mean accepted share of the draft,
    (mean length - 1) / K, under a quarter; without K, a mean length under 2.5 (DSpark K=5 runs about 4)."""
    collapsed = bool(per_pos) and all(p <= COLLAPSED_POSITION for p in per_pos)
    share = (mean_len - 1) / k if k else None
    if collapsed or mean_len <= 1 + COLLAPSED_POSITION or (share is not None and share <= COLLAPSED_POSITION):
        out.add("D04", CONFIRMED, evidence)
    elif (share < LOW_SHARE) if share is not None else (mean_len < LOW_MEAN_ACCEPTANCE):
        if ctx.get("random_bench"):
            out.add("H02", HARMLESS, evidence + [h.at for h in ctx.get("random_bench")][:1])
        else:
            out.add("D04", SUSPECTED, evidence)


def _startup_rules(ctx: Context, kx: dict[str, list[Hit]], out: Findings) -> None:
    for h in ctx.get("breakable_on"):
        out.add("P01", CONFIRMED, [h.at])
    for h in ctx.get("kv_short"):
        out.add("P07" if (h.match["len"] or h.match["len2"]) == "1048576" else "D06", CONFIRMED, [h.at])
    captures = ctx.get("graph_capture")
    for h in ctx.get("cuda_oom"):
        capture = [c.at for c in captures if c.at.source == h.at.source and c.at.line <= h.at.line]
        if ctx.phase(h.at) == SERVING:
            out.add("P15", SUSPECTED, [h.at])
        elif capture:
            out.add("D18", CONFIRMED, capture[-1:] + [h.at])
        else:
            out.add("D06", CONFIRMED, [h.at])
    loopback = ctx.get("master_loopback")
    for h in ctx.get("rendezvous_timeout"):
        if loopback:  # the peers were sent to an address only the head answers: the timeout follows from it
            out.add("P08", CONFIRMED, [loopback[0].at, h.at])
            out.add("D03", SUSPECTED, [h.at])
        else:
            out.add("D03", CONFIRMED, [h.at])
    for h in ctx.get("image_mismatch"):
        # "no kernel image" alone says a binary lacks this GPU's kernels: the image's, or a torch or kernel library
        # built without them; "X is not supported on sm_121" is as often a kernel library's gate to other parts
        # (D50): the suspected tier weighs the reports. A kernel naming the one architecture it was built for confirms.
        ambiguous = "no kernel image" in h.at.text or "not supported" in h.at.text
        out.add("D19", SUSPECTED if ambiguous else CONFIRMED, [h.at])
    for h in ctx.get("engine_dead"):
        phase = ctx.phase(h.at)
        if phase == SERVING:
            out.add("D02", CONFIRMED, [h.at])
        elif phase is None:
            out.add("D02", SUSPECTED, [h.at])
        # a start that failed is not an engine that died: the lines above it name the cause, or it stays unknown
    gone, removed = ctx.get("shm_gone"), ctx.get("remove_ipc")
    if gone or removed:
        out.add("D16", CONFIRMED if gone and removed else SUSPECTED, [h.at for h in gone[:2] + removed[:2]])
    for h in ctx.get("legacy_unit"):
        out.add("P13", CONFIRMED, [h.at])
    for h in ctx.get("port_taken"):
        out.add("P13", SUSPECTED, [h.at])
    for h in ctx.get("peer_lost"):
        on_worker = bool(WORKER_SOURCE.search(h.at.source) or WORKER_TEXT.search(h.at.quoted))
        out.add("P16", CONFIRMED if on_worker else SUSPECTED, [h.at])
    for h in ctx.get("jit_inference"):
        if ctx.after_ready(h.at):
            warmup_off = ctx.get("warmup_off")
            out.add("P12", CONFIRMED if warmup_off else SUSPECTED, [h.at] + [w.at for w in warmup_off][:1])
    nvrm = kx.get("nvrm_nomem", [])
    if nvrm:
        lines = [h.at for h in nvrm]
        drafter = ctx.get("drafter_load")
        if drafter and not ctx.any_ready:
            out.add("D06", CONFIRMED, [drafter[-1].at] + lines)
        elif ctx.any_ready:
            out.add("P15", SUSPECTED, lines)
        else:
            for symptom_id in ("P15", "D06", "D09"):
                out.add(symptom_id, SUSPECTED, lines)


def _hang_rules(ctx: Context, moving: Moving, out: Findings) -> None:
    for h in ctx.get("shm_timeout"):
        if ctx.phase(h.at) != SERVING:
            out.add("P11", HARMLESS, [h.at])
        elif moving.generating is True:
            out.add("P12", SUSPECTED, [h.at])  # tokens still move: a slow step (a compile), not a hang
        elif moving.running and moving.generating is False:
            out.add("D01", CONFIRMED, [h.at])
        else:
            out.add("D01", SUSPECTED, [h.at])
            out.add("P12", SUSPECTED, [h.at])
    frozen = [
        h
        for h in ctx.get("engine_stats")
        if ctx.after_ready(h.at)
        and int(h.match["running"]) > 0
        and float(h.match["gen"]) == 0.0
        and float(h.match["prompt"]) == 0.0
    ]
    if len(frozen) >= 2:
        out.add("D01", SUSPECTED, [h.at for h in frozen])


def _acceptance_rules(ctx: Context, out: Findings) -> None:
    lines = [h for h in ctx.get("spec_line") if ctx.after_ready(h.at) or not ctx.any_ready]
    if not lines:
        return
    means = [float(h.match["mal"]) for h in lines]
    positions = [[float(x) for x in h.match["pos"].split(",") if x.strip()] for h in lines]
    mean_len = median(means)
    per_pos = [max(col) for col in zip(*positions)] if all(positions) else []
    worst = sorted(lines, key=lambda h: float(h.match["mal"]))[:3]
    _judge_acceptance(mean_len, per_pos, [h.at for h in worst], ctx, out, k=max(map(len, positions), default=0))


def _message(reply: dict) -> Optional[tuple[dict, str]]:
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    message = choice.get("message") or choice.get("delta") or {}
    return (message, choice.get("finish_reason") or "") if isinstance(message, dict) else None


def _reply_rules(records: list[tuple[Line, dict]], ctx: Context, out: Findings) -> None:
    for h in ctx.get("hermes_truncated"):
        out.add("D07", CONFIRMED, [h.at])
    for at, reply in records:
        found = _message(reply)
        if found is None:
            continue
        message, finish = found
        content = message.get("content") or ""
        reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
        if MARKERS.search(str(content)) or MARKERS.search(str(reasoning)):
            out.add("D10", CONFIRMED, [at])
        for call in message.get("tool_calls") or []:
            arguments = (call.get("function") or {}).get("arguments", "") if isinstance(call, dict) else ""
            try:
                json.loads(arguments or "{}")
            except ValueError:
                if finish in ("length", "tool_calls"):
                    out.add("D07", CONFIRMED, [at])
        if not str(content).strip() and str(reasoning).strip() and not message.get("tool_calls"):
            if finish == "length":
                out.add("D08", CONFIRMED, [at])
            else:
                out.add("D08", SUSPECTED, [at])
                out.add("P10", SUSPECTED, [at])


def _starvation_rules(records: list[tuple[Line, dict]], ctx: Context, moving: Moving, out: Findings) -> None:
    rates = [
        (at, float(r["stream_decode_tok_s"]))
        for at, r in records
        if isinstance(r.get("stream_decode_tok_s"), (int, float)) and r["stream_decode_tok_s"] > 0
    ]
    if len(rates) >= 2:
        slow, fast = min(rates, key=lambda x: x[1]), max(rates, key=lambda x: x[1])
        if fast[1] / slow[1] >= STARVED_SPREAD:
            if moving.preempted is False:
                out.add("D11", CONFIRMED, [slow[0], fast[0]] + moving.evidence[:0])
            elif moving.preempted is None:
                out.add("D11", SUSPECTED, [slow[0], fast[0]])
    busy = [
        h
        for h in ctx.get("engine_stats")
        if int(h.match["running"]) >= 2
        and int(h.match["waiting"]) == 0
        and float(h.match["prompt"]) >= 1000.0
        and float(h.match["gen"]) < 2.0 * int(h.match["running"])
    ]
    # Two windows at least, as for a frozen engine: starvation lasts while a long prefill runs, and one window can be
    # a burst's. The launcher's post-readiness warmup sends its long prefill, then a C4 wave, and a stats line logged
    # as that wave starts reads just so on a healthy lane (seen on the twin: prompt 1423.9 tok/s, generation 4.4
    # tok/s, Running: 4).
    if len(busy) >= 2 and moving.preempted is not True:
        out.add("D11", SUSPECTED, [h.at for h in busy])


def _roce_rules(ctx: Context, out: Findings) -> None:
    for h in ctx.get("gloo_loopback"):
        out.add("P08", CONFIRMED, [h.at])
    if not ctx.get("gloo_loopback"):
        for h in ctx.get("gloo_mesh") + ctx.get("socket_retry"):
            out.add("P08", SUSPECTED, [h.at])
    _rdma_memory_rules(ctx, out)
    for h in ctx.get("nccl_init_error"):
        if "unhandled system error" in h.at.text:
            out.add("D05", SUSPECTED, [h.at])
            out.add("P08", SUSPECTED, [h.at])
        else:
            out.add("D05", CONFIRMED, [h.at])
    mtus: dict[str, dict[int, Line]] = {}
    for h in ctx.get("ip_link"):
        if ROCE_IF.match(h.match["ifname"]):
            mtus.setdefault(h.at.source, {}).setdefault(int(h.match["mtu"]), h.at)
    if len(mtus) >= 2:
        values = {source: set(by_mtu) for source, by_mtu in mtus.items()}
        if len({frozenset(v) for v in values.values()}) > 1:
            out.add("D05", CONFIRMED, [at for by_mtu in mtus.values() for at in by_mtu.values()])


def _rdma_memory_rules(ctx: Context, out: Findings) -> None:
    """RDMA registration refused (ENOMEM): a locked-memory limit that is a number is D17; the kernel versions the
    post names (one failing, one working) are D20; one version is D20 suspected; neither, both suspected."""
    refused = [h.at for h in ctx.get("ibv_nomem")]
    if not refused:
        return
    limits = [h for h in ctx.get("memlock") if h.match["kb"].isdigit() and int(h.match["kb"]) < MEMLOCK_ENOUGH_KB]
    versions = {h.match["version"] or h.match["v2"] for h in ctx.get("kernel_named")}
    if limits:
        out.add("D17", CONFIRMED, refused[:2] + [h.at for h in limits[:1]])
    elif len(versions) >= 2:
        out.add("D20", CONFIRMED, refused[:2] + [h.at for h in ctx.get("kernel_named")][:2])
    else:
        out.add("D20", SUSPECTED, refused[:2] + [h.at for h in ctx.get("kernel_named")][:1])
        out.add("D17", SUSPECTED, refused[:2])


def _gib(h: Hit) -> Optional[float]:
    total, used, unit = float(h.match["total"]), float(h.match["used"]), h.match["unit"]
    if unit == "Mi" or (unit is None and total > 4096):  # `free -h` Mi, or `free -m`
        return used / 1024
    if unit == "Ki" or (unit is None and total > 4096 * 1024):
        return used / 1024 / 1024
    return used


def _node(source: str) -> str:
    """The node a gathered line was read on ("head:free -m" -> "head"); a saved file is its own node."""
    return source.split(":", 1)[0]


def _memory_rules(ctx: Context, out: Findings) -> None:
    for h in ctx.get("free_admission"):
        for symptom_id in ("D21", "D22", "P04"):
            out.add(symptom_id, SUSPECTED, [h.at])
    # the lane's container is not on that node, and no legacy unit runs there to hold the memory instead (P13)
    busy = {_node(h.at.source) for h in ctx.get("legacy_unit")}
    absent = {_node(h.at.source): h.at for h in ctx.get("no_container") if _node(h.at.source) not in busy}
    for h in ctx.get("free_mem"):
        used = _gib(h)
        if used is None or used < STICKY_GIB:
            continue
        if ctx.in_warmup(h.at):
            out.add("H03", HARMLESS, [h.at])
        elif ctx.after_stop(h.at):
            out.add("P04", CONFIRMED, [h.at])
        elif _node(h.at.source) in absent:
            out.add("P04", CONFIRMED, [h.at, absent[_node(h.at.source)]])


def _host_rules(kx: dict[str, list[Hit]], out: Findings) -> None:
    fatal = kx.get("aer_fatal", []) + kx.get("mlx5_recovery", [])
    lockups = kx.get("soft_lockup", [])
    if fatal:
        out.add("D12", CONFIRMED, [h.at for h in fatal + lockups])
    elif lockups:
        out.add("D12", SUSPECTED, [h.at for h in lockups])
    for h in kx.get("mlx5_27w", []):
        out.add("H01", HARMLESS, [h.at])


def _spin_rules(ctx: Context, moving: Moving, out: Findings) -> None:
    """vLLM's engine processes spinning on the CPU (D15). The evidence is their %CPU per node over an interval (a
    `top -b` frame); it names the spin-wait only with TP>=2 (a VLLM::Worker process, or the live command's
    tensor-parallel size), never on a lane whose command says TP=1, and confirms it only where nothing should use
    the CPU: both scrapes with no request running and no token generated, and no line saying the 2 ms fix is on.
    Under decode, or with the fix on, or without the scrapes, high CPU is only suspected."""
    rows = ctx.get("engine_cpu")
    if not rows:
        return
    sizes = {int(h.match["tp"]) for h in ctx.get("tp_size")}
    if sizes == {1}:
        return  # the uni executor: no message queue between processes to spin on
    if not (any(s >= 2 for s in sizes) or any("Worker" in h.match["proc"] for h in rows)):
        return
    hot: list[Line] = []
    for node in dict.fromkeys(_node(h.at.source) for h in rows):
        mine = [h for h in rows if _node(h.at.source) == node]
        if sum(float(h.match["cpu"]) for h in mine) >= SPIN_NODE_CPU:
            hot += [h.at for h in sorted(mine, key=lambda h: -float(h.match["cpu"]))]
    if not hot:
        return
    fix_on, fix_off = ctx.get("spin_fix_on"), ctx.get("spin_fix_off")
    fix = [h.at for h in fix_off[-1:] + fix_on[-1:]]
    if moving.idle and not fix_on:
        idle = [line for line in moving.evidence if line.text.startswith(RUNNING)][:2]
        out.add("D15", CONFIRMED, hot[:2] + idle + fix + hot[2:])
    else:
        out.add("D15", SUSPECTED, hot[:3] + fix + hot[3:])


def _node_rules(ctx: Context, out: Findings) -> None:
    """A node's weights tree read short of its index, or left with unfinished downloads (D13); a node the gather could
    not reach over SSH (D14). Each line is a fact about the node's files or connection, confirmed as read; only a
    dangling link to a file that is no shard is suspected (the model may not need it)."""
    gaps = [h.at for key in ("shard_absent", "shard_dangling", "incomplete_blob") for h in ctx.get(key)]
    broken = ctx.get("broken_link")  # a dangling snapshot link: a shard's is a gap, another file's only points at one
    gaps += [h.at for h in broken if h.at.text.endswith(".safetensors")]
    if gaps:
        out.add("D13", CONFIRMED, gaps)
    elif broken:
        out.add("D13", SUSPECTED, [h.at for h in broken])
    unreachable = [h.at for h in ctx.get("ssh_unreachable")]
    if unreachable:
        out.add("D14", CONFIRMED, unreachable)


def _notes_rules(ctx: Context, out: Findings) -> None:
    for h in ctx.get("tf32_warning"):
        out.add("H01", HARMLESS, [h.at])


# --- reading files ----------------------------------------------------------------------------------------


def read_lines(path: str, text: str) -> list[Line]:
    """The logical lines of a saved or pasted text (lanebook.verify.doctor_input.fold)."""
    return fold(path, text)


def read_inputs(
    logs: Sequence[Path], metrics: Sequence[Path] = (), dmesg: Optional[Path] = None
) -> tuple[list[Line], list[Scrape], list[Line]]:
    """Saved files read as the doctor reads them: logs (container, launcher, shell output, JSON replies and speed
    records, one per line) folded into logical lines, /metrics scrapes in the order taken, a kernel log (dmesg or
    journalctl -k). A missing file or a scrape that is no /metrics text is one LanebookError line."""
    missing = [str(p) for p in [*logs, *metrics, *([dmesg] if dmesg else [])] if not Path(p).is_file()]
    if missing:
        raise LanebookError(f"no such file: {', '.join(missing)}")
    log_lines = [line for p in logs for line in read_lines(str(p), Path(p).read_text(errors="replace"))]
    scrapes = [Scrape(str(p), Path(p).read_text(errors="replace")) for p in metrics]
    for s in scrapes:
        try:
            s.snapshot
        except MetricsUnavailable as exc:
            raise LanebookError(f"{s.source}: {exc}") from None
    kernel = read_lines(str(dmesg), Path(dmesg).read_text(errors="replace")) if dmesg else []
    return log_lines, scrapes, kernel


def read_files(logs: Sequence[Path], metrics: Sequence[Path] = (), dmesg: Optional[Path] = None) -> Diagnosis:
    """The diagnosis of saved files (read_inputs)."""
    return diagnose(*read_inputs(logs, metrics, dmesg))


def folded_evidence(logs: Iterable[Line], kernel: Iterable[Line] = (), *, limit: int = 12_000) -> str:
    """What the suspected tier reads, as text for a model: the error-shaped, telling and rule-matched lines and the
    prose, folded, each distinct line once, at most LIMIT characters."""
    logs, kernel = list(logs), list(kernel)
    hits, _ = _scan(logs, LOG_PATTERNS, json_too=False)
    wanted = {(h.at.source, h.at.line) for h in hits if h.key not in CONTEXT_KEYS or h.key in SUMMARY_KEYS}
    wanted |= {(at.source, at.line) for at in kernel}
    seen: dict[str, None] = {}
    size = 0
    for at in [*logs, *kernel]:
        if (at.source, at.line) in wanted or is_prose(at):
            if at.text not in seen:
                seen[at.text] = None
                size += len(at.text) + 1
                if size >= limit:
                    break
    return "\n".join(seen)[:limit]
