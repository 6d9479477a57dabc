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
# # Warm up the lane
#
# **What you'll do:** send the recipe's bounded post-readiness warmup to the serving lane from this
# machine — one bounded long prefill (~8K tokens), then a wave of four and a wave of six concurrent
# requests (the loads the 5/4/3 schedule verifies at K4 and K3) — once the queues read idle, then each
# shape once more, and look: the queues drain, the engine is alive, no rank's log shows a fatal runtime
# error. Readiness does not compile every production shape; the first use of an untouched shape compiles
# kernels mid-inference, a latency event (P12). After this run the first production burst of these shapes
# is not that event: the table below sets each shape's first use against its first request once warm.
#
# **Fail-open, as the recipe's launcher is:** a warmup that cannot run or finish (queues busy, requests
# failing, queues not draining) is a `WARNING` and the lane keeps serving. Only a sick lane fails the run:
# the server not up, the engine dead after the warmup, a CUDA, NCCL, engine-death or preemption line in a
# log, or preemptions counted by `/metrics`.
#
# **Time:** under a minute (on a real lane the first uses may take longer: that is the JIT being paid here).
# **Risk:** low — about twenty short requests; nothing is restarted. The lane's
# `POST_READINESS_WARMUP_ENABLED: 0` (the recipe's immediate bypass) skips it.
# **Rollback:** nothing to roll back.
#
# **Prerequisites** (checked below): the lane is up — `/health` 200 and `/v1/models` listing its served name.

# %% tags=["parameters"]
lane = "twin"  # lane name under params/ or a lane YAML path
dry_run = False  # record the requests and commands instead of sending them (opens no connection)

# %%
from lanebook.ops import readiness, warmup
from lanebook.steps.runbook import Runbook

rb = Runbook("warmup", lane_name=lane, dry_run=dry_run)
p = rb.params

# %% [markdown]
# ## Prerequisites
# Expected: `/health` 200 and `/v1/models` listing the lane's served name, within a minute. A warmup is for a
# lane that serves; a lane that is not up is a failure here, not a warning.

# %%
with rb.step("prerequisites", fix="run `status`; if the lane is down, run `launch` (it warms the lane too)"):
    models = readiness.wait_lane_ready(rb.nodes, timeout_s=60)
    ids = [m.get("id") for m in models or []]
    rb.expect(
        p.served_model_name in ids,
        what=f"the lane is up: /health 200, /v1/models lists {p.served_model_name}",
        detail=", ".join(map(str, ids)),
    )

# %% [markdown]
# ## Step 1 — The bounded warmup
# From this machine, once `vllm:num_requests_running` and `vllm:num_requests_waiting` read 0 on `/metrics`:
# the bounded prefill, the C4 wave, the C6 wave (each shape's first use), then each shape again (its first
# request once warm), then the queues again. Expected: idle before, every request completed, idle after,
# no preemption counted. A warning here leaves the lane serving.

# %%
with rb.step(
    "1 warmup",
    fix="a warning leaves the lane serving: run `warmup` again once the queues are idle; "
    "if its requests keep failing, run `diagnose`",
):
    warmup.warmup_step(rb)

# %% [markdown]
# ## Step 2 — The lane after the warmup
# `/health` from this machine, and `docker logs CONTAINER 2>&1 | grep -E …` on every node for fatal runtime
# errors: CUDA errors, NCCL errors, engine death (`EngineDeadError`, a dead engine core or worker),
# preemption, a Python crash. Expected: `/health` 200 and no such line on any rank. Any of them is a sick
# lane, not a failed warmup.

# %%
with rb.step(
    "2 lane after the warmup",
    fix="the lane is sick: run `stop`, then `launch` again; if it recurs, run `rollback` to the lane's rollback lane",
):
    warmup.lane_step(rb)

# %% [markdown]
# ## Troubleshooting
# What goes wrong at this stage and what to do, from the pitfall registry
# (`lanebook.recipe.pitfalls`: the same entries lint and the book use; edit the registry, not this cell).
#
# | Symptom | Cause | Fix |
# |---|---|---|
# | **P12** First-use inference JIT | Readiness does not compile every production shape: an untouched request shape triggers Triton/JIT compilation during inference, turning the first production burst into a latency event. | Keep the bounded post-readiness warmup enabled (POST_READINESS_WARMUP_ENABLED=1); treat cold-bind proof as pending until observed. |
# | **P15** Unwatched long cold needles | Unwatched ≥128k synthetic cold needles on the sole production head can hard-hang the box. | Step long probes up gradually and watch the console. |

# %% [markdown]
# ## Verdict
# The figures hold each shape's wall time at first use and once warm (`warmup_shapes`) and any warning
# (`warmup_warnings`); on the twin lane they are twin figures.

# %%
rb.show_commands()
verdict = rb.finish()
