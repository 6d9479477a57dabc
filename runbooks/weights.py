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
# # Weights: download once, rsync once
#
# **What you'll do:** verify the lane's hub model dir on every node; download it on the head only,
# and only when the head's tree is incomplete; copy the head's tree once to each worker whose tree is
# not whole over the RoCE address (rsync, resumable, never `--delete`); delete the `*.incomplete`
# leftovers on those workers only; verify every node again. What moves is the full hub model dir
# (blobs + snapshots + refs), the directory the compose file mounts, never a snapshot alone: a
# snapshot holds symlinks into `blobs/`.
#
# **Time:** a verify is one round trip per node (seconds). A download of the ~160 GB takes hours on
# the head's WAN; the rsync over the RoCE link tens of minutes. On the twin, seconds.
# **Risk:** low to medium — nothing here deletes a weight file: the only deletion is `*.incomplete`
# on the workers, rsync never runs with `--delete`, and the head is never written except by `hf download`.
# The download, the rsync and the deletion ask for confirmation (`--yes`; the runner confirms twin lanes).
# **Rollback:** none needed: a cut download or rsync is resumed by running this runbook again
# (`hf download` resumes its `*.incomplete` blobs, rsync `--partial` its partial file); files are only ever added.
#
# **Prerequisites** (checked below): the lane's weights path is a full hub model dir; every node
# answers the verify probe (it reports what its tree holds, whole or not).

# %% tags=["parameters"]
lane = "twin"  # lane name under params/ or a lane YAML path
dry_run = False  # record the commands instead of sending them (opens no connection)
confirm = None  # destructive steps go ahead: True (`lanebook run --yes`), None: on the twin only
sha256 = False  # also hash every shard blob against its name in both verifies (reads every byte)
rsync_attempts = 3  # rsync runs per worker when the connection drops mid-transfer (each resumes the last)

# %%
from lanebook.ops import weights
from lanebook.steps.runbook import Runbook

rb = Runbook("weights", lane_name=lane, dry_run=dry_run, confirm=confirm)
p = rb.params

# %% [markdown]
# ## Prerequisites
# The lane file names the full hub model dir (`…/hub/models--ORG--NAME`, holding blobs, snapshots and
# refs), and every node answers the probe (`python3 - HUB_DIR SHARDS < weights_probe.py`, one round trip).

# %%
with rb.step(
    "prerequisites",
    fix="fix the lane file's `weights:` (the full hub model dir, models--ORG--NAME) and run `weights` again",
):
    rb.expect(
        p.weights.hub_dir.rstrip("/").rsplit("/", 1)[-1].startswith("models--"),
        what="what moves is the full hub model dir (blobs + snapshots + refs), not a snapshot (P06)",
        detail=p.weights.hub_dir,
        local=True,
    )
    rb.expect(rsync_attempts >= 1, what="rsync_attempts is at least 1", detail=rsync_attempts, local=True)

# %% [markdown]
# ## Step 1 — Verify on every node
# Expected: each node reports its tree: shard count against the lane's, no `*.incomplete`, each shard's
# size against its header and the index's total, the snapshot's links into `blobs/`.
# A tree that is not whole is repaired by the steps below.

# %%
with rb.step(
    "1 verify", fix="a node that does not answer: check SSH to it (`ssh -F CONFIG NODE`), then run `weights` again"
):
    before = weights.verify_every_node(rb.nodes, sha256=sha256)
    rb.record(shards_before={a: r.shard_count for a, r in before.items()})
    rb.expect(weights.tree_results(before))

# %% [markdown]
# ## Step 2 — Download on the head only, when its tree is incomplete
# `HF_HUB_OFFLINE=0 TRANSFORMERS_OFFLINE=0 HF_HUB_DISABLE_XET=1 hf download REPO --max-workers 4` on the head
# (never on both nodes: that pulls ~160 GB over both WANs, P05). Expected: the head's tree verifies after it.
# A cut download leaves `*.incomplete` blobs that the next run's `hf download` resumes.

# %%
with rb.step(
    "2 download on head",
    fix=(
        "run `weights` again: `hf download` resumes the `*.incomplete` blobs; check the head's network and HF token if "
        "it keeps failing"
    ),
):
    head = weights.ensure_head_whole(rb, before[rb.nodes.head.alias], sha256=sha256)

# %% [markdown]
# ## Step 3 — rsync once to each worker that needs it, over the RoCE link
# `rsync -aH --partial --info=stats2 HUB_DIR/ [user@]FABRIC_IP:HUB_DIR/` from the head, for each worker whose
# tree is not whole or holds another revision; a worker whose tree verifies at the head's revision is
# skipped (nothing to send). Never `--delete`. A connection lost mid-transfer is resumed from the partial
# file (up to `rsync_attempts` runs). Expected: rsync finishes and prints its transfer statistics.

# %%
with rb.step(
    "3 rsync to workers",
    fix="run `weights` again: rsync resumes from the partial files; check the fabric link to the worker",
):
    to_sync = weights.sync_step(rb, head, before, attempts=rsync_attempts)

# %% [markdown]
# ## Step 4 — Delete `*.incomplete` on the copied workers only
# `find HUB_DIR -name '*.incomplete' -type f -print -delete` on each worker rsync copied to: leftovers of a
# download cut on that worker, which rsync does not remove (no `--delete`). Never on the head, never any
# other file. Expected: every deleted path is a `*.incomplete` file.

# %%
with rb.step(
    "4 delete *.incomplete on workers",
    fix=(
        "stop: a file that is not *.incomplete was named for deletion; check the worker's hub dir by hand before "
        "anything else"
    ),
):
    weights.clean_step(rb, to_sync)

# %% [markdown]
# ## Step 5 — Verify again on every node
# Expected: every node's tree whole — the lane's shard count, no `*.incomplete`, no broken link, every
# shard's size matching its header (and its sha256 its blob name with `-p sha256=True`), one revision
# on all nodes. If a worker still fails, run this runbook again (rsync resumes); if the head fails,
# its download did not finish.

# %%
with rb.step(
    "5 verify again",
    fix="run `weights` again (rsync resumes a cut copy); a head that still fails did not finish its download",
):
    after = weights.verify_every_node(rb.nodes, sha256=sha256)
    rb.record(shards_after={a: r.shard_count for a, r in after.items()}, revision=after[rb.nodes.head.alias].revision)
    rb.expect(weights.complete_results(after))
    revisions = weights.revisions(after)
    rb.expect(len(revisions) == 1, what="every node holds the same revision", detail=", ".join(revisions))

# %% [markdown]
# ## Troubleshooting
# What goes wrong at this stage and what to do, from the pitfall registry
# (`lanebook.recipe.pitfalls`: the same entries lint and the book use; edit the registry, not this cell).
#
# | Symptom | Cause | Fix |
# |---|---|---|
# | **P05** Dual-WAN download | Pulling the ~160 GB of weights on every node over the WAN wastes hours and disk. | Download once on the head, then rsync the hub model dir to every worker over the RoCE link. |
# | **P06** Snapshot-only mounts | A snapshot dir holds symlinks into blobs/; binding only snapshots/REV breaks them inside the container. | Mount the full hub model dir (blobs + snapshots + refs) or the whole HF cache. |

# %% [markdown]
# ## Verdict

# %%
rb.show_commands()
verdict = rb.finish()
