"""The diagnose runbook's three follow-ups as pure rules: what each sends, and what its figures must show.

- prefix-cache churn (A, A again, unrelated B, A again): eviction is A hitting fewer cached tokens after B;
- the verify schedule's K boundary: waves either side and one crossing it mid-run complete, queues drain, no fatal line;
- a one-axis canary: one env value changed, kept only when healthy and better than the lane's own value.

I/O lives in lanebook.verify.probes (requests, /metrics) and the runbook (renders, relaunches).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection, Iterable, Mapping, Optional, Sequence

from lanebook.nodes.prometheus import Snapshot
from lanebook.recipe.speculative import k_for_batch
from lanebook.speed.bands import DEFAULT_TOLERANCE, Comparison, ab_canary
from lanebook.speed.metrics import NO_DECODE_WINDOW, WaveFigures, content_times
from lanebook.speed.records import RequestRecord
from lanebook.speed.servercounts import TTFT_COUNT, TTFT_SUM
from lanebook.speed.workloads import Workload, request_body

# --- prefix-cache churn: A -> A -> B -> A ------------------------------------------------------------

PREFIX_HITS = "vllm:prefix_cache_hits_total"  # tokens served from the prefix cache
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"  # tokens looked up in it
PREFIX_STEPS = (("A cold", "A"), ("A repeat", "A"), ("B cold", "B"), ("A again", "A"))
# A and B differ in every line, have the same shape line for line, and share the same question and framing.
_SUBJECTS = {
    "A": ("harbor crane", "berth schedule", "tide gauge", "pilot boat"),
    "B": ("orchard ledger", "cider press", "frost alarm", "seed drill"),
}
_PRIMES = {"A": 37, "B": 53}
PREFIX_QUESTION = "Which entry records the largest reading? Reply with its entry number only."


def prefix_context(label: str, lines: int) -> str:
    """Long notes for prompt A or B: the same shape line for line, different words and readings throughout."""
    subjects, prime = _SUBJECTS[label], _PRIMES[label]
    return "\n".join(
        f"Entry {i}: the {subjects[i % len(subjects)]} reading was {(i * prime) % 997} units."
        for i in range(1, lines + 1)
    )


def prefix_bodies(
    model: str, lane_request: Mapping[str, Any], run_tag: str, lines: int, max_tokens: int = 16
) -> list[tuple[str, dict]]:
    """The protocol's four streamed requests, in order, as (step name, request body).

    Each prompt starts with a tag unique to this run and to its prompt (A or B), so nothing cached before
    the run can hit and B shares no block with A; the framing (chat template, tag, notes, question, the
    lane's request shape) is the same for both, so they differ only in what they say.
    """
    prompts = {
        label: Workload(
            name=f"prefix-{label}",
            description=f"prefix-cache protocol prompt {label}",
            prompts=[PREFIX_QUESTION],
            context=prefix_context(label, lines),
        )
        for label in ("A", "B")
    }
    return [
        (name, request_body(model, prompts[label], 0, f"{run_tag}-{label}", max_tokens, lane_request))
        for name, label in PREFIX_STEPS
    ]


def ttft_s(record: RequestRecord) -> Optional[float]:
    """Seconds from sending to the first chunk carrying content (None when the request failed or had none)."""
    times = content_times(record)
    return None if record.error or not times else times[0] - record.t_sent


@dataclass(frozen=True)
class PrefixStep:
    """One request of the protocol: /metrics prefix-cache deltas over it and its TTFT."""

    name: str
    queried_tokens: float
    hit_tokens: float
    ttft_s: Optional[float]
    error: Optional[str] = None
    server_ttft_s: Optional[float] = None  # the server's own, from its TTFT histogram over this one request

    @property
    def hit_rate(self) -> Optional[float]:
        return self.hit_tokens / self.queried_tokens if self.queried_tokens > 0 else None

    def figures(self) -> dict:
        return {
            "queried_tokens": self.queried_tokens,
            "hit_tokens": self.hit_tokens,
            "hit_rate": None if self.hit_rate is None else round(self.hit_rate, 4),
            "ttft_s": None if self.ttft_s is None else round(self.ttft_s, 4),
            "server_ttft_s": None if self.server_ttft_s is None else round(self.server_ttft_s, 4),
            "error": self.error,
        }


def one_request_ttft_s(delta: Snapshot) -> Optional[float]:
    """The server's TTFT of the one request a /metrics delta covers (its histogram's _sum over exactly one _count);
    None when the server does not expose it or the delta timed another number of requests."""
    count, total = delta.total(TTFT_COUNT), delta.total(TTFT_SUM)
    return total if count == 1 and total is not None else None


def prefix_step(name: str, record: RequestRecord, before: Snapshot, after: Snapshot) -> PrefixStep:
    """A step's figures from the scrapes taken (with the queue idle) just before and after its request."""
    delta = after.minus(before)
    return PrefixStep(
        name,
        delta.total(PREFIX_QUERIES) or 0.0,
        delta.total(PREFIX_HITS) or 0.0,
        ttft_s(record),
        record.error,
        one_request_ttft_s(delta),
    )


@dataclass(frozen=True)
class PrefixVerdict:
    ok: bool
    evicted: bool  # A hit fewer cached tokens after B than on its repeat: the churn this protocol looks for
    problems: list[str]
    steps: list[PrefixStep]

    def summary(self) -> str:
        seen = "; ".join(
            f"{s.name}: {s.hit_tokens:g}/{s.queried_tokens:g} tokens hit"
            + ("" if s.ttft_s is None else f", TTFT {s.ttft_s:.3f} s")
            for s in self.steps
        )
        return ("; ".join(self.problems) + " — " if self.problems else "") + seen


def prefix_verdict(steps: Sequence[PrefixStep], judge_ttft: bool = True) -> PrefixVerdict:
    """Judge A cold, A repeat, B cold, A again.

    The protocol is valid only when both cold requests hit nothing (the prefixes really are unique) and A's
    repeat hits (the cache works at all). It passes when A again hits at least what A's repeat hit, and (unless
    judge_ttft is False) the cached prefill shows in TTFT (A again answers sooner than A cold). Fewer hits on A
    again is eviction.
    """
    names = [s.name for s in steps]
    if names != [name for name, _ in PREFIX_STEPS]:
        raise ValueError(f"the protocol's steps are {[n for n, _ in PREFIX_STEPS]}, got {names}")
    a_cold, a_repeat, b_cold, a_again = steps
    problems = [f"{s.name}: request failed: {s.error}" for s in steps if s.error]
    if not problems:
        for cold in (a_cold, b_cold):
            if cold.hit_tokens > 0:
                problems.append(
                    f"{cold.name} hit {cold.hit_tokens:g} cached tokens: its prefix was not unique, "
                    "so the protocol does not test eviction"
                )
        if cold_queries := [s.name for s in steps if s.queried_tokens <= 0]:
            problems.append(f"no prefix-cache queries counted for {', '.join(cold_queries)}: is prefix caching on?")
        elif a_repeat.hit_tokens <= 0:
            problems.append("A repeat hit no cached tokens: the prefix cache is not working (is prefix caching on?)")
    evicted = not problems and a_again.hit_tokens < a_repeat.hit_tokens
    if evicted:
        problems.append(
            f"A→B→A eviction reproduced: after unrelated B, A hit {a_again.hit_tokens:g} cached tokens "
            f"where its repeat hit {a_repeat.hit_tokens:g}"
        )
    elif not problems and judge_ttft:
        clock, again, cold = _ttft_pair(a_again, a_cold)
        if again is not None and cold is not None and again >= cold:
            problems.append(
                f"A again hit the cache but its TTFT ({again:.3f} s, {clock}) is not below A cold's "
                f"({cold:.3f} s): the counters and the stream disagree"
            )
    return PrefixVerdict(not problems, evicted, problems, list(steps))


def _ttft_pair(again: PrefixStep, cold: PrefixStep) -> tuple[str, Optional[float], Optional[float]]:
    """The two TTFTs to compare, by the server's own clock where it timed both requests (the client's stamps also
    carry the machine's scheduling of this process: noise beside a small prefill), else by the stream's."""
    if again.server_ttft_s is not None and cold.server_ttft_s is not None:
        return "the server's", again.server_ttft_s, cold.server_ttft_s
    return "the stream's", again.ttft_s, cold.ttft_s


# --- the K boundary: C4 <-> C5 ---------------------------------------------------------------------


@dataclass(frozen=True)
class BoundaryPlan:
    """The three waves of the stability run: at the lower side, at the upper side, and the upper side with one
    shorter branch, so the batch drops across the boundary mid-run."""

    lower: int
    upper: int
    k_lower: int
    k_upper: int
    max_tokens: int
    short_tokens: int

    @property
    def crosses(self) -> bool:
        """A boundary only where the schedule gives the two batch sizes different K."""
        return self.k_lower != self.k_upper

    def cases(self) -> list[tuple[str, list[int]]]:
        """(case name, max_tokens of each request), in the order they run."""
        lo, hi = f"C{self.lower} K={self.k_lower}", f"C{self.upper} K={self.k_upper}"
        return [
            (lo, [self.max_tokens] * self.lower),
            (hi, [self.max_tokens] * self.upper),
            (
                f"C{self.upper}→C{self.lower} mixed (one {self.short_tokens}-token branch)",
                [self.short_tokens] + [self.max_tokens] * (self.upper - 1),
            ),
        ]


def boundary_plan(
    schedule: Optional[Sequence[Sequence[int]]],
    fixed_k: int,
    lower: int,
    upper: int,
    max_tokens: int,
    short_tokens: int,
) -> BoundaryPlan:
    if not 1 <= lower < upper:
        raise ValueError(f"the boundary needs 1 <= lower < upper batch sizes, got {lower} and {upper}")
    if not 2 <= short_tokens < max_tokens:
        raise ValueError(
            f"the shorter branch needs 2 <= short_tokens < max_tokens, got {short_tokens} and {max_tokens}"
        )
    return BoundaryPlan(
        lower,
        upper,
        k_for_batch(schedule, fixed_k, lower),
        k_for_batch(schedule, fixed_k, upper),
        max_tokens,
        short_tokens,
    )


def boundary_bodies(
    model: str, workload: Workload, lane_request: Mapping[str, Any], run_tag: str, case: int, max_tokens: Sequence[int]
) -> list[dict]:
    """One case's request bodies; every prompt of the run is unique (tag), so no request rides another's cache."""
    return [
        request_body(model, workload, i, f"{run_tag}-k{case}-{i}", n, lane_request) for i, n in enumerate(max_tokens)
    ]


@dataclass(frozen=True)
class BoundaryCase:
    name: str
    wave: WaveFigures
    drained: bool  # running and waiting back to 0 after the wave, within the bound
    drain_s: Optional[float]
    preemptions: float  # Δ vllm:num_preemptions_total over the wave

    @property
    def unfinished(self) -> int:
        """Requests that did not complete (an error, an empty stream): a completed stream whose content came in one
        read has no decode rate, but it is no instability."""
        return self.wave.errors - self.wave.error_reasons.get(NO_DECODE_WINDOW, 0)

    def figures(self) -> dict:
        return {
            "requests": self.wave.requests,
            "ok": self.wave.ok,
            "errors": self.wave.errors,
            "unfinished": self.unfinished,
            "decode_tokens": self.wave.decode_tokens,
            "wall_s": round(self.wave.wall_s, 4),
            "wall_aggregate_tok_s": round(self.wave.wall_aggregate_tok_s, 4),
            "drained": self.drained,
            "drain_s": None if self.drain_s is None else round(self.drain_s, 3),
            "preemptions": self.preemptions,
        }


@dataclass(frozen=True)
class BoundaryVerdict:
    ok: bool
    problems: list[str]

    def summary(self, cases: Iterable[BoundaryCase]) -> str:
        seen = "; ".join(
            f"{c.name}: {c.wave.ok}/{c.wave.requests} ok, aggregate {c.wave.wall_aggregate_tok_s:.1f} tok/s"
            for c in cases
        )
        return ("; ".join(self.problems) + " — " if self.problems else "") + seen


def boundary_verdict(
    cases: Sequence[BoundaryCase], found: Mapping[str, Mapping[str, list[str]]], healthy: bool
) -> BoundaryVerdict:
    """Stable: every request of every case completed, the queues drained after each, no preemption, /health
    still 200 and no fatal line in any rank's log (FOUND: {node: {kind: lines}}, as probes.fatal_log_lines gives)."""
    fatal = [
        f"{node}: {line}"
        for node, by_kind in found.items()  # a line of two kinds is named once
        for line in dict.fromkeys(line for lines in by_kind.values() for line in lines)
    ]
    problems = []
    for case in cases:
        if case.unfinished:
            reasons = ", ".join(f"{n}× {why}" for why, n in case.wave.error_reasons.items() if why != NO_DECODE_WINDOW)
            problems.append(f"{case.name}: {case.unfinished} of {case.wave.requests} requests failed ({reasons})")
        if not case.drained:
            problems.append(f"{case.name}: the queue did not drain (requests still running or waiting)")
        if case.preemptions > 0:
            problems.append(f"{case.name}: {case.preemptions:g} preemption(s)")
    if not healthy:
        problems.append("/health is no longer 200 after the waves")
    if fatal:
        problems.append(
            f"fatal log lines: {'; '.join(fatal[:3])}" + (f" (and {len(fatal) - 3} more)" if len(fatal) > 3 else "")
        )
    return BoundaryVerdict(not problems, problems)


# --- the one-axis canary: keep or reject ------------------------------------------------------------

CANARY_WORKLOADS = ("count", "code", "json")  # the probes batch 8216 regressed


@dataclass(frozen=True)
class CanaryDecision:
    """keep: the variant's value stays on the lane; reject: the lane's own value is restored."""

    key: str
    baseline_value: Any
    variant_value: Any
    decision: str  # "keep" | "reject"
    reasons: list[str]
    comparison: Optional[Comparison]
    cells: list[dict] = field(default_factory=list)

    @property
    def kept_value(self) -> Any:
        return self.variant_value if self.decision == "keep" else self.baseline_value

    def summary(self) -> str:
        return (
            f"{self.decision} {self.key}={self.variant_value} (against {self.baseline_value}): "
            + "; ".join(self.reasons)
            + f"; the lane keeps {self.key}={self.kept_value}"
        )

    def figures(self) -> dict:
        return {
            "key": self.key,
            "baseline": self.baseline_value,
            "variant": self.variant_value,
            "decision": self.decision,
            "kept": self.kept_value,
            "reasons": self.reasons,
            "verdict": self.comparison.verdict if self.comparison else None,
            "tolerance": self.comparison.tolerance if self.comparison else None,
            "cells": self.cells,
        }


def _errors(documents: Iterable[dict]) -> int:
    return sum(run["errors"] for doc in documents for run in doc["runs"])


def canary_decision(
    key: str,
    baseline_value: Any,
    variant_value: Any,
    baseline: list[dict],
    variant: list[dict],
    tolerance: float = DEFAULT_TOLERANCE,
    alike: Collection[int] = (),
) -> CanaryDecision:
    """Keep the variant only when both sides are healthy (every request measured) and the matched comparison of
    their bands (bands.ab_canary: the same workloads, levels and max_tokens) promotes it: no cell worse beyond
    tolerance, complete bands, at least one cell better. Anything else rejects it, and the lane's value stays.
    Cells at the concurrencies in `alike` (both sides run the same there) are shown and weigh neither way."""
    reasons = []
    for side, documents in (("baseline", baseline), ("variant", variant)):
        if failed := _errors(documents):
            reasons.append(f"{side} unhealthy: {failed} request(s) failed or were unmeasurable")
    if reasons:
        return CanaryDecision(key, baseline_value, variant_value, "reject", reasons, None)
    comparison = ab_canary(baseline, variant, tolerance, alike)
    cells = [
        {
            "workload": c.workload,
            "concurrency": c.concurrency,
            "figure": c.figure,
            "baseline": c.baseline,
            "variant": c.current,
            "change": None if c.change is None else round(c.change, 4),
            "verdict": c.verdict,
        }
        for c in comparison.cells
    ]
    worse = [c for c in comparison.cells if c.verdict == "worse"]
    weighed = [c for c in comparison.cells if c.verdict != "alike"]
    slower = [c for c in weighed if c.change is not None and c.change < 0]
    noisy = [c for c in comparison.cells if c.verdict == "better" and c.overlap]
    if comparison.verdict == "promote":
        better = [c for c in comparison.cells if c.verdict == "better" and not c.overlap]
        reasons.append(f"better beyond ±{tolerance:.0%} on {', '.join(_cell(c) for c in better)}, worse nowhere")
    elif worse:
        reasons.append(f"worse beyond ±{tolerance:.0%} on {', '.join(_cell(c) for c in worse)}")
    elif comparison.verdict == "incomplete":
        reasons.append("bands incomplete (fewer than 3 trials a cell): a value is kept only on complete bands")
    elif not weighed:
        reasons.append("no level measured where the two sides differ: nothing shows a gain")
    else:
        reasons.append(
            f"no cell clearly better beyond ±{tolerance:.0%}; slower on {len(slower)} of "
            f"{len(weighed)} cells" + (f" ({', '.join(_cell(c) for c in slower)})" if slower else "")
        )
        if noisy:
            reasons.append(
                f"a better median inside overlapping trial bands may be noise: {', '.join(_cell(c) for c in noisy)}"
            )
    if same := sorted({c.concurrency for c in comparison.cells if c.verdict == "alike"}):
        levels = ", ".join(f"C{c}" for c in same)
        reasons.append(f"{levels}: both sides run the same there, so those cells are shown and not weighed")
    return CanaryDecision(
        key,
        baseline_value,
        variant_value,
        "keep" if comparison.verdict == "promote" else "reject",
        reasons,
        comparison,
        cells,
    )


def _cell(c) -> str:
    figure = "stream" if c.figure == "mean_stream_decode_tok_s" else "aggregate"
    return f"{c.workload} C{c.concurrency} {figure} {c.baseline:.1f}→{c.current:.1f} ({c.change:+.1%})"
