"""The lane doctor's diagnosis: from what a sick lane shows to its cause and fix, as a pure function of records.

Inputs are plain records: log lines with where they were read (source, line number), /metrics scrapes in the order
they were taken (two give rates), and kernel-log lines. The output is findings, each from the one registry
(lanebook.recipe.pitfalls.SYMPTOMS): id, cause, the evidence quoted exactly with where it was read, a confidence
(`confirmed` when the evidence is specific, `suspected` when it is only consistent), the fix, the repair runbook and
what to check next. Look-alikes (H-ids, and the cold bind's SHM lines, P11) come back as notes, never as findings.

Restraint is part of the rules: a line means different things before and after readiness, on the head and on the
worker, with and without moving counters, so a rule looks at that context before it names a cause; where the
evidence fits several causes it names each as `suspected`, with the check that tells them apart.

Speed: every pattern is compiled once with the literals one of which each of its matches must contain; one pass over
the lines tests those literals with plain `in` and searches a line only with the patterns whose literal it holds
(benchmarks/doctor_speed.py: 100,000 lines in about 1.5 s on a busy 2-core machine).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from re import _constants, _parser  # the regex parser, to find each pattern's literals for the prefilter
from statistics import median
from typing import Iterable, Optional, Sequence

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
from lanebook.recipe.pitfalls import SYMPTOMS, Symptom, symptom
from lanebook.recipe.symptoms import CONTEXT, KERNEL, LOG, NOTE

_LITERAL, _SUBPATTERN, _BRANCH = _constants.LITERAL, _constants.SUBPATTERN, _constants.BRANCH
CONFIRMED, SUSPECTED, HARMLESS = "confirmed", "suspected", "harmless"
GENERATION = "vllm:generation_tokens_total"
LOW_MEAN_ACCEPTANCE = 2.5  # DSpark K=5 runs ~4 on natural text (vllm-ascend's golden per-position 0.82/0.62/...)
COLLAPSED_POSITION = 0.05  # every position at or under this: the drafter contributes nothing
STICKY_GIB = 8.0  # used memory with no lane running; the seed saw 10-16 GiB stick
STARVED_SPREAD = 4.0  # fastest / slowest per-request decode rate in one wave
SPIN_NODE_CPU = 200.0  # vLLM engine processes' %CPU on one node: ~333-400% spinning, ~89% with the 2 ms fix (D15)
MAX_EVIDENCE = 5
# Where a worker rank's line was read (rank 1..N-1: `worker3:docker logs ...`, spark4.log) and its own line's rank
WORKER_SOURCE = re.compile(r"(?i)worker|spark[2-9]|rank ?[1-9]\d*\b|tp[1-9]\d*\b")
WORKER_TEXT = re.compile(r"Worker_TP[1-9]\d*|rank[1-9]\d*\b")
FABRIC_IF = re.compile(r"^(en[pP]\d|enP\d|bond|rocep|ib)")
TIMESTAMP = re.compile(r"\b(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d)")
MARKERS = re.compile(r"<｜DSML｜|<\|DSML\||</?think>|<｜tool▁calls▁begin｜>")


@dataclass(frozen=True)
class Line:
    source: str  # where it was read: a file, or node:file
    line: int  # 1-based
    text: str


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
            "next_check": self.next_check if self.confidence == SUSPECTED else "",
            "source": self.source,
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


def _patterns(stream: str) -> dict[str, re.Pattern]:
    found: dict[str, str] = {}
    for s in SYMPTOMS:
        for p in s.patterns:
            if p.stream == stream:
                found[p.key] = p.regex
    if stream == LOG:
        found.update({p.key: p.regex for p in CONTEXT})
    return {key: re.compile(regex) for key, regex in found.items()}


def _required(items: list) -> Optional[set[str]]:
    """Literal strings one of which every match of this parsed regex level contains (None: none known)."""
    best: Optional[set[str]] = None
    run = ""

    def better(candidate: Optional[set[str]]) -> None:
        nonlocal best
        if candidate and min(map(len, candidate)) >= 3:
            if best is None or min(map(len, candidate)) > min(map(len, best)):
                best = candidate

    for op, av in items:
        if op is _LITERAL:
            run += chr(av)
            continue
        better({run} if run else None)
        run = ""
        if op is _SUBPATTERN:
            better(_required(list(av[-1])))
        elif op is _BRANCH:
            branches = [_required(list(b)) for b in av[1]]
            if all(branches):
                better(set().union(*branches))
    better({run} if run else None)
    return best


def _hints(pattern: re.Pattern) -> Optional[set[str]]:
    if pattern.flags & re.IGNORECASE:
        return None
    try:
        return _required(list(_parser.parse(pattern.pattern)))
    except re.error:
        return None


class _Prefilter:
    """A fast first look at a line: for each pattern, literal substrings one of which every match contains (plain
    `in` tests); a line is searched only with the patterns whose literal it holds, and with the few patterns that
    have no such literal."""

    def __init__(self, patterns: dict[str, re.Pattern]):
        by_hint: dict[str, list[str]] = {}
        self.bare: list[str] = []
        for key, p in patterns.items():
            found = _hints(p)
            if found:
                for hint in found:
                    by_hint.setdefault(hint, []).append(key)
            else:
                self.bare.append(key)
        self.by_hint = tuple(by_hint.items())

    def __call__(self, text: str) -> list[str]:
        keys = [key for hint, keys in self.by_hint if hint in text for key in keys]
        # a line holding two of a pattern's literals is searched with it once (one hit, counted once)
        return list(dict.fromkeys(keys)) + self.bare if keys else self.bare


LOG_PATTERNS = _patterns(LOG)
KERNEL_PATTERNS = _patterns(KERNEL)
_LOG_FIRST = _Prefilter(LOG_PATTERNS)
_KERNEL_FIRST = _Prefilter(KERNEL_PATTERNS)


@dataclass(frozen=True)
class Hit:
    key: str
    at: Line
    match: re.Match


def _scan(lines: Iterable[Line], patterns: dict[str, re.Pattern], first_look: _Prefilter, json_too: bool):
    hits: list[Hit] = []
    records: list[tuple[Line, dict]] = []
    for at in lines:
        text = at.text
        for key in first_look(text):
            m = patterns[key].search(text)
            if m:
                hits.append(Hit(key, at, m))
        if json_too and (text[:1] == "{" or (text[:1] in " \t" and text.lstrip()[:1] == "{")):
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
        self.ready: dict[str, int] = {}
        ready_stamps = []
        for h in self.get("ready"):
            self.ready.setdefault(h.at.source, h.at.line)
            stamp = _stamp(h.at.text)
            if stamp:
                ready_stamps.append(stamp)
        self.ready_stamp = min(ready_stamps) if ready_stamps else None
        self.warmups = self._intervals("warmup_start", "warmup_end")
        self.stops = {h.at.source: h.at.line for h in self.get("stopped")}

    def get(self, key: str) -> list[Hit]:
        return self.by_key.get(key, [])

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
        if at.source in self.ready:
            return at.line > self.ready[at.source]
        stamp = _stamp(at.text)
        return bool(stamp and self.ready_stamp and stamp > self.ready_stamp)

    def in_warmup(self, at: Line) -> bool:
        return any(a < at.line < b for a, b in self.warmups.get(at.source, []))

    def after_stop(self, at: Line) -> bool:
        stop = self.stops.get(at.source)
        return stop is not None and at.line > stop and not (self.ready.get(at.source, 0) > stop)


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
            e = Evidence(at.source, at.line, at.text)
            if e in item.evidence:
                continue
            if len(item.evidence) < MAX_EVIDENCE:
                item.evidence.append(e)
            else:
                item.more += 1

    def diagnosis(self) -> Diagnosis:
        order = {s.id: n for n, s in enumerate(SYMPTOMS)}
        rank = {CONFIRMED: 0, SUSPECTED: 1}
        found = sorted(
            (f for f in self.items.values() if f.confidence != HARMLESS),
            key=lambda f: (rank[f.confidence], order[f.id]),
        )
        notes = sorted((f for f in self.items.values() if f.confidence == HARMLESS), key=lambda f: order[f.id])
        return Diagnosis(found, notes)


# --- the rules --------------------------------------------------------------------------------------------


def diagnose(logs: Iterable[Line] = (), metrics: Sequence[Scrape] = (), kernel: Iterable[Line] = ()) -> Diagnosis:
    """Findings for what a lane showed: its log lines, /metrics scrapes (in the order taken) and kernel-log lines."""
    log_hits, records = _scan(logs, LOG_PATTERNS, _LOG_FIRST, json_too=True)
    kernel_hits, _ = _scan(kernel, KERNEL_PATTERNS, _KERNEL_FIRST, json_too=False)
    ctx = Context(log_hits)
    kx = {}
    for h in kernel_hits:
        kx.setdefault(h.key, []).append(h)
    out = Findings()
    moving = _metrics_rules(metrics, ctx, out)
    _startup_rules(ctx, kx, out)
    _hang_rules(ctx, moving, out)
    _acceptance_rules(ctx, out)
    _reply_rules(records, ctx, out)
    _starvation_rules(records, ctx, moving, out)
    _fabric_rules(ctx, out)
    _memory_rules(ctx, out)
    _host_rules(kx, out)
    _spin_rules(ctx, moving, out)
    _node_rules(ctx, out)
    _notes_rules(ctx, out)
    return out.diagnosis()


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


def _judge_acceptance(mean_len: float, per_pos: list[float], evidence: list[Line], ctx: Context, out: Findings):
    collapsed = bool(per_pos) and all(p <= COLLAPSED_POSITION for p in per_pos)
    if collapsed or mean_len <= 1 + COLLAPSED_POSITION:
        out.add("D04", CONFIRMED, evidence)
    elif mean_len < LOW_MEAN_ACCEPTANCE:
        if ctx.get("random_bench"):
            out.add("H02", HARMLESS, evidence + [h.at for h in ctx.get("random_bench")][:1])
        else:
            out.add("D04", SUSPECTED, evidence)


def _startup_rules(ctx: Context, kx: dict[str, list[Hit]], out: Findings) -> None:
    for h in ctx.get("breakable_on"):
        out.add("P01", CONFIRMED, [h.at])
    for h in ctx.get("kv_short_1m"):
        out.add("P07", CONFIRMED, [h.at])
    for h in ctx.get("kv_short"):
        out.add("D06", CONFIRMED, [h.at])
    for h in ctx.get("cuda_oom"):
        if ctx.after_ready(h.at):
            out.add("P15", SUSPECTED, [h.at])
        else:
            out.add("D06", CONFIRMED, [h.at])
    for h in ctx.get("rendezvous_timeout"):
        out.add("D03", CONFIRMED, [h.at])
    for h in ctx.get("engine_dead"):
        out.add("D02", CONFIRMED, [h.at])
    for h in ctx.get("legacy_unit"):
        out.add("P13", CONFIRMED, [h.at])
    for h in ctx.get("port_taken"):
        out.add("P13", SUSPECTED, [h.at])
    for h in ctx.get("peer_lost"):
        on_worker = bool(WORKER_SOURCE.search(h.at.source) or WORKER_TEXT.search(h.at.text))
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
        if not ctx.after_ready(h.at):
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
    _judge_acceptance(mean_len, per_pos, [h.at for h in worst], ctx, out)


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


def _fabric_rules(ctx: Context, out: Findings) -> None:
    for h in ctx.get("nccl_init_error"):
        if "unhandled system error" in h.at.text:
            out.add("D05", SUSPECTED, [h.at])
            out.add("P08", SUSPECTED, [h.at])
        else:
            out.add("D05", CONFIRMED, [h.at])
    mtus: dict[str, dict[int, Line]] = {}
    for h in ctx.get("ip_link"):
        if FABRIC_IF.match(h.match["ifname"]):
            mtus.setdefault(h.at.source, {}).setdefault(int(h.match["mtu"]), h.at)
    if len(mtus) >= 2:
        values = {source: set(by_mtu) for source, by_mtu in mtus.items()}
        if len({frozenset(v) for v in values.values()}) > 1:
            out.add("D05", CONFIRMED, [at for by_mtu in mtus.values() for at in by_mtu.values()])


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
    return [Line(path, n, line) for n, line in enumerate(text.splitlines(), 1)]


def read_files(logs: Sequence[Path], metrics: Sequence[Path] = (), dmesg: Optional[Path] = None) -> Diagnosis:
    """The diagnosis of saved files: logs (container, launcher, shell output, JSON replies and speed records, one
    per line), /metrics scrapes in the order taken, and a kernel log (dmesg or journalctl -k)."""
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
    return diagnose(log_lines, scrapes, kernel)


def print_diagnosis(diagnosis: Diagnosis) -> None:
    """A table of findings (id, confidence, cause, fix, repair runbook), each followed by its evidence lines and
    where they were read; then the harmless notes and one summary line."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(soft_wrap=True, highlight=False)
    if diagnosis.findings:
        table = Table(show_lines=True)
        for column in ("id", "confidence", "cause", "fix", "runbook", "next check"):
            table.add_column(column)
        for f in diagnosis.findings:
            style = "red" if f.confidence == CONFIRMED else "yellow"
            table.add_row(
                f"[{style}]{f.id}[/{style}] {escape(f.title)}",
                f"[{style}]{f.confidence}[/{style}]",
                escape(f.cause),
                escape(f.fix),
                f"runbooks/{f.runbook}.ipynb",
                escape(f.next_check) if f.confidence == SUSPECTED else "",
            )
        console.print(table)
    for f in diagnosis.findings + diagnosis.notes:
        label = "note" if f.confidence == HARMLESS else f.confidence
        console.print(f"{f.id} {label}: {escape(f.title)} (learnt from {escape(f.source)})")
        for e in f.evidence:
            console.print(f"  {escape(e.source)}:{e.line}: {escape(e.text)}")
        if f.more:
            console.print(f"  … and {f.more} more line(s)")
        if f.confidence == HARMLESS:
            console.print(f"  harmless: {escape(f.cause)}")
    confirmed = len(diagnosis.confirmed)
    suspected = len(diagnosis.findings) - confirmed
    if diagnosis.healthy:
        console.print(f"[green]healthy[/green]: no finding ({len(diagnosis.notes)} harmless note(s))")
    else:
        verdict = "[red]sick[/red]" if confirmed else "[yellow]suspect[/yellow]"
        console.print(f"{verdict}: {confirmed} confirmed, {suspected} suspected, {len(diagnosis.notes)} note(s)")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def diagnosis_markdown(diagnosis: Diagnosis) -> str:
    """The same as print_diagnosis, as Markdown for a runbook's page: the findings table, then each finding's and note's
    evidence lines with where they were read, then the summary line."""
    parts = []
    if diagnosis.findings:
        rows = [
            f"| {f.id} {_cell(f.title)} | {f.confidence} | {_cell(f.cause)} | {_cell(f.fix)} | "
            f"[{f.runbook}]({f.runbook}.ipynb) | {_cell(f.next_check) if f.confidence == SUSPECTED else ''} |"
            for f in diagnosis.findings
        ]
        parts.append(
            "| id | confidence | cause | fix | runbook | next check |\n|---|---|---|---|---|---|\n" + "\n".join(rows)
        )
    for f in diagnosis.findings + diagnosis.notes:
        label = "note (harmless)" if f.confidence == HARMLESS else f.confidence
        lines = [f"{e.source}:{e.line}: {e.text}" for e in f.evidence]
        lines += [f"… and {f.more} more line(s)"] if f.more else []
        parts.append(
            f"**{f.id} {label}**: {f.title} (learnt from {f.source})\n\n```text\n" + "\n".join(lines) + "\n```"
        )
    confirmed = len(diagnosis.confirmed)
    if diagnosis.healthy:
        parts.append(f"**healthy**: no finding ({len(diagnosis.notes)} harmless note(s))")
    else:
        suspected = len(diagnosis.findings) - confirmed
        verdict = "sick" if confirmed else "suspect"
        parts.append(f"**{verdict}**: {confirmed} confirmed, {suspected} suspected, {len(diagnosis.notes)} note(s)")
    return "\n\n".join(parts)
