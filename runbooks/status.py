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
# # Status of the lane
#
# **What you'll do:** run the checkout's status script from the head, list which of the lane's
# containers run on each node, ask `/health` and `/v1/models` from this machine, and read the startup
# log lines operators grep. Nothing is changed: status needs no confirmation.
#
# **What it passes and fails on:** a lane is either **up** (every node runs the lane's container, the
# API answers with the lane's model and the startup log is clean) or
# **cleanly down** (no node runs a container of the lane). Both are valid observations and pass; the
# verdict's figure `state` records which. It fails on an inconsistent lane: an **orphaned worker**
# (the head's container is gone while a worker still runs the lane's, holding its GPU: P16, repaired
# by the `stop` runbook), a head running **without its workers**, or containers up whose API does not
# answer (a cold bind takes 8–15 minutes: if a launch is in progress, wait and run status again).
#
# **Time:** under a minute. **Risk:** none — read-only.
# **Rollback:** nothing to roll back.
#
# **Prerequisites** (checked below): the checkout, which holds the status script, is on every node.

# %% tags=["parameters"]
lane = "twin"  # lane name under params/ or a lane YAML path
dry_run = False  # record the commands instead of sending them (opens no connection)
link = False  # also measure the RoCE link, rail by rail (ib_write_bw loads each rail for seconds)

# %%
from lanebook.ops import launcher, transfers
from lanebook.steps.runbook import Runbook
from lanebook.verify.link import link_step

rb = Runbook("status", lane_name=lane, dry_run=dry_run)
p = rb.params

# %% [markdown]
# ## Prerequisites

# %%
with rb.step("prerequisites", fix="copy the checkout to every node: run `env`"):
    rb.expect(transfers.checkout_ok(rb.nodes))

# %% [markdown]
# ## Step 1 — The status script, from the head
# `cd CHECKOUT && ./status-deepseek-v4-flash-dspark.sh`: both ranks' containers, the startup lines and
# `/v1/models`. Expected: it runs and exits 0, up or down: the recipe's script shows what it finds and does
# not judge it (each probe ends `|| true`), so the lane's state is what steps 2 and 3 observe. Exit 1 or 2
# means it refused its configuration (a missing `.env.dspark`, `WORKER_HOST` unset, a bad option).

# %%
with rb.step(
    "1 status script", fix="the status script itself failed: check the checkout on the head (`env` copies it again)"
):
    script = launcher.run_status_script(rb.nodes)
    print(script.output)
    rb.record(status_script_exit=None if script.dry_run else script.exit_code)
    rb.expect(
        script.ok,
        what="the status script ran (exit 0, up or down)",
        detail=f"exit {script.exit_code}" + ("" if script.ok else f": {script.reason}"),
    )

# %% [markdown]
# ## Step 2 — The lane's containers on each node
# `docker ps` on every node, keeping the lane's Compose project. Expected: up (every node) or down
# (none). An orphaned worker — the head's container gone, a worker's still running and holding its GPU
# (P16) — fails here: run the `stop` runbook at once, it stops every orphaned worker and cleans memory on every node.

# %%
with rb.step(
    "2 containers", fix="run `stop` (it stops an orphaned worker and cleans memory on every node), then `launch`"
):
    state = launcher.containers_step(rb)

# %% [markdown]
# ## Step 3 — `/health` and `/v1/models` from this machine
# Expected when up: `/health` 200 and `/v1/models` listing the lane's served name with its context.
# When down there is nothing to ask.

# %%
with rb.step(
    "3 api", fix="if a launch is in progress wait and run `status` again; otherwise run `stop`, then `launch`"
):
    launcher.status_api_step(rb, state)

# %% [markdown]
# ## Step 4 — The startup log lines
# `docker logs CONTAINER 2>&1 | grep -E …` on the head. Expected when up: no
# `Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1` (P01), `Application startup complete`, and
# `GPU KV cache size` in the lane's band.

# %%
with rb.step("4 startup log", fix="run `env` to fix what the log shows, then `stop` and `launch`"):
    down = state == launcher.LANE_DOWN
    launcher.startup_log_step(rb, skip_because="the lane is cleanly down: no container to read" if down else None)

# %% [markdown]
# ## Step 5 — The RoCE link, rail by rail (`-p link=True`)
# On each rail the lane file names (`link.rails`), between the head and each worker: `rdma link` and `ip link` on
# both ends (port ACTIVE, MTU 9000), then perftest's `ib_write_bw` with RC writes of 64 KiB (server on the worker,
# client on the head). Expected: every rail 92–97 Gb/s. Under 40 Gb/s is degraded — the ConnectX-7 boot fault
# carries 8–25 Gb/s while the link negotiates 200 Gb/s — and fails with its fix, a power cycle of the node (a
# relaunch does not help). Off by default: the measurement loads the link for seconds.

# %%
with rb.step(
    "5 link",
    fix="each failed rail names its fix: a degraded rail → power-cycle the node at its far end, then "
    "`lanebook check`; a rail down → its cable and `ip link`; ib_write_bw missing → install perftest",
):
    link_step(rb, skip_because=None if link else "not asked (-p link=True measures the RoCE link)")

# %% [markdown]
# ## Troubleshooting
# What goes wrong at this stage and what to do, from the pitfall registry
# (`lanebook.recipe.pitfalls`: the same entries lint and the book use; edit the registry, not this cell).
#
# | Symptom | Cause | Fix |
# |---|---|---|
# | **P01** Breakable CUDA graphs not disabled | Without VLLM_USE_BREAKABLE_CUDAGRAPH=0 the Anemll 0.1.1 image auto-enables breakable CUDA graphs, the slow decode path. The env file alone is not enough: Compose passes only the keys named in the service's environment: map, so the compose file needs the injection line as well. | VLLM_USE_BREAKABLE_CUDAGRAPH=0 in .env.dspark on every node and VLLM_USE_BREAKABLE_CUDAGRAPH: "${VLLM_USE_BREAKABLE_CUDAGRAPH:-0}" under environment: (`lanebook env render` writes both); the log must not say "Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1". |
# | **P11** Cold start takes 8–15 minutes | A cold bind often takes 8–15 minutes; SHM "60 seconds" lines during TileLang/autotune are usually not fatal. | Wait for "Application startup complete" and a live /v1/models (WAIT_ATTEMPTS=120 × WAIT_SECONDS=15); do not abort on the first SHM timeout. |
# | **P16** Head dies mid-TP | When the head dies mid-TP a worker is left orphaned, holding its GPU. | Stop every orphaned worker at once; clean SHM and page cache on every node, then restore from the head. |

# %% [markdown]
# ## Verdict
# `state` in the figures says what was observed: `up` or `down` (a dry run observes nothing).

# %%
rb.show_commands()
verdict = rb.finish()
