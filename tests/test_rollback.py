"""Rollback (lanebook.ops.rollback): the fingerprint probe on local trees with exact manifests, what changes a
fingerprint and what does not, the comparison's lines, the audit-trail lookup, the Hermes change, the dry-run
probe line, and one fingerprint of the twin's rollback lane over SSH."""

import hashlib
import json
import os
import subprocess
import sys

import pytest
from lanebook.base.errors import LanebookError
from lanebook.lane.params import lane_with, load_lane
from lanebook.nodes import ssh
from lanebook.ops import rollback
from lanebook.twin.tree import FIXED_MTIME, HubModel, write_hub_model

MTIME = 1785456000


def probe(checkout, hub) -> dict:
    """The probe as a node runs it: `python3 - CHECKOUT HUB_DIR < fingerprint_probe.py`."""
    done = subprocess.run(
        [sys.executable, "-", str(checkout), str(hub)],
        stdin=open(rollback.PROBE),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def as_fingerprint(found: dict, lane="l", alias="head") -> dict:
    return {"lane": lane, "observed": True, "nodes": {alias: {part: found[part] for part in rollback.PARTS}}}


@pytest.fixture
def trees(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    (checkout / "start.sh").write_text("echo start\n")
    (checkout / "start.sh").chmod(0o755)
    (checkout / "scripts" / "env.sh").write_text("X=1\n")
    (checkout / "scripts" / "env.sh").chmod(0o644)
    (checkout / "link").symlink_to("start.sh")
    for path in (checkout / "start.sh", checkout / "scripts" / "env.sh"):
        os.utime(path, (MTIME, MTIME))
    hub = tmp_path / "hub"
    write_hub_model(hub, HubModel("org/model", shards=3))
    return checkout, hub / "models--org--model"


def test_the_checkout_manifest_is_exact(trees):
    checkout, hub = trees
    sha = {
        name: hashlib.sha256(text.encode()).hexdigest() for name, text in (("start", "echo start\n"), ("env", "X=1\n"))
    }
    manifest = (
        f"l link -> start.sh\nd scripts 755\nf scripts/env.sh 644 4 {MTIME}000000000 {sha['env']}\n"
        f"f start.sh 755 11 {MTIME}000000000 {sha['start']}\n"
    )
    os.chmod(checkout / "scripts", 0o755)
    found = probe(checkout, hub)["checkout"]
    assert found == {
        "path": str(checkout),
        "exists": True,
        "sha256": hashlib.sha256(manifest.encode()).hexdigest(),
        "entries": 4,
        "bytes": 15,
        "newest": "start.sh",
    }


def test_the_weights_are_not_read_but_named(trees):
    """Blobs count by name (their sha256), size and mtime; a blob rewritten in place with its mtime restored is the
    one change the name-based manifest cannot see, so everything outside blobs/ is hashed."""
    checkout, hub = trees
    found = probe(checkout, hub)["weights"]
    model = HubModel("org/model", shards=3)
    assert (
        found["exists"] and found["entries"] == 4 + 5 + 1 + 5
    )  # blobs/ refs/ snapshots/ snapshots/REV/, 5 blobs, refs/main, 5 links
    assert found["bytes"] == sum(len(data) for _, data in model.files()) + len(model.revision)
    (hub / "refs" / "main").write_text("0" * 40)
    os.utime(hub / "refs" / "main", (FIXED_MTIME, FIXED_MTIME))
    assert probe(checkout, hub)["weights"]["sha256"] != found["sha256"]


@pytest.mark.parametrize("change", ["touch existing", "new file", "rewrite same size", "chmod", "remove", "relink"])
def test_every_touch_changes_the_checkout_fingerprint(trees, change):
    checkout, hub = trees
    before = probe(checkout, hub)
    target = checkout / "start.sh"
    if change == "touch existing":
        os.utime(target, (MTIME + 1, MTIME + 1))
    elif change == "new file":
        (checkout / "stray").touch()
    elif change == "rewrite same size":
        target.write_text("echo STARt\n")
        os.utime(target, (MTIME, MTIME))
    elif change == "chmod":
        target.chmod(0o700)
    elif change == "remove":
        (checkout / "scripts" / "env.sh").unlink()
    else:
        (checkout / "link").unlink()
        (checkout / "link").symlink_to("scripts/env.sh")
    after = probe(checkout, hub)
    assert after["checkout"]["sha256"] != before["checkout"]["sha256"]
    assert after["weights"] == before["weights"]
    (change_line,) = rollback.fingerprint_differences(as_fingerprint(before), as_fingerprint(after))
    assert change_line.startswith(f"head: checkout {checkout} changed (")


def test_reading_a_tree_changes_nothing_and_directory_mtimes_do_not_count(trees):
    checkout, hub = trees
    before = probe(checkout, hub)
    (checkout / "scripts" / "tmp").touch()
    (checkout / "scripts" / "tmp").unlink()  # a file made and removed again leaves only the directory's mtime changed
    after = probe(checkout, hub)
    assert [after[part] for part in rollback.PARTS] == [before[part] for part in rollback.PARTS]


def test_difference_lines_name_node_part_counts_and_newest(trees, tmp_path):
    checkout, hub = trees
    before = as_fingerprint(probe(checkout, hub))
    (checkout / "stray").write_text("x")
    after = as_fingerprint(probe(checkout, hub))
    assert rollback.fingerprint_differences(before, after) == [
        f"head: checkout {checkout} changed (4 → 5 entries, 15 → 16 bytes; newest file now stray)"
    ]
    gone = as_fingerprint(probe(tmp_path / "nowhere", hub))
    assert rollback.fingerprint_differences(before, gone) == [f"head: checkout {tmp_path / 'nowhere'} is gone"]
    assert rollback.fingerprint_differences(gone, before) == [f"head: checkout {checkout} appeared"]
    assert rollback.fingerprint_differences(before, {**before, "nodes": {}}) == [
        "head: checkout fingerprinted only before",
        "head: weights fingerprinted only before",
    ]
    assert rollback.fingerprint_differences(before, {**before, "lane": "other"}) == [
        "fingerprints of different lanes: l and other"
    ]
    assert rollback.fingerprint_differences(before, json.loads(json.dumps(before))) == []  # as recorded in runs.jsonl
    assert rollback.short(before) == {
        "head": {
            "checkout": before["nodes"]["head"]["checkout"]["sha256"][:12],
            "weights": before["nodes"]["head"]["weights"]["sha256"][:12],
        }
    }


def test_the_most_recent_observed_fingerprint_of_the_lane_is_the_one_compared():
    def fp(lane, mark, observed=True):
        return {
            "lane": lane,
            "observed": observed,
            "nodes": {"head": mark} if observed else {},
        }

    runs = [
        {"run_id": "a", "figures": {rollback.FINGERPRINT_FIGURE: fp("twin-1m6", 1)}},
        {"run_id": "b", "figures": {rollback.FINGERPRINT_FIGURE: fp("twin-1m6", 2)}},
        {"run_id": "c", "figures": {rollback.FINGERPRINT_FIGURE: fp("anemll-1m6", 3)}},
        {"run_id": "d", "figures": {rollback.FINGERPRINT_FIGURE: fp("twin-1m6", 4, observed=False)}},  # a dry run
        {"run_id": "e", "figures": {"rollback_fingerprint_before": fp("twin-1m6", 5)}},  # a rollback's own figure
        {"run_id": "f", "figures": {}},
        {"run_id": "g"},
    ]
    record, found = rollback.recorded_fingerprint(runs, "twin-1m6")
    assert record["run_id"] == "b" and found["nodes"] == {"head": 2}
    assert rollback.recorded_fingerprint(runs, "anemll-1m6")[0]["run_id"] == "c"
    assert rollback.recorded_fingerprint(runs, "patch3-c12") is None


def test_the_hermes_change_is_the_served_name():
    assert rollback.hermes_changes(load_lane("anemll-0731"), load_lane("anemll-1m6")) == [
        "default_model: deepseek-v4-flash-0731 → deepseek-v4-flash-dspark"
    ]
    assert rollback.hermes_changes(load_lane("twin"), load_lane("twin-1m6")) == [
        "default_model: deepseek-v4-flash-0731 → deepseek-v4-flash-dspark"
    ]
    assert rollback.hermes_changes(load_lane("anemll-1m6"), load_lane("patch3-c12")) == []  # same served name
    moved = lane_with(load_lane("patch3-c12"), api="http://192.168.1.12:8888/v1")
    assert rollback.hermes_changes(load_lane("anemll-1m6"), moved) == [
        "api: http://192.168.1.11:8888/v1 → http://192.168.1.12:8888/v1"
    ]


def test_rollback_targets_and_pairs():
    assert rollback.rollback_target(load_lane("anemll-0731")).name == "anemll-1m6"
    assert rollback.rollback_target(load_lane("twin")).name == "twin-1m6"
    with pytest.raises(LanebookError, match="lane patch3-c12 names no rollback lane"):
        rollback.rollback_target(load_lane("patch3-c12"))
    assert rollback.pair_differences(load_lane("twin"), load_lane("twin-1m6")) == []
    assert rollback.pair_differences(load_lane("anemll-0731"), load_lane("anemll-1m6")) == []
    assert rollback.pair_differences(load_lane("twin"), load_lane("anemll-1m6")) == [
        "head: twin ('head', '127.0.0.2', 2222, '127.0.0.2'), anemll-1m6 ('head', '192.168.1.11', 22, '10.0.0.1')",
        "worker: twin ('worker', '127.0.0.3', 2222, '127.0.0.3'), anemll-1m6 ('worker', '10.0.0.2', 22, '10.0.0.2')",
    ]


def test_the_twin_rollback_lane_is_the_1m6_shape_on_the_twin():
    real, twin = load_lane("anemll-1m6"), load_lane("twin-1m6")
    assert twin.twin and twin.checkout == real.checkout == "~/ds4-f-mia-anemll-1m6"
    assert twin.launcher.env == real.launcher.env and twin.weights == real.weights
    assert twin.speculative.schedule is None and twin.gates.exact_smoke == real.gates.exact_smoke == "CANARY_BLOG_OK"
    shape = (
        "DSPARK_MODEL",
        "SERVED_MODEL_NAME",
        "MAX_MODEL_LEN",
        "MAX_NUM_SEQS",
        "MAX_NUM_BATCHED_TOKENS",
        "GPU_MEMORY_UTILIZATION",
        "MTP_NUM_TOKENS",
        "VLLM_USE_BREAKABLE_CUDAGRAPH",
        "DSPARK_VLLM_IMAGE",
    )
    assert {k: twin.env[k] for k in shape} == {k: real.env[k] for k in shape}
    assert [(n.alias, n.host, n.port) for n in twin.nodes] == [
        (n.alias, n.host, n.port) for n in load_lane("twin").nodes
    ]


def test_a_dry_run_fingerprint_sends_one_probe_per_node_and_observes_nothing():
    nodes = ssh.LaneNodes(load_lane("anemll-1m6"), dry_run=True)
    assert rollback.fingerprint(nodes) == {
        "lane": "anemll-1m6",
        "checkout": "~/ds4-f-mia-anemll-1m6",
        "hub_dir": "~/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash",
        "observed": False,
        "nodes": {},
    }
    probe_line = (
        "python3 - ~/ds4-f-mia-anemll-1m6 ~/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash < "
        "fingerprint_probe.py"
    )
    assert nodes.executor.commands() == [f"head: {probe_line}", f"worker: {probe_line}"]


@pytest.mark.twin
def test_the_twin_lays_out_the_rollback_lane_identically_on_both_nodes(twin):
    """One probe per node over SSH: the twin's 1m6 checkout and 48-shard tree, the same on head and worker."""
    with ssh.LaneNodes(load_lane("twin-1m6")) as nodes:
        fp = rollback.fingerprint(nodes)
        again = rollback.fingerprint(nodes)
    head, worker = (
        {part: {k: v for k, v in tree.items() if k != "path"} for part, tree in fp["nodes"][alias].items()}
        for alias in ("head", "worker")
    )  # each node's own root holds its home
    assert fp["observed"] and head == worker, (head, worker)
    assert head["checkout"]["exists"] and fp["nodes"]["head"]["checkout"]["path"].endswith("/ds4-f-mia-anemll-1m6")
    assert head["weights"]["entries"] == 4 + 50 + 1 + 50  # 48 shards + config + index: blobs and links
    assert rollback.fingerprint_differences(fp, again) == []


def test_the_rollback_steps_compare_skip_and_show_what_they_found():
    from lanebook.steps.runbook import Runbook, StepFailed

    rb = Runbook("rollback", "anemll-0731", dry_run=True)
    assert rollback.load_target(rb).name == "anemll-1m6"
    target = ssh.LaneNodes(load_lane("anemll-1m6"), executor=rb.nodes.executor)
    fp = {"lane": "anemll-1m6", "observed": True, "nodes": {"head": {}}}
    rollback.recorded_step(rb, name="anemll-1m6", before=fp, runs=[])
    rollback.recorded_step(
        rb,
        name="anemll-1m6",
        before=fp,
        runs=[{"run_id": "a", "runbook": "promote", "started_at": "T", "figures": {rollback.FINGERPRINT_FIGURE: fp}}],
    )
    rollback.stop_step(rb, target=target, already=True)
    rollback.clean_step(rb, target=target, already=True)
    assert [(c.what, c.outcome) for c in rb.checks] == [
        ("anemll-1m6 untouched since its recorded fingerprint", "skipped"),
        ("anemll-1m6 untouched since promote run a fingerprinted it (T)", "not observed"),
        ("anemll-0731 stopped on every node", "skipped"),
        ("SHM and page cache cleaned on every node", "skipped"),
    ]
    assert rb.figures == {"fingerprint_compared_with": "a"} and rb.commands() == []
    alone = Runbook("rollback", "patch3-c12", dry_run=True)
    with pytest.raises(StepFailed, match="the lane names a rollback lane that loads"):
        rollback.load_target(alone)


def test_the_hermes_note():
    before, after = load_lane("twin"), load_lane("twin-1m6")
    changes = rollback.hermes_changes(before, after)
    assert rollback.hermes_note(before, after, changes) == (
        f"In `providers.{after.hermes.provider}`:\n\n```text\n{changes[0]}\n```"
    )
    same = load_lane("anemll-1m6")
    assert rollback.hermes_note(same, same, []) == (
        f"Nothing changes in `providers.{same.hermes.provider}`: `default_model` stays `{same.served_model_name}`."
    )


def test_a_four_spark_lane_rolls_back_to_its_pair_and_fingerprints_every_node():
    """The pair's nodes are the four-Spark lane's first two, the same: the rollback relaunches there and the two added
    Sparks are stopped with the lane. A pair cannot roll back to four Sparks it does not hold."""
    tp4, pair = load_lane("anemll-0731-tp4"), load_lane("anemll-0731")
    assert rollback.rollback_target(tp4).name == "anemll-0731"
    assert rollback.pair_differences(tp4, pair) == []
    assert rollback.pair_differences(pair, tp4) == [
        "worker2: anemll-0731 None, anemll-0731-tp4 ('worker', '10.0.0.3', 22, '10.0.0.3')",
        "worker3: anemll-0731 None, anemll-0731-tp4 ('worker', '10.0.0.4', 22, '10.0.0.4')",
    ]
    nodes = ssh.LaneNodes(tp4, dry_run=True)
    found = rollback.fingerprint(nodes)
    assert found["observed"] is False and found["nodes"] == {}
    assert [c.split(":", 1)[0] for c in nodes.executor.commands()] == ["head", "worker", "worker2", "worker3"]
