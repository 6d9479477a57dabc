"""How exact and how cheap is `lanebook speed`? Measured against a server whose own record is the truth.

The server (benchmarks/sse_server.py, loopback) streams on a known schedule and logs, per request,
when it wrote the first and last content chunk. Each measurement runs a client in a subprocess and
compares its figures with that log:

- error of mean stream decode (and of wall aggregate) at seed 003's C1/C4/C6 rates and at 64 streams x 400 tok/s;
- at every configuration, a plain httpx probe beside lanebook (httpx's default async client, one
  perf_counter reading per SSE line as aiter_lines hands it over, the same figure definitions), so
  the two errors and CPU costs come from the same run; 64 x 400 is then printed as one table;
- a ramp of 64 streams at rising rates: the highest aggregate it measures within 1%;
- each client's CPU seconds (user + sys of the whole process, start-up included) per 1,000 tokens;
- NVIDIA aiperf side by side on the same server and schedule (its own venv under .bench/, a tiny
  local tokenizer in HF-cache layout, HF_HUB_OFFLINE=1): its per-user output rate, which NOTES says
  equals lanebook's stream decode rate (ARCHITECTURE.md, "Speed figures"), against the same truth, and its CPU per 1,000
  tokens.

    .venv/bin/python benchmarks/speed_accuracy.py            # everything (~5 min; first run installs aiperf)
    .venv/bin/python benchmarks/speed_accuracy.py --no-aiperf [--no-ramp]
    .venv/bin/python benchmarks/speed_accuracy.py --no-aiperf --no-ramp --only-heavy \
        --heavy-max-tokens 128,256,512 [--hog]

--hog keeps one core busy with a spinning process beside the clients (a slower machine: the client falls behind at
the burst and some streams' first content chunk arrives merged with the next; lanebook counts those edges).

Goals: error <= 0.5% at every configuration and within +/-0.25% at 64 x 400, below the plain probe's;
>= 50,000 tok/s measured within 1%; aiperf at most as accurate and more costly. Figures printed are
measured on this machine in this run; nothing is carried over.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import httpx
from sse_server import spawn

REPO = Path(__file__).resolve().parents[1]
BENCH_DIR = REPO / ".bench"
AIPERF_VENV = BENCH_DIR / "aiperf-venv"
HF_HOME = BENCH_DIR / "hf-home"
TOKENIZER = "lanebook/tiny-wordlevel"
SEED_003 = [(1, 82.8), (4, 59.1), (6, 42.5)]  # per-stream decode rates of seed 003's table
TOKENS_PER_CHUNK = 3  # about what K=5 speculative decoding hands out per chunk
HEAVY = (64, 400.0)  # streams x tok/s: 64 first chunks land together, the case where loop lag shows
ACCURACY_GOAL = 0.0025  # lanebook's mean stream decode within +/-0.25% of the truth at HEAVY


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Truth:
    """The server's own figures for one wave (the speed figures' definitions, server-side times)."""

    mean_stream_decode_tok_s: float
    wall_aggregate_tok_s: float
    tokens: int
    rates: dict[str, float]  # each stream's rate by its prompt's tag ("[run-t1-c64-0]"), where it has one

    def mean_over(self, tags: list[str]) -> float:
        """The mean stream decode over the streams with these tags: the truth of a figure taken over them."""
        return statistics.fmean(self.rates[tag] for tag in tags)


def prompt_tag(prompt: str) -> str:
    """The unique tag lanebook puts first in every prompt (speed.workloads), as logged by the server."""
    return prompt.split("]", 1)[0] + "]" if prompt.startswith("[") else prompt


def truth_waves(records: list[dict], concurrency: int) -> list[Truth]:
    """Split the server's log into sequential waves of `concurrency` requests (by start time)."""
    records = sorted(records, key=lambda r: r["t_start"])
    waves = []
    for i in range(0, len(records), concurrency):
        wave = records[i : i + concurrency]
        rates = [(r["completion_tokens"] - 1) / (r["t_last"] - r["t_first"]) for r in wave]
        wall = max(r["t_end"] for r in wave) - min(r["t_start"] for r in wave)
        decode = sum(r["completion_tokens"] - 1 for r in wave)
        tokens = sum(r["completion_tokens"] for r in wave)
        by_tag = {prompt_tag(r["prompt"]): rate for r, rate in zip(wave, rates)}
        waves.append(Truth(statistics.fmean(rates), decode / wall, tokens, by_tag))
    return waves


class Server:
    def __init__(self):
        self.proc, self.url = spawn("--tokens-per-chunk", str(TOKENS_PER_CHUNK))
        self.http = httpx.Client(trust_env=False, timeout=30)

    def configure(self, pace_tok_s: float) -> None:
        self.http.post(
            f"{self.url}/bench/config", json={"pace_tok_s": pace_tok_s, "tokens_per_chunk": TOKENS_PER_CHUNK}
        )

    def clear(self) -> None:
        self.http.delete(f"{self.url}/bench/truth")

    def truth(self) -> list[dict]:
        return self.http.get(f"{self.url}/bench/truth").json()["requests"]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@dataclass
class Measured:
    tool: str
    concurrency: int
    pace: float
    stream_errors: list[float]  # per wave: measured mean stream decode / truth (over the same streams) - 1
    aggregate_errors: list[float]
    measured_aggregate: float  # median over waves, tok/s
    cpu_s: float  # user + sys of every client process, start-up included
    tokens: int  # tokens streamed (server count)
    processes: int
    max_tokens: int = 0
    edges: tuple[int, int] = (0, 0)  # lanebook's streams with both edges exact / a first edge merged (all waves)
    all_stream_errors: Optional[list[float]] = None  # lanebook: against the truth over all the wave's streams
    no_figure: int = 0  # waves without a stream figure (lanebook: no stream's first edge exact)

    @property
    def cpu_per_1k_tokens(self) -> float:
        return self.cpu_s / self.tokens * 1000

    def steady_cpu(self, start_up_cpu_s: float) -> str:
        """ms of CPU per 1,000 tokens once each process's fixed start-up cost is taken out, when that
        leaves a figure (short runs are all start-up, within the start-up's own variation)."""
        steady = self.cpu_s - self.processes * start_up_cpu_s
        if steady < 0.2 * self.cpu_s:
            return "start-up dominates"
        return f"{steady / self.tokens * 1e6:,.1f} ms without start-up"

    @property
    def worst_stream(self) -> float:
        return max(self.stream_errors, key=abs) if self.stream_errors else float("nan")

    @property
    def worst_aggregate(self) -> float:
        return max(self.aggregate_errors, key=abs) if self.aggregate_errors else float("nan")


def run_client(tool: str, argv: list[str], server: Server, concurrency: int, pace: float, max_tokens: int) -> Measured:
    """Run one client process that writes {"runs": [...]} (the run objects of `lanebook speed --json`) and compare each
    run with the server's truth for the same wave."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "speed.json"
        before = children_cpu_s()
        done = subprocess.run([*argv, str(out)], capture_output=True, text=True, env={**os.environ, "COLUMNS": "120"})
        cpu = children_cpu_s() - before
        if done.returncode != 0:
            raise SystemExit(f"{tool} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        runs = json.loads(out.read_text())["runs"]
    truths = truth_waves(server.truth(), concurrency)
    # lanebook leaves out streams whose first edge it could not stamp exactly: its figure's truth is the mean over
    # the streams it kept (window_tags); a plain client's is over all of them. A wave with none kept has no figure.
    pairs = [(r, t) for r, t in zip(runs, truths) if r["mean_stream_decode_tok_s"] is not None]
    matched = [t.mean_over(r["window_tags"]) if "window_tags" in r else t.mean_stream_decode_tok_s for r, t in pairs]
    return Measured(
        tool,
        concurrency,
        pace,
        [r["mean_stream_decode_tok_s"] / m - 1 for (r, _), m in zip(pairs, matched)],
        [r["wall_aggregate_tok_s"] / t.wall_aggregate_tok_s - 1 for r, t in zip(runs, truths)],
        statistics.median(r["wall_aggregate_tok_s"] for r in runs),
        cpu,
        sum(t.tokens for t in truths),
        1,
        max_tokens,
        (sum(r.get("edges_exact", 0) for r in runs), sum(r.get("edges_merged", 0) for r in runs)),
        [r["mean_stream_decode_tok_s"] / t.mean_stream_decode_tok_s - 1 for r, t in pairs]
        if any("window_tags" in r for r in runs)
        else None,
        len(runs) - len(pairs),
    )


def run_lanebook(server: Server, concurrency: int, pace: float, max_tokens: int, trials: int) -> Measured:
    """`lanebook speed`'s library call in its own process (see lanebook_probe)."""
    server.configure(pace)
    server.clear()
    argv = [
        sys.executable,
        __file__,
        "--lanebook-probe",
        f"{server.url}/v1",
        str(concurrency),
        str(max_tokens),
        str(trials),
    ]
    return run_client("lanebook", argv, server, concurrency, pace, max_tokens)


def lanebook_probe(api: str, concurrency: int, max_tokens: int, trials: int, out: str) -> None:
    """What `lanebook speed --api API --model bench-model --json OUT` runs (run_speed: waves, progress, figures),
    the prompts' run id fixed so each run can name the streams its stream figure was taken over (window_tags),
    which the server's truth is then taken over too."""
    import io
    import types

    from lanebook.speed import client
    from lanebook.speed.command import run_speed
    from lanebook.speed.metrics import window_requests
    from rich.console import Console

    client.secrets = types.SimpleNamespace(token_hex=lambda n: "bench")  # Plan's run id: the prompts' tags known
    console = Console(file=io.StringIO())
    result = run_speed(api, "bench-model", "count", [concurrency], trials, max_tokens, console=console)
    doc = result.document()
    for run, wave in zip(doc["runs"], result.waves):
        run["window_tags"] = [f"[bench-t{wave.trial}-c{wave.concurrency}-{r.index}]" for r in window_requests(wave)]
    Path(out).write_text(json.dumps(doc))


def run_httpx(server: Server, concurrency: int, pace: float, max_tokens: int, trials: int) -> Measured:
    """The plain probe anyone would write, in its own process like the others (see httpx_probe)."""
    server.configure(pace)
    server.clear()
    argv = [sys.executable, __file__, "--httpx-probe", server.url, str(concurrency), str(max_tokens), str(trials)]
    return run_client("httpx", argv, server, concurrency, pace, max_tokens)


async def _httpx_probe_wave(client: httpx.AsyncClient, url: str, concurrency: int, max_tokens: int, tag: str) -> dict:
    async def one(i: int) -> tuple[float, float, float, float, int]:
        body = {
            "model": "bench-model",
            "messages": [{"role": "user", "content": f"count {tag}-{i}"}],
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        t_first = t_last = tokens = None
        t_sent = time.perf_counter()
        async with client.stream("POST", url, json=body) as response:
            async for text in response.aiter_lines():
                t = time.perf_counter()
                if not text.startswith("data:") or text[5:].strip() == "[DONE]":
                    continue
                event = json.loads(text[5:])
                if event.get("usage"):
                    tokens = event["usage"]["completion_tokens"]
                choices = event.get("choices") or [{}]
                if (choices[0].get("delta") or {}).get("content"):
                    t_first = t if t_first is None else t_first
                    t_last = t
        return t_sent, t_first, t_last, time.perf_counter(), tokens

    streams = await asyncio.gather(*(one(i) for i in range(concurrency)))
    decode = [tokens - 1 for _, _, _, _, tokens in streams]
    wall = max(s[3] for s in streams) - min(s[0] for s in streams)
    return {
        "mean_stream_decode_tok_s": statistics.fmean(d / (s[2] - s[1]) for d, s in zip(decode, streams)),
        "wall_aggregate_tok_s": sum(decode) / wall,
    }


def httpx_probe(base_url: str, concurrency: int, max_tokens: int, trials: int, out: str) -> None:
    """A plain measurement: httpx's default async client, asyncio's default loop, one perf_counter
    reading per SSE line as aiter_lines hands it over; the same definitions as lanebook's figures."""

    async def waves() -> list[dict]:
        async with httpx.AsyncClient(
            trust_env=False, timeout=httpx.Timeout(300.0), limits=httpx.Limits(max_connections=None)
        ) as client:
            return [
                await _httpx_probe_wave(
                    client, f"{base_url}/v1/chat/completions", concurrency, max_tokens, f"probe-t{trial}"
                )
                for trial in range(trials)
            ]

    Path(out).write_text(json.dumps({"runs": asyncio.run(waves())}))


def build_tokenizer() -> None:
    """A word-level tokenizer laid out as the HF cache lays a repo (aiperf refuses a plain local path offline)."""
    script = f"""
import json
from pathlib import Path
from tokenizers import Tokenizer, models, pre_tokenizers
rev = "0" * 40
repo = Path({str(HF_HOME)!r}) / "hub" / "models--{TOKENIZER.replace("/", "--")}"
snap = repo / "snapshots" / rev
snap.mkdir(parents=True, exist_ok=True)
words = ["[UNK]", "[PAD]", "tok", "the", "a", "of", "and", "to", "in", "is", "it", "that"]
tok = Tokenizer(models.WordLevel({{w: i for i, w in enumerate(words)}}, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
tok.save(str(snap / "tokenizer.json"))
(snap / "tokenizer_config.json").write_text(json.dumps({{"tokenizer_class": "PreTrainedTokenizerFast",
    "unk_token": "[UNK]", "pad_token": "[PAD]", "model_max_length": 1000000}}))
(snap / "config.json").write_text(json.dumps({{"model_type": "gpt2", "vocab_size": len(words),
    "bos_token_id": None, "eos_token_id": None}}))
(repo / "refs").mkdir(exist_ok=True)
(repo / "refs" / "main").write_text(rev)
"""
    subprocess.run([str(AIPERF_VENV / "bin" / "python"), "-c", script], check=True)


def ensure_aiperf() -> str | None:
    """aiperf in its own venv (never in requirements.txt); returns why not when it cannot be had."""
    aiperf = AIPERF_VENV / "bin" / "aiperf"
    if not aiperf.exists():
        print("installing aiperf into .bench/aiperf-venv (once; about 1 GB)...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(AIPERF_VENV)], check=True)
        pip = subprocess.run(
            [str(AIPERF_VENV / "bin" / "pip"), "install", "-q", "aiperf"], capture_output=True, text=True
        )
        if pip.returncode != 0:
            return f"pip install aiperf failed: {pip.stderr.strip().splitlines()[-1:]}"
    build_tokenizer()
    return None


def run_aiperf(server: Server, concurrency: int, pace: float, max_tokens: int, trials: int) -> Measured:
    """aiperf on the same schedule: one wave of `concurrency` requests per trial, server token counts."""
    server.configure(pace)
    stream_errors, measured_aggregates = [], []
    cpu, tokens = 0.0, 0
    for _ in range(trials):
        server.clear()
        with tempfile.TemporaryDirectory() as tmp:
            before = children_cpu_s()
            done = subprocess.run(
                [
                    str(AIPERF_VENV / "bin" / "aiperf"),
                    "profile",
                    "--model",
                    "bench-model",
                    "--tokenizer",
                    TOKENIZER,
                    "--url",
                    server.url,
                    "--endpoint-type",
                    "chat",
                    "--streaming",
                    "--concurrency",
                    str(concurrency),
                    "--request-count",
                    str(concurrency),
                    "--prompt-input-tokens-mean",
                    "100",
                    "--prompt-output-tokens-mean",
                    str(max_tokens),
                    "--prompt-output-tokens-stddev",
                    "0",
                    "--use-server-token-count",
                    "--ui-type",
                    "none",
                    "--no-server-metrics",
                    "--no-gpu-telemetry",
                    "--output-artifact-dir",
                    tmp,
                ],
                capture_output=True,
                text=True,
                cwd=tmp,
                env={**os.environ, "HF_HOME": str(HF_HOME), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
            )
            cpu += children_cpu_s() - before
            export = Path(tmp) / "profile_export_aiperf.json"
            if done.returncode != 0 or not export.exists():
                raise RuntimeError(f"aiperf failed ({done.returncode}): {(done.stdout + done.stderr)[-1500:]}")
            result = json.loads(export.read_text())
        [truth] = truth_waves(server.truth(), concurrency)
        tokens += truth.tokens
        stream_errors.append(result["output_token_throughput_per_user"]["avg"] / truth.mean_stream_decode_tok_s - 1)
        measured_aggregates.append(result["output_token_throughput"]["avg"])
    # aiperf's output throughput counts every output token over its benchmark duration: not SPEC's
    # decode aggregate, so no aggregate error is claimed for it.
    return Measured(
        "aiperf",
        concurrency,
        pace,
        stream_errors,
        [],
        statistics.median(measured_aggregates),
        cpu,
        tokens,
        trials,
        max_tokens,
    )


def line(m: Measured, start_up: dict[str, float]) -> str:
    aggregate = "" if not m.aggregate_errors else f", aggregate err worst {m.worst_aggregate:+.3%}"
    waves = " ".join(f"{e:+.3%}" for e in m.stream_errors) + (f", {m.no_figure} without a figure" * bool(m.no_figure))
    edges = f"; edges exact {m.edges[0]}, merged {m.edges[1]}" if m.tool == "lanebook" else ""
    if m.all_stream_errors is not None:
        edges += " (vs all streams' truth: " + " ".join(f"{e:+.3%}" for e in m.all_stream_errors) + ")"
    return (
        f"  {m.tool:8s} C{m.concurrency:<3d} x {m.pace:6.1f} tok/s, {m.max_tokens} tok: stream err worst "
        f"{m.worst_stream:+.3%} (waves {waves}){aggregate}{edges}; "
        f"measured {m.measured_aggregate:,.0f} tok/s; CPU per 1k tok {m.cpu_per_1k_tokens * 1000:,.1f} ms "
        f"({m.steady_cpu(start_up[m.tool])})"
    )


def side_by_side(
    results: list[Measured], start_up: dict[str, float], concurrency: int, pace: float, max_tokens: int
) -> None:
    """The 64 x 400 comparison as one table: every client on the same server, schedule and run."""
    rows = [m for m in results if (m.concurrency, m.pace, m.max_tokens) == (concurrency, pace, max_tokens)]
    print(
        f"\n  {concurrency} x {pace:g} tok/s, {max_tokens}-token streams side by side "
        "(mean stream decode vs the server's truth, per wave):"
    )
    print(f"    {'client':9s} {'worst':>9s} {'mean':>9s} {'waves':>5s}  {'CPU/1k tok':>10s}  without start-up")
    for m in rows:
        print(
            f"    {m.tool:9s} {m.worst_stream:+9.3%} {statistics.fmean(m.stream_errors or [float('nan')]):+9.3%} "
            f"{len(m.stream_errors):5d}  "
            f"{m.cpu_per_1k_tokens * 1000:7,.1f} ms  {m.steady_cpu(start_up[m.tool])}"
        )
    ours = next(m for m in rows if m.tool == "lanebook")
    within = abs(ours.worst_stream) <= ACCURACY_GOAL
    print(f"    lanebook within +/-{ACCURACY_GOAL:.2%} on every wave: {'yes' if within else 'NO'}")
    for other in (m for m in rows if m.tool != "lanebook"):
        below = abs(ours.worst_stream) < abs(other.worst_stream)
        print(f"    lanebook's worst error below {other.tool}'s: {'yes' if below else 'NO'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-aiperf", action="store_true", help="skip the aiperf side-by-side")
    parser.add_argument("--no-ramp", action="store_true", help="skip the 64-stream ramp")
    parser.add_argument("--trials", type=int, default=3, help="waves per configuration")
    parser.add_argument("--ramp-from", type=float, default=400.0, help="first per-stream rate of the 64-stream ramp")
    parser.add_argument("--ramp-to", type=float, default=12800.0, help="highest per-stream rate tried (rates double)")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each ramp stream")
    parser.add_argument(
        "--heavy-max-tokens",
        default="2000",
        help="stream lengths of the 64 x 400 configuration, comma-separated (one configuration each)",
    )
    parser.add_argument("--only-heavy", action="store_true", help="skip the seed 003 C1/C4/C6 configurations")
    parser.add_argument("--hog", action="store_true", help="keep one core busy beside the clients (a slower machine)")
    parser.add_argument(
        "--httpx-probe", nargs=5, metavar=("URL", "C", "MAX_TOKENS", "TRIALS", "OUT"), help=argparse.SUPPRESS
    )  # the probe's own process, started by run_httpx
    parser.add_argument(
        "--lanebook-probe", nargs=5, metavar=("API", "C", "MAX_TOKENS", "TRIALS", "OUT"), help=argparse.SUPPRESS
    )  # lanebook's own process, started by run_lanebook
    args = parser.parse_args()
    if args.httpx_probe:
        url, concurrency, max_tokens, trials, out = args.httpx_probe
        httpx_probe(url, int(concurrency), int(max_tokens), int(trials), out)
        return 0
    if args.lanebook_probe:
        api, concurrency, max_tokens, trials, out = args.lanebook_probe
        lanebook_probe(api, int(concurrency), int(max_tokens), int(trials), out)
        return 0
    try:
        heavy_tokens = [int(n) for n in args.heavy_max_tokens.split(",")]
    except ValueError:
        parser.error(f"--heavy-max-tokens takes comma-separated integers, not {args.heavy_max_tokens!r}")

    print(
        f"speed accuracy on {os.cpu_count()} cores: loopback server, {TOKENS_PER_CHUNK} tokens per chunk; "
        "truth = the server's own first/last content-chunk writes; load average %.2f %.2f %.2f\n" % os.getloadavg(),
        flush=True,
    )
    why_no_aiperf = "skipped (--no-aiperf)" if args.no_aiperf else ensure_aiperf()
    runners = {"lanebook": run_lanebook, "httpx": run_httpx, **({} if why_no_aiperf else {"aiperf": run_aiperf})}
    server = Server()
    results: list[Measured] = []
    best, limit = None, "skipped (--no-ramp)"
    hog = None
    if args.hog:
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        print(f"CPU hog beside the clients: pid {hog.pid}, one core spinning\n", flush=True)
    try:
        # An 8-token run is nearly all fixed cost: interpreter start, imports, connection, report, exit.
        start_up = {tool: runner(server, 1, 200.0, 8, 1).cpu_s for tool, runner in runners.items()}
        print("fixed CPU per client process: " + ", ".join(f"{t} {c:.2f} s" for t, c in start_up.items()) + "\n")
        configs = (
            [] if args.only_heavy else [("seed 003 schedule, 256-token streams", c, pace, 256) for c, pace in SEED_003]
        )
        configs += [(f"64 streams x 400 tok/s, {n:,}-token streams", *HEAVY, n) for n in heavy_tokens]
        for title, concurrency, pace, max_tokens in configs:
            print(f"{title}:")
            for runner in runners.values():
                results.append(runner(server, concurrency, pace, max_tokens, args.trials))
                print(line(results[-1], start_up), flush=True)
        if not args.no_ramp:
            print(f"\nramp, 64 streams of {args.seconds:g} s, rates doubling (lanebook):")
            # Rates double until the harness errs by more than 1%, or the server no longer keeps its
            # schedule (then the limit found is the server's on these cores, not the harness's).
            limit = f"every level up to 64 x {args.ramp_to:g} tok/s passed: the limit is higher"
            pace = args.ramp_from
            while pace <= args.ramp_to:
                m = run_lanebook(server, 64, pace, int(pace * args.seconds), args.trials)
                print(line(m, start_up), flush=True)
                if abs(m.worst_stream) > 0.01 or abs(m.worst_aggregate) > 0.01:
                    limit = f"the harness erred by more than 1% at 64 x {pace:g} tok/s"
                    break
                best = m
                if m.measured_aggregate < 0.9 * 64 * pace:
                    limit = (
                        f"the server could not keep 64 x {pace:g} tok/s on these cores "
                        "(the harness was still within 1%)"
                    )
                    break
                pace *= 2
    finally:
        server.close()
        if hog is not None:
            hog.terminate()
            hog.wait(10)

    print("\nsummary (this machine, this run; load average %.2f %.2f %.2f)" % os.getloadavg())
    ours = [m for m in results if m.tool == "lanebook"]
    worst = max((m.worst_stream for m in ours), key=abs)
    print(f"  lanebook worst mean-stream-decode error over C1/C4/C6 and 64x400: {worst:+.3%} (goal <= 0.5%)")
    for n in heavy_tokens:
        side_by_side(results, start_up, *HEAVY, n)
    if best:
        print(
            f"\n  lanebook highest aggregate measured within 1%: {best.measured_aggregate:,.0f} tok/s at 64 x "
            f"{best.pace:g} "
            f"tok/s; CPU {best.cpu_per_1k_tokens * 1000:.1f} ms per 1,000 tokens "
            f"({best.steady_cpu(start_up['lanebook'])}) (goal >= 50,000); ramp stopped: {limit}"
        )
    elif not args.no_ramp:
        print("\n  lanebook: no ramp level was measured within 1%")
    if why_no_aiperf:
        print(f"  aiperf: {why_no_aiperf}")
        return 0
    for concurrency, max_tokens in sorted({(m.concurrency, m.max_tokens) for m in results}):
        pair = {m.tool: m for m in results if (m.concurrency, m.max_tokens) == (concurrency, max_tokens)}
        a, b = pair["lanebook"], pair["aiperf"]
        print(
            f"  C{concurrency:<3d} stream error lanebook {a.worst_stream:+.3%} vs aiperf {b.worst_stream:+.3%}; "
            f"CPU per 1k tokens lanebook {a.cpu_per_1k_tokens * 1000:,.1f} ms vs aiperf "
            f"{b.cpu_per_1k_tokens * 1000:,.1f} ms "
            f"(lanebook {a.steady_cpu(start_up['lanebook'])}; aiperf {b.steady_cpu(start_up['aiperf'])})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
