"""Files on the nodes (lanebook.ops.transfers): rsync head -> workers over the RoCE link (seed lines, stats parsed
exactly, a cut transfer resumed), path tests in one round trip, and the checkout a launch needs."""

import pytest
from helpers.twin_helpers import process_gone
from lanebook.lane.params import NodeParams, lane_with, load_lane
from lanebook.nodes import ssh
from lanebook.ops import transfers

STATS = """Number of files: 3 (reg: 2, dir: 1)
Number of regular files transferred: 2
Total file size: 4,000,006 bytes
Total transferred file size: 4,000,006 bytes
Literal data: 1,234 bytes
Matched data: 3,998,772 bytes
"""


def test_parse_rsync_stats():
    assert transfers.parse_rsync_stats(STATS, 2.5) == transfers.RsyncStats(
        files_transferred=2,
        total_file_size=4000006,
        transferred_file_size=4000006,
        literal_data=1234,
        matched_data=3998772,
        duration_s=2.5,
    )
    assert transfers.parse_rsync_stats("", dry_run=True).files_transferred is None


def test_rsync_lines_for_a_lane_of_n_workers():
    """Workers come from the lane's params: three workers get three rsyncs from the head, never --delete."""
    params = load_lane("anemll-0731")
    extra = [
        NodeParams(
            alias=f"worker{i}",
            role="worker",
            host=f"10.0.0.{i + 1}",
            user="milo",
            roce_ip=f"10.0.0.{i + 1}",
            jump="head",
        )
        for i in (2, 3)
    ]
    nodes = ssh.LaneNodes(lane_with(params, nodes=[n.model_dump() for n in params.nodes + extra]), dry_run=True)
    stats = transfers.sync_checkout(nodes)
    assert list(stats) == ["worker", "worker2", "worker3"] and all(s.dry_run for s in stats.values())
    assert nodes.executor.commands() == [
        f"head: rsync -aH --partial --info=stats2 ~/ds4-f-mia-anemll-0731/ milo@10.0.0.{n}:ds4-f-mia-anemll-0731/"
        for n in (2, 3, 4)
    ]
    assert transfers.rsync_command(nodes, nodes.workers[0], "~/a b/", bwlimit_kib=1000) == (
        "rsync -aH --partial --info=stats2 --bwlimit=1000 ~/'a b'/ 'milo@10.0.0.2:a b/'"
    )


def test_checkout_dry_run_observes_nothing():
    nodes = ssh.LaneNodes(load_lane("anemll-0731"), dry_run=True)
    check = transfers.checkout_ok(nodes)
    assert not check.ok and check.detail == "not observed (dry run)"
    assert nodes.executor.commands()[0].startswith(
        "head: test -f ~/ds4-f-mia-anemll-0731/docker-compose.dspark.yml || echo "
        "'~/ds4-f-mia-anemll-0731/docker-compose.dspark.yml'; "
    )


@pytest.fixture
def nodes(twin):
    with ssh.LaneNodes(load_lane("twin")) as connected:
        yield connected


@pytest.mark.twin
def test_paths_and_the_checkout(nodes):
    head = nodes.head
    assert transfers.path_exists(head, "~/ds4-f-mia-anemll-0731/.env.dspark")
    assert not transfers.path_exists(head, "~/no such dir")
    assert transfers.missing_paths(head, ["~/ds4-f-mia-anemll-0731", "~/a b", "/nonexistent/x"]) == [
        "~/a b",
        "/nonexistent/x",
    ]
    assert transfers.checkout_ok(nodes).ok
    moved = ssh.LaneNodes(lane_with(nodes.params, checkout="~/ds4-not-here"), executor=nodes.executor)
    check = transfers.checkout_ok(moved)
    assert not check.ok
    assert check.nodes["worker"].figures["missing"] == [
        "~/ds4-not-here/docker-compose.dspark.yml",
        "~/ds4-not-here/.env.dspark",
        "~/ds4-not-here/start-deepseek-v4-flash-dspark.sh",
        "~/ds4-not-here/status-deepseek-v4-flash-dspark.sh",
        "~/ds4-not-here/stop-deepseek-v4-flash-dspark.sh",
    ]


def _md5(node, path):
    return node.run(f"md5sum {ssh.qpath(path)}").stdout.split()[0]


@pytest.mark.twin
def test_rsync_to_workers_interrupted_then_resumed(nodes):
    """Cut by our timeout (throttled so it is mid-file), rsync leaves a partial file; the rerun resumes it
    (--partial: matched data > 0), files only the worker has survive (no --delete), and the copy is exact."""
    head, worker = nodes.head, nodes.node("worker")
    head.run(
        "rm -rf ~/lbt-sync && mkdir -p ~/lbt-sync/sub && head -c 4000000 /dev/urandom > ~/lbt-sync/big.bin"
        " && echo small > ~/lbt-sync/sub/small.txt"
    )
    worker.run("rm -rf ~/lbt-sync && mkdir -p ~/lbt-sync && echo mine > ~/lbt-sync/worker-only.txt")
    try:
        with pytest.raises(ssh.CommandTimeout):
            transfers.rsync_to_workers(nodes, "~/lbt-sync", timeout_s=1.5, bwlimit_kib=1000)
        assert process_gone(head, "rsyn[c] .*lbt-sync")  # hung up (both ends), not left running
        partial = int(worker.run("stat -c %s ~/lbt-sync/big.bin").stdout)
        assert 0 < partial < 4000000
        stats = transfers.rsync_to_workers(nodes, "~/lbt-sync", timeout_s=60)["worker"]
        assert stats.matched_data >= partial * 0.9 and stats.literal_data < 4000000
        assert stats.total_file_size == 4000006
        assert _md5(worker, "~/lbt-sync/big.bin") == _md5(head, "~/lbt-sync/big.bin")
        assert worker.run("cat ~/lbt-sync/worker-only.txt ~/lbt-sync/sub/small.txt").stdout == "mine\nsmall\n"
        again = transfers.rsync_to_workers(nodes, "~/lbt-sync/", timeout_s=60)["worker"]
        assert (again.files_transferred, again.literal_data) == (0, 0)  # nothing left to send
    finally:
        for node in (head, worker):
            node.run("rm -rf ~/lbt-sync")


# --- resuming a cut rsync (no twin: an executor that answers as the head and the worker would) ------------


class CutOnce(ssh.Executor):
    """Answers rsync as a head whose first push loses its connection (exit `first_exit`), then completes;
    the worker's receiver of the cut push is still listed by pgrep once, then gone."""

    def __init__(self, first_exit: int):
        super().__init__(dry_run=True)  # no ssh config is resolved; nothing is sent
        self.first_exit, self.rsyncs, self.pgreps = first_exit, 0, 0

    def run(self, node, command, **kwargs):
        if command.startswith("rsync"):
            self.rsyncs += 1
            if self.rsyncs == 1:
                raise ssh.CommandFailed(self._record(ssh.CommandResult(node.alias, command, self.first_exit)))
            return self._record(ssh.CommandResult(node.alias, command, 0, stdout=STATS))
        self.pgreps += 1
        receiver = "4242 rsync --server -logDtprHe.iLsfxCIvu --partial . ds4-f-mia-anemll-0731/\n"
        return self._record(ssh.CommandResult(node.alias, command, 0, stdout=receiver if self.pgreps == 1 else ""))


def test_a_cut_connection_is_resumed_after_the_receiver_exits():
    executor = CutOnce(first_exit=255)
    nodes = ssh.LaneNodes(load_lane("anemll-0731"), executor=executor)
    stats = transfers.rsync_to_workers(nodes, "~/ds4-f-mia-anemll-0731", attempts=3)
    assert (stats["worker"].attempts, stats["worker"].files_transferred) == (2, 2)
    assert [(r.node, r.command.split()[0]) for r in executor.history] == [
        ("head", "rsync"),
        ("worker", "pgrep"),
        ("worker", "pgrep"),
        ("head", "rsync"),
    ]


def test_a_cut_is_not_retried_without_attempts_nor_an_error_a_rerun_meets_again():
    with pytest.raises(ssh.CommandFailed, match="exit 255"):
        transfers.rsync_to_workers(ssh.LaneNodes(load_lane("anemll-0731"), executor=CutOnce(255)), "~/x")
    executor = CutOnce(first_exit=23)  # partial transfer due to file errors
    with pytest.raises(ssh.CommandFailed, match="exit 23"):
        transfers.rsync_to_workers(ssh.LaneNodes(load_lane("anemll-0731"), executor=executor), "~/x", attempts=3)
    assert executor.rsyncs == 1


def test_receivers_of_a_path():
    lines = (
        "11 rsync --server -logDtprHe.iLsfxCIvu --partial . .cache/hub/models--a--b/\n"
        "12 rsync --server --sender -logDtpre.iLsfxCIvu . .cache/hub/models--a--b/\n"
        "13 rsync --server -logDtprHe.iLsfxCIvu --partial . ds4-f-mia-anemll-0731/\n"
        "14 bash -c pgrep -af 'rsync --server' || true\n"
    )
    assert transfers.receivers_of(lines, "~/.cache/hub/models--a--b") == [lines.splitlines()[0]]
    assert transfers.receivers_of(lines, "~/.cache/hub/models--a") == []


def test_rsync_to_chosen_workers_only():
    params = load_lane("anemll-0731")
    extra = NodeParams(alias="worker2", role="worker", host="10.0.0.3", user="milo", roce_ip="10.0.0.3")
    nodes = ssh.LaneNodes(
        lane_with(params, nodes=[n.model_dump() for n in params.nodes] + [extra.model_dump()]), dry_run=True
    )
    stats = transfers.rsync_to_workers(nodes, "~/d", workers=[nodes.node("worker2")])
    assert list(stats) == ["worker2"] and nodes.executor.commands() == [
        "head: rsync -aH --partial --info=stats2 ~/d/ milo@10.0.0.3:d/"
    ]
