"""The env runbook end to end on the session twin. Bare papermill on the twin lane passes and changes nothing (its
checkout already runs it). A lane rolled back to fixed K=5, on a copy of the twin's checkout, is rendered on the head
with a backup recorded, copied to the worker (same bytes), and a second run changes nothing; a restore by run id
refuses while the file is edited, then puts the bytes back exactly on both nodes. A lane at memory 0.80 stops at the
lint step (P07) before any file changes. A dry run on the real lanes prints the commands and opens no connection."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.lanebook_runs import dry_run_offline, run
from lanebook.base.paths import RUNBOOKS_DIR
from lanebook.lane.params import lane_with, load_lane
from lanebook.nodes import ssh
from lanebook.ops import checkout_env
from lanebook.runs.execute import read_verdict

PAPERMILL = str(Path(sys.executable).parent / "papermill")
COMPOSE = "docker-compose.dspark.yml"
FILES = (COMPOSE, ".env.dspark")


def papermill(out: Path, *params: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PAPERMILL, str(RUNBOOKS_DIR / "env.ipynb"), str(out), *params], capture_output=True, text=True, timeout=300
    )


def lane_file(tmp_path: Path, name: str, **changes) -> Path:
    """A lane file for the twin's nodes (YAML is a superset of JSON)."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps(lane_with(load_lane("twin"), name=name, **changes).model_dump()))
    return path


def hashes(nodes: ssh.LaneNodes, node: ssh.Node) -> dict[str, bytes]:
    return dict(zip(FILES, checkout_env.read_node_files(node, [f"{nodes.params.checkout}/{n}" for n in FILES])))


def backups_on(node: ssh.Node, checkout: str) -> list[str]:
    return [n for n in node.run(f"ls -A {checkout}").stdout.split() if ".bak-" in n]


def test_dry_runs_on_the_real_lanes_print_the_commands_and_open_no_connection(tmp_path):
    record, done = dry_run_offline(tmp_path, "env")
    assert record["verdict"] == "dry-run" and record["failed_step"] is None, done.stdout
    lines = [line.strip() for line in done.stdout.splitlines()]
    read = next(
        i for i, line in enumerate(lines) if line.startswith("head: for f in ~/ds4-f-mia-anemll-0731/docker-compose")
    )
    write = next(
        i for i, line in enumerate(lines) if line.startswith("head: set -e; cd ~/ds4-f-mia-anemll-0731; test ")
    )
    rsync = lines.index(
        "head: rsync -aH --partial --info=stats2 ~/ds4-f-mia-anemll-0731/ milo@10.0.0.2:ds4-f-mia-anemll-0731/"
    )
    hashed = [
        i
        for i, line in enumerate(lines)
        if line.startswith("worker: cd ~/ds4-f-mia-anemll-0731 2>/dev/null || exit 0;")
    ]
    assert read < write < rsync < hashed[-1] and "verdict: dry-run" in lines
    assert record["figures"]["backups"] == [] and record["figures"]["lint_errors"] == []

    # papermill itself, on the preview-weights lane
    preview = papermill(tmp_path / "preview.ipynb", "-p", "lane", "anemll-1m6", "-p", "dry_run", "True")
    assert preview.returncode == 0, preview.stderr[-2000:]
    assert read_verdict(tmp_path / "preview.ipynb")["verdict"] == "dry-run"
    assert "milo@10.0.0.2:ds4-f-mia-anemll-1m6/" in (tmp_path / "preview.ipynb").read_text()


@pytest.mark.twin
def test_bare_papermill_on_the_twin_passes_and_changes_nothing(twin, tmp_path):
    with ssh.LaneNodes(load_lane("twin")) as nodes:
        before = {n.alias: hashes(nodes, n) for n in nodes}
        done = papermill(tmp_path / "out.ipynb")
        assert done.returncode == 0, done.stderr[-2000:]
        verdict = read_verdict(tmp_path / "out.ipynb")
        assert verdict["verdict"] == "pass" and verdict["figures"]["backups"] == []
        assert {c["step"] for c in verdict["checks"] if c["outcome"] == "skipped"} == {
            "1 checkout",
            "4 write on the head",
            "5 copy to workers",
        }
        assert {n.alias: hashes(nodes, n) for n in nodes} == before
        assert "TWIN RUN" in (tmp_path / "out.ipynb").read_text()


@pytest.fixture(scope="module")
def copied(twin, tmp_path_factory):
    """A copy of the twin's checkout on the head only; removed from both nodes after the module."""
    checkout = f"~/lbt-env-runbook-{os.getpid()}"
    with ssh.LaneNodes(lane_with(load_lane("twin"), checkout=checkout)) as nodes:
        nodes.head.run(f"cp -a {load_lane('twin').checkout} {checkout}")
        try:
            yield nodes, tmp_path_factory.mktemp("env")
        finally:
            nodes.each(f"rm -rf {checkout}")


@pytest.mark.twin
def test_a_lint_error_stops_the_run_before_any_file_changes(copied):
    lane, tmp_path = copied
    checkout = lane.params.checkout
    low = lane_file(
        tmp_path, "twin-memory-080", checkout=checkout, checkout_from=False, env={"GPU_MEMORY_UTILIZATION": 0.80}
    )
    before, backups = hashes(lane, lane.head), backups_on(lane.head, checkout)  # the twin's own may hold some
    record, _ = run(tmp_path, "env", str(low), expect_exit=1)
    assert record["verdict"] == "fail" and record["failed_step"] == "3 lint", record
    assert any(e.startswith("P07 ") for e in record["figures"]["lint_errors"]), record["figures"]
    assert "nothing on the nodes was changed" in record["fix"]
    assert hashes(lane, lane.head) == before and backups_on(lane.head, checkout) == backups  # no backup made
    assert "P07" in (tmp_path / "outputs" / record["output"]).read_text()


@pytest.mark.twin
def test_render_copy_then_restore_by_run_id(copied):
    """The seed's rollback to fixed K=5 as a render, then the restore of that render."""
    lane, tmp_path = copied
    checkout = lane.params.checkout
    worker = lane.node("worker")
    fixed = lane_file(
        tmp_path,
        "twin-fixed-k",
        checkout=checkout,
        checkout_from=False,  # the worker gets the head's checkout by rsync (step 5)
        speculative={**lane.params.speculative.model_dump(), "schedule": None},
    )
    original = hashes(lane, lane.head)

    rendered, _ = run(tmp_path, "env", str(fixed), expect_exit=0)
    assert rendered["verdict"] == "pass" and rendered["figures"]["changed"] == [f"{checkout}/{COMPOSE}"], rendered
    (backup,) = rendered["figures"]["backups"]
    after = hashes(lane, lane.head)
    assert b"num_speculative_tokens_per_batch_size" in original[COMPOSE]
    assert b"num_speculative_tokens_per_batch_size" not in after[COMPOSE]
    assert backup["sha256_backup"] == checkout_env.sha256(original[COMPOSE])
    assert backup["sha256_new"] == checkout_env.sha256(after[COMPOSE])
    assert checkout_env.read_node_files(lane.head, [backup["backup"]]) == [original[COMPOSE]]
    assert hashes(lane, worker) == after  # the worker got the head's bytes
    assert rendered["figures"]["rsync"]["worker"]["files_transferred"] >= 1
    assert [c["step"] for c in rendered["confirmations"]] == ["4 write on the head", "5 copy to workers"]

    again, _ = run(tmp_path, "env", str(fixed), expect_exit=0)
    assert again["verdict"] == "pass" and again["figures"]["backups"] == [] and "rsync" not in again["figures"]

    path = f"{checkout}/{COMPOSE}"
    lane.head.run(f"echo '# tuned by hand' >> {path}")
    refused, _ = run(tmp_path, "env", str(fixed), "-p", f"restore='{rendered['run_id']}'", expect_exit=1)
    assert refused["verdict"] == "fail" and refused["failed_step"] == "2 plan", refused
    executed = (tmp_path / "outputs" / refused["output"]).read_text()
    assert f"head:{path} was edited since the env run changed it" in executed
    assert hashes(lane, lane.head)[COMPOSE] == after[COMPOSE] + b"# tuned by hand\n"  # nothing restored

    lane.head.run(f"sed -i '$ d' {path}")  # the hand edit undone: the file is what the render wrote
    restored, _ = run(tmp_path, "env", str(fixed), "-p", f"restore='{rendered['run_id']}'", expect_exit=0)
    assert restored["verdict"] == "pass", restored
    assert restored["figures"]["mode"] == "restore" and restored["figures"]["restored_run"] == rendered["run_id"]
    assert hashes(lane, lane.head) == original and hashes(lane, worker) == original  # byte for byte, on both nodes
    (undo,) = restored["figures"]["backups"]
    assert (undo["sha256_backup"], undo["sha256_new"]) == (backup["sha256_new"], backup["sha256_backup"])

    other, _ = run(tmp_path, "env", str(fixed), "-p", f"restore='{refused['run_id']}'", expect_exit=1)
    assert other["failed_step"] == "2 plan"
    assert f"run {refused['run_id']} changed no file" in (tmp_path / "outputs" / other["output"]).read_text()


@pytest.mark.twin
def test_a_lane_without_its_checkout_gets_a_copy_of_the_rollback_lanes(twin, tmp_path):
    """Seed 000's `cp -a ~/ds4-f-mia-anemll-1m6 ~/ds4-f-mia-anemll-0731` on the twin: the twin lane's checkout removed
    from both nodes (kept aside, put back after), env copies it from twin-1m6's and renders it; the rollback lane's
    fingerprint is unchanged."""
    from lanebook.ops.rollback import fingerprint, fingerprint_differences

    params, saved = load_lane("twin"), f"~/lbt-env-saved-{os.getpid()}"
    with ssh.LaneNodes(params) as nodes, ssh.LaneNodes(load_lane("twin-1m6")) as rollback_nodes:
        before = fingerprint(rollback_nodes)
        nodes.each(f"mv {params.checkout} {saved}")
        try:
            record, _ = run(tmp_path, "env", "twin", expect_exit=0)
            assert record["verdict"] == "pass", record
            copied = {"from": "~/ds4-f-mia-anemll-1m6", "to": params.checkout, "nodes": ["head", "worker"]}
            assert record["figures"]["checkout_copied"] == copied
            assert record["figures"]["backups"], "the copy was rendered into the twin lane"
            assert [c["step"] for c in record["confirmations"]][0] == "1 checkout"
            assert fingerprint_differences(before, fingerprint(rollback_nodes)) == []
            assert checkout_env.same_checkout(nodes).ok
        finally:
            nodes.each(f"if test -e {saved}; then rm -rf {params.checkout} && mv {saved} {params.checkout}; fi")
