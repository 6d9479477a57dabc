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
# # Env: make the lane's checkout, render the lane into it, copy it to every node
#
# **What you'll do:** on a node without the lane's checkout, make it as a copy of the known-good one
# (`cp -a ~/ds4-f-mia-anemll-1m6 ~/ds4-f-mia-anemll-0731`: the lane's `checkout_from:`, by default its rollback
# lane's checkout, which stays as it is); read the head's checkout, plan the lane's `.env.dspark` and the two compose lines
# (the `environment:` injection of VLLM_USE_BREAKABLE_CUDAGRAPH and the SPECULATIVE_CONFIG line, rewritten
# from the lane), show the diff, lint the checkout as it would be rendered and stop on any lint error before
# a file is touched; then write the changed files on the head (each backed up beside it first, replaced
# atomically), copy the checkout to each worker over the RoCE link (`rsync -a`, never `--delete`), and check
# that every node holds the same bytes.
#
# **Restore mode** (`-p restore=RUN_ID`): instead of rendering, put back byte for byte the files an earlier
# env run of this lane changed, from the backups its record lists, then copy and compare as above. It refuses
# a file edited since that run wrote it. This is the recipe's one-line rollback: restoring the compose file an
# env run changed to the 5/4/3 schedule gives back fixed K=5; `launch` then restarts the lane and checks that
# the live command no longer carries `num_speculative_tokens_per_batch_size`.
#
# **Time:** seconds. **Risk:** medium — the files the next launch reads change on every node; a running
# server is not touched (launch restarts it with them). Writing, copying and restoring ask for confirmation
# (`--yes`; the runner confirms twin lanes).
# **Rollback:** `lanebook run env --lane LANE -p restore=RUN_ID` with this run's id (`lanebook audit`); a
# restore records its own backups, so it is undone the same way.
#
# **Prerequisites** (checked below): every node holds the lane's checkout (`checkout:` in the lane file), or the
# checkout it is copied from.

# %% tags=["parameters"]
lane = "twin"  # lane name under params/ or a lane YAML path
dry_run = False  # record the commands instead of sending them (opens no connection)
confirm = None  # destructive steps go ahead: True (`lanebook run --yes`), None: on the twin only
restore = None  # run id of an earlier env run of this lane: put back the files it changed instead of rendering
allow_runtime_and_weights = False  # the operator allows a lane that changes image and weights at once (lint S07)

# %%
from lanebook.ops import checkout_copy, checkout_env, transfers
from lanebook.runs import audit
from lanebook.steps.runbook import Runbook

rb = Runbook("env", lane_name=lane, dry_run=dry_run, confirm=confirm)
p = rb.params

# %% [markdown]
# ## Prerequisites
# `restore`, when given, is a run id as `lanebook audit` lists it (text; quote one that reads as a number).

# %%
with rb.step("prerequisites", fix="give the run id as text: `-p restore=\"'RUN_ID'\"`"):
    rb.expect(
        restore is None or isinstance(restore, str),
        what="restore is a run id (text) or not given",
        detail=f"{restore!r} was read as a {type(restore).__name__}: quote it"
        if restore is not None and not isinstance(restore, str)
        else restore or "render mode",
        local=True,
    )
    rb.record(mode="render" if restore is None else "restore", restored_run=restore)

# %% [markdown]
# ## Step 1 — The lane's checkout on every node
# On each node where nothing is at the lane's `checkout:`, after confirmation: `cp -a FROM CHECKOUT` (seed 000's
# `cp -a ~/ds4-f-mia-anemll-1m6 ~/ds4-f-mia-anemll-0731`), FROM being the lane's `checkout_from:` or its rollback
# lane's checkout. Never over an existing checkout. The fingerprint probe hashes FROM before and after, and the
# copy. Expected: FROM unchanged (it stays the rollback) and the copy its exact tree. A node that holds the
# checkout is left as it is; a restore copies nothing.

# %%
with rb.step(
    "1 checkout",
    fix="give the lane a `checkout_from:` that every node holds (or make the checkout by hand); a copy "
    "that is not its source's tree: move it aside, then run `env` again",
):
    checkout_copy.copy_step(rb, restore=restore)

# %% [markdown]
# ## Step 2 — Plan
# **Render:** read the head's checkout files (one command) and plan what the lane needs: each lane value
# whose effective value differs is written to the env key that decides it (the launcher's profile key for
# GPU_MEMORY_UTILIZATION), and the compose file gets the two lines. Expected: the head's checkout is read; the
# diff below is every change (nothing to change is a valid outcome).
# **Restore:** find the run in `outputs/runs.jsonl` (an env run of this lane that recorded backups) and read
# each file and its backup on the head. Expected: each file still holds what that run wrote, and each
# backup what it replaced; the diff below is what the restore puts back.

# %%
with rb.step(
    "2 plan",
    fix="render: the lane's `checkout:` must be its checkout on the head (holding "
    "docker-compose.dspark.yml); restore: give the id of an env run of this lane that changed "
    "files (`lanebook audit --lane LANE`), and compare a file edited since with its backup by hand",
):
    plan, backups = checkout_env.plan_step(
        rb,
        source=lane,
        restored=audit.find_run(restore) if restore else None,
        allow_runtime_and_weights=allow_runtime_and_weights,
    )

# %% [markdown]
# ## Step 3 — Lint what the checkout will run
# The checkout as rendered, read as the launcher, Compose and the image read it, against the lane and the
# pitfall registry (`lanebook lint`). Expected: no error. On an error the run stops here and **no file on any
# node has been changed**: fix the lane file (the finding names the pitfall and the line), then run `env` again.
# A dry run lints the lane file against lanebook's reference checkout. A restore puts back bytes the lane ran
# before and is not linted here (`launch` lints what it runs).

# %%
with rb.step(
    "3 lint",
    fix="fix the lane value the error names (the pitfall's fix is in the troubleshooting table below), then run "
    "`env` again; nothing on the nodes was changed",
):
    checkout_env.lint_step(rb, plan, restore=restore)

# %% [markdown]
# ## Step 4 — Write on the head
# For each changed file, one command on the head: refuse if the file is no longer the bytes read in step 2,
# copy it to `NAME.bak-UTCSTAMP` beside it, write the new text to a temporary file and rename it over the
# file, print the sha256 of both. The backups go into this run's record (`backups`), which a restore reads.
# Expected (render): planning again finds nothing to change. Expected (restore): each file holds its backup's
# bytes again (the files the restore replaced are backed up and recorded too).

# %%
with rb.step(
    "4 write on the head",
    fix="the earlier files are kept beside them (the backups above): "
    "`-p restore=RUN_ID` with this run's id puts them back",
):
    checkout_env.write_step(rb, plan, backups, source=lane, restore=restore)

# %% [markdown]
# ## Step 5 — Copy the checkout to each worker
# `rsync -aH --partial --info=stats2 CHECKOUT/ [user@]FABRIC_IP:CHECKOUT/` from the head, over the RoCE link
# (never `--delete`), unless every worker already holds the head's bytes. Expected: rsync finishes and prints
# its statistics.

# %%
with rb.step(
    "5 copy to workers",
    fix="make the worker reachable from the head over the fabric, then run `env` "
    "again (the head's files are already rendered: it copies and compares)",
):
    checkout_env.copy_step(rb)

# %% [markdown]
# ## Step 6 — The same bytes on every node
# On each node, `sha256sum` of the compose file, the env file, the example, the launcher scripts and every
# file under `scripts/` the head has. Expected: every worker's hashes equal the head's; the files a launch
# needs are present and the launcher scripts executable.

# %%
with rb.step(
    "6 same bytes",
    fix="run `env` again to copy the head's checkout (a worker's own edit is replaced by the head's file)",
):
    same = checkout_env.same_checkout(rb.nodes)
    rb.record(checkout_sha256=same.figure("sha256"))
    rb.expect(same)
    rb.expect(transfers.checkout_ok(rb.nodes, what="the checkout's files on every node, launcher scripts executable"))

# %% [markdown]
# ## Troubleshooting
# What goes wrong at this stage and what to do, from the pitfall registry
# (`lanebook.recipe.pitfalls`: the same entries lint and the book use; edit the registry, not this cell).
#
# | Symptom | Cause | Fix |
# |---|---|---|
# | **P01** Breakable CUDA graphs not disabled | Without VLLM_USE_BREAKABLE_CUDAGRAPH=0 the Anemll 0.1.1 image auto-enables breakable CUDA graphs, the slow decode path. The env file alone is not enough: Compose passes only the keys named in the service's environment: map, so the compose file needs the injection line as well. | VLLM_USE_BREAKABLE_CUDAGRAPH=0 in .env.dspark on every node and VLLM_USE_BREAKABLE_CUDAGRAPH: "${VLLM_USE_BREAKABLE_CUDAGRAPH:-0}" under environment: (`lanebook env render` writes both); the log must not say "Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1". |
# | **P02** Batch 16384 | MAX_NUM_BATCHED_TOKENS=16384 measured a single-stream regression on the count canary. | Keep MAX_NUM_BATCHED_TOKENS=8192. |
# | **P03** Batch 8216 | 8216 lands the six-sequence scheduler budget exactly on 8192 after the draft reserve. It initialised cleanly but regressed count, code and structured-JSON probes in the matched canary, and was rejected. | Keep MAX_NUM_BATCHED_TOKENS=8192. |
# | **P07** Memory 0.80 at 1M context | GPU_MEMORY_UTILIZATION=0.80 with MAX_MODEL_LEN=1048576 failed on the operators' pair: ~7.16 GiB KV available vs 7.54 GiB needed (estimated max length ~953,088). 0.85 came up cleanly. | GPU_MEMORY_UTILIZATION=0.85 for the 1M profile; where the launcher exports it from the profile key, GPU_MEMORY_UTILIZATION_TEXT=0.85 (`lanebook env render` writes the key the launcher reads). |
# | **P08** Gloo / host IP on loopback | If the distributed setup binds 127.0.0.1 the ranks cannot reach each other across nodes. | A per-rank VLLM_HOST_IP (each node's RoCE IP) and GLOO/NCCL/TP_SOCKET_IFNAME on the RoCE interface (bond0). |
# | **P14** K above the drafter block size | The Flash drafter's dspark_block_size is 5: K=7 is not free speed. | Keep the draft maximum at K=5 (MTP_NUM_TOKENS=5); shorten verification under load with the 5/4/3 schedule. |
# | **S01** Invalid batch-size schedule | num_speculative_tokens_per_batch_size ranges must cover batch sizes 1..MAX_NUM_SEQS contiguously, once, with every K at most num_speculative_tokens and the drafter block size 5. | Use the measured schedule [[1,1,5],[2,4,4],[5,6,3]] for MAX_NUM_SEQS=6. |
# | **S02** Unreadable SPECULATIVE_CONFIG | The compose command must hold one SPECULATIVE_CONFIG assignment that becomes valid JSON inside the container. | Restore the recipe's one-line SPECULATIVE_CONFIG (`lanebook env render` writes it). |
# | **S03** Unreadable env-file line | Compose skips an env-file line it cannot read as KEY=VALUE, so that setting never applies; a line whose key holds a space makes Docker Compose v2 refuse the whole file (lint then stops with Compose's message). | Write it as KEY=VALUE (or comment it out with #). |
# | **S04** Lane value not what runs | The lane file is the operator's truth: every value it sets must be what the server runs. A line of the env file can be undone before it gets there: the recipe's current launcher exports GPU_MEMORY_UTILIZATION from its profile key (GPU_MEMORY_UTILIZATION_TEXT, or _VISION with ENABLE_VL_SIDECAR=1) and DSPARK_MODEL from ABLITERATED; Compose passes only the keys its environment: map names and keeps a flag the command hard-codes; the image's command script builds the speculative config itself. | `lanebook env render --lane LANE --checkout DIR` writes the key that decides each value (the profile key, not GPU_MEMORY_UTILIZATION); where it cannot, edit the line lint names. After launch the live command must carry the lane's flags. |
# | **S05** Dead env line | A line whose key a later line sets again, or that the launcher overrides (GPU_MEMORY_UTILIZATION in a checkout whose launcher reads the profile key), never reaches the server and misleads whoever reads it. | Delete the line, or set the key that wins (the finding names it). |
# | **S07** Runtime and weights changed at once | A lane changes one thing against its rollback lane: seed 000 swapped to the 0731 weights on a known-good Anemll checkout and says not to change runtime and weights the same weekend. A lane whose image and weights both differ from its rollback lane's leaves a failure with two suspects, and a rollback that undoes both. | Promote one change at a time: keep the rollback lane's image (or weights) and change the other, then the rest once the first has held. To go ahead knowingly: `lanebook promote --allow-runtime-and-weights` (a runbook: `-p allow_runtime_and_weights=true`). |
# | **S08** A multi-node lane whose TP keys disagree with its nodes | The recipe's launcher and compose are two-node only (WORKER_HOST, --tensor-parallel-size 2, --nnodes 2). A lane of more Sparks runs a four-node checkout of its own, whose launcher reads NNODES, TP_SIZE, WORKER_HOSTS and WORKER_IPS (space-separated, in rank order) and whose compose passes --tensor-parallel-size ${TP_SIZE} and --nnodes ${NNODES}: keys that disagree with the lane's nodes start a smaller TP group, or a rank on the wrong node, and the recipe's start-deepseek-v4-flash-dspark.sh starts only WORKER_HOST, so a four-node lane launched by it would start a TP2 pair and leave two Sparks idle. | Set NNODES and TP_SIZE to the node count and WORKER_HOSTS and WORKER_IPS to the workers' RoCE IPs in the order `nodes:` lists them, and name the four-node launcher scripts under `launcher:` (./start-tp4.sh, ./status-tp4.sh, ./stop-tp4.sh). |
# | **S09** The API on every address with no key | The lane files serve on the head's LAN (VLLM_HOST 0.0.0.0) so Hermes and other machines reach it; with neither VLLM_API_KEY nor DSPARK_API_KEYS set, anyone who reaches the port can run inference on the pair. vLLM's key check covers only /v1, /v2 and /inference: a keyed lane still wants network-level access control. | Key the lane: auth: {DSPARK_API_KEYS: {key_file: ~/.config/lanebook/LANE.keys}} in its lane file (mode 0600; render writes the keys into .env.dspark, every lanebook client sends them), or serve on one trusted address (VLLM_HOST) behind a firewall. |

# %% [markdown]
# ## Verdict

# %%
rb.show_commands()
verdict = rb.finish()
