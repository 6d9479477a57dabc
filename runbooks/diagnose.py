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
# # Diagnose: cache churn, the K boundary, a one-axis canary and the verify schedule's own A/B
#
# **What you'll do:** after a promotion, attack the plausible failure modes instead of trusting one
# benchmark win. (1) Prefix-cache churn: A cold → A repeat → unrelated B cold → A again, with unique
# prefixes and identical framing; cache counters from `/metrics`, TTFT from the first streamed content.
# (2) The C4↔C5 K boundary of the 5/4/3 verify schedule: waves either side and a mixed wave that crosses
# it mid-run; queues must drain with no CUDA, NCCL, engine-death or preemption condition. (3) A one-axis
# canary: `MAX_NUM_BATCHED_TOKENS` 8192 → 8216 measured on count, code and structured JSON against 8192
# measured the same way, ending in an explicit keep or reject, and the kept value restored and checked live.
# (4) The schedule's own A/B: the lane's batch-size verify schedule against fixed K (`MTP_NUM_TOKENS`) on matched
# workloads at C1/C4/C6, the schedule kept only on a clear gain, else fixed K restored through the launcher. After
# any canary the relaunched lane is proven as the write-up proved it (count-300, tools, Hermes, queues, both ranks).
# (5, opt-in) A stepped long-context needle climb, watched (pitfall P15).
#
# **Time:** on a real lane up to four relaunches (8–15 minutes each, cold bind) plus about 30 minutes of probes;
# several minutes on the twin with `--fast`. **Risk:** parts 1–2 only send requests (the lane keeps
# serving, slower while they run); parts 3 and 4 relaunch the lane: nothing serves during each relaunch.
# Headless on a real lane the canaries need `--yes` (or `-p confirm=True`); `-p canary=False` and
# `-p schedule_canary=False` leave them out.
# **Rollback:** parts 3 and 4 restore the kept values themselves, also when a variant fails; if a restore fails,
# run `env` then `launch` for this lane. **One command to put a verify side back** (no lane file written by hand):
# `lanebook run diagnose --lane LANE -p restore_k=fixed` (or `restore_k=schedule`) relaunches that side through
# the launcher, checks the live command, writes the side into the lane file (backed up beside it) and proves the lane;
# nothing else runs.
#
# **Prerequisites** (checked below): the lane is up (run `launch` first; a twin lane found cleanly down is
# launched by the `launch` runbook, its own record), its API lists the served model, and the live command
# carries the lane's values, so the canary starts from the lane's own value.

# %% tags=["parameters"]
lane = "twin"  # lane name under params/ or a lane YAML path
dry_run = False  # record the commands and requests instead of sending them (opens no connection)
confirm = None  # the canary relaunches go ahead: True (`lanebook run --yes`), None: on the twin only
prefix_lines = 200  # lines of notes in prompts A and B (about 14 tokens a line)
prefix_ttft = True  # A again must also answer sooner than A cold; False where a prefill is too short to show in TTFT
boundary = [4, 5]  # the batch sizes either side of the K boundary (the schedule's 2-4 → K4, 5-6 → K3)
boundary_workload = "code"
boundary_max_tokens = 256
boundary_short_tokens = 64  # the mixed wave's shorter branch: five streams become four mid-run
canary = True  # run part 3 (relaunches the lane twice); False: parts 1-2 only
canary_key = "MAX_NUM_BATCHED_TOKENS"
canary_value = 8216  # the variant's value of canary_key (the lane's own value is the baseline)
canary_workloads = ["count", "code", "json"]
canary_concurrency = [1, 4]
canary_trials = 3  # at least 3: a value is kept only on complete bands
canary_max_tokens = 256
tolerance = 0.05  # relative change of a median beyond which a cell is better or worse
schedule_canary = True  # part 4: the verify schedule against fixed K (relaunches the lane once or twice)
k_schedule = None  # the schedule side's [[start_bs, end_bs, K], ...]; None: the lane's own
restore_k = None  # "fixed" or "schedule": put that side back through the launcher; nothing else runs
schedule_workloads = ["count", "code", "json"]
schedule_concurrency = [1, 4, 6]
schedule_trials = 3  # the speed harness's bands: at least 3 trials a cell
schedule_max_tokens = 256
proof_trials = 3  # count-300 trials on the relaunched lane (the best is reported, as the write-up did)
long_context = False  # part 5, opt-in (P15): cold needles climbing to the lane's context
long_context_tokens = None  # the climb's last length; None: the lane's MAX_MODEL_LEN
attended = None  # someone watches the head's console: True headless; None: JupyterLab asks (twin: not needed)

# %%
import secrets

from lanebook.lane.plugins import launch_lane_if_down
from lanebook.ops import launcher, readiness
from lanebook.steps.runbook import Runbook
from lanebook.verify import canary as canary_run
from lanebook.verify import probes
from lanebook.verify import schedule_canary as schedule_run

rb = Runbook("diagnose", lane_name=lane, dry_run=dry_run, confirm=confirm)
p = rb.params
run_tag = f"diagnose-{secrets.token_hex(4)}"  # makes every prompt of this run unique

# %%
restore_only = bool(restore_k)  # `-p restore_k=fixed`: parts 1-3 are left out
left_out = f"restore_k={restore_k}: only the restore runs" if restore_only else None
canary = canary and not restore_only

# %% [markdown]
# ## Prerequisites
# Expected: the lane's containers up on every node, `/v1/models` listing the served name, and the live
# `vllm serve` command carrying every value the lane sets (so the canary's baseline is the lane's value).

# %%
with rb.step("prerequisites", fix="run `launch` for this lane (it verifies the live command), then `diagnose` again"):
    launch_lane_if_down(rb)  # a twin lane found cleanly down: the launch runbook, its own record
    containers = launcher.lane_containers(rb.nodes)
    rb.expect(containers.state == launcher.LANE_UP, what="the lane is up on every node", detail=containers.summary())
    models = readiness.wait_models(p.api, p.served_model_name, timeout_s=60, executor=rb.nodes.executor) or []
    rb.expect(
        p.served_model_name in [m.get("id") for m in models],
        what=f"/v1/models lists {p.served_model_name}",
        detail=", ".join(str(m.get("id")) for m in models),
    )
    launcher.live_command_step(rb)

# %% [markdown]
# ## Part 1 — Prefix-cache churn: A → A → B → A
# Four streamed requests, each alone on an idle lane, `/metrics` read before and after each:
# A cold, A repeat, unrelated B cold, A again. A and B start with tags unique to this run and share
# framing (template, note shape, question, request extras) so they differ only in what they say.
# Expected: both cold requests hit nothing (the prefixes are unique), A's repeat hits, and A again hits at
# least what its repeat hit, answering sooner than A cold (`prefix_ttft`; a tiny model's prefill takes
# milliseconds, less than a busy machine's scheduling: there the counters alone judge). Fewer hits on A again
# is the A→B→A eviction.

# %%
with rb.step(
    "1 prefix cache A→B→A",
    fix="the prefix cache evicts under churn: check `--enable-prefix-caching` and the GPU KV cache size in "
    "the startup log (`status`); relaunch with `stop` then `launch`, and run `diagnose` again",
):
    probes.prefix_cache_step(rb, run_tag=run_tag, lines=prefix_lines, skip_because=left_out, judge_ttft=prefix_ttft)

# %% [markdown]
# ## Part 2 — The C4↔C5 K boundary
# Three waves on an idle lane: C4 (K=4), C5 (K=3), and C5 with one shorter branch, so the batch drops to four
# mid-run and K changes under the running streams. These are aggregate rates over concurrent requests; the
# mixed wave is a transition test, not an equal-output throughput comparison.
# Expected: every request completes, the queue drains after each wave, no preemption, `/health` still 200,
# and no CUDA, NCCL, engine-death or out-of-memory line in either rank's log.

# %%
with rb.step(
    "2 K boundary C4↔C5",
    fix="read both ranks' logs (`status`); an engine death or an orphaned worker needs `stop`, then `launch`; "
    "keep the 5/4/3 schedule off (`rollback`) until a clean `diagnose`",
):
    probes.boundary_step(
        rb,
        run_tag=run_tag,
        sizes=boundary,
        workload=boundary_workload,
        max_tokens=boundary_max_tokens,
        short_tokens=boundary_short_tokens,
        skip_because=left_out,
    )

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
with rb.step(
    "3 canary baseline", fix="run `status`; a lane that cannot serve the probes cleanly needs `stop`, then `launch`"
):
    measured = canary_run.Trials(  # the parameters of part 3
        workloads=canary_workloads, concurrency=canary_concurrency, trials=canary_trials, max_tokens=canary_max_tokens
    )
    plan = canary_run.CanaryPlan(
        enabled=canary, key=canary_key, value=canary_value, tolerance=tolerance, measured=measured
    )
    baseline_docs = canary_run.baseline_step(rb, plan)

# %%
with rb.step(
    "4 canary variant",
    fix="the lane's own value was relaunched if the variant failed: run `status`; if the lane is not up with "
    "the lane's values, run `env` then `launch`",
):
    trial = canary_run.variant_step(rb, plan)

# %%
with rb.step("5 canary decision", fix="no decision without both sides measured: run `diagnose` again"):
    decision = canary_run.decision_step(rb, plan, baseline=baseline_docs, trial=trial)

# %%
with rb.step(
    "6 restore the kept value",
    fix="if the lane is not up with the kept value, run `env` then `launch` for this lane (`status` shows it)",
):
    canary_run.restore_step(rb, plan, decision)

# %% [markdown]
# ## Part 4 — The verify schedule against fixed K
# Seed 000: "If your matched workload does not improve, restore fixed K=5 by removing the batch-size schedule", then
# restart through the same launcher and confirm the live command no longer contains
# `num_speculative_tokens_per_batch_size`. The side the lane runs is measured first; then the lane is relaunched with
# only the schedule changed (fixed K = `MTP_NUM_TOKENS`, or the schedule back) and measured the same way at
# C1/C4/C6 with trial bands. The schedule stays only on part 3's rule (no cell worse, complete bands, one cell clearly
# better); otherwise fixed K is what runs. Expected: the kept side is up, its live command carries the schedule's key
# exactly when the schedule is kept.
#
# **The lane file and the live lane:** the lane file is your truth, so a decision the file does not say would be
# undone by the next `env` and `launch`. lanebook therefore writes the kept side into the lane file itself: only
# `speculative.schedule` changes (`null` for fixed K), with a comment naming this canary, and the file as it was is
# kept beside it (`NAME.yaml.bak-UTCSTAMP`). `-p restore_k=fixed|schedule` does the same restore without the A/B.

# %%
splan = schedule_run.SchedulePlan(  # the parameters of part 4
    enabled=schedule_canary,
    schedule=k_schedule,
    restore=restore_k,
    tolerance=tolerance,
    measured=canary_run.Trials(
        workloads=schedule_workloads,
        concurrency=schedule_concurrency,
        trials=schedule_trials,
        max_tokens=schedule_max_tokens,
    ),
)

# %%
with rb.step(
    "7 schedule A/B",
    fix="the lane's own side was relaunched if the other failed: run `status`; if the lane is not up with the "
    "lane file's values, run `env` then `launch`",
):
    schedule_ab = schedule_run.ab_step(rb, splan)

# %%
with rb.step("8 schedule decision", fix="no decision without both sides measured: run `diagnose` again"):
    schedule_decision = schedule_run.decision_step(rb, splan, schedule_ab)

# %%
with rb.step(
    "9 restore the kept verify side",
    fix="if the lane is not up with the kept side, run `lanebook run diagnose --lane LANE -p restore_k=fixed` "
    "(or `schedule`); `status` shows the live command",
):
    schedule_restore = schedule_run.restore_step(rb, splan, decision=schedule_decision, ab=schedule_ab)

# %% [markdown]
# ## The relaunched lane, proven
# Seed 000: "The restored lane returned a 90.70 t/s best count-300 run, passed tools and Hermes routing, drained its
# queues, and stayed clean on both TP ranks." After any canary relaunched the lane, the same proof: count at C1 with
# 300 tokens (best trial, beside the write-up's figure; a twin figure is labelled twin and judged against nothing),
# the tool-call smoke, Hermes `ROUTE_OK` through the real CLI, idle queues, and a fatal-line scan of every rank's log.

# %%
with rb.step("10 the relaunched lane proven", fix="run `gates` and `status`; a failing lane: `stop`, then `launch`"):
    relaunched = canary or schedule_ab is not None or schedule_restore is not None
    canary_run.proof_step(rb, relaunched=relaunched, trials=proof_trials)

# %% [markdown]
# ## Part 5 — Long context, stepped and watched (opt-in)
# Pitfall P15: unwatched ≥128k synthetic cold needles on the sole production head can hard-hang the box. So the
# probe climbs (8,192 tokens, doubling, the lane's context last), reads the queues idle and `/health` 200 before
# each step, and stops at the first failure. On a real lane it runs only while someone watches the head's console:
# JupyterLab asks with a button; headless, `-p attended=True` says so. Expected: every step answered.

# %%
with rb.step(
    "11 long context",
    fix="the climb stopped where the lane failed: read the head's console and `status`; an engine death needs "
    "`stop`, then `launch`",
):
    probes.long_context_step(rb, enabled=long_context, target_tokens=long_context_tokens, attended=attended)

# %% [markdown]
# ## Troubleshooting
# What goes wrong at this stage and what to do, from the pitfall registry
# (`lanebook.recipe.pitfalls`: the same entries lint and the book use; edit the registry, not this cell).
#
# | Symptom | Cause | Fix |
# |---|---|---|
# | **P03** Batch 8216 | 8216 lands the six-sequence scheduler budget exactly on 8192 after the draft reserve. It initialised cleanly but regressed count, code and structured-JSON probes in the matched canary, and was rejected. | Keep MAX_NUM_BATCHED_TOKENS=8192. |
# | **P04** Sticky UMA memory after stop | After a stop, free memory can stay ~10–16 GiB short with no container running. | Drop the page cache on every node (or reboot) before the next launch. Never `docker system prune -af`: it deletes the Anemll image. |
# | **P15** Unwatched long cold needles | Unwatched ≥128k synthetic cold needles on the sole production head can hard-hang the box. | Step long probes up gradually and watch the console. |
# | **P16** Head dies mid-TP | When the head dies mid-TP a worker is left orphaned, holding its GPU. | Stop every orphaned worker at once; clean SHM and page cache on every node, then restore from the head. |

# %% [markdown]
# ## Verdict

# %%
rb.show_commands()
verdict = rb.finish()
