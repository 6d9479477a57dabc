"""A new checkout beside the old one (lanebook.ops.checkout_upgrade): what REF may be, the new checkout's name, the one
command the head runs (quoted, never writing under the old checkout), a dry run that sends nothing, and on the twin
a checkout made at REF, found again, refused at another commit, the old checkout's tree unchanged."""

import pytest
from helpers.lanebook_runs import offline
from helpers.twin_helpers import private_twin
from lanebook.base.errors import LanebookError
from lanebook.lane.params import load_lane
from lanebook.nodes import ssh
from lanebook.ops import checkout_upgrade
from lanebook.twin import control
from lanebook.twin.remote import AUG22, JUL31

SHA = "83ddf4c470a51fad3aa40f358ca8bff3221ad07e"


@pytest.mark.parametrize("ref", ["-o", "main..other", "a b", "x;rm -rf ~", "tag.lock", "$(id)", "", "v1/"])
def test_a_ref_that_is_no_commit_branch_or_tag_is_refused(ref):
    with pytest.raises(LanebookError, match="commit, branch or tag"):
        checkout_upgrade.check_ref(ref)


def test_the_new_checkout_is_named_beside_the_old_by_its_commit():
    assert checkout_upgrade.beside("~/ds4-f-mia-anemll-0731/", SHA) == "~/ds4-f-mia-anemll-0731@83ddf4c470a5"


def test_the_command_quotes_the_ref_and_the_checkout_and_writes_only_beside_it():
    command = checkout_upgrade.make_command("~/ds4 f/x", "v1.0")
    assert "old=~/'ds4 f/x'; " in command and "'v1.0^{commit}'" in command and "fetch --quiet origin v1.0" in command
    assert 'git -C "$old" remote get-url origin' in command and 'git -C "$old" fetch' not in command
    assert 'mktemp -d "$old@fetch.XXXXXX"' in command and 'rm -rf -- "$stage"' in command


def test_a_dry_run_sends_nothing_and_knows_no_commit():
    with ssh.LaneNodes(load_lane("anemll-0731"), dry_run=True) as nodes:
        made = checkout_upgrade.make_beside(nodes, "main")
        assert checkout_upgrade.old_checkout_trees(nodes) == {}
        commands = nodes.executor.commands()
    assert made.commit is None and made.path == "~/ds4-f-mia-anemll-0731@main"
    with ssh.LaneNodes(load_lane("anemll-0731"), dry_run=True) as nodes:  # a full commit names it as a run would
        assert (
            checkout_upgrade.make_beside(nodes, "489af95896" + "84" * 15).path == "~/ds4-f-mia-anemll-0731@489af9589684"
        )
    assert commands[0].startswith("head: set -eu; old=~/ds4-f-mia-anemll-0731; ")


def test_tree_changes_name_the_node_whose_tree_moved():
    before = {"head": {"path": "/h/c", "sha256": "a" * 64}, "worker": {"path": "/w/c", "sha256": "b" * 64}}
    after = {"head": before["head"], "worker": {"path": "/w/c", "sha256": "c" * 64}}
    assert checkout_upgrade.tree_changes(before, before) == []
    assert checkout_upgrade.tree_changes(before, after) == ["worker: /w/c changed (bbbbbbbbbbbb → cccccccccccc)"]


@pytest.mark.twin
def test_on_the_twin_the_new_checkout_is_made_found_again_and_never_replaced(tmp_path):
    with private_twin(tmp_path / "twin", faults=[]):
        params = load_lane("twin-1m6")
        shas = control.recipe_shas()
        control.lay_out_checkout(params, JUL31)
        with ssh.LaneNodes(params) as nodes:
            before = checkout_upgrade.old_checkout_trees(nodes)
            made = checkout_upgrade.make_beside(nodes, shas[AUG22][:10])  # a short commit: found in the clone
            assert made.made and made.commit == shas[AUG22] and made.old_commit == shas[JUL31]
            assert checkout_upgrade.copy_to_workers(nodes, made).outcome == "pass"
            again = checkout_upgrade.make_beside(nodes, "main")  # main's tip is that commit: the same checkout, kept
            assert not again.made and again.path == made.path
            old, new = checkout_upgrade.read_sides(nodes.head, params.checkout, made.path)
            nodes.head.run(f"git -C {ssh.qpath(made.path)} checkout --quiet --detach {shas[JUL31]}")
            with pytest.raises(LanebookError, match="at another commit"):
                checkout_upgrade.make_beside(nodes, "main")
            assert checkout_upgrade.tree_changes(before, checkout_upgrade.old_checkout_trees(nodes)) == []
    assert "GPU_MEMORY_UTILIZATION_TEXT" in new.example.text and "GPU_MEMORY_UTILIZATION_TEXT" not in old.example.text


def test_lanebook_upgrade_to_a_ref_in_a_dry_run_opens_no_connection_and_writes_nothing(tmp_path):
    """`lanebook upgrade --lane anemll-0731 --to REF --dry-run` offline: the head's clone command and the rsync shown,
    exit 0, nothing recorded."""
    done = offline(tmp_path, "upgrade --lane anemll-0731 --to main --dry-run", timeout=120)
    assert "upgrade: dry-run (nothing observed)" in done.stdout, done.stdout + done.stderr
    assert "head: set -eu; old=~/ds4-f-mia-anemll-0731; " in done.stdout
    assert "rsync -aH --partial" in done.stdout and list(tmp_path.iterdir()) == []
