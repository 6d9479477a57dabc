"""Weights (lanebook.ops.weights): the seed's download and rsync lines in dry-run, and verification of the twin's
48-shard hub tree over SSH in one round trip, including the damage a real tree suffers."""

import pytest
from helpers.twin_helpers import prints_nothing, private_twin
from lanebook.lane.params import WeightsParams, load_lane
from lanebook.nodes import ssh
from lanebook.ops import weights


def test_dry_run_download_and_rsync_lines():
    nodes = ssh.LaneNodes(load_lane("anemll-0731"), dry_run=True)
    weights.download_on_head(nodes)
    weights.sync_to_workers(nodes)
    deleted = weights.clean_incomplete_on_workers(nodes)
    report = weights.verify_weights(nodes.node("worker"), nodes.params.weights)
    hub = "~/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731"
    assert nodes.executor.commands() == [
        "head: HF_HUB_OFFLINE=0 TRANSFORMERS_OFFLINE=0 HF_HUB_DISABLE_XET=1 "
        "hf download deepseek-ai/DeepSeek-V4-Flash-0731 --max-workers 4",
        f"head: rsync -aH --partial --info=stats2 {hub}/ milo@10.0.0.2:{hub.removeprefix('~/')}/",
        f"worker: find {hub} -name '*.incomplete' -type f -print -delete",
        f"worker: python3 - {hub} 48 < weights_probe.py",
    ]
    assert deleted == {"worker": []}
    assert report.dry_run and not report.ok  # nothing was verified


def test_download_goes_where_verify_looks():
    params = WeightsParams(repo="org/model", hf_cache="/data/hf")
    assert weights.download_command(params) == (
        "HF_HUB_OFFLINE=0 TRANSFORMERS_OFFLINE=0 HF_HUB_DISABLE_XET=1 HF_HOME=/data/hf hf download org/model "
        "--max-workers 4"
    )
    assert params.hub_dir == "/data/hf/hub/models--org--model"


# --- against the twin over SSH -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def damaged_lane(twin, tmp_path_factory):
    """A private twin whose worker tree lacks shard 7 and holds shards 3 and 17 as `*.incomplete` blobs.

    It asks for the session twin first: while the private twin's variables are set, the session fixture would
    take the private twin for the session's, and later modules would find no twin once this one is down."""
    with private_twin(tmp_path_factory.mktemp("twin-weights"), ["incomplete-shards", "missing-shard"]):
        with ssh.LaneNodes(load_lane("twin")) as nodes:
            yield nodes


def shard(n):
    return f"model-{n:05d}-of-00048.safetensors"


@pytest.mark.twin
def test_verify_a_whole_tree_in_one_round_trip(damaged_lane):
    lane = damaged_lane
    before = len(lane.executor.history)
    report = weights.verify_weights(lane.head, lane.params.weights)
    assert len(lane.executor.history) == before + 1
    assert report.ok, report.problems
    assert (report.shard_count, report.expected_shards, report.size_basis) == (48, 48, "file bytes")
    hashed = weights.verify_weights(lane.head, lane.params.weights, sha256=True, workers=3)
    assert hashed.ok and hashed.sha256_checked == 48


@pytest.mark.twin
def test_worker_tree_repaired_by_one_rsync_and_cleanup(damaged_lane):
    """The seed's order: verify, rsync once from the head, delete `*.incomplete` on the worker only, verify."""
    lane = damaged_lane
    worker = lane.node("worker")
    found = weights.verify_weights(worker, lane.params.weights)
    assert not found.ok and found.shard_count == 45
    assert found.missing_shards == [shard(3), shard(7), shard(17)]
    assert len(found.incomplete) == 2 and all(p.startswith("blobs/") for p in found.incomplete)
    assert "45 shards in the snapshot, expected 48" in found.problems

    hub = lane.params.weights.hub_dir
    files_before = set(worker.run(f"cd {ssh.qpath(hub)} && find . -type f -o -type l").stdout.split())
    stats = weights.sync_to_workers(lane)["worker"]
    assert stats.files_transferred == 3  # only what the worker lacked
    head_left = lane.head.run(f"find {ssh.qpath(hub)} -name '*.incomplete'").stdout
    deleted = weights.clean_incomplete_on_workers(lane)
    assert sorted(p.rsplit("/", 1)[1] for p in deleted["worker"]) == sorted(
        p.rsplit("/", 1)[1] for p in found.incomplete
    )
    assert "head" not in deleted and head_left == ""
    files_after = set(worker.run(f"cd {ssh.qpath(hub)} && find . -type f -o -type l").stdout.split())
    assert files_before - files_after == {"./" + p for p in found.incomplete}  # nothing else deleted

    repaired = weights.verify_weights(worker, lane.params.weights, sha256=True)
    assert repaired.ok, repaired.problems


@pytest.mark.twin
def test_download_on_the_head_only(damaged_lane):
    """The twin's hub (hf stand-in) restores a shard removed from the head's tree; the line is the seed's."""
    lane = damaged_lane
    hub = ssh.qpath(lane.params.weights.hub_dir)
    lane.head.run(f"rm -f $(readlink -f {hub}/snapshots/*/{shard(9)}) {hub}/snapshots/*/{shard(9)}")
    assert weights.verify_weights(lane.head, lane.params.weights).missing_shards == [shard(9)]
    result = weights.download_on_head(lane)
    assert result.node == "head" and result.command == (
        "HF_HUB_OFFLINE=0 TRANSFORMERS_OFFLINE=0 HF_HUB_DISABLE_XET=1 hf download deepseek-ai/DeepSeek-V4-Flash-0731 "
        "--max-workers 4"
    )
    assert weights.verify_weights(lane.head, lane.params.weights).ok


@pytest.mark.twin
def test_verify_finds_the_damage_a_tree_suffers(damaged_lane):
    """A copy of the head's tree, damaged five ways; each is reported, and sha256 mode finds the silent one."""
    head = damaged_lane.head
    params = damaged_lane.params.weights
    scratch = WeightsParams(repo=params.repo, shards=params.shards, hf_cache="~/lbt-weights")
    copy = ssh.qpath(scratch.hub_dir)
    snap = f"{copy}/snapshots/*"
    head.run(
        f"rm -rf ~/lbt-weights && mkdir -p ~/lbt-weights/hub && cp -a {ssh.qpath(params.hub_dir)} ~/lbt-weights/hub/"
    )
    assert weights.verify_weights(head, scratch).ok
    head.run(
        f"truncate -s -1000 $(readlink -f {snap}/{shard(2)})"  # a short shard
        f" && rm $(readlink -f {snap}/{shard(4)})"  # a blob gone: broken symlink
        f" && printf X | dd of=$(readlink -f {snap}/{shard(5)}) bs=1 seek=5000 conv=notrunc status=none"  # silent
        f" && cp --remove-destination $(readlink -f {snap}/{shard(6)}) {snap}/{shard(6)}"  # snapshot-only copy
        f" && touch {copy}/blobs/abc.incomplete"
    )
    report = weights.verify_weights(head, scratch)
    assert set(report.bad_shards) == {shard(2)} and report.broken_symlinks == [
        f"snapshots/{report.revision}/{shard(4)}"
    ]
    assert report.not_blob_links == [shard(6)] and report.incomplete == ["blobs/abc.incomplete"]
    assert report.sha256_checked == 0 and not report.ok
    hashed = weights.verify_weights(head, scratch, sha256=True)
    assert hashed.sha256_mismatches == [shard(5)]
    head.run("rm -rf ~/lbt-weights")


@pytest.mark.twin
def test_weights_rsync_cut_mid_tree_is_resumed(tmp_path):
    """Fault ssh-drop-mid-rsync: the first push to the worker loses its connection part-way; the rerun sends only
    what is missing (the partial shard resumed) and the worker's tree verifies."""
    with private_twin(tmp_path / "twin", ["ssh-drop-mid-rsync"]), ssh.LaneNodes(load_lane("twin")) as nodes:
        worker = nodes.node("worker")
        with pytest.raises(ssh.CommandFailed, match="head: exit"):
            weights.sync_to_workers(nodes, timeout_s=120)
        # The worker's receiver may still be saving the partial shard when the head reports the failure.
        assert prints_nothing(
            worker, 'for p in $(pgrep -f "rsyn[c] --server"); do readlink /proc/$p/cwd; done | grep -F "$HOME"'
        )
        cut = weights.verify_weights(worker, nodes.params.weights)
        assert not cut.ok and cut.broken_symlinks, cut.problems  # links arrive before all their blobs
        # The shard being sent when the link dropped is kept short (--partial) when the receiver gets to save it;
        # whether it does depends on where in its write loop the stream ends, so both outcomes occur.
        assert len(cut.bad_shards) <= 1, cut.problems
        stats = weights.sync_to_workers(nodes, timeout_s=120)["worker"]
        if cut.bad_shards:
            assert stats.matched_data > 0, stats  # the short shard was the basis, not sent again
        assert stats.transferred_file_size < stats.total_file_size and stats.literal_data < stats.total_file_size
        assert weights.verify_weights(worker, nodes.params.weights, sha256=True).ok


def test_check_weights_of_a_dry_run_observes_nothing():
    nodes = ssh.LaneNodes(load_lane("anemll-0731"), dry_run=True)
    check = weights.check_weights(nodes)
    assert not check.ok and check.detail == "not observed (dry run)"
    assert [c.split(":")[0] for c in nodes.executor.commands()] == ["head", "worker"]  # every node's probe recorded


@pytest.mark.twin
def test_check_weights_reports_every_node(twin):
    """A lane whose weights are nowhere on the nodes: each node's part fails and says what it found."""
    from lanebook.lane.params import lane_with

    base = load_lane("twin")
    elsewhere = lane_with(base, weights={**base.weights.model_dump(), "hf_cache": "~/no-hf-cache-here"})
    with ssh.LaneNodes(elsewhere) as nodes:
        check = weights.check_weights(nodes)
    assert not check.ok and list(check.failed_nodes) == ["head", "worker"]
    assert all(n.figures["shard_count"] == 0 for n in check.nodes.values())
    assert check.detail.startswith("head: 0/48 shards, ")
    with ssh.LaneNodes(base) as nodes:
        whole = weights.check_weights(nodes)
    assert whole.ok and whole.detail == "head: 48/48 shards, complete; worker: 48/48 shards, complete"


# --- what the weights runbook decides from the reports ------------------------------------------------


def report(node, revision="r1", problems=(), dry_run=False):
    return weights.WeightsReport(
        node, "~/hub", revision=revision, shard_count=48, expected_shards=48, problems=list(problems), dry_run=dry_run
    )


def test_workers_to_sync_are_those_not_whole_or_at_another_revision():
    head = report("head")
    workers = {
        "worker": report("worker"),
        "worker2": report("worker2", problems=["45 shards in the snapshot, expected 48", "2 *.incomplete files"]),
        "worker3": report("worker3", revision="r0"),
    }
    assert weights.workers_to_sync(head, workers) == {
        "worker2": "45 shards in the snapshot, expected 48; 2 *.incomplete files",
        "worker3": "revision r0, the head has r1",
    }
    assert weights.workers_to_sync(head, {"worker": report("worker")}) == {}  # whole at the head's revision: rsync once
    unseen = report("head", revision=None, dry_run=True)
    assert weights.workers_to_sync(unseen, {"worker": report("worker", dry_run=True)}) == {
        "worker": "not observed (dry run)"
    }


def test_only_incomplete_files_count_as_deleted_cleanly():
    assert weights.not_incomplete({"worker": ["hub/blobs/ab.incomplete"], "worker2": []}) == []
    assert weights.not_incomplete({"worker": ["hub/blobs/ab.incomplete", "hub/blobs/cd"]}) == ["worker: hub/blobs/cd"]


def test_incomplete_files_are_deleted_on_the_chosen_workers_never_the_head():
    nodes = ssh.LaneNodes(load_lane("anemll-0731"), dry_run=True)
    assert weights.clean_incomplete_on_workers(nodes, [nodes.head, nodes.node("worker")]) == {"worker": []}
    assert [c.split(":")[0] for c in nodes.executor.commands()] == ["worker"]
    assert weights.clean_incomplete_on_workers(nodes, []) == {}


def test_per_node_results_and_revisions_for_the_runbooks_checks():
    reports = {"head": report("head"), "worker": report("worker", revision="r0", problems=["2 *.incomplete files"])}
    assert [(c.what, c.ok, c.detail) for c in weights.tree_results(reports)] == [
        ("head reports its tree", True, "head: 48/48 shards, complete"),
        ("worker reports its tree", True, "worker: 48/48 shards, 2 *.incomplete files"),
    ]
    assert [(c.what, c.ok, c.detail) for c in weights.complete_results(reports)] == [
        ("weights complete on head", True, "head: 48/48 shards, complete"),
        ("weights complete on worker", False, "worker: 48/48 shards, 2 *.incomplete files"),
    ]
    assert weights.revisions(reports) == ["r0", "r1"]
    unseen = {"head": report("head", revision=None, dry_run=True)}
    assert [(c.outcome, c.detail) for c in weights.tree_results(unseen)] == [("fail", "head: not observed (dry run)")]
    assert weights.revisions(unseen) == ["None"]


def test_steps_skip_what_is_whole_and_a_dry_run_records_the_download_and_the_rsync():
    from lanebook.steps.runbook import Runbook

    rb = Runbook("weights", "anemll-0731", dry_run=True)
    whole = report("head")
    assert weights.ensure_head_whole(rb, whole) is whole
    assert weights.sync_step(rb, whole, {"worker": report("worker")}, attempts=1) == {}
    weights.clean_step(rb, {})
    assert [(c.what, c.outcome) for c in rb.checks] == [
        ("the head's tree is whole", "skipped"),
        ("every worker's tree verifies at the head's revision", "skipped"),
        ("no *.incomplete on any worker", "skipped"),
    ]
    assert rb.figures == {"downloaded": False, "synced": {}} and rb.commands() == []
    cut = report("head", problems=["2 *.incomplete files"])
    again = weights.ensure_head_whole(rb, cut)
    assert again.dry_run and rb.figures["downloaded"] is True
    assert f"hf download {rb.params.weights.repo}" in rb.commands()[0]
    assert rb.commands()[1].startswith("head: python3 - ")
    assert rb.checks[-1].outcome == "not observed"
