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
# **Prerequisites** (checked below): the lane is up (run `launch` first; a twin lane found cleanly down is
# launched by the `launch` runbook, its own record), its API lists the served model, and the live command
# carries the lane's values, so the canary starts from the lane's own value.

# %% tags=["parameters"]
lane = "twin"          # lane name under params/ or a lane YAML path
dry_run = False        # record the commands and requests instead of sending them (opens no connection)
confirm = None         # the canary relaunches go ahead: True (`lanebook run --yes`), None: on the twin only
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

from IPython.display import Markdown, display

from lanebook import canary as canary_run
from lanebook import diagnose, launcher, logs, probes, readiness
from lanebook.effective import live_mismatches
from lanebook.params import lane_with
from lanebook.pitfalls import troubleshooting_table
from lanebook.plugins import launch_lane_if_down
from lanebook.speed.bands import bands_frame
from lanebook.runbook import Runbook
from lanebook.speed.workloads import load_workload

rb = Runbook("diagnose", lane, dry_run=dry_run, confirm=confirm)
p = rb.params
run_tag = f"diagnose-{secrets.token_hex(4)}"  # makes every prompt of this run unique


def show_diff(relaunch):
    """What a relaunch rendered into the head's checkout (in a dry run: into lanebook's reference checkout)."""
    if relaunch.change is not None:
        display(Markdown(f"```diff\n{relaunch.change.diff or '(no change: the checkout already runs these values)'}\n```"))

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
    launch_lane_if_down(rb)  # a twin lane found cleanly down: the launch runbook, its own record
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
# ## Part 3 — One-axis canary: `MAX_NUM_BATCHED_TOKENS` 8192 → 8216
# 8216 lands the six-sequence scheduler budget exactly on 8192 after the draft reserve. The lane's own value is
# measured first; then the lane is relaunched with only that one value changed (rendered into the head's checkout,
# copied to the workers, stop, clean memory, start) and measured the same way: the same workloads, levels,
# trials and `max_tokens`. The variant is kept only when every request of both sides was measured and the matched
# bands promote it (no cell worse beyond the tolerance, at least one better, complete bands); otherwise it is
# rejected. The kept value is then rendered back, the lane relaunched, and the live command read. If the variant
# fails to come up or to carry its value, the lane's own value is relaunched at once.

# %%
with rb.step("3 canary baseline", fix="run `status`; a lane that cannot serve the probes cleanly needs `stop`, then `launch`"):
    if not canary:
        rb.skip("the lane's own value measured", "canary=False: parts 1-2 only")
    else:
        rb.expect(canary_key in p.env, f"the lane sets {canary_key} (the canary's one axis)", p.env.get(canary_key), local=True)
        variant = lane_with(p, env={canary_key: canary_value})
        baseline_docs = probes.measure_workloads(rb.lane, canary_workloads, canary_concurrency, canary_trials, canary_max_tokens)
        if baseline_docs:
            rb.record(canary_baseline=probes.document_figures(baseline_docs))
            display(bands_frame(baseline_docs))
        failed = None if baseline_docs is None else sum(r["errors"] for d in baseline_docs for r in d["runs"])
        rb.expect(failed == 0, f"every request measured at {canary_key}={p.env.get(canary_key)}",
                  None if failed is None else f"{failed} failed or unmeasurable")

# %%
with rb.step("4 canary variant",
             fix="the lane's own value was relaunched if the variant failed: run `status`; if the lane is not up with "
                 "the lane's values, run `env` then `launch`"):
    if not canary:
        rb.skip(f"the lane relaunched with {canary_key}={canary_value} and measured", "canary=False")
    else:
        rb.confirm(f"relaunch lane {p.name} with {canary_key}={canary_value} (stop, clean memory, start) and measure it")
        trial = canary_run.try_variant(rb.lane, variant, lambda: probes.measure_workloads(
            rb.lane, canary_workloads, canary_concurrency, canary_trials, canary_max_tokens))
        rb.record(canary_variant_run=trial.figures())
        show_diff(trial.relaunch)
        if trial.documents:
            rb.record(canary_variant=probes.document_figures(trial.documents))
            display(bands_frame(trial.documents))
        rb.expect(trial.relaunch.ok, f"the lane is up with {canary_key}={canary_value} and the live command carries it",
                  trial.relaunch.summary())
        rb.expect(trial.error is None, f"{', '.join(canary_workloads)} measured at {canary_key}={canary_value}",
                  trial.error or "")

# %%
with rb.step("5 canary decision", fix="no decision without both sides measured: run `diagnose` again"):
    if not canary:
        rb.skip("an explicit keep or reject from the measured figures", "canary=False")
    else:
        decision = None
        if baseline_docs and trial.documents:
            decision = diagnose.canary_decision(canary_key, p.env[canary_key], canary_value, baseline_docs,
                                                trial.documents, tolerance)
            rb.record(canary=decision.figures())
            display(Markdown(f"### Decision: **{decision.decision}** {canary_key}={canary_value}\n\n{decision.summary()}"))
            display(decision.comparison.frame() if decision.comparison else decision.reasons)
        rb.expect(decision is not None, "an explicit keep or reject from the measured figures", decision and decision.summary())

# %%
with rb.step("6 restore the kept value",
             fix="if the lane is not up with the kept value, run `env` then `launch` for this lane (`status` shows it)"):
    if not canary:
        rb.skip("the kept value is what the lane runs", "canary=False")
    else:
        kept = variant if decision is not None and decision.decision == "keep" else p  # a dry run shows the reject path
        kept_value = kept.env[canary_key]
        if kept is p:
            rb.confirm(f"render {canary_key}={kept_value} back into lane {p.name}'s checkout and relaunch it")
            restored = canary_run.relaunch_with(rb.lane, p)
            rb.record(canary_restore=restored.figures())
            show_diff(restored)
            rb.expect(restored.ok, f"the lane is up again with {canary_key}={kept_value} and the live command carries it",
                      restored.summary())
        else:
            rb.skip(f"{canary_key}={kept_value} rendered back", "the variant is kept: it is what the lane runs")
            mismatches = live_mismatches(kept, logs.live_command(rb.lane.head, launcher.container_name(rb.lane)))
            rb.expect(not mismatches, f"the live command carries {canary_key}={kept_value}", "; ".join(map(str, mismatches)))
        on_head = canary_run.head_env_value(rb.lane, canary_key)
        rb.record(canary_kept={canary_key: kept_value, "head_env_file": on_head})
        rb.expect(on_head == str(kept_value), f"the head's env file sets {canary_key}={kept_value}", on_head)
        rb.expect(p.env[canary_key] == kept_value, f"the lane file holds the kept {canary_key}={kept_value}",
                  f"the lane file says {p.env[canary_key]}: set env.{canary_key}: {kept_value} in params/{p.name}.yaml "
                  "so the lane file is the truth again" if p.env[canary_key] != kept_value else "", local=True)

# %% [markdown]
# ## Verdict

# %%
rb.show_commands()
verdict = rb.finish()
