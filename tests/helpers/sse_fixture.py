"""The benchmarks' loopback SSE server (benchmarks/sse_server.py) as a test fixture: it streams on a known
schedule and records its own first and last token times, so client figures can be checked against its truth."""

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("sse_server", REPO / "benchmarks" / "sse_server.py")
sse_server = sys.modules.setdefault("sse_server", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(sse_server)


@pytest.fixture(scope="module")
def server():
    """A known-schedule server: 200 tok/s per stream, 4 tokens per chunk, 10 ms to the first token."""
    proc, url = sse_server.spawn("--pace-tok-s", "200", "--tokens-per-chunk", "4", "--ttft-ms", "10")
    yield url
    proc.terminate()
    proc.wait(timeout=10)
