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
# (orphaned workers too); clean shared memory and page cache on every node; relaunch the rollback lane from
# its own checkout with its own launcher line; run its gates as a recorded run of their own; fingerprint it
# again; and point the operator's Hermes config at the rollback lane (backed up first), proving ROUTE_OK through it.
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
lane = "twin"  # the lane to roll back from: a lane name under params/ or a lane YAML path
dry_run = False  # record the commands instead of sending them (opens no connection)
confirm = None  # destructive steps go ahead: True (`lanebook run --yes`), None: on the twin only
hermes_config = None  # the operator's Hermes config.yaml on the Hermes host; None: the lane's hermes.config

# %%
from IPython.display import Markdown, display
from lanebook.nodes.ssh import LaneNodes
from lanebook.ops import rollback
from lanebook.runs import audit
from lanebook.runs.execute import nested_step
from lanebook.steps.runbook import Runbook
from lanebook.verify import hermes

rb = Runbook("rollback", lane_name=lane, dry_run=dry_run, confirm=confirm)
p = rb.params

# %% [markdown]
# ## Prerequisites
# The rollback lane is read from this lane's file and acted on with the same commands log (a dry run shows
# both lanes' commands together). Both lanes want the whole pair: only they may be running on it. If the
# rollback lane is already up and this lane down, an earlier rollback got that far: steps 2–4 are skipped
# and the running rollback lane is verified instead.

# %%
with rb.step(
    "prerequisites",
    fix="name a shipped rollback lane on the same pair in the lane file; run `weights "
    "--lane ROLLBACK_LANE` for its weights; stop whatever else serves on the pair with its own `stop`",
):
    target = rollback.load_target(rb)
    ROLLBACK_LANE = target.name
    rb.record(rollback_lane=ROLLBACK_LANE)
    moved = rollback.pair_differences(p, target)
    rb.expect(not moved, what=f"{ROLLBACK_LANE} runs on the same pair as {p.name}", detail="; ".join(moved), local=True)
    target_nodes = LaneNodes(target, executor=rb.nodes.executor)
    rollback.ready_step(rb, target=target_nodes)  # lints clean, its checkout and weights on every node
    already_rolled_back = rollback.pair_step(rb, target=target_nodes)

# %% [markdown]
# ## Step 1 — Fingerprint the rollback lane before anything changes
# On every node, one probe hashes the rollback lane's checkout tree (every file's content, mode, size and
# mtime) and its hub model dir (each blob by its name — its sha256 — size and mtime; refs hashed). Expected:
# equal to the most recent fingerprint of that lane in the audit trail (`rollback_fingerprint`, recorded
# when a promotion starts). A difference means the fallback is no longer the tree that was known good:
# nothing is stopped.

# %%
with rb.step(
    "1 fingerprint before",
    fix="the rollback lane changed since it was fingerprinted: find what changed "
    "(the newest file is named), restore the known-good checkout or weights, then run `rollback` again; "
    "nothing was stopped",
):
    before = rollback.fingerprint(target_nodes)
    rb.record(rollback_fingerprint_before=before)
    display(Markdown(f"`{ROLLBACK_LANE}` fingerprints (checkout, weights): `{rollback.short(before)}`"))
    rollback.recorded_step(rb, name=ROLLBACK_LANE, before=before, runs=audit.read_runs())

# %% [markdown]
# ## Step 2 — Stop this lane on all nodes
# `cd CHECKOUT && ./stop-deepseek-v4-flash-dspark.sh` from the head (after confirmation), then any worker
# still running this lane's container is stopped with `docker compose -p PROJECT … down` (an orphaned
# worker, P16). Expected: no container of this lane on any node.

# %%
with rb.step(
    "2 stop", fix="run `status` to see what still runs and `stop` to finish stopping this lane, then `rollback` again"
):
    rollback.stop_step(rb, target=target_nodes, already=already_rolled_back)

# %% [markdown]
# ## Step 3 — Clean SHM and page cache on every node
# `sudo -n sh -c 'rm -rf /dev/shm/*; sync; echo 3 > /proc/sys/vm/drop_caches'` on each node (refused while
# any vLLM container runs), then look again. Expected: none of the segments /dev/shm held is left, and free
# memory covers the rollback lane's GPU_MEMORY_UTILIZATION (sticky UMA, P04).

# %%
with rb.step(
    "3 clean memory",
    fix="drop caches on every node again (`sudo sh -c 'sync; echo 3 > "
    "/proc/sys/vm/drop_caches'`) or reboot, then `rollback` again; never `docker system prune -af`",
):
    rollback.clean_step(rb, target=target_nodes, already=already_rolled_back)

# %% [markdown]
# ## Step 4 — Relaunch the rollback lane from its own checkout
# Legacy units masked (P13), then from the head: `cd ROLLBACK_CHECKOUT && PROJECT_NAME=… WAIT_ATTEMPTS=…
# WAIT_SECONDS=… ./start-deepseek-v4-flash-dspark.sh` (after confirmation). Expected: launcher exit 0 (the
# API answered a minimal chat), the rollback lane up on every node, and its live `vllm serve` command
# carrying its own values — for the preview-weights lane fixed K=5: no `num_speculative_tokens_per_batch_size`.
# A cold bind takes 8–15 minutes on a real pair; SHM "60 seconds" lines are not fatal (P11).

# %%
with rb.step(
    "4 relaunch",
    fix=f"run `status --lane {ROLLBACK_LANE}`; `stop --lane {ROLLBACK_LANE}`, then "
    "`rollback` again (or `launch` this lane to go forward)",
):
    rollback.relaunch_step(rb, target=target_nodes, already=already_rolled_back)

# %% [markdown]
# ## Step 5 — The rollback lane's gates
# The `gates` runbook on the rollback lane, as a recorded run of its own (its executed notebook and its line
# in the audit trail). Expected: verdict pass (`dry-run` in a dry run).

# %%
with rb.step(
    "5 gates",
    fix=f"read the gates record linked above; `diagnose --lane {ROLLBACK_LANE}`; to go "
    f"forward instead, `stop --lane {ROLLBACK_LANE}` and `launch` this lane",
):
    nested_step(rb, "gates", target=target)

# %% [markdown]
# ## Step 6 — Fingerprint the rollback lane again
# Expected: equal to step 1's: stopping, cleaning, relaunching and the gates read the rollback lane's checkout
# and weights, and write nothing into them.

# %%
with rb.step(
    "6 fingerprint after",
    fix="something this rollback ran wrote into the rollback lane's checkout or "
    "weights: find it (the newest file is named) and keep it out of the tree; the lane serves meanwhile",
):
    after = rollback.fingerprint(target_nodes)
    rb.record(rollback_fingerprint_after=after)
    changes = rollback.fingerprint_differences(before, after)
    rb.expect(
        not changes,
        what=f"{ROLLBACK_LANE}'s checkout and weights as step 1 found them",
        detail="; ".join(changes) or "equal",
    )

# %% [markdown]
# ## Step 7 — Hermes follows the rollback
# The rollback lane serves under its own name (seed 000: `# Hermes default_model → deepseek-v4-flash-dspark`). The
# line(s) of Hermes's provider block that change are shown below. With the operator's Hermes config named (the
# lane's `hermes.config`, or `-p hermes_config=PATH`), after confirmation it is copied to `config.yaml.bak-UTCSTAMP`
# beside itself and its `default_model` (and its URL, where the rollback lane's differs) changed in place, every
# other line kept; then the config as it now is passes the Hermes gates against the rollback lane: the block's
# checks and `ROUTE_OK` through the real `hermes` CLI. Going forward again, the forward lane's `gates` point it back.

# %%
with rb.step(
    "7 hermes",
    fix="put the backup named above back by hand if the edit is not wanted; `gates --lane "
    f"{ROLLBACK_LANE} -p hermes_config=PATH` checks it again",
):
    changes = rollback.hermes_changes(p, target)
    rb.record(
        hermes_changes=changes, hermes_default_model={"from": p.served_model_name, "to": target.served_model_name}
    )
    display(Markdown(rollback.hermes_note(p, target, changes)))
    print("\n".join(f"Hermes providers.{target.hermes.provider}.{line}" for line in changes))
    hermes.follow_step(rb, target=target_nodes, config=hermes_config or p.hermes.config)
    hermes.route_step(rb, target=target_nodes, config=hermes_config or p.hermes.config)

# %% [markdown]
# ## Troubleshooting
# What goes wrong at this stage and what to do, from the pitfall registry
# (`lanebook.recipe.pitfalls`: the same entries lint and the book use; edit the registry, not this cell).
#
# | Symptom | Cause | Fix |
# |---|---|---|
# | **P04** Sticky UMA memory after stop | After a stop, free memory can stay ~10–16 GiB short with no container running. | Drop the page cache on every node (or reboot) before the next launch. Never `docker system prune -af`: it deletes the Anemll image. |
# | **P11** Cold start takes 8–15 minutes | A cold bind often takes 8–15 minutes; SHM "60 seconds" lines during TileLang/autotune are usually not fatal. | Wait for "Application startup complete" and a live /v1/models (WAIT_ATTEMPTS=120 × WAIT_SECONDS=15); do not abort on the first SHM timeout. |
# | **P13** Legacy serving units | Older serving units (Aiden/legacy) left active fight the compose project for the GPUs. | Mask the lane's legacy units on every node before compose up. |
# | **P16** Head dies mid-TP | When the head dies mid-TP a worker is left orphaned, holding its GPU. | Stop every orphaned worker at once; clean SHM and page cache on every node, then restore from the head. |
# | **S04** Lane value not what runs | The lane file is the operator's truth: every value it sets must be what the server runs. A line of the env file can be undone before it gets there: the recipe's current launcher exports GPU_MEMORY_UTILIZATION from its profile key (GPU_MEMORY_UTILIZATION_TEXT, or _VISION with ENABLE_VL_SIDECAR=1) and DSPARK_MODEL from ABLITERATED; Compose passes only the keys its environment: map names and keeps a flag the command hard-codes; the image's command script builds the speculative config itself. | `lanebook env render --lane LANE --checkout DIR` writes the key that decides each value (the profile key, not GPU_MEMORY_UTILIZATION); where it cannot, edit the line lint names. After launch the live command must carry the lane's flags. |

# %% [markdown]
# ## Verdict

# %%
rb.show_commands()
verdict = rb.finish()
target_nodes.close()
