"""What `lanebook watch` looks at each round, and what it makes of it.

A probe round sees the lane twice: as a client does (`/health`, `/v1/models` listing the served model, a one-token
chat, keyed where the lane is keyed, and `/metrics`: running and waiting requests, KV usage, token counters) and as
the pair is (every node answers SSH; each node's `docker ps` names the lane's containers, read into the lane's
state by lanebook.ops.launcher, so an orphaned worker shows; the head's free disk). One SSH command per node and
four HTTP requests per round, over connections kept open between rounds; nothing starts a notebook.

A round is a record (one JSON line of probes.jsonl: lanebook.runs.watch.FILES). What is judged is a pure function
of records: served, healthy or the cause and whether a relaunch fixes it, clients busy, a speed regression.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

import httpx

from lanebook.lane.params import LaneParams
from lanebook.nodes.prometheus import (
    RUNNING,
    WAITING,
    MetricsUnavailable,
    metrics_url,
    parse_metrics,
    server_root,
)
from lanebook.nodes.ssh import LaneNodes, NodeError, NodesFailed
from lanebook.ops.launcher import LANE_UP, orphaned_workers, project_name, state_from_containers

KV_USAGE = "vllm:kv_cache_usage_perc"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
HTTP_TIMEOUT_S = 10.0
MIN_HTTP_TIMEOUT_S = 1.0
SSH_TIMEOUT_S = 20.0
# Below this much free space on the head a serving lane's logs, compile caches and images cannot grow: a full disk,
# which a relaunch does not fix (lanebook's own floor, not a recipe figure).
DISK_FLOOR_KIB = 5 * 1024 * 1024
PAIR_MARK = "--lanebook-watch-df--"

# Causes a round can point at, from what a relaunch can fix to what it cannot.
ENGINE_DOWN = "engine down"  # the API does not serve while every node answers and has room
ORPHANED = "orphaned worker"  # a worker's rank runs with no head rank (pitfall 16)
NOT_SERVED = "not served"  # the API answers, but not a client's request
NODE_UNREACHABLE = "node unreachable"
DISK_FULL = "disk full"
LINK_DEGRADED = "link degraded"
SPEED_REGRESSION = "speed regression"
# A relaunch cannot make a node answer, free a disk, mend a link or undo an update's slowdown: these are paged.
NOT_RELAUNCHABLE = (NODE_UNREACHABLE, DISK_FULL, LINK_DEGRADED, SPEED_REGRESSION)


def relaunch_can_fix(cause: str) -> bool:
    return cause not in NOT_RELAUNCHABLE


# --- the client's view ------------------------------------------------------------------------------------------


def chat_body(params: LaneParams) -> dict:
    """The one-token chat a watch round sends: the lane's request shape, one token back, nothing streamed."""
    return {
        **params.request,
        "model": params.served_model_name,
        "messages": [{"role": "user", "content": "Reply with one word: ok"}],
        "max_tokens": 1,
        "temperature": 0,
    }


def round_timeout_s(interval_s: Optional[float]) -> float:
    """How long a round waits for each of its HTTP answers: HTTP_TIMEOUT_S, but at most half the probe interval
    (never under MIN_HTTP_TIMEOUT_S). A hung rank answers /health and never the chat: a round that waited longer than
    the interval would push the second failed round, and the incident, past two intervals after the fault."""
    if not interval_s or interval_s <= 0:
        return HTTP_TIMEOUT_S
    return max(MIN_HTTP_TIMEOUT_S, min(HTTP_TIMEOUT_S, interval_s / 2))


def wave_timeout_s(max_tokens: int, band_min_tok_s: float, *, interval_s: Optional[float] = None) -> float:
    """How long the watch's speed wave may take: three times one stream of MAX_TOKENS at the band's minimum, plus a
    round's wait for a first token (round_timeout_s). A wave the engine stops answering (a rank hang, a death) ends
    within it, so the watch is never blind for the speed client's generous bounds (minutes); a lane three times
    slower than its band still finishes its wave and is measured."""
    return 3.0 * max_tokens / max(band_min_tok_s, 1e-6) + round_timeout_s(interval_s)


def _get(client: httpx.Client, url: str, timeout_s: float) -> tuple[Optional[int], Optional[httpx.Response], str]:
    try:
        response = client.get(url, timeout=timeout_s)
    except httpx.HTTPError as exc:
        return None, None, type(exc).__name__
    return response.status_code, response, f"HTTP {response.status_code}"


def metrics_figures(text: str) -> dict:
    """The figures a round keeps from a /metrics scrape (None where the server does not expose one)."""
    snapshot = parse_metrics(text)
    kv = snapshot.total(KV_USAGE)
    return {
        "running": snapshot.total(RUNNING),
        "waiting": snapshot.total(WAITING),
        "kv_usage": None if kv is None else round(kv, 4),
        "prompt_tokens": snapshot.total(PROMPT_TOKENS),
        "generation_tokens": snapshot.total(GENERATION_TOKENS),
    }


def probe_client(params: LaneParams, client: httpx.Client, *, timeout_s: float = HTTP_TIMEOUT_S) -> dict:
    """What a client sees: /health, /v1/models, a one-token chat (keyed where the lane is: the client sends the key
    lanebook.lane.keys registered), /metrics, each answer awaited at most TIMEOUT_S. Never raises for the lane's
    answers."""
    root, api = server_root(params.api), params.api.rstrip("/")
    seen: dict[str, Any] = {"errors": []}
    status, _, said = _get(client, f"{root}/health", timeout_s)
    seen["health"] = status
    if status != 200:
        seen["errors"].append(f"/health: {said}")
    status, response, said = _get(client, f"{api}/models", timeout_s)
    ids: list[str] = []
    if response is not None and status == 200:
        try:
            ids = [str(m.get("id")) for m in response.json().get("data", [])]
        except (ValueError, AttributeError):
            ids = []
    seen["models"] = params.served_model_name in ids
    if not seen["models"]:
        seen["errors"].append(f"/v1/models: {said}" + (f", lists {', '.join(ids)}" if ids else ""))
    started = time.monotonic()
    try:
        response = client.post(f"{api}/chat/completions", json=chat_body(params), timeout=timeout_s)
        body = response.json() if response.status_code == 200 else None
        seen["chat"] = bool(body and body.get("choices"))
        seen["chat_tokens"] = int(((body or {}).get("usage") or {}).get("completion_tokens") or 0)
        if not seen["chat"]:
            seen["errors"].append(f"chat: HTTP {response.status_code}")
    except (httpx.HTTPError, ValueError) as exc:
        seen["chat"], seen["chat_tokens"] = False, 0
        seen["errors"].append(f"chat: {type(exc).__name__}")
    seen["chat_s"] = round(time.monotonic() - started, 3)
    status, response, said = _get(client, metrics_url(params.api), timeout_s)
    seen["metrics"] = None
    if response is not None and status == 200:
        try:
            seen["metrics"] = metrics_figures(response.text)
        except MetricsUnavailable as exc:
            seen["errors"].append(f"/metrics: {exc}")
    return seen


# --- the pair's view --------------------------------------------------------------------------------------------


def pair_command() -> str:
    """One command per node: the running container names, then the free KiB of the home's filesystem."""
    return f"docker ps --format '{{{{.Names}}}}'; echo {PAIR_MARK}; df -Pk ~ | awk 'NR==2 {{print $4}}'"


def read_pair_output(stdout: str) -> tuple[list[str], Optional[int]]:
    """(container names, free KiB or None) from pair_command's output."""
    names, _, rest = stdout.partition(PAIR_MARK)
    free = rest.strip().splitlines()
    return names.split(), int(free[0]) if free and free[0].strip().isdigit() else None


def probe_pair(nodes: LaneNodes) -> dict:
    """What the pair is: which nodes answer SSH, the lane's containers on each, and each node's free disk."""
    try:
        results = nodes.each(pair_command(), check=False, timeout=SSH_TIMEOUT_S)
    except NodesFailed as exc:  # a node that does not answer: its NodeError stands in its place
        results = exc.results
    prefix = project_name(nodes) + "-"
    ssh: dict[str, bool] = {}
    containers: dict[str, list[str]] = {}
    disk: dict[str, Optional[int]] = {}
    errors = []
    for alias, result in results.items():
        if isinstance(result, NodeError):
            ssh[alias] = False
            errors.append(f"{alias}: {str(result).splitlines()[0][:160]}")
            continue
        ssh[alias] = True
        names, free = read_pair_output(result.stdout)
        containers[alias] = [n for n in names if n.startswith(prefix)]
        disk[alias] = free
    head = nodes.head.alias
    state = state_from_containers(containers, head) if all(ssh.values()) else None
    return {"ssh": ssh, "containers": containers, "disk_free_kib": disk, "state": state, "errors": errors}


def probe_round(
    nodes: LaneNodes,
    client: httpx.Client,
    *,
    number: int,
    now: Optional[float] = None,
    timeout_s: float = HTTP_TIMEOUT_S,
) -> dict:
    """One round: the client's view (each answer awaited at most TIMEOUT_S: round_timeout_s), then the pair's, as one
    record (judged into it: served, healthy, cause)."""
    started = time.monotonic()
    at = time.time() if now is None else now
    seen = probe_client(nodes.params, client, timeout_s=timeout_s)
    pair = probe_pair(nodes)
    nodes.executor.history.clear()  # a watch runs for weeks: its executor keeps no history
    record = {
        "t": round(at, 3),
        "round": number,
        "lane": nodes.params.name,
        "health": seen["health"],
        "models": seen["models"],
        "chat": seen["chat"],
        "chat_s": seen["chat_s"],
        "chat_tokens": seen.get("chat_tokens", 0),
        "metrics": seen["metrics"],
        "ssh": pair["ssh"],
        "containers": pair["containers"],
        "disk_free_kib": pair["disk_free_kib"],
        "state": pair["state"],
        "errors": seen["errors"] + pair["errors"],
        "probe_s": round(time.monotonic() - started, 3),
    }
    return judged(record, head=nodes.head.alias)


# --- judgments (pure) -------------------------------------------------------------------------------------------


def served(record: dict) -> bool:
    """A client was served: /health 200, the served model listed, the one-token chat answered."""
    return record.get("health") == 200 and bool(record.get("models")) and bool(record.get("chat"))


def full_disks(record: dict, floor_kib: int = DISK_FLOOR_KIB) -> list[str]:
    return sorted(a for a, free in (record.get("disk_free_kib") or {}).items() if free is not None and free < floor_kib)


def cause_of(record: dict, *, head: str) -> Optional[str]:
    """What a round points at, most basic first: a node that does not answer, a full disk, an orphaned worker, an
    engine that does not serve, a server that answers but does not serve; None for a healthy round."""
    if not all((record.get("ssh") or {}).values()):
        return NODE_UNREACHABLE
    if full_disks(record):
        return DISK_FULL
    containers = record.get("containers") or {}
    if orphaned_workers(containers, head):
        return ORPHANED
    if record.get("state") not in (None, LANE_UP):
        return ENGINE_DOWN
    if not served(record):
        return ENGINE_DOWN if record.get("health") != 200 else NOT_SERVED
    return None


def judged(record: dict, *, head: str) -> dict:
    """The record with its judgment: served, healthy (served, every node answering with room, the lane's ranks all
    up) and the cause when not healthy, with one line naming what failed."""
    cause = cause_of(record, head=head)
    failures = list(record.get("errors") or [])
    if cause == DISK_FULL:
        failures.append(f"free disk below {DISK_FLOOR_KIB // 1024**2} GiB on {', '.join(full_disks(record))}")
    if cause in (ENGINE_DOWN, ORPHANED) and record.get("state") not in (None, LANE_UP):
        failures.append(f"the lane's containers: {record.get('state')}")
    return {**record, "served": served(record), "healthy": cause is None, "cause": cause, "failures": failures}


def detail(record: dict) -> str:
    """A round in one line, for the terminal and a page."""
    if record.get("healthy"):
        m = record.get("metrics") or {}
        return (
            f"healthy: served in {record.get('chat_s')} s; running {m.get('running')}, waiting {m.get('waiting')}, "
            f"KV {m.get('kv_usage')}"
        )
    return f"{record.get('cause')}: " + "; ".join(record.get("failures") or ["no detail"])


def clients_busy(previous: Optional[dict], record: dict, *, own_tokens: float = 0.0) -> Optional[str]:
    """Why clients are being served now (so a speed probe would measure their load, and slow them), or None: requests
    running or waiting, or more tokens generated since the last round than the watch's own requests account for."""
    m = record.get("metrics") or {}
    if (m.get("running") or 0) > 0 or (m.get("waiting") or 0) > 0:
        return f"requests running {m.get('running'):g}, waiting {m.get('waiting'):g}"
    before = ((previous or {}).get("metrics") or {}).get("generation_tokens")
    after = m.get("generation_tokens")
    if before is not None and after is not None and after - before > own_tokens:
        return f"{after - before - own_tokens:g} tokens generated for clients since the last round"
    return None


def wave_disturbed(
    before: Optional[float], after: Optional[float], wave_tokens: float, *, slack: float = 2.0
) -> Optional[str]:
    """Why a speed wave is no sample of the lane alone, or None: the server generated more tokens between the round's
    /metrics (BEFORE, the round's own chat counted) and the wave's end (AFTER) than the wave's own, so a client's
    request shared its steps and slowed it (a C1 wave at C2 is no C1 figure). None where the counters cannot tell
    (missing, or reset by a restart)."""
    if before is None or after is None or after < before:
        return None
    extra = after - before - wave_tokens
    if extra > slack:
        return f"{extra:g} tokens were generated for clients during the wave"
    return None


# A speed wave counts as below its band only when it is more than this share under the band's minimum: the seeds'
# own tolerance for one figure (the twin's facts hold to +-3 %); a real lane's trials and a loaded machine's twin
# both scatter by tenths of a percent around a band's edge, which alone would fill the test below by chance.
BELOW_MARGIN = 0.03


def below_band(value: Optional[float], band_min: float) -> bool:
    """A wave's stream decode rate is below its band: none measured, or under the band's minimum by BELOW_MARGIN."""
    return value is None or value < band_min * (1 - BELOW_MARGIN)


@dataclass(frozen=True)
class SpeedJudgment:
    regression: bool
    why: str


def speed_regression(samples: Sequence[dict], *, k: int) -> SpeedJudgment:
    """The stated test over the speed waves, oldest first: a regression only when the last K (`watch.speed_samples`)
    all fell below the stored band's minimum for the same cell (`below_band`); fewer than K, or any within the band,
    is none. If nothing changed, a wave is the slowest of n + 1 exchangeable samples (the band's n trials and it)
    with chance 1/(n + 1), so K in a row below the minimum come by chance with at most (1/(n + 1))^K: 1/64 for
    n = 3, K = 3, less with the margin (docs/decisions.md). One wave is never a regression."""
    last = list(samples)[-k:]
    if len(last) < k:
        return SpeedJudgment(False, f"{len(last)} of the {k} waves the test needs")
    below = [s for s in last if s.get("below")]
    if len(below) == k:
        figures = ", ".join(f"{s['stream_decode_tok_s']:g}" for s in last)
        return SpeedJudgment(
            True,
            f"the last {k} speed waves ({figures} tok/s) all fell more than {BELOW_MARGIN:.0%} below the band's "
            f"minimum {last[-1]['band_min']:g} tok/s (chance under no change: under "
            f"1/{(last[-1].get('band_trials', 3) + 1) ** k})",
        )
    return SpeedJudgment(False, f"{len(below)} of the last {k} waves below the band's minimum")


def availability(records: Iterable[dict]) -> Optional[float]:
    """The share of rounds in which a client was served (None for no rounds)."""
    rounds = [bool(r.get("served")) for r in records]
    return sum(rounds) / len(rounds) if rounds else None
