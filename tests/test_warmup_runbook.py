"""The warmup runbook end to end. A dry run on the real lane lists every request and log scan it would make and opens
no connection; papermill on anemll-1m6 in dry run plans its fixed-K shapes. On the session twin, a lane whose
checkout's launcher did not warm it (its own hook switched off in the node's .env.dspark, as a checkout without the
hook would be) is warmed by bare `papermill runbooks/warmup.ipynb`: the first C4 and C6 waves stall on the twin's
JIT, the first request of each warmed shape does not, the queues read idle before and after, and no rank's log holds a
fatal line. One twin run, shared by the assertions."""

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from helpers.lanebook_runs import dry_run_offline
from lanebook.base.paths import RUNBOOKS_DIR
from lanebook.lane.params import load_lane
from lanebook.nodes import ssh
from lanebook.nodes.prometheus import server_root
from lanebook.ops import launcher
from lanebook.runs.execute import read_verdict

PAPERMILL = str(Path(sys.executable).parent / "papermill")
GREP = (
    "docker logs ds4-f-mia-anemll-0731-vllm-dspark-1 2>&1 | grep -E 'CUDA error|out of memory|NCCL error|"
    "EngineDeadError|EngineCore encountered a fatal error|died unexpectedly|is preempted by PreemptionMode|"
    "Fatal Python error|No such container'"
)


def papermill(out: Path, *params: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [PAPERMILL, str(RUNBOOKS_DIR / "warmup.ipynb"), str(out), *params], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_a_dry_run_on_the_real_lane_lists_the_requests_and_opens_no_connection(tmp_path):
    record, done = dry_run_offline(tmp_path, "warmup")
    assert record["verdict"] == "dry-run" and record["failed_step"] is None and record["figures"] == {}
    lines = [line.strip() for line in done.stdout.splitlines()]
    posts = [line for line in lines if "POST http://192.168.1.11:8888/v1/chat/completions" in line]
    assert [line.split(":")[1].strip() for line in posts] == [
        "warmup bounded prefill, first use",
        "warmup C4 (K4), first use",
        "warmup C6 (K3), first use",
        "warmup bounded prefill, warmed",
        "warmup C4 (K4), warmed",
        "warmup C6 (K3), warmed",
    ]
    idle = lines.index(
        "local: warmup, before: GET http://192.168.1.11:8888/metrics until vllm:num_requests_running "
        "and vllm:num_requests_waiting read 0, bound 120 s"
    )
    assert idle < lines.index(posts[0]) and lines.index(f"head: {GREP}") < lines.index(f"worker: {GREP}")
    assert lines.index(posts[-1]) < lines.index(f"head: {GREP}")  # the logs are read after the warmup


def test_papermill_dry_run_on_the_fixed_k_lane(tmp_path):
    out = tmp_path / "warmup-1m6.ipynb"
    papermill(out, "-p", "lane", "anemll-1m6", "-p", "dry_run", "True")
    verdict = read_verdict(out)
    assert verdict["verdict"] == "dry-run" and verdict["figures"] == {}
    assert any(
        "warmup C6 (K5), warmed: POST http://192.168.1.11:8888/v1/chat/completions ×6" in c for c in verdict["commands"]
    )
    assert {c["outcome"] for c in verdict["checks"]} == {"not observed"}


@pytest.fixture(scope="module")
def cold_lane_warmed(twin, tmp_path_factory):
    """The twin lane relaunched with its checkout's own warmup hook off, then bare papermill of the warmup runbook:
    (the verdict emitted, the twin server's truth of the warmup's requests, the launcher's output)."""
    params = load_lane("twin")
    env_file = f"{params.checkout.removeprefix('~/')}/.env.dspark"
    api_root = server_root(params.api)
    out = tmp_path_factory.mktemp("warmup") / "warmup.ipynb"
    with ssh.LaneNodes(params) as nodes:
        original = nodes.head.run(f"cat {env_file}").stdout
        assert "POST_READINESS_WARMUP_ENABLED=1" in original.splitlines()
        launcher.stop_lane(nodes)
        nodes.head.run(f"sed -i 's/^POST_READINESS_WARMUP_ENABLED=1$/POST_READINESS_WARMUP_ENABLED=0/' {env_file}")
        try:
            started = launcher.start_lane(nodes)
            assert started.ok, started.output[-2000:]
            httpx.delete(f"{api_root}/twin/requests")
            papermill(out)  # no parameters: the twin lane
            sent = sorted(httpx.get(f"{api_root}/twin/requests").json()["requests"], key=lambda r: r["t_sent"])
        finally:
            restore = out.parent / ".env.dspark"
            restore.write_text(original)
            nodes.head.put(restore, env_file)
    return read_verdict(out), sent, started.output


def test_the_launchers_hook_was_off_so_the_lane_was_cold(cold_lane_warmed):
    _, _, launched = cold_lane_warmed
    assert "Post-readiness warmup: SKIPPED (POST_READINESS_WARMUP_ENABLED=0)" in launched


def test_the_warmup_passes_with_idle_queues_and_clean_logs(cold_lane_warmed):
    verdict, _, _ = cold_lane_warmed
    assert verdict["verdict"] == "pass" and verdict["twin"] is True
    checks = {c["what"]: (c["step"], c["outcome"]) for c in verdict["checks"]}
    assert checks["queues idle before the warmup (running 0, waiting 0)"] == ("1 warmup", "pass")
    assert checks["queues idle after the warmup (they drained)"] == ("1 warmup", "pass")
    assert checks["/health answers 200 after the warmup (the engine is alive)"] == ("2 lane after the warmup", "pass")
    logs = [what for what in checks if what.startswith("no fatal runtime error in ")]
    assert [w.split("'")[0] for w in logs] == ["no fatal runtime error in head", "no fatal runtime error in worker"]
    assert all(checks[w] == ("2 lane after the warmup", "pass") for w in logs)
    figures = verdict["figures"]
    assert figures["warmup_warnings"] == [] and figures["warmup_preemptions"] == 0
    assert set(figures["warmup_shapes"]) == {"bounded prefill", "C4 (K4)", "C6 (K3)"}


def test_each_first_use_stalled_and_each_warmed_shape_did_not(cold_lane_warmed):
    verdict, sent, _ = cold_lane_warmed
    assert len(sent) == 2 * (1 + 4 + 6)
    first_use, warmed = sent[:11], sent[11:]
    shapes = verdict["figures"]["warmup_shapes"]
    for label, requests in {"C4 (K4)": first_use[1:5], "C6 (K3)": first_use[5:]}.items():
        stalled = max(r["jit_s"] for r in requests)
        assert stalled > 0, label  # the twin compiled the shape on its first use
        # The server slept that stall inside the wave (its engine steps at deadlines that include it): the server's
        # own span of the wave and the wave's wall time as the runbook recorded it both hold it whole. Read from the
        # server's truth, not from two wall times compared under whatever load the machine has.
        assert max(r["t_last"] for r in requests) - min(r["t_sent"] for r in requests) >= stalled, (label, requests)
        assert shapes[label]["first_use_wall_s"] >= stalled and shapes[label]["first_use_stall_s"] is not None, (
            label,
            shapes[label],
        )
    # The launcher's own chat smoke had already prefilled: this lane's compose sets no long-prefill threshold, so
    # every prefill is the one shape, warm before the warmup began (readiness covers it; the decode widths it does not).
    assert first_use[0]["jit_s"] == 0.0 and first_use[0]["prompt_tokens"] > 4096
    assert [r["jit_s"] for r in warmed] == [0.0] * 11
