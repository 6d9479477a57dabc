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
# # Launch the lane
#
# **What you'll do:** clean shared memory and page cache on every node, mask legacy serving units,
# start the lane from the head with the recipe's launcher (worker first, then head), and prove the
# server is the one the lane describes: no auto-enabled breakable CUDA graphs, a KV cache in band,
# `/v1/models` reporting the served name and 1M context, and the live command carrying the lane's
# values (memory, context, slots, batch, K and schedule); then the bounded post-readiness warmup (as the
# `warmup` runbook runs it), unless the lane sets `POST_READINESS_WARMUP_ENABLED: 0`.
#
# **Time:** 8–15 minutes on a real lane (cold bind); about a minute on the twin with `--fast`.
# **Risk:** medium — it takes the pair. Nothing else can serve on these Sparks while it runs.
# **Rollback:** run the `stop` runbook, clean memory on every node, then `launch` the lane's
# rollback lane (see the lane file's `rollback:`).
#
# **Prerequisites** (checked below): the lane lints clean; the checkout is on every node; the weights
# are on every node; no other lane is serving on the pair. Launching is idempotent: if this lane is
# already up, the cleanup, the free-memory check and the start are skipped (legacy units are still
# masked and checked) and the server is verified as it runs.

# %% tags=["parameters"]
lane = "twin"  # lane name under params/ or a lane YAML path
dry_run = False  # record the commands instead of sending them (opens no connection)
min_free_gib = None  # GiB that must be free after cleanup, None for what vLLM asks of the lane
confirm = None  # destructive steps go ahead: True (`lanebook run --yes`), None: on the twin only
allow_runtime_and_weights = False  # the operator allows a lane that changes image and weights at once (lint S07)

# %%
from lanebook.ops import launcher, memory, readiness, transfers, warmup, weights
from lanebook.recipe.lint import lint_what_lane_runs
from lanebook.steps.runbook import Runbook
from lanebook.verify import gates

rb = Runbook("launch", lane_name=lane, dry_run=dry_run, confirm=confirm)
p = rb.params

# %% [markdown]
# ## Prerequisites

# %%
with rb.step(
    "prerequisites",
    fix=(
        "fix what failed: lint errors → run `env` (it renders the lane into the checkout and copies it to the "
        "workers); a missing checkout → `env`; incomplete weights → `weights`; another lane up → run `stop` on that "
        "lane; a node unreachable → make it answer SSH (ssh -F CONFIG NODE true), then `launch` again"
    ),
):
    # the head's checkout; a dry run lints the lane file
    report = lint_what_lane_runs(p, dry_run=rb.dry_run, allow_runtime_and_weights=allow_runtime_and_weights)
    rb.expect(report.ok, what="what the lane runs lints clean", detail=report.errors_summary(), local=True)
    rb.expect(transfers.checkout_ok(rb.nodes))
    pair = launcher.pair_occupancy(rb.nodes)
    rb.expect(
        not pair.other_lane_up,
        what="no other lane is serving on the pair (stop it first: both want the whole pair)",
        detail=pair.others_found() or "",
    )
    already_up = pair.this_lane_up  # launching is idempotent: a lane already up is verified, not restarted
    rb.expect(weights.complete_results(weights.verify_every_node(rb.nodes)))

# %% [markdown]
# ## Step 1 — Clean SHM and page cache on every node
# `sudo -n sh -c 'rm -rf /dev/shm/*; sync; echo 3 > /proc/sys/vm/drop_caches'` on each node, then look again.
# It removes every segment there, so it asks first (a button in JupyterLab; `--yes` headless on a real lane).
# Expected: each node's /dev/shm holds none of the segments it held before; free memory read back.

# %%
with rb.step(
    "1 clean memory",
    fix="a segment that stays is held by a live process: run `status`, then `stop`, then `launch` again",
):
    nodes = ", ".join(n.alias for n in rb.nodes)
    memory.clean_step(
        rb,
        skip_because="the lane is already up" if already_up else None,
        confirm=f"clean /dev/shm and the page cache on {nodes} and start lane {p.name} on the pair",
    )

# %% [markdown]
# ## Step 2 — Mask legacy units, check free memory
# `systemctl mask --now` the lane's legacy units, then read their states back.
# Expected: no legacy unit active (each inactive and masked); free memory above the bound on every
# node (sticky UMA, P04).

# %%
with rb.step(
    "2 legacy units and memory",
    fix=(
        "a legacy unit still active: stop and mask it by hand (`sudo systemctl mask --now UNIT`); too little free "
        "memory: run `stop` (it drops caches, P04) or reboot the node; then `launch` again"
    ),
):
    rb.expect(memory.mask_legacy_units(rb.nodes))
    memory.free_memory_step(
        rb,
        what="enough free memory on every node for the lane's GPU_MEMORY_UTILIZATION",
        skip_because="the lane is already up and holds its memory" if already_up else None,
        min_free_gib=min_free_gib,
    )

# %% [markdown]
# ## Step 3 — Start the lane from the head
# `PROJECT_NAME=… WAIT_ATTEMPTS=… WAIT_SECONDS=… ./start-deepseek-v4-flash-dspark.sh`.
# Expected: launcher exit 0, which it gives once `/v1/models` answers and a minimal chat request
# succeeds; then `/health` 200, which the launcher never asks (an engine that is not alive answers 503).
# Otherwise its outcome says why: refused configuration (exit 2, or a required key missing), missing env
# file, worker unreachable, image missing, health timeout (it prints the last 120 log lines of both
# ranks), interrupted. SHM "60 seconds" lines during autotune are not fatal (P11): wait.

# %%
with rb.step(
    "3 start",
    fix=(
        "read the launcher's outcome above: refused configuration or missing env file → run `env`; worker unreachable "
        "→ check SSH and the fabric address; health timeout or /health not 200 → run `status` and read the log (SHM "
        "60-second lines are not fatal, P11); then `stop` and `launch` again"
    ),
):
    started = launcher.start_step(
        rb, skip_because="already up: verifying it instead of restarting it" if already_up else None, timing=True
    )
    api = launcher.ask_api(rb.nodes)  # the launcher polls /v1/models only; /health says the engine is alive
    rb.expect(api.healthy is True, what="/health answers 200", detail=api.detail)

# %% [markdown]
# ## Step 4 — Check the startup log
# Expected: no `Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1` (P01); `GPU KV cache size` in band;
# `Application startup complete`.

# %%
with rb.step(
    "4 startup log",
    fix=(
        "breakable graphs auto-enabled (P01) → run `env` (VLLM_USE_BREAKABLE_CUDAGRAPH=0 in the env file and the "
        "compose environment); KV cache out of band → check GPU_MEMORY_UTILIZATION (0.85 at 1M, P07); then `stop` and "
        "`launch` again"
    ),
):
    launcher.startup_log_step(rb)

# %% [markdown]
# ## Step 5 — `/v1/models` and the live command
# Expected: id is the lane's served name, `max_model_len` the lane's; the live `vllm serve` command carries
# every value the lane sets (served name, max model length, sequences, batched tokens, memory
# utilization, K and the batch-size schedule exactly when the lane has one). A launcher or compose
# line that overrides the lane shows up here, named with both values.

# %%
with rb.step(
    "5 models and live command",
    fix=(
        "the server does not run what the lane says: run `env` (and remove the launcher or compose override named "
        "above), then `stop` and `launch` again"
    ),
):
    models = readiness.wait_models(p.api, p.served_model_name, timeout_s=60, executor=rb.nodes.executor)
    rb.expect(gates.judge_model_list(rb.current_step, models or [], p))
    launcher.live_command_step(rb)

# %% [markdown]
# ## Step 6 — The post-readiness warmup
# Readiness does not compile every production shape (P12): the bounded prefill, the C4 and C6 waves, each
# once and once more warm, sent from this machine once the queues read idle (the `warmup` runbook's
# step 1), then `/health` and every node's log for CUDA, NCCL, engine-death and preemption lines.
# Fail-open, as the recipe's launcher is: a warmup that cannot run or finish is a `WARNING` and the
# launch still passes; a dead engine or a fatal line in a log fails it. `POST_READINESS_WARMUP_ENABLED: 0`
# in the lane skips it (the recipe's immediate bypass). When the launcher says its own hook warmed the
# lane (`Post-readiness warmup: ok`), the shapes are not sent twice: only `/health` and the logs are
# checked (the `warmup` runbook times every shape).

# %%
with rb.step(
    "6 post-readiness warmup",
    fix="a warning leaves the lane serving: run `warmup` later; a dead "
    "engine or a fatal log line: run `stop`, then `launch` again",
):
    warmup.post_readiness_step(rb, hook=None if started is None else started.hook_warmed)

# %% [markdown]
# ## Troubleshooting
# What goes wrong at this stage and what to do, from the pitfall registry
# (`lanebook.recipe.pitfalls`: the same entries lint and the book use; edit the registry, not this cell).
#
# | Symptom | Cause | Fix |
# |---|---|---|
# | **P04** Sticky UMA memory after stop | After a stop, free memory can stay ~10–16 GiB short with no container running. | Drop the page cache on every node (or reboot) before the next launch. Never `docker system prune -af`: it deletes the Anemll image. |
# | **P07** Memory 0.80 at 1M context | GPU_MEMORY_UTILIZATION=0.80 with MAX_MODEL_LEN=1048576 failed on the operators' pair: ~7.16 GiB KV available vs 7.54 GiB needed (estimated max length ~953,088). 0.85 came up cleanly. | GPU_MEMORY_UTILIZATION=0.85 for the 1M profile; where the launcher exports it from the profile key, GPU_MEMORY_UTILIZATION_TEXT=0.85 (`lanebook env render` writes the key the launcher reads). |
# | **P08** Gloo / host IP on loopback | If the distributed setup binds 127.0.0.1 the ranks cannot reach each other across nodes. | A per-rank VLLM_HOST_IP (each node's RoCE IP) and GLOO/NCCL/TP_SOCKET_IFNAME on the RoCE interface (bond0). |
# | **P11** Cold start takes 8–15 minutes | A cold bind often takes 8–15 minutes; SHM "60 seconds" lines during TileLang/autotune are usually not fatal. | Wait for "Application startup complete" and a live /v1/models (WAIT_ATTEMPTS=120 × WAIT_SECONDS=15); do not abort on the first SHM timeout. |
# | **P12** First-use inference JIT | Readiness does not compile every production shape: an untouched request shape triggers Triton/JIT compilation during inference, turning the first production burst into a latency event. | Keep the bounded post-readiness warmup enabled (POST_READINESS_WARMUP_ENABLED=1); treat cold-bind proof as pending until observed. |
# | **P13** Legacy serving units | Older serving units (Aiden/legacy) left active fight the compose project for the GPUs. | Mask the lane's legacy units on every node before compose up. |
# | **S04** Lane value not what runs | The lane file is the operator's truth: every value it sets must be what the server runs. A line of the env file can be undone before it gets there: the recipe's current launcher exports GPU_MEMORY_UTILIZATION from its profile key (GPU_MEMORY_UTILIZATION_TEXT, or _VISION with ENABLE_VL_SIDECAR=1) and DSPARK_MODEL from ABLITERATED; Compose passes only the keys its environment: map names and keeps a flag the command hard-codes; the image's command script builds the speculative config itself. | `lanebook env render --lane LANE --checkout DIR` writes the key that decides each value (the profile key, not GPU_MEMORY_UTILIZATION); where it cannot, edit the line lint names. After launch the live command must carry the lane's flags. |
# | **S06** Entrypoint refuses the configuration | The image's command script validates some variables (DRAFT_SAMPLE_METHOD, DEFAULT_THINKING, the API keys) and exits before `vllm serve` when one is wrong, so the container never serves. | Set the variable to one of the values the message lists. |
# | **S07** Runtime and weights changed at once | A lane changes one thing against its rollback lane: seed 000 swapped to the 0731 weights on a known-good Anemll checkout and says not to change runtime and weights the same weekend. A lane whose image and weights both differ from its rollback lane's leaves a failure with two suspects, and a rollback that undoes both. | Promote one change at a time: keep the rollback lane's image (or weights) and change the other, then the rest once the first has held. To go ahead knowingly: `lanebook promote --allow-runtime-and-weights` (a runbook: `-p allow_runtime_and_weights=true`). |
# | **S08** A multi-node lane whose TP keys disagree with its nodes | The recipe's launcher and compose are two-node only (WORKER_HOST, --tensor-parallel-size 2, --nnodes 2). A lane of more Sparks runs a four-node checkout of its own, whose launcher reads NNODES, TP_SIZE, WORKER_HOSTS and WORKER_IPS (space-separated, in rank order) and whose compose passes --tensor-parallel-size ${TP_SIZE} and --nnodes ${NNODES}: keys that disagree with the lane's nodes start a smaller TP group, or a rank on the wrong node, and the recipe's start-deepseek-v4-flash-dspark.sh starts only WORKER_HOST, so a four-node lane launched by it would start a TP2 pair and leave two Sparks idle. | Set NNODES and TP_SIZE to the node count and WORKER_HOSTS and WORKER_IPS to the workers' RoCE IPs in the order `nodes:` lists them, and name the four-node launcher scripts under `launcher:` (./start-tp4.sh, ./status-tp4.sh, ./stop-tp4.sh). |

# %% [markdown]
# ## Verdict

# %%
rb.show_commands()
verdict = rb.finish()
