"""How much streaming the twin's vLLM server sustains on this machine, checked against its own truth.

Starts `python -m lanebook.twin.vllm serve` in pace mode (every stream at a fixed token rate, the
engine model bypassed), opens N concurrent streams with httpx, and prints the streams, the total
tokens/s the client measured, and the client's error against the server's truth (GET /twin/requests:
when the server emitted each stream's first and last tokens). Figures are this machine's, printed,
never asserted. The house target: 64 streams and at least 20,000 tokens/s.

    .venv/bin/python benchmarks/twin_server_throughput.py [--streams 64] [--pace-tok-s 400] [--tokens 2400]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from lanebook.twin.vllm import start_local


async def one_stream(client: httpx.AsyncClient, url: str, index: int, max_tokens: int) -> dict:
    """One streamed request; times are the client's arrival of the first and last content chunks."""
    body = {
        "model": "twin-bench",
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": f"[bench {index}] Explain the lane's runbook in detail."}],
    }
    record = {"t_sent": time.time(), "t_first": None, "t_last": None, "completion_tokens": None}
    async with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                record["completion_tokens"] = event["usage"]["completion_tokens"]
            choices = event.get("choices") or []
            if choices and choices[0].get("delta", {}).get("content"):
                record["t_last"] = time.time()
                record["t_first"] = record["t_first"] or record["t_last"]
    return record


def totals(records: list[dict]) -> tuple[float, float]:
    """Total tokens/s over the run's wall, and the mean per-stream decode rate (ARCHITECTURE.md, "Speed figures")."""
    wall = max(r["t_last"] for r in records) - min(r["t_sent"] for r in records)
    tokens = sum(r["completion_tokens"] for r in records)
    streams = [(r["completion_tokens"] - 1) / (r["t_last"] - r["t_first"]) for r in records]
    return tokens / wall, statistics.fmean(streams)


async def run(url: str, streams: int, max_tokens: int) -> list[dict]:
    limits = httpx.Limits(max_connections=streams + 2, max_keepalive_connections=streams + 2)
    async with httpx.AsyncClient(timeout=60, limits=limits, trust_env=False) as client:
        return await asyncio.gather(
            *(one_stream(client, f"{url}/v1/chat/completions", i, max_tokens) for i in range(streams))
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--pace-tok-s", type=float, default=400.0)
    parser.add_argument("--tokens-per-chunk", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=2400, help="max_tokens of each stream")
    opts = parser.parse_args()
    env = {
        "LANEBOOK_TWIN_PACE_TOK_S": str(opts.pace_tok_s),
        "LANEBOOK_TWIN_TOKENS_PER_CHUNK": str(opts.tokens_per_chunk),
        "LANEBOOK_TWIN_TIME_SCALE": "0.001",
    }
    with tempfile.TemporaryDirectory() as tmp:
        server = start_local(
            ["twin-bench", "--max-num-seqs", "1024", "--disable-uvicorn-access-log"],
            Path(tmp) / "vllm.log",
            host="127.0.0.61",
            env=env,
        )
        try:
            httpx.delete(f"{server.url}/twin/requests")
            records = asyncio.run(run(server.url, opts.streams, opts.tokens))
            truth = httpx.get(f"{server.url}/twin/requests").json()["requests"]
        finally:
            server.stop()
    failed = [r for r in records if r["completion_tokens"] is None or r["t_first"] is None]
    if failed or len(truth) != len(records):
        print(f"FAILED: {len(failed)} streams without usage or content; server recorded {len(truth)} of {len(records)}")
        return 1
    client_tok_s, client_stream = totals(records)
    truth_tok_s, truth_stream = totals(truth)
    print("twin server throughput (pace mode; this machine's figures, twin server)")
    print(f"  concurrent streams          {len(records)}")
    print(f"  tokens per stream           {records[0]['completion_tokens']}")
    print(f"  pace per stream             {opts.pace_tok_s:.0f} tok/s, {opts.tokens_per_chunk} tokens a chunk")
    print(f"  total tok/s (client)        {client_tok_s:,.0f}")
    print(f"  total tok/s (server truth)  {truth_tok_s:,.0f}")
    print(
        f"  client error vs truth       {100 * (client_tok_s / truth_tok_s - 1):+.2f}% total, "
        f"{100 * (client_stream / truth_stream - 1):+.2f}% mean stream rate"
    )
    print(f"  target >= 20,000 tok/s      {'met' if client_tok_s >= 20_000 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
