"""A lane's checkout made as a copy of the known-good one (lanebook.ops.checkout_copy): where it comes from, the seed's
`cp -a` line that never copies over a checkout (run here by a real shell, odd paths included), and on the twin's
nodes a copy whose fingerprint is its source's, the source's unchanged."""

import subprocess

import pytest
from lanebook.base.errors import LanebookError
from lanebook.lane.params import lane_with, load_lane
from lanebook.nodes import ssh
from lanebook.ops import checkout_copy
from lanebook.ops.rollback import probe_trees


def test_the_source_is_checkout_from_else_the_rollback_lanes_checkout():
    assert checkout_copy.copy_source(load_lane("anemll-0731")) == "~/ds4-f-mia-anemll-1m6"  # seed 000's cp -a
    assert checkout_copy.copy_source(load_lane("twin")) == load_lane("twin-1m6").checkout
    assert checkout_copy.copy_source(load_lane("anemll-1m6")) is None  # its own checkout, not Patch3's
    assert checkout_copy.copy_source(load_lane("patch3-c12")) is None  # the end of the chain
    assert checkout_copy.copy_source(lane_with(load_lane("patch3-c12"), checkout_from="/srv/x")) == "/srv/x"


def test_the_command_reads_as_the_seeds_line():
    command = checkout_copy.copy_command("~/ds4-f-mia-anemll-1m6", "~/ds4-f-mia-anemll-0731")
    assert command.endswith("; cp -a ~/ds4-f-mia-anemll-1m6 ~/ds4-f-mia-anemll-0731")


def sh(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60)


def test_a_real_shell_copies_once_and_never_over_a_checkout(tmp_path):
    source = tmp_path / "known good $(touch pwned); `x`"
    (source / "scripts").mkdir(parents=True)
    (source / "scripts" / "lane-env.sh").write_text("echo hi\n")
    (source / "scripts" / "lane-env.sh").chmod(0o755)
    target = tmp_path / "new lane; rm -rf ~"
    command = checkout_copy.copy_command(str(source), str(target))
    assert sh(command).returncode == 0
    assert (target / "scripts" / "lane-env.sh").read_text() == "echo hi\n"
    assert (target / "scripts" / "lane-env.sh").stat().st_mode & 0o777 == 0o755  # cp -a keeps modes
    again = sh(command)  # cp -a onto a directory would copy into it: refused instead
    assert again.returncode == checkout_copy.REFUSED_EXIT and "nothing copied over it" in again.stderr
    assert sorted(p.name for p in target.iterdir()) == ["scripts"]
    assert not (tmp_path / "pwned").exists() and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [source.name, target.name]
    )


@pytest.mark.twin
def test_on_a_twin_node_the_copy_is_its_sources_tree_and_the_source_is_unchanged(twin):
    params = load_lane("twin")
    source, target, hub = load_lane("twin-1m6").checkout, f"~/lbt-checkout-copy-{id(params)}", params.weights.hub_dir
    with ssh.LaneNodes(params) as nodes:
        head = nodes.head
        before = probe_trees(head, source, hub)["checkout"]
        try:
            checkout_copy.copy_checkout(head, source, target)
            after = probe_trees(head, source, hub)["checkout"]
            copy = probe_trees(head, target, hub)["checkout"]
            assert checkout_copy.copy_results({"head": before}, {"head": after}, {"head": copy}) == {
                "head": (True, True)
            }
            assert copy["entries"] == before["entries"] > 0
            with pytest.raises(LanebookError, match="appeared since it was looked for: nothing copied over it"):
                checkout_copy.copy_checkout(head, source, target)
            assert probe_trees(head, target, hub)["checkout"]["sha256"] == copy["sha256"]  # nothing nested into it
            assert [n.alias for n in checkout_copy.absent_on(nodes, target)] == ["worker"]
        finally:
            head.run(f"rm -rf {ssh.qpath(target)}")


def test_a_copy_that_differs_or_a_source_that_changed_is_told_apart():
    tree = {"exists": True, "sha256": "a"}
    judged = checkout_copy.copy_results(
        {"head": tree, "worker": tree},
        {"head": tree, "worker": {"exists": True, "sha256": "b"}},
        {"head": {"exists": True, "sha256": "c"}, "worker": {"exists": True, "sha256": "b"}},
    )
    assert judged == {"head": (True, False), "worker": (False, True)}
