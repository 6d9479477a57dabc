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
# # Diagnose: cache churn, the K boundary, and a one-axis canary
#
# **What you'll do:** after a promotion, attack three plausible failure modes instead of trusting one
# benchmark win. (1) Prefix-cache churn: A cold → A repeat → unrelated B cold → A again, with unique
# prefixes and identical framing; cache counters from `/metrics`, TTFT from the first streamed content.
# (2) The C4↔C5 K boundary of the 5/4/3 verify schedule: waves either side and a mixed wave that crosses
# it mid-run; queues must drain with no CUDA, NCCL, engine-death or preemption condition. (3) A one-axis
# canary: `MAX_NUM_BATCHED_TOKENS` 8192 → 8216 measured on count, code and structured JSON against 8192
# measured the same way, ending in an explicit keep or reject, and the kept value restored and checked live.
#
# **Time:** on a real lane two relaunches (8–15 minutes each, cold bind) plus about 15 minutes of probes;
# about 4 minutes on the twin with `--fast`. **Risk:** parts 1–2 only send requests (the lane keeps
# serving, slower while they run); part 3 relaunches the lane twice: nothing serves during each relaunch.
# Headless on a real lane the canary needs `--yes` (or `-p confirm=True`); `-p canary=False` runs parts 1–2 only.
# **Rollback:** part 3 restores the kept value itself, also when the variant fails; if a restore fails,
# run `env` then `launch` for this lane.
#
# **Prerequisites** (checked below): the lane is up (run `launch` first), its API lists the served model,
# and the live command carries the lane's values, so the canary starts from the lane's own value.

# %% tags=["parameters"]
lane = "twin"          # lane name under params/ or a lane YAML path
dry_run = False        # record the commands and requests instead of sending them (opens no connection)
confirm = None         # the canary relaunches go ahead: True (`lanebook run --yes`); None: on the twin only
prefix_lines = 200     # lines of notes in prompts A and B (about 14 tokens a line)
boundary = [4, 5]      # the batch sizes either side of the K boundary (the schedule's 2-4 → K4, 5-6 → K3)
boundary_workload = "code"
boundary_max_tokens = 256
boundary_short_tokens = 64   # the mixed wave's shorter branch: five streams become four mid-run
canary = True          # run part 3 (relaunches the lane twice); False: parts 1-2 only
canary_key = "MAX_NUM_BATCHED_TOKENS"
canary_value = 8216    # the variant's value of canary_key (the lane's own value is the baseline)
canary_workloads = ["count", "code", "json"]
canary_concurrency = [1, 4]
canary_trials = 3      # at least 3: a value is kept only on complete bands
canary_max_tokens = 256
tolerance = 0.05       # relative change of a median beyond which a cell is better or worse

# %%
import secrets

from lanebook import diagnose, launcher, logs, probes, readiness
from lanebook.effective import live_mismatches
from lanebook.pitfalls import troubleshooting_table
from lanebook.runbook import Runbook
from lanebook.speed.workloads import load_workload

rb = Runbook("diagnose", lane, dry_run=dry_run, confirm=confirm)
p = rb.params
run_tag = f"diagnose-{secrets.token_hex(4)}"  # makes every prompt of this run unique

# %% [markdown]
# ## Troubleshooting
# What goes wrong at this stage and what to do, generated from the pitfall registry.

# %%
troubleshooting_table("diagnose")

# %% [markdown]
# ## Prerequisites
# Expected: the lane's containers up on every node, `/v1/models` listing the served name, and the live
# `vllm serve` command carrying every value the lane sets (so the canary's baseline is the lane's value).

# %%
with rb.step("prerequisites", fix="run `launch` for this lane (it verifies the live command), then `diagnose` again"):
    containers = launcher.lane_containers(rb.lane)
    rb.expect(containers.state == launcher.LANE_UP, "the lane is up on every node", containers.summary())
    models = readiness.wait_models(p.api, p.served_model_name, timeout_s=60, executor=rb.lane.executor) or []
    rb.expect(p.served_model_name in [m.get("id") for m in models], f"/v1/models lists {p.served_model_name}",
              ", ".join(str(m.get("id")) for m in models))
    mismatches = live_mismatches(p, logs.live_command(rb.lane.head, launcher.container_name(rb.lane)))
    rb.expect(not mismatches, "the live command carries every value the lane sets", "; ".join(map(str, mismatches)))

# %% [markdown]
# ## Part 1 — Prefix-cache churn: A → A → B → A
# Four streamed requests, each alone on an idle lane, `/metrics` read before and after each:
# A cold, A repeat, unrelated B cold, A again. A and B start with tags unique to this run and share
# framing (template, note shape, question, request extras) so they differ only in what they say.
# Expected: both cold requests hit nothing (the prefixes are unique), A's repeat hits, and A again hits at
# least what its repeat hit, answering sooner than A cold. Fewer hits on A again is the A→B→A eviction.

# %%
with rb.step("1 prefix cache A→B→A",
             fix="the prefix cache evicts under churn: check `--enable-prefix-caching` and the GPU KV cache size in "
                 "the startup log (`status`); relaunch with `stop` then `launch`, and run `diagnose` again"):
    prefix_requests = diagnose.prefix_bodies(p.served_model_name, p.request, run_tag, prefix_lines)
    prefix_steps = probes.prefix_protocol(p.api, prefix_requests, rb.lane.executor)
    prefix = None if prefix_steps is None else diagnose.prefix_verdict(prefix_steps)  # None: a dry run sent nothing
    if prefix:
        rb.record(prefix_cache={s.name: s.figures() for s in prefix_steps}, prefix_cache_evicted=prefix.evicted)
    rb.expect(bool(prefix and prefix.ok), "A hits the cache again after unrelated B (no eviction), and sooner than cold",
              prefix and prefix.summary())

# %% [markdown]
# ## Part 2 — The C4↔C5 K boundary
# Three waves on an idle lane: C4 (K=4), C5 (K=3), and C5 with one shorter branch, so the batch drops to four
# mid-run and K changes under the running streams. These are aggregate rates over concurrent requests; the
# mixed wave is a transition test, not an equal-output throughput comparison.
# Expected: every request completes, the queue drains after each wave, no preemption, `/health` still 200,
# and no CUDA, NCCL, engine-death or out-of-memory line in either rank's log.

# %%
with rb.step("2 K boundary C4↔C5",
             fix="read both ranks' logs (`status`); an engine death or an orphaned worker needs `stop`, then `launch`; "
                 "keep the 5/4/3 schedule off (`rollback`) until a clean `diagnose`"):
    plan = diagnose.boundary_plan(p.speculative.schedule, p.num_speculative_tokens, boundary[0], boundary[1],
                                  boundary_max_tokens, boundary_short_tokens)
    if not plan.crosses:
        rb.skip(f"C{plan.lower}↔C{plan.upper} stays stable across the K boundary",
                f"the lane verifies K={plan.k_lower} at both batch sizes: no boundary to cross")
    else:
        workload = load_workload(boundary_workload)
        cases = [(name, diagnose.boundary_bodies(p.served_model_name, workload, p.request, run_tag, i, lengths))
                 for i, (name, lengths) in enumerate(plan.cases())]
        measured = probes.boundary_run(p.api, cases, rb.lane.executor)
        health = probes.healthy(p.api, rb.lane.executor)
        fatal = diagnose.fatal_lines(probes.fatal_log_lines(rb.lane))
        stability = None if measured is None else diagnose.boundary_verdict(measured, fatal, bool(health))
        if stability:
            rb.record(k_boundary={c.name: c.figures() for c in measured})
        rb.expect(bool(stability and stability.ok), f"C{plan.lower}↔C{plan.upper} stays stable across the K boundary",
                  stability and stability.summary(measured))

# %% [markdown]
# ## Verdict

# %%
rb.show_commands()
verdict = rb.finish()
