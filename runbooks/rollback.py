# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Roll the lane back
#
# **What you'll do:** fall back from this lane to its rollback lane (the lane file's `rollback:`, e.g.
# anemll-0731 → anemll-1m6 → patch3-c12): fingerprint the rollback lane's checkout and weights on every node
# and compare them with the fingerprint recorded when this lane was promoted; stop this lane on all nodes
# (orphaned workers too); clean shared memory and page cache on both nodes; relaunch the rollback lane from
# its own checkout with its own launcher line; run its gates as a recorded run of their own; fingerprint it
# again; and print the one line of Hermes's provider block that changes.
#
# **Time:** a minute or two to stop, then a cold bind of 8–15 minutes on a real lane; about a minute on the
# twin. **Risk:** high — the lane stops serving until the rollback lane is up. Headless, it needs `--yes`
# (or `-p confirm=True`).
# **Rollback:** this is the rollback. To go forward again: `stop --lane ROLLBACK_LANE`, then `launch` this
# lane.
#
# **Keep the rollback lane boring:** it is the known-good fallback only while nothing touches it. This run
# refuses to roll back onto a checkout or weights tree that changed since it was fingerprinted, and fails if
# anything it does writes into them.
#
# **Prerequisites** (checked below): the lane names a rollback lane on the same pair; that lane lints clean,
# its checkout and its weights are on every node; nothing but these two lanes serves on the pair.

# %% tags=["parameters"]
lane = "twin"          # the lane to roll back from: a lane name under params/ or a lane YAML path
dry_run = False        # record the commands instead of sending them (opens no connection)
confirm = None         # destructive steps go ahead: True (`lanebook run --yes`), None: on the twin only

# %%
from pathlib import Path

from IPython.display import Markdown, display

from lanebook import audit, launcher, memory, rollback, transfers, weights
from lanebook.effective import live_mismatches
from lanebook.errors import LanebookError
from lanebook.execute import run_runbook
from lanebook.lint import lint_lane_checkout
from lanebook.logs import live_command
from lanebook.nodes import Lane
from lanebook.paths import outputs_dir
from lanebook.pitfalls import troubleshooting_table
from lanebook.runbook import Runbook

rb = Runbook("rollback", lane, dry_run=dry_run, confirm=confirm)
p = rb.params

# %% [markdown]
# ## Troubleshooting
# What goes wrong at this stage and what to do, generated from the pitfall registry.

# %%
troubleshooting_table("rollback")

# %% [markdown]
# ## Prerequisites
# The rollback lane is read from this lane's file and acted on with the same commands log (a dry run shows
# both lanes' commands together). Both lanes want the whole pair: only they may be running on it. If the
# rollback lane is already up and this lane down, an earlier rollback got that far: steps 2–4 are skipped
# and the running rollback lane is verified instead.

# %%
with rb.step("prerequisites", fix="name a shipped rollback lane on the same pair in the lane file; run `weights "
             "--lane ROLLBACK_LANE` for its weights; stop whatever else serves on the pair with its own `stop`"):
    try:
        target = rollback.rollback_target(p)
    except LanebookError as exc:
        rb.expect(False, "the lane names a rollback lane that loads", exc, local=True)
    ROLLBACK_LANE = target.name
    rb.record(rollback_lane=ROLLBACK_LANE)
    moved = rollback.pair_differences(p, target)
    rb.expect(not moved, f"{ROLLBACK_LANE} runs on the same pair as {p.name}", "; ".join(moved), local=True)
    target_lane = Lane(target, executor=rb.lane.executor)
    report = lint_lane_checkout(target, dry_run=rb.dry_run)
    rb.expect(report.ok, f"what {ROLLBACK_LANE} runs lints clean",
              "; ".join(f"{f.id} {f.message}" for f in report.findings if f.severity == "error") or report.linted_summary(),
              local=True)
    rb.expect(transfers.checkout_ok(target_lane), f"{ROLLBACK_LANE}'s checkout present on every node", target.checkout)
    complete = weights.check_weights(target_lane)
    rb.expect(complete, f"{ROLLBACK_LANE}'s weights complete on every node", complete.summary())
    current, fallback = launcher.lane_containers(rb.lane), launcher.lane_containers(target_lane)
    rb.record(state_before=current.state, rollback_state_before=fallback.state)
    ours = {n for names in [*current.running.values(), *fallback.running.values()] for n in names}
    others = {a: [n for n in names if n not in ours] for a, names in launcher.vllm_containers(rb.lane).items()}
    rb.expect(not any(others.values()), "no other lane serves on the pair", {a: n for a, n in others.items() if n} or "")
    rb.expect(fallback.state in (launcher.LANE_DOWN, launcher.LANE_UP), f"{ROLLBACK_LANE} is cleanly down or up",
              fallback.summary())
    already_rolled_back = fallback.state == launcher.LANE_UP
    rb.expect(not already_rolled_back or current.state == launcher.LANE_DOWN,
              f"{p.name} and {ROLLBACK_LANE} do not both hold the pair", f"{p.name}: {current.summary()}")

# %% [markdown]
# ## Step 1 — Fingerprint the rollback lane before anything changes
# On every node, one probe hashes the rollback lane's checkout tree (every file's content, mode, size and
# mtime) and its hub model dir (each blob by its name — its sha256 — size and mtime; refs hashed). Expected:
# equal to the most recent fingerprint of that lane in the audit trail (`rollback_fingerprint`, recorded
# when a promotion starts). A difference means the fallback is no longer the tree that was known good:
# nothing is stopped.

# %%
with rb.step("1 fingerprint before", fix="the rollback lane changed since it was fingerprinted: find what changed "
             "(the newest file is named), restore the known-good checkout or weights, then run `rollback` again; "
             "nothing was stopped"):
    before = rollback.fingerprint(target_lane)
    rb.record(rollback_fingerprint_before=before)
    display(Markdown(f"`{ROLLBACK_LANE}` fingerprints (checkout, weights): `{rollback.short(before)}`"))
    earlier = rollback.recorded_fingerprint(audit.read_runs(), ROLLBACK_LANE)
    if earlier is None:
        rb.skip(f"{ROLLBACK_LANE} untouched since its recorded fingerprint",
                f"no run in the audit trail recorded a fingerprint of {ROLLBACK_LANE} (`promote` records one)")
    else:
        record, recorded = earlier
        rb.record(fingerprint_compared_with=record.get("run_id"))
        changes = rollback.fingerprint_differences(recorded, before)
        rb.expect(not changes, f"{ROLLBACK_LANE} untouched since {record.get('runbook')} run {record.get('run_id')} "
                               f"fingerprinted it ({record.get('started_at')})", "; ".join(changes) or "equal")

# %% [markdown]
# ## Step 2 — Stop this lane on all nodes
# `cd CHECKOUT && ./stop-deepseek-v4-flash-dspark.sh` from the head (after confirmation), then any worker
# still running this lane's container is stopped with `docker compose -p PROJECT … down` (an orphaned
# worker, P16). Expected: no container of this lane on any node.

# %%
with rb.step("2 stop", fix="run `status` to see what still runs and `stop` to finish stopping this lane, "
             "then `rollback` again"):
    if already_rolled_back:
        rb.skip(f"{p.name} stopped on every node", f"{ROLLBACK_LANE} is already up and {p.name} down")
    else:
        rb.confirm(f"stop lane {p.name} on every node and relaunch {ROLLBACK_LANE} from {target.checkout}")
        stopped = launcher.stop_lane(rb.lane)
        rb.record(stop_script=stopped.launcher.outcome)
        rb.expect(stopped.launcher.ok, "the stop script exits 0", stopped.launcher.summary())
        orphans = launcher.stop_orphaned_workers(rb.lane)
        rb.record(orphaned_workers_stopped=orphans)
        left = launcher.lane_containers(rb.lane)
        rb.expect(not left.left, f"no container of {p.name} left on any node",
                  (f"stopped orphaned: {orphans}; " if orphans else "") + left.summary())

# %% [markdown]
# ## Step 3 — Clean SHM and page cache on both nodes
# `sudo -n sh -c 'rm -rf /dev/shm/*; sync; echo 3 > /proc/sys/vm/drop_caches'` on each node (refused while
# any vLLM container runs), then look again. Expected: none of the segments /dev/shm held is left, and free
# memory covers the rollback lane's GPU_MEMORY_UTILIZATION (sticky UMA, P04).

# %%
with rb.step("3 clean memory", fix="drop caches on both nodes again (`sudo sh -c 'sync; echo 3 > "
             "/proc/sys/vm/drop_caches'`) or reboot, then `rollback` again; never `docker system prune -af`"):
    if already_rolled_back:
        rb.skip("SHM and page cache cleaned on every node", f"{ROLLBACK_LANE} is up; memory is never cleaned under a server")
    else:
        cleaned = memory.clean_memory(rb.lane)
        rb.record(free_gib_after_cleanup=cleaned.figure("free_gib"))
        rb.expect(cleaned, "no stale SHM segment left on any node, free memory read back", cleaned.summary())
        free = memory.check_sticky_uma(target_lane)
        rb.record(free_gib=free.figure("free_gib"))
        rb.expect(free, f"enough free memory on every node for {ROLLBACK_LANE}", free.summary())

# %% [markdown]
# ## Step 4 — Relaunch the rollback lane from its own checkout
# Legacy units masked (P13), then from the head: `cd ROLLBACK_CHECKOUT && PROJECT_NAME=… WAIT_ATTEMPTS=…
# WAIT_SECONDS=… ./start-deepseek-v4-flash-dspark.sh` (after confirmation). Expected: launcher exit 0 (the
# API answered a minimal chat), the rollback lane up on every node, and its live `vllm serve` command
# carrying its own values — for the preview-weights lane fixed K=5: no `num_speculative_tokens_per_batch_size`.
# A cold bind takes 8–15 minutes on a real pair; SHM "60 seconds" lines are not fatal (P11).

# %%
with rb.step("4 relaunch", fix=f"run `status --lane {ROLLBACK_LANE}`; `stop --lane {ROLLBACK_LANE}`, then "
             "`rollback` again (or `launch` this lane to go forward)"):
    units = memory.mask_legacy_units(target_lane)
    rb.expect(units, "no legacy unit active: each inactive and masked on every node", units.summary())
    if already_rolled_back:
        rb.skip(f"launcher reports {ROLLBACK_LANE} up", "already up: verifying it instead of restarting it")
    else:
        rb.confirm(f"launch {ROLLBACK_LANE} from {target.checkout}")
        started = launcher.start_lane(target_lane)
        rb.record(launcher_outcome=started.outcome)
        rb.expect(started.ok, "launcher reports the rollback lane up", started.summary())
    up = launcher.lane_containers(target_lane)
    rb.expect(up.state == launcher.LANE_UP, f"{ROLLBACK_LANE} up on every node", up.summary())
    mismatches = live_mismatches(target, live_command(target_lane.head, launcher.container_name(target_lane)))
    rb.expect(not mismatches, f"the live command carries every value {ROLLBACK_LANE} sets", "; ".join(map(str, mismatches)))

# %% [markdown]
# ## Step 5 — The rollback lane's gates
# The `gates` runbook on the rollback lane, as a recorded run of its own (its executed notebook and its line
# in the audit trail). Expected: verdict pass (`dry-run` in a dry run).

# %%
with rb.step("5 gates", fix=f"read the gates record linked above; `diagnose --lane {ROLLBACK_LANE}`; to go "
             f"forward instead, `stop --lane {ROLLBACK_LANE}` and `launch` this lane"):
    gates = run_runbook("gates", target, {}, dry_run=rb.dry_run, yes=True)
    rb.record(gates_verdict=gates["verdict"], gates_run_id=gates["run_id"], gates_output=gates["output"])
    link = f"../{Path(gates['output']).relative_to(outputs_dir())}"  # from this record's folder, outputs/LANE/
    display(Markdown(f"| runbook | lane | verdict | failed step | record |\n|---|---|---|---|---|\n"
                     f"| gates | {gates['lane']} | {audit.verdict_label(gates['verdict'])} | {gates['failed_step'] or ''} "
                     f"| [{gates['run_id']}]({link}) |"))
    print(f"gates record: {gates['output']}")
    wanted = "dry-run" if rb.dry_run else "pass"
    rb.expect(gates["verdict"] == wanted, f"{ROLLBACK_LANE}'s gates verdict is {wanted}",
              f"{gates['verdict']}" + (f" at {gates['failed_step']}" if gates["failed_step"] else ""), local=True)

# %% [markdown]
# ## Step 6 — Fingerprint the rollback lane again
# Expected: equal to step 1's: stopping, cleaning, relaunching and the gates read the rollback lane's checkout
# and weights, and write nothing into them.

# %%
with rb.step("6 fingerprint after", fix="something this rollback ran wrote into the rollback lane's checkout or "
             "weights: find it (the newest file is named) and keep it out of the tree; the lane serves meanwhile"):
    after = rollback.fingerprint(target_lane)
    rb.record(rollback_fingerprint_after=after)
    changes = rollback.fingerprint_differences(before, after)
    rb.expect(not changes, f"{ROLLBACK_LANE}'s checkout and weights as step 1 found them", "; ".join(changes) or "equal")

# %% [markdown]
# ## Step 7 — Hermes
# The rollback lane serves under its own name: in Hermes's provider block, change the line(s) below (seed 000:
# `default_model` → the rollback lane's served name), then check the route with Hermes's `ROUTE_OK` smoke.

# %%
changes = rollback.hermes_changes(p, target)
rb.record(hermes_changes=changes, hermes_default_model={"from": p.served_model_name, "to": target.served_model_name})
display(Markdown(f"In `providers.{target.hermes.provider}`:\n\n```text\n" + "\n".join(changes) + "\n```" if changes else
                 f"Nothing changes in `providers.{target.hermes.provider}`: `default_model` stays `{target.served_model_name}`."))
print("\n".join(f"Hermes providers.{target.hermes.provider}.{line}" for line in changes))

# %% [markdown]
# ## Verdict

# %%
rb.show_commands()
verdict = rb.finish()
target_lane.close()
