"""The four-node twin lane (params/twin-tp4.yaml) on the session twin, which gets worker2 and worker3 added when the
promotion starts: `lanebook promote --lane twin-tp4` passes (one promotion shared by the module), and `lanebook run
status` names an orphaned rank on a worker beyond the first."""

from __future__ import annotations

import json

import pytest
from helpers.lanebook_runs import lanebook_command, last_record
from lanebook.lane.params import load_lane
from lanebook.nodes import ssh
from lanebook.twin import control

pytestmark = pytest.mark.twin

LANE = "twin-tp4"
WORKERS = ("worker", "worker2", "worker3")


def records(outputs) -> list[dict]:
    return [json.loads(line) for line in (outputs / "runs.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def promoted(twin, tmp_path_factory):
    """The lane promoted once (the pair's own lane stopped first: one API address on the head); stopped after."""
    outputs = tmp_path_factory.mktemp("tp4") / "outputs"
    with ssh.LaneNodes(load_lane("twin")) as pair:
        if pair.head.run("docker ps --format '{{.Names}}'").stdout.strip():
            assert lanebook_command(["run", "stop", "--lane", "twin"], outputs).returncode == 0
    done = lanebook_command(["promote", "--lane", LANE], outputs)
    try:
        yield done, outputs
    finally:
        lanebook_command(["run", "stop", "--lane", LANE], outputs, timeout=300)


def test_the_promotion_passes_on_four_nodes_with_the_weights_fanned_out_to_every_worker(promoted):
    done, outputs = promoted
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = [r for r in records(outputs) if r["lane"] == LANE]
    assert [(r["runbook"], r["verdict"]) for r in runs] == [
        (name, "pass") for name in ("weights", "env", "launch", "warmup", "gates", "speed")
    ]
    nodes = [n for n in control.status()["nodes"] if n["alias"] in ("head", *WORKERS)]  # fleets add theirs
    assert [(n["alias"], n["host"], n["reachable"]) for n in nodes] == [
        ("head", "127.0.0.2", True),
        ("worker", "127.0.0.3", True),
        ("worker2", "127.0.0.4", True),
        ("worker3", "127.0.0.5", True),
    ]
    weights = runs[0]["figures"]
    assert weights["shards_before"]["worker2"] == weights["shards_before"]["worker3"] == 0  # new Sparks: no tree
    assert {"worker2", "worker3"} <= set(weights["synced"])  # the head's tree rsynced to them
    with ssh.LaneNodes(load_lane(LANE)) as nodes:
        container = f"{nodes.params.launcher.env['PROJECT_NAME']}-vllm-dspark-1"
        for rank, alias in enumerate(WORKERS, start=1):
            environment = nodes.node(alias).run(f"docker inspect --format '{{{{json .Config.Env}}}}' {container}")
            assert f"NODE_RANK={rank}" in environment.stdout and "HEADLESS=1" in environment.stdout
        log = nodes.head.run(f"docker logs {container} 2>&1 | grep -E 'world_size|nodes\\)'").stdout
        assert "world_size=4, local_world_size=1" in log and "(4/4 nodes)" in log


def test_status_names_an_orphaned_rank_on_worker2(promoted, tmp_path):
    """The head's container killed (P16) while worker2's rank runs: `status` fails naming worker2, not the pair's
    worker, whose rank (like worker3's) was stopped."""
    assert promoted[0].returncode == 0, "the promotion did not pass"
    with ssh.LaneNodes(load_lane(LANE)) as nodes:
        container = f"{nodes.params.launcher.env['PROJECT_NAME']}-vllm-dspark-1"
        nodes.head.run(f"docker kill {container}")
        for alias in ("worker", "worker3"):
            nodes.node(alias).run(f"docker stop -t 1 {container}")
    done = lanebook_command(["run", "status", "--lane", LANE], tmp_path, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    record = last_record(tmp_path)
    assert record["verdict"] == "fail" and record["failed_step"] == "2 containers"
    assert record["figures"]["state"] == "orphaned worker"
    assert record["figures"]["containers"] == {"head": [], "worker": [], "worker2": [container], "worker3": []}
    assert f"orphaned: {{'worker2': ['{container}']}}" in (tmp_path / record["output"]).read_text()
