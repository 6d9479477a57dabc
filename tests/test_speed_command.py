"""`lanebook speed` and run_speed against a real loopback SSE server (benchmarks/sse_server.py): the JSON
document, the human tables, exit codes."""

import json
import subprocess
import sys
from pathlib import Path

from helpers.sse_fixture import server, sse_server  # noqa: F401 - the fixture, and the server module
from lanebook.speed import transport
from lanebook.speed.command import print_result, run_speed
from lanebook.speed.records import STAMP_KERNEL, STAMP_LOOP
from rich.console import Console


def printed(result) -> str:
    console = Console(record=True, width=200)
    print_result(result, console)
    return console.export_text()


def test_run_speed_document_and_incomplete_bands(server):
    result = run_speed(f"{server}/v1", "m", "prose", [2], trials=2, max_tokens=21)
    doc = result.document()
    assert list(doc) == [
        "api",
        "model",
        "workload",
        "max_tokens",
        "twin",
        "stamp_source",
        "runs",
        "bands",
        "server_counts",
    ]
    # this server's /metrics has no vllm:generation_tokens_total nor TTFT histogram: lanebook's side only
    assert [
        (c["trial"], c["server_generation_tokens"], c["lanebook_completion_tokens"]) for c in doc["server_counts"]
    ] == [
        (1, None, 42),
        (2, None, 42),
    ]
    assert doc["stamp_source"] == STAMP_KERNEL  # Linux stamps loopback TCP: the kernel's arrival times
    assert [r["trial"] for r in doc["runs"]] == [1, 2]
    band = doc["bands"][0]
    assert band["trials"] == 2 and band["complete"] is False
    assert doc["runs"][0]["decode_tokens"] == 40
    assert "chunk times: the kernel's receive stamps" in printed(result)


def test_a_run_without_kernel_stamps_says_so_in_its_document_and_tables(server, monkeypatch):
    monkeypatch.setattr(transport, "SO_TIMESTAMPNS_NEW", 0x7FFE)  # an option this kernel refuses
    result = run_speed(f"{server}/v1", "m", "count", [1], trials=1, max_tokens=9)
    assert result.errors == 0 and result.document()["stamp_source"] == STAMP_LOOP
    text = printed(result)
    assert "chunk times: when this client read them (no kernel stamps; late when the client is busy)" in text
    assert "note: chunk arrivals are stamped when this process reads them, not by the kernel" in text


def test_cli_speed_writes_json_and_exits_by_errors(server, tmp_path):
    out = tmp_path / "speed.json"
    lanebook = str(Path(sys.executable).with_name("lanebook"))
    done = subprocess.run(
        [
            lanebook,
            "speed",
            "--api",
            f"{server}/v1",
            "--model",
            "m",
            "--concurrency",
            "1,2",
            "--max-tokens",
            "17",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(out.read_text())
    assert [r["concurrency"] for r in doc["runs"]] == [1, 2] and doc["twin"] is False
    assert doc["stamp_source"] == STAMP_KERNEL
    bad = subprocess.run(
        [lanebook, "speed", "--api", f"{server}/v1", "--model", "m", "--workload", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "unknown workload" in bad.stderr and "Traceback" not in bad.stderr
    failing = subprocess.run(
        [lanebook, "speed", "--api", "http://127.0.0.1:9/v1", "--model", "m", "--concurrency", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert failing.returncode == 1 and "1 request(s) failed" in failing.stdout
    assert "no stream was read" in failing.stdout  # a connect failure read no chunk: no stamp source to name
