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
# # The lane doctor
#
# **What you'll do:** read what a running (or sick) lane shows, on every node, and get its likely causes with
# the evidence quoted: each rank's container log since its last start, `free`, the kernel log (this boot and the
# one before), the RoCE link (`ip -o link` MTUs, the RoCE GID tables), the HF cache's symlinks of the lane's model,
# the live `vllm serve` command, the CPU its processes use (`top`, a 0.5 s frame), and two `/metrics` scrapes a few
# seconds apart. What cannot be read is named, never skipped silently.
#
# **What it passes and fails on:** it passes when no finding is **confirmed** (a healthy lane gives none;
# suspected findings and harmless notes are shown with the check that tells causes apart). It fails on a confirmed
# finding: its fix and repair runbook are in the table.
#
# **Time:** under a minute. **Risk:** none — read-only: it changes nothing on a node and takes no lock.
# **Rollback:** nothing to roll back.

# %% tags=["parameters"]
lane = "twin"  # lane name under params/ or a lane YAML path
dry_run = False  # record the commands instead of sending them (opens no connection)

# %%
from lanebook.steps.runbook import Runbook
from lanebook.verify import doctor_gather

rb = Runbook("doctor", lane_name=lane, dry_run=dry_run)

# %% [markdown]
# ## Step 1 — Read the lane
# Every node, through the lane's one executor (logged, timed out, redacted). Expected: something was read;
# what was not (a command that failed, a table the node does not have) is listed with why.

# %%
with rb.step("1 read", fix="check that every node is reachable over SSH (`status`), then run `doctor` again"):
    gathered = doctor_gather.gather_step(rb)

# %% [markdown]
# ## Step 2 — Findings
# The findings table (id, confidence, cause, fix, repair runbook, next check), then each finding's evidence
# lines with where they were read. Expected: no confirmed finding.

# %%
with rb.step("2 findings", fix="follow the confirmed finding's fix and run its repair runbook (the table names it)"):
    diagnosis = doctor_gather.findings_step(rb, gathered)

# %% [markdown]
# ## Troubleshooting
# What goes wrong at this stage and what to do, from the pitfall registry
# (`lanebook.recipe.pitfalls`: the same entries lint and the book use; edit the registry, not this cell).
#
# No registered pitfall is met in `doctor`.

# %% [markdown]
# ## Verdict
# `findings` in the figures holds every finding with its evidence; `confirmed` their ids.

# %%
rb.show_commands()
verdict = rb.finish()
