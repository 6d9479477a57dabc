"""Nothing lost: rsync never runs with --delete, weights are never deleted except `*.incomplete` files, every file
lanebook changes is backed up first and replaced atomically, and operations on one lane leave its rollback lane's
checkout and weights as they were (fingerprints before and after, on the twin)."""

from __future__ import annotations

import ast
import os
import re
import shlex
from pathlib import Path

import pytest
from helpers.recipe_dry_run import every_operation
from lanebook.base import files
from lanebook.base.paths import REPO
from lanebook.lane.params import lane_names, lane_with, load_lane
from lanebook.nodes.ssh import LaneNodes, qpath
from lanebook.ops import checkout_env, rollback, transfers, weights
from lanebook.recipe import render
from lanebook.twin.nodes import TwinLayout

LIB = REPO / "lib" / "lanebook"
DELETES = re.compile(r"(^|[\s;&|('\"])(rm|rmdir|unlink|shred|truncate)\s|\s-delete\b|--delete|--remove-source-files")


def _product_modules() -> list[Path]:
    return [p for p in LIB.rglob("*.py") if "twin" not in p.relative_to(LIB).parts]


@pytest.fixture(scope="module")
def dry_commands() -> dict[str, list[str]]:
    """Every node operation the runbooks make, dry-run on every shipped lane: the command lines a lane would get."""
    found = {}
    for name in lane_names():
        nodes = LaneNodes(load_lane(name), dry_run=True)
        every_operation(nodes)
        rollback.fingerprint(nodes)
        checkout_env.apply_plan(nodes, checkout_env.plan_on_head(nodes))
        found[name] = nodes.executor.commands()
    return found


def test_no_rsync_lanebook_builds_deletes(dry_commands):
    rsyncs = [c for lines in dry_commands.values() for c in lines if "rsync " in c]
    assert len(rsyncs) >= 2 * len(dry_commands)  # weights and checkout, every lane
    for line in rsyncs:
        words = shlex.split(line.split(": ", 1)[1])
        assert words[0] == "rsync" and "--partial" in words, line
        assert not [w for w in words if w.startswith("--del") or w == "--remove-source-files"], line


def test_no_module_holds_an_rsync_delete_option():
    """Outside docstrings, no string in the product library names a deleting rsync option."""
    found = []
    for path in _product_modules():
        tree = ast.parse(path.read_text())
        docstrings = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
            and n.body
            and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and re.search(r"--delete|--remove-source-files|--del\b", node.value)
            ):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []


def test_the_only_deletion_near_the_weights_is_of_incomplete_files_on_workers(dry_commands):
    for name, lines in dry_commands.items():
        params = load_lane(name)
        hub = shlex.quote(params.weights.hub_dir.removeprefix("~/"))
        deleting = [c for c in lines if DELETES.search(c.split(": ", 1)[1])]
        near_weights = [c for c in deleting if params.weights.hf_cache.removeprefix("~/") in c or hub in c]
        assert near_weights and all(c.split(": ", 1)[0] != "head" for c in near_weights), near_weights
        for line in near_weights:
            words = shlex.split(line.split(": ", 1)[1])
            assert words[0] == "find" and words[2:] == ["-name", "*.incomplete", "-type", "f", "-print", "-delete"], (
                line
            )
        in_checkout = [c for c in deleting if params.checkout.removeprefix("~/") in c]
        # the one removal there is of the replace command's own temporary file ($t, from mktemp), on exit
        assert all(not DELETES.search(c.replace("""trap 'rm -f "$t"' EXIT""", "")) for c in in_checkout), in_checkout


# --- files: backed up first, written atomically -----------------------------------------------------------------

# Every direct write in the product library, with why it is not an operator's file that needs a backup; any other
# write must go through lanebook.base.files (backup, then write_atomic).
DIRECT_WRITES = {
    "book.py": "the book's staging directory, rebuilt from scratch each time",
    "checkout_env.py": "a temporary file holding new bytes to send to the head",
    "hermes.py": "a temporary Hermes home lanebook creates and removes",
    "execute.py": "claims a new run output name (exist_ok=False: never an existing file)",
    "upgrade_plan.py": "claims a new upgrade plan record's name (exist_ok=False: never an existing file)",
    "audit.py": "appends one line to the run index (never rewrites it)",
    "files.py": "the atomic writer and the backup themselves",
    "lab.py": "the walkthrough's own state dir: JupyterLab setting defaults it generates, and its log",
    "compose_cli.py": "a temporary directory holding copies of the checkout's texts for `docker compose config`",
    "fleet_dag.py": "claims a new fleet run's folder (exist_ok=False) and writes its Airflow log; Airflow's lock file",
    "lane_from_checkout.py": "a temporary copy of the checkout the imported lane is rendered into (the round trip)",
    "watch.py": "appends one line a round to the watch's series (never rewrites it)",
    "watch_unit.py": "a temporary file holding the unit's bytes to send to the head",
    "casebase.py": "replaces its own JSON copy of a case file in __pycache__ (parsed data, never an operator's file)",
}
WRITE_CALLS = re.compile(
    r"\.(write_text|write_bytes|touch)\(|\bopen\([^)]*[\"'][wax]|os\.(replace|rename|remove|unlink)\(|"
    r"shutil\.(move|copy\w*|rmtree)\(|\.unlink\(|\.rename\("
)


def test_every_write_outside_lanebook_files_is_a_new_or_scratch_file():
    writers = {p.name for p in _product_modules() if WRITE_CALLS.search(p.read_text())}
    assert writers <= set(DIRECT_WRITES), sorted(writers - set(DIRECT_WRITES))


def test_render_backs_up_each_file_before_it_replaces_it(tmp_path, monkeypatch):
    """At the moment render writes a file, a backup with the file's old bytes is already beside it."""
    from helpers.recipe_fixtures import checkout

    directory = checkout(tmp_path, env="MAX_NUM_SEQS=4\n")
    old = {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}
    real_write = files.write_atomic
    written = []

    def checked_write(path, text, mode=None):
        path = Path(path)
        if path.name in old:
            backups = [b for b in path.parent.glob(f"{path.name}.bak-*") if b.read_bytes() == old[path.name]]
            assert backups, f"{path.name} written before it was backed up"
        written.append(path.name)
        real_write(path, text, mode)

    monkeypatch.setattr(render, "write_atomic", checked_write)
    result = render.render_checkout(load_lane("anemll-0731"), directory)
    assert sorted(written) == sorted(Path(p).name for p in result.changed) and len(result.backups) == len(written) >= 1


def test_a_node_file_is_backed_up_before_it_is_replaced_through_a_temporary_file():
    """The one command that replaces a checkout file on the head: refuse if it changed, back up, write to a temporary
    file beside it, rename over it; in that order."""
    command = checkout_env.replace_command("~/ck", ".env.dspark", "20260101T000000Z", "ab" * 32, from_stdin=True)
    steps = [s.strip() for s in command.split("; ")]
    order = [
        next(i for i, s in enumerate(steps) if marker in s)
        for marker in ('test "$(sha256sum', 'cp -p .env.dspark "$b"', 'cat > "$t"', 'mv -f "$t" .env.dspark')
    ]
    assert order == sorted(order), steps


# --- the rollback lane is untouched by operations on another lane (twin) ----------------------------------------


@pytest.mark.twin
def test_operations_on_the_twin_lane_leave_its_rollback_lane_as_it_was(twin):
    """Fingerprint the rollback lane (twin-1m6), then on the twin lane (its checkout copied to ~/lbt-ds-PID): rsync
    the checkout and the weights to the worker, delete `*.incomplete` there, render a changed env into the head's
    checkout and restore it; the rollback lane's checkout and weights fingerprint the same on every node, and no
    rsync the worker received deleted anything."""
    base = load_lane("twin")
    target = rollback.rollback_target(base)
    params = lane_with(base, checkout=f"~/lbt-ds-{os.getpid()}")
    worker_log = TwinLayout(Path(twin["twin_dir"])).command_log("worker")
    offset = worker_log.stat().st_size if worker_log.exists() else 0
    with LaneNodes(target) as rollback_nodes, LaneNodes(params) as nodes:
        before = rollback.fingerprint(rollback_nodes)
        nodes.head.run(f"cp -a {qpath(base.checkout)} {qpath(params.checkout)}")
        try:
            transfers.sync_checkout(nodes)
            weights.sync_to_workers(nodes)
            assert weights.not_incomplete(weights.clean_incomplete_on_workers(nodes)) == []
            fixed_k = lane_with(params, speculative={**params.speculative.model_dump(), "schedule": None})
            change = checkout_env.render_on_head(nodes, fixed_k)
            assert change.backups, "the render changed nothing to back up"
            checkout_env.restore_backups(nodes, change.backups)
        finally:
            nodes.each(f"rm -rf {qpath(params.checkout)}")
        after = rollback.fingerprint(rollback_nodes)
    assert before["observed"] and set(before["nodes"]) == {"head", "worker"}
    assert all(tree["exists"] for trees in before["nodes"].values() for tree in trees.values())
    assert rollback.fingerprint_differences(before, after) == []
    received = [c for c in worker_log.read_bytes()[offset:].split(b"\0") if c.startswith(b"rsync --server")]
    assert len(received) >= 2 and not [c for c in received if b"--delete" in c or b"--remove-source" in c]
