"""The diagnose runbook end to end. A dry run on the real lane lists the follow-ups' requests and the canary's
commands and opens no connection; a dry run on the preview lane (fixed K=5) skips the K boundary. On the
session twin, after `launch`: no A→B→A eviction, a stable C4↔C5 boundary, and the batch-8216 canary measured,
rejected and restored (the head's env file and the live command carry 8192 again). (With twin fault prefix-evict the
A→B→A step fails naming the eviction: a row of the fault matrix, test_fault_matrix.py.)"""

import subprocess
import sys
from pathlib import Path

import pytest
from helpers.lanebook_runs import dry_run_offline, run
from lanebook.base.paths import RUNBOOKS_DIR
from lanebook.lane.params import load_lane
from lanebook.nodes import ssh
from lanebook.ops import launcher, logs
from lanebook.recipe.effective.mismatches import live_mismatches
from lanebook.runs.execute import read_verdict
from lanebook.twin.timing import prefill_step_s

API = "http://192.168.1.11:8888/v1/chat/completions"
START = (
    "head: cd ~/ds4-f-mia-anemll-0731 && PROJECT_NAME=ds4-f-mia-anemll-0731 WAIT_ATTEMPTS=120 WAIT_SECONDS=15 "
    "./start-deepseek-v4-flash-dspark.sh"
)
STOP = "head: cd ~/ds4-f-mia-anemll-0731 && PROJECT_NAME=ds4-f-mia-anemll-0731 ./stop-deepseek-v4-flash-dspark.sh"
RSYNC = "head: rsync -aH --partial --info=stats2 ~/ds4-f-mia-anemll-0731/ milo@10.0.0.2:ds4-f-mia-anemll-0731/"
CHECKOUT_FILES = (".env.dspark", "docker-compose.dspark.yml")  # what env's render writes in a checkout
# Small, so a twin run takes about a minute and a half: C1 only, short streams, shorter prompts.
SMALL = [
    "-p",
    "canary_concurrency=[1]",
    "-p",
    "canary_max_tokens=64",
    "-p",
    "boundary_max_tokens=64",
    "-p",
    "boundary_short_tokens=16",
    "-p",
    "prefix_lines=120",
]
# The schedule canary at C1 only, where the 5/4/3 schedule verifies K=5 as fixed K does: nothing tells the sides apart,
# so fixed K is restored; then the long-context climb, short.
SCHEDULE_SMALL = [
    "-p",
    "schedule_concurrency=[1]",
    "-p",
    'schedule_workloads=["count"]',
    "-p",
    "schedule_max_tokens=64",
    "-p",
    "long_context=True",
    "-p",
    "long_context_tokens=20000",
]


def test_a_dry_run_on_the_real_lane_lists_requests_and_commands_and_opens_no_connection(tmp_path):
    record, done = dry_run_offline(tmp_path, "diagnose")
    assert record["verdict"] == "dry-run" and record["failed_step"] is None
    lines = [line.strip() for line in done.stdout.splitlines()]
    prefix = [line for line in lines if line.startswith("local: prefix cache ")]
    assert [line.split(":")[1].strip() for line in prefix] == [
        "prefix cache A cold",
        "prefix cache A repeat",
        "prefix cache B cold",
        "prefix cache A again",
    ]
    assert all(
        f"POST {API} stream, max_tokens 16" in line
        and line.endswith("GET http://192.168.1.11:8888/metrics before and after")
        for line in prefix
    )
    boundary = [line for line in lines if line.startswith("local: K boundary ") and "POST" in line]
    assert len(boundary) == 4 + 5 + 5 and sum("max_tokens 64," in line for line in boundary) == 1  # the shorter branch
    speed = [line for line in lines if line.startswith("local: speed ")]
    batch = [
        f"local: speed {w}: 3 trial(s) × C1,4, max_tokens 256, streamed to {API}" for w in ("count", "code", "json")
    ]
    schedule = [
        f"local: speed {w}: 3 trial(s) × C1,4,6, max_tokens 256, streamed to {API}" for w in ("count", "code", "json")
    ]
    proof = [f"local: speed count: 3 trial(s) × C1, max_tokens 300, streamed to {API}"]
    assert speed == batch * 2 + schedule * 2 + proof  # each canary's two sides, then the relaunched lane's count-300
    # the variant: render on the head, copy to the worker, stop, clean, start, measure; then the restore the same way
    renders = [
        i
        for i, line in enumerate(lines)
        if line.startswith("head: set -e; cd ~/ds4-f-mia-anemll-0731;") and 'mv -f "$t" .env.dspark' in line
    ]
    rsyncs, stops, starts = ([i for i, line in enumerate(lines) if line == want] for want in (RSYNC, STOP, START))
    cleans = [
        i
        for i, line in enumerate(lines)
        if line == "worker: sudo -n sh -c 'rm -rf /dev/shm/*; sync; echo 3 > /proc/sys/vm/drop_caches'"
    ]
    # the batch canary's variant and restore, then the schedule canary's other side and (a dry run decides nothing:
    # the restore path) its restore
    assert len(renders) == len(rsyncs) == len(stops) == len(cleans) == len(starts) == 4
    assert any(line.startswith("local: set speculative.schedule: null in ") for line in lines)  # the lane file
    variant_speed = [i for i, line in enumerate(lines) if line.startswith("local: speed ")][3]
    assert (
        renders[0]
        < rsyncs[0]
        < stops[0]
        < cleans[0]
        < starts[0]
        < variant_speed
        < renders[1]
        < rsyncs[1]
        < stops[1]
        < cleans[1]
        < starts[1]
    )
    assert any(line.startswith("head: for f in ~/ds4-f-mia-anemll-0731/.env.dspark;") for line in lines)  # read back
    assert any("long context" in line for line in lines) is False  # opt-in: not asked for
    assert "verdict: dry-run" in lines
    text = (tmp_path / record["output"]).read_text()
    assert "MAX_NUM_BATCHED_TOKENS=8216" in text  # the variant's diff against the reference checkout
    assert "| **P03** Batch 8216 |" in text  # the troubleshooting table, after the last step


def test_papermill_dry_run_on_the_preview_lane_skips_the_k_boundary(tmp_path):
    out = tmp_path / "out.ipynb"
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "papermill"),
            str(RUNBOOKS_DIR / "diagnose.ipynb"),
            str(out),
            "-p",
            "lane",
            "anemll-1m6",
            "-p",
            "dry_run",
            "True",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = out.read_text()
    assert "the lane verifies K=5 at both batch sizes: no boundary to cross" in text
    assert '\\"verdict\\": \\"dry-run\\"' in text or '"verdict": "dry-run"' in text


@pytest.fixture(scope="module")
def twin_run(twin, tmp_path_factory):
    """One run on the launched session twin, shared by the assertions below; the lane is stopped after."""
    tmp = tmp_path_factory.mktemp("diagnose")
    lane_file = tmp / "twin.yaml"  # a copy: the schedule canary writes the side it keeps into the lane file
    lane_file.write_text(load_lane("twin").file.read_text())
    record = {"figures": {}}
    kept = tmp / "checkout-files"  # the schedule canary renders its kept side into the checkout: put the twin's back
    kept.mkdir()
    checkout = str(load_lane("twin").checkout).removeprefix("~/")
    with ssh.LaneNodes(load_lane("twin")) as nodes:
        for node in nodes:
            for name in CHECKOUT_FILES:
                node.get(f"{checkout}/{name}", kept / f"{node.alias}-{name}")
        try:
            assert launcher.start_lane(nodes).ok  # the launcher alone: the launch runbook has its own tests
            record, _ = run(tmp, "diagnose", str(lane_file), *SMALL, *SCHEDULE_SMALL, expect_exit=0)
            command = logs.live_command(nodes.head, launcher.container_name(nodes))
            env_file = nodes.head.run("cat ~/ds4-f-mia-anemll-0731/.env.dspark").stdout
            yield record, command, env_file, tmp, lane_file
        finally:
            launcher.stop_lane(nodes)
            # the backups this run's renders made (kept by lanebook, copied to the worker): tidy the session twin
            made = [
                b["backup"]
                for key in (
                    "canary_variant_run",
                    "canary_restore",
                    "schedule_canary_relaunch",
                    "schedule_canary_restore",
                )
                for b in ((record["figures"].get(key) or {}).get("relaunch", record["figures"].get(key)) or {}).get(
                    "backups", []
                )
            ]
            if made:
                nodes.each("rm -f " + " ".join(made))
            for node in nodes:
                for name in CHECKOUT_FILES:
                    node.put(kept / f"{node.alias}-{name}", f"{checkout}/{name}")


@pytest.mark.twin
def test_twin_prefix_cache_hits_a_again(twin_run):
    record, *_ = twin_run
    assert record["verdict"] == "pass" and record["twin"] is True, record
    cache = record["figures"]["prefix_cache"]
    assert record["figures"]["prefix_cache_evicted"] is False
    assert cache["A cold"]["hit_tokens"] == cache["B cold"]["hit_tokens"] == 0
    assert cache["A again"]["hit_tokens"] == cache["A repeat"]["hit_tokens"] > 0
    # What the hit saves, without comparing two wall times under load: A cold's first token came after the prefill the
    # twin sleeps for its whole prompt, A again needed that only for what the cache did not hold.
    again_prefill_s = prefill_step_s(1, cache["A again"]["queried_tokens"] - cache["A again"]["hit_tokens"])
    assert cache["A cold"]["ttft_s"] >= prefill_step_s(1, cache["A cold"]["queried_tokens"]) > again_prefill_s
    assert cache["A again"]["ttft_s"] > 0


@pytest.mark.twin
def test_twin_k_boundary_is_stable(twin_run):
    record, *_ = twin_run
    cases = record["figures"]["k_boundary"]
    assert list(cases) == ["C4 K=4", "C5 K=3", "C5→C4 mixed (one 16-token branch)"]
    for case in cases.values():
        assert case["errors"] == 0 and case["ok"] == case["requests"] and case["drained"] and case["preemptions"] == 0
    assert cases["C5→C4 mixed (one 16-token branch)"]["decode_tokens"] == 15 + 4 * 63


@pytest.mark.twin
def test_twin_canary_rejects_8216_and_restores_8192(twin_run):
    record, command, env_file, tmp, lane_file = twin_run
    canary = record["figures"]["canary"]
    assert (canary["decision"], canary["kept"], canary["baseline"], canary["variant"]) == ("reject", 8192, 8192, 8216)
    assert {c["workload"] for c in canary["cells"]} == {"count", "code", "json"}
    variant = record["figures"]["canary_variant_run"]
    assert variant["relaunch"]["launcher"] == "ok" and variant["relaunch"]["live_mismatches"] == []
    assert variant["restored_after_failure"] is None
    assert record["figures"]["canary_restore"]["live_mismatches"] == []
    assert record["figures"]["canary_kept"] == {"MAX_NUM_BATCHED_TOKENS": 8192, "head_env_file": "8192"}
    assert [c["step"] for c in record["confirmations"]][:2] == ["4 canary variant", "6 restore the kept value"]
    # looked at again after the run: the head's env file and the live command carry 8192
    assert "MAX_NUM_BATCHED_TOKENS=8192" in env_file.splitlines()
    # against the lane file as the run left it (the schedule canary after it kept fixed K)
    assert "--max-num-batched-tokens 8192" in command and live_mismatches(load_lane(str(lane_file)), command) == []
    text = (tmp / "outputs" / record["output"]).read_text()
    assert "Decision: **reject** MAX_NUM_BATCHED_TOKENS=8216" in text


@pytest.mark.twin
def test_twin_schedule_canary_restores_fixed_k_and_proves_the_lane(twin_run):
    record, command, _, tmp, lane_file = twin_run
    figures = record["figures"]
    decision = figures["schedule_canary"]
    assert (decision["decision"], decision["kept"], decision["baseline"]) == ("reject", "fixed K=5", "fixed K=5")
    assert decision["variant"] == "[[1, 1, 5], [2, 4, 4], [5, 6, 3]]"
    # C1 alone, where both sides verify K=5: its cells are shown and weigh neither way, so no swing of the twins'
    # real-time decode under a loaded machine can flip the decision
    assert {(c["concurrency"], c["verdict"]) for c in decision["cells"]} == {(1, "alike")}
    assert decision["reasons"][0] == "no level measured where the two sides differ: nothing shows a gain"
    relaunch = figures["schedule_canary_relaunch"]["relaunch"]
    assert relaunch["launcher"] == "ok" and relaunch["live_mismatches"] == []
    assert figures["schedule_kept"] == {"side": "fixed", "live_command_has_schedule_key": False}
    assert "num_speculative_tokens_per_batch_size" not in command  # looked at again after the run
    # the lane file says fixed K now, its earlier text kept beside it
    backup = Path(figures["schedule_lane_file"]["backup"])
    assert load_lane(str(lane_file)).speculative.schedule is None
    assert load_lane(str(backup)).speculative.schedule == [(1, 1, 5), (2, 4, 4), (5, 6, 3)]
    # the relaunched lane proven in the same run: count-300 (a twin figure), tools, Hermes, queues, both ranks
    proof = figures["restored_best_count_300"]
    assert proof["twin"] is True and proof["tok_s"] > 0 and proof["reference_tok_s"] == "90.70"
    verdict = read_verdict(tmp / "outputs" / record["output"])
    checks = {c["what"]: c["outcome"] for c in verdict["checks"] if c["step"] == "10 the relaunched lane proven"}
    assert checks["a structured tool_calls[] comes back"] == "pass"
    assert any("ROUTE_OK" in what and outcome == "pass" for what, outcome in checks.items())
    assert checks["the queues drain (running = waiting = 0)"] == "pass"
    assert checks["no CUDA, NCCL, engine-death or out-of-memory line on any rank"] == "pass"
    # the long-context climb: every step answered, each on an idle lane
    assert [s["tokens"] for s in figures["long_context"]] == [8192, 16384, 20000]
    assert all(s["error"] is None and s["prompt_tokens"] >= s["tokens"] for s in figures["long_context"])
