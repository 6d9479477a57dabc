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
# # Stop the lane
#
# **What you'll do:** run the checkout's stop script from the head (the head's rank, then the
# worker's), stop any worker still running the lane's container (an orphaned worker whose head died
# mid-TP, P16), clean shared memory and page cache on every node, then look: no container of the lane
# left on any node, and enough memory free again for the next launch (sticky UMA, P04).
#
# **Time:** about a minute. **Risk:** high — the lane stops serving. Hermes falls back to its
# other providers until a lane is launched again. Headless, it needs `--yes` (or `-p confirm=True`).
# **Rollback:** run the `launch` runbook for this lane (or for its rollback lane).
#
# **Prerequisites** (checked below): the checkout, which holds the stop script, is on every node.

# %% tags=["parameters"]
lane = "twin"  # lane name under params/ or a lane YAML path
dry_run = False  # record the commands instead of sending them (opens no connection)
confirm = None  # destructive steps go ahead: True (`lanebook run --yes`), None: on the twin only

# %%
from lanebook.ops import launcher, memory, transfers
from lanebook.steps.runbook import Runbook

rb = Runbook("stop", lane_name=lane, dry_run=dry_run, confirm=confirm)
p = rb.params

# %% [markdown]
# ## Prerequisites
# The containers found before stopping are recorded (`state_before`): `orphaned worker` there means the
# head had died mid-TP (P16), and this run is its repair.

# %%
with rb.step("prerequisites", fix="copy the checkout to every node (`env`), then run `stop` again"):
    rb.expect(transfers.checkout_ok(rb.nodes))
    before = launcher.lane_containers(rb.nodes)
    rb.record(state_before=before.state, containers_before=before.running)

# %% [markdown]
# ## Step 1 — The stop script, from the head
# `cd CHECKOUT && ./stop-deepseek-v4-flash-dspark.sh` (after confirmation).
# Expected: exit 0, and the head runs no container of the lane. An unreachable worker makes the script
# exit 1: its rank is not stopped; make it reachable and run `stop` again.

# %%
with rb.step("1 stop script", fix="make the unreachable node reachable (SSH, fabric), then run `stop` again"):
    rb.confirm(f"stop lane {p.name} on every node and clean their memory")
    stopped = launcher.stop_lane(rb.nodes)
    rb.record(stop_script=stopped.launcher.outcome)
    rb.expect(stopped.launcher.ok, what="the stop script exits 0", detail=stopped.launcher.summary())
    on_head = stopped.left_running.get(rb.nodes.head.alias)
    rb.expect(not on_head, what="no container of the lane on the head", detail=", ".join(on_head or []) or "none")

# %% [markdown]
# ## Step 2 — Orphaned workers
# A worker still running the lane's container once the head's is gone is orphaned, holding its GPU
# (P16): `docker compose -p PROJECT … down` there. Expected: no container of the lane on any node.

# %%
with rb.step(
    "2 orphaned workers",
    fix="run `stop` again; if the container stays, `docker compose -p PROJECT down` on that worker by hand",
):
    orphans = launcher.stop_orphaned_workers(rb.nodes)
    rb.record(orphaned_workers_stopped=orphans)
    left = launcher.lane_containers(rb.nodes)
    rb.expect(
        not left.left,
        what="no container of the lane left on any node",
        detail=(f"stopped orphaned: {orphans}; " if orphans else "") + left.summary(),
    )

# %% [markdown]
# ## Step 3 — Clean SHM and page cache on every node
# `sudo -n sh -c 'rm -rf /dev/shm/*; sync; echo 3 > /proc/sys/vm/drop_caches'` on each node, then look
# again. Expected: none of the segments /dev/shm held is left; free memory read back.

# %%
with rb.step(
    "3 clean memory",
    fix=(
        "another lane still serves on the pair (the rollback lane, say): run `stop` with that lane; otherwise run "
        "`status`, stop what holds the segments, then run `stop` again"
    ),
):
    memory.clean_step(rb)

# %% [markdown]
# ## Step 4 — Free memory is back
# Expected: on every node, free memory covers the lane's GPU_MEMORY_UTILIZATION again. If it stays held
# with no container running (sticky UMA, P04), drop the page cache on every node again
# (`sudo sh -c 'sync; echo 3 > /proc/sys/vm/drop_caches'`) or reboot the node before the next launch.
# Never `docker system prune -af`: it deletes the Anemll image.

# %%
with rb.step("4 free memory", fix="drop caches on every node again or reboot them (sticky UMA, P04), then `launch`"):
    free = memory.check_sticky_uma(rb.nodes)
    rb.record(free_gib=free.figure("free_gib"))
    rb.expect(
        free.ok,
        what="enough free memory on every node for the next launch",
        detail=free.detail
        if free.ok
        else f"{free.detail}: memory still held (P04): drop caches on every node again "
        "or reboot; never `docker system prune -af`",
    )

# %% [markdown]
# ## Troubleshooting
# What goes wrong at this stage and what to do, from the pitfall registry
# (`lanebook.recipe.pitfalls`: the same entries lint and the book use; edit the registry, not this cell).
#
# | Symptom | Cause | Fix |
# |---|---|---|
# | **P04** Sticky UMA memory after stop | After a stop, free memory can stay ~10–16 GiB short with no container running. | Drop the page cache on every node (or reboot) before the next launch. Never `docker system prune -af`: it deletes the Anemll image. |
# | **P16** Head dies mid-TP | When the head dies mid-TP a worker is left orphaned, holding its GPU. | Stop every orphaned worker at once; clean SHM and page cache on every node, then restore from the head. |

# %% [markdown]
# ## Verdict

# %%
rb.show_commands()
verdict = rb.finish()
