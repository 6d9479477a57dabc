"""The lane's env on its nodes (lanebook.ops.checkout_env): records and commands exactly (no twin), then on the twin's
real
sshd nodes: render into the head's checkout with a backup per changed file, a second render that changes nothing,
a restore that puts the bytes back exactly and refuses an edited file, a created env file moved aside, a file changed
between read and write left alone, and the same-bytes check naming what differs."""

import itertools
import os

import pytest
from lanebook.base.errors import LanebookError
from lanebook.lane.params import lane_with, load_lane
from lanebook.nodes import ssh
from lanebook.ops import checkout_env as ce
from lanebook.ops import transfers

SHA_A, SHA_B = "a" * 64, "b" * 64


# --- records and commands, no twin ----------------------------------------------------------------------


def test_a_backup_goes_into_the_record_and_back():
    backup = ce.Backup("~/co/.env.dspark", "~/co/.env.dspark.bak-20261201T000000Z", SHA_A, SHA_B)
    assert backup.to_json() == {
        "path": "~/co/.env.dspark",
        "backup": "~/co/.env.dspark.bak-20261201T000000Z",
        "sha256_backup": SHA_A,
        "sha256_new": SHA_B,
    }
    assert ce.Backup.from_json(backup.to_json()) == backup
    created = ce.Backup("~/co/.env.dspark", None, None, SHA_B)
    assert ce.Backup.from_json(created.to_json()) == created
    with pytest.raises(LanebookError, match="not a backup entry of an env run"):
        ce.Backup.from_json({"path": "~/co/x"})
    with pytest.raises(LanebookError, match="a backup path needs its sha256"):
        ce.Backup.from_json({**backup.to_json(), "sha256_backup": None})


def env_record(**changes):
    record = {
        "run_id": "abcd1234",
        "runbook": "env",
        "lane": "twin",
        "dry_run": False,
        "figures": {"backups": [ce.Backup("~/co/x", "~/co/x.bak-1", SHA_A, SHA_B).to_json()]},
    }
    return {**record, **changes}


def test_only_an_env_run_of_the_lane_that_changed_files_is_restored():
    assert ce.backups_of_run(env_record(), "twin") == [ce.Backup("~/co/x", "~/co/x.bak-1", SHA_A, SHA_B)]
    refusals = [
        (env_record(runbook="launch"), "run abcd1234 is a launch run, not an env run"),
        (env_record(lane="anemll-0731"), "run abcd1234 was on lane anemll-0731, not twin"),
        (env_record(dry_run=True), "run abcd1234 was a dry run: it changed nothing"),
        (env_record(figures={"backups": []}), "run abcd1234 changed no file"),
        (env_record(figures={}), "run abcd1234 changed no file"),
    ]
    for record, message in refusals:
        with pytest.raises(LanebookError, match=message):
            ce.backups_of_run(record, "twin")


def test_sha256sum_lines_are_read_by_name():
    out = f"{SHA_A}  docker-compose.dspark.yml\n{SHA_B}  scripts/lane-env.sh\nnot a line\n"
    assert ce._hashes(out) == {"docker-compose.dspark.yml": SHA_A, "scripts/lane-env.sh": SHA_B}


def test_a_dry_run_records_the_read_and_the_writes_and_sends_nothing():
    """The plan is the lane rendered into the reference checkout; each write requires the bytes a real run would read
    (a placeholder a shell would refuse) and keeps a backup; nothing is observed, so no backup is recorded."""
    nodes = ssh.LaneNodes(load_lane("anemll-0731"), dry_run=True)
    plan = ce.plan_on_head(nodes)
    assert plan.read == {} and plan.source.startswith("lanebook's reference checkout (dry run")
    assert plan.lint.ok and "dry run: no connection opened" in plan.lint.note
    assert set(plan.writes) == {"docker-compose.dspark.yml", ".env.dspark"}
    assert "+GPU_MEMORY_UTILIZATION_TEXT=0.85" in plan.diff
    change = ce.apply_plan(nodes, plan)
    assert change.dry_run and change.backups == []
    assert change.changed == [
        "~/ds4-f-mia-anemll-0731/docker-compose.dspark.yml",
        "~/ds4-f-mia-anemll-0731/.env.dspark",
    ]
    read, compose, env = nodes.executor.commands()
    assert read.startswith(
        "head: for f in ~/ds4-f-mia-anemll-0731/docker-compose.dspark.yml ~/ds4-f-mia-anemll-0731/.env.dspark "
    )
    assert compose == (
        "head: set -e; cd ~/ds4-f-mia-anemll-0731; "
        'test "$(sha256sum < docker-compose.dspark.yml 2>/dev/null | cut -c1-64)" = SHA256-AS-READ || '
        "{ echo 'docker-compose.dspark.yml: not the bytes lanebook expected (changed since)' >&2; exit 3; }; "
        f'b=docker-compose.dspark.yml.bak-{compose.split(".bak-")[1][:16]}; i=1; while test -e "$b"; do i=$((i + 1)); '
        f"b=docker-compose.dspark.yml.bak-{compose.split('.bak-')[1][:16]}-$i; done; cp -p docker-compose.dspark.yml "
        '"$b"; '
        't=$(mktemp .lanebook-docker-compose.dspark.yml-XXXXXX); trap \'rm -f "$t"\' EXIT; cat > "$t"; '
        'chmod --reference=docker-compose.dspark.yml "$t"; sync "$t"; mv -f "$t" docker-compose.dspark.yml; '
        'if test -n "${b:-}"; then sha256sum -- "$b"; fi; if test -e docker-compose.dspark.yml; then '
        "sha256sum -- docker-compose.dspark.yml; fi < docker-compose.dspark.yml"
    )
    assert env.startswith('head: set -e; cd ~/ds4-f-mia-anemll-0731; test "$(sha256sum < .env.dspark ')
    assert env.endswith("< .env.dspark")
    assert not ce.same_checkout(nodes).ok and ce.same_checkout(nodes).detail == "not observed (dry run)"


# --- on the twin's nodes ----------------------------------------------------------------------------------------

_dirs = itertools.count()


@pytest.fixture
def nodes(twin):
    """The twin lane on a copy of its checkout on the head only (~/lbt-ce-PID-N), removed from both nodes after."""
    base = load_lane("twin")
    checkout = f"~/lbt-ce-{os.getpid()}-{next(_dirs)}"
    with ssh.LaneNodes(lane_with(base, checkout=checkout)) as connected:
        connected.head.run(f"cp -a {base.checkout} {checkout}")
        try:
            yield connected
        finally:
            connected.each(f"rm -rf {checkout}")


def fixed_k(nodes):
    """The lane with its batch-size schedule removed: the seed's rollback to fixed K=5."""
    params = nodes.params
    return lane_with(params, speculative={**params.speculative.model_dump(), "schedule": None})


def read(nodes, name, node=None):
    return ce.read_node_files(node or nodes.head, [f"{nodes.params.checkout}/{name}"])[0]


def listing(nodes, node=None):
    return (node or nodes.head).run(f"ls -A {nodes.params.checkout}").stdout.split()


COMPOSE = "docker-compose.dspark.yml"
SCHEDULE = b"num_speculative_tokens_per_batch_size"


@pytest.mark.twin
def test_render_backs_up_then_restore_puts_the_bytes_back(nodes):
    original = read(nodes, COMPOSE)
    assert ce.render_on_head(nodes).backups == []  # the twin's checkout already runs the twin lane
    change = ce.render_on_head(nodes, fixed_k(nodes))
    checkout = nodes.params.checkout
    assert change.changed == [f"{checkout}/{COMPOSE}"] and "-        SPECULATIVE_CONFIG=" in change.diff
    (backup,) = change.backups
    rendered = read(nodes, COMPOSE)
    assert SCHEDULE in original and SCHEDULE not in rendered
    assert backup.path == f"{checkout}/{COMPOSE}" and backup.backup.startswith(f"{checkout}/{COMPOSE}.bak-")
    assert (backup.sha256_backup, backup.sha256_new) == (ce.sha256(original), ce.sha256(rendered))
    assert ce.read_node_files(nodes.head, [backup.backup])[0] == original
    assert ce.render_on_head(nodes, fixed_k(nodes)).backups == []  # idempotent: nothing changes, no backup

    restored = ce.restore_backups(nodes, change.backups)
    assert read(nodes, COMPOSE) == original  # byte for byte
    (undo,) = restored.backups  # the restore backed up what it replaced
    assert (undo.sha256_backup, undo.sha256_new) == (ce.sha256(rendered), ce.sha256(original))
    with pytest.raises(LanebookError, match=rf"^head:{checkout}/{COMPOSE} was edited since the env run changed it"):
        ce.restore_backups(nodes, change.backups)  # the file no longer holds what the render wrote
    ce.restore_backups(nodes, restored.backups)  # a restore is undone by restoring its own backups
    assert read(nodes, COMPOSE) == rendered


@pytest.mark.twin
def test_restore_refuses_an_edited_file_and_changes_nothing(nodes):
    change = ce.render_on_head(nodes, fixed_k(nodes))
    nodes.head.run(f"echo '# tuned by hand' >> {nodes.params.checkout}/{COMPOSE}")
    edited, files = read(nodes, COMPOSE), listing(nodes)
    with pytest.raises(
        LanebookError, match=rf"{COMPOSE} was edited since the env run changed it .* nothing was restored"
    ):
        ce.restore_backups(nodes, change.backups)
    assert read(nodes, COMPOSE) == edited and listing(nodes) == files
    outside = ce.Backup("~/elsewhere/x", None, None, SHA_A)
    with pytest.raises(LanebookError, match="~/elsewhere/x is not a file of lane twin's checkout"):
        ce.restore_backups(nodes, [outside])


@pytest.mark.twin
def test_a_created_env_file_is_moved_aside_by_the_restore(nodes):
    """No .env.dspark yet: the render starts it from the example (mode 600: it may hold keys); the restore moves it
    aside (kept, never deleted), and restoring the restore brings it back."""
    nodes.head.run(f"rm {nodes.params.checkout}/.env.dspark")
    change = ce.render_on_head(nodes)
    (created,) = [b for b in change.backups if b.path.endswith("/.env.dspark")]
    assert created.backup is None and created.sha256_backup is None
    assert "--- a/env.dspark.example" in change.diff
    written = read(nodes, ".env.dspark")
    assert ce.sha256(written) == created.sha256_new and b"GPU_MEMORY_UTILIZATION_TEXT=0.85" in written
    assert nodes.head.run(f"stat -c %a {nodes.params.checkout}/.env.dspark").stdout.strip() == "600"
    restored = ce.restore_backups(nodes, [created])
    assert read(nodes, ".env.dspark") is None
    (aside,) = restored.backups
    assert aside.sha256_new is None and ce.read_node_files(nodes.head, [aside.backup])[0] == written
    ce.restore_backups(nodes, restored.backups)
    assert read(nodes, ".env.dspark") == written


@pytest.mark.twin
def test_a_file_changed_after_it_was_read_is_left_alone(nodes):
    plan = ce.plan_on_head(nodes, fixed_k(nodes))
    nodes.head.run(f"echo '# edited meanwhile' >> {nodes.params.checkout}/{COMPOSE}")
    edited, files = read(nodes, COMPOSE), listing(nodes)
    with pytest.raises(
        LanebookError,
        match=rf"^head:{nodes.params.checkout}/{COMPOSE}: not the bytes lanebook expected "
        r"\(changed since\); nothing was changed$",
    ):
        ce.apply_plan(nodes, plan)
    assert read(nodes, COMPOSE) == edited and listing(nodes) == files


@pytest.mark.twin
def test_same_checkout_names_what_differs_and_what_is_missing(nodes):
    worker = nodes.node("worker")
    missing = ce.same_checkout(nodes)
    assert not missing.ok
    assert missing.nodes["worker"].detail.startswith("missing: .env.dspark, docker-compose.dspark.yml")
    transfers.sync_checkout(nodes)
    same = ce.same_checkout(nodes)
    assert same.ok and same.figure("sha256")["worker"] == same.figure("sha256")["head"]
    assert {"scripts/lane-env.sh", ".env.dspark", COMPOSE} <= set(same.figure("sha256")["head"])
    checkout = nodes.params.checkout
    worker.run(
        f"echo X=1 >> {checkout}/.env.dspark && rm {checkout}/scripts/lane-env.sh && touch {checkout}/scripts/mine.sh"
    )
    found = ce.same_checkout(nodes)
    assert not found.ok and found.nodes["worker"].detail == "differs: .env.dspark; missing: scripts/lane-env.sh"


def test_env_steps_in_a_dry_run_plan_write_and_copy_without_sending():
    from lanebook.steps.runbook import Runbook

    rb = Runbook("env", "anemll-0731", dry_run=True)
    plan, backups = ce.plan_step(rb, source="anemll-0731")
    assert backups == [] and rb.figures["changed"] == plan.changed
    ce.lint_step(rb, plan)
    assert rb.figures["lint_errors"] == ce.lint_errors(plan.lint) == [] and rb.checks[-1].outcome == "pass"
    ce.write_step(rb, plan, backups, source="anemll-0731")
    ce.copy_step(rb)
    assert rb.figures["backups"] == [] and "+GPU_MEMORY_UTILIZATION_TEXT=0.85" in plan.diff


def test_a_restore_skips_the_lint_and_lint_errors_name_file_and_line():
    from lanebook.recipe.lint import Finding, LintReport
    from lanebook.steps.runbook import Runbook

    rb = Runbook("env", "anemll-0731", dry_run=True)
    ce.lint_step(rb, None, restore="r1")
    assert (rb.checks[-1].what, rb.checks[-1].detail) == (
        "the checkout as rendered lints clean",
        "skipped: a restore puts back what run r1 replaced",
    )
    report = LintReport(
        [
            Finding("P01", "error", "breakable graphs", ".env.dspark", 7),
            Finding("P15", "warning", "only a warning", ".env.dspark", 9),
        ]
    )
    assert ce.lint_errors(report) == ["P01 .env.dspark:7 breakable graphs"]


def test_every_worker_of_a_four_node_lane_is_asked_for_the_heads_bytes():
    """same_checkout in a dry run: the head, then each of the three workers hashes its checkout; nothing observed."""
    nodes = ssh.LaneNodes(load_lane("anemll-0731-tp4"), dry_run=True)
    assert ce.same_checkout(nodes).detail == "not observed (dry run)"
    asked = [c.split(":", 1)[0] for c in nodes.executor.commands()]
    assert asked == ["head", "worker", "worker2", "worker3"]
    assert all("cd ~/ds4-f-mia-anemll-0731-tp4 " in c and "start-tp4.sh" in c for c in nodes.executor.commands())
