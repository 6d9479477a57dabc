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
# # Speed bands
#
# **What you'll do:** record the setup being measured (the image the head's container runs with its
# digest, the model's snapshot revision from the head's hub tree, the server's `/version`, the lane
# file's sha256); stream the lane's workloads at C1, C4 and C6, three trials or more per level, each
# wave sent only once the server's queues are idle; publish each workload's bands (median and min–max
# over trials, never a single best run) with a plot; and set them against the lane's stored baseline.
#
# **What it passes and fails on:** it fails when a request of any wave fails (the step names the
# workload, the trial and the level), when a wave could not be checked for idle queues, and when, on
# the **same setup** as the baseline, a median falls more than the tolerance (10%) below the
# baseline's. On a different setup, or one the baseline did not record fully, the figures are shown
# beside the baseline's and **not judged**: the step says which fact differs.
#
# **Figures** (each request streamed, temperature 0, unique prompt, usage included):
# per-stream decode = (completion tokens − 1) / (last − first content chunk), averaged over the wave;
# wall aggregate = all decode tokens / (first request sent → last response finished); TTFT to the
# first content chunk (the role-only chunk does not count); acceptance from `/metrics` deltas.
#
# **Time:** the seed's 256-token probe takes about 15 s per trial (C1 + C4 + C6); the lane's
# workloads × 3 trials take a few minutes on a real lane. On the twin (probe and code): under two
# minutes with the lane up, about two and a half from a stopped twin (its launch included).
# **Risk:** none to the lane's state: it sends chat requests only. It keeps the pair busy while it runs,
# and other clients' requests would spoil its waves (it waits for idle queues before each).
# **Rollback:** nothing to roll back. A regression on the same setup is what `diagnose` and
# `rollback` act on.
#
# **Prerequisites** (checked below): the parameters are valid (three trials at least); the lane is up
# (`/health` 200, `/v1/models` lists the lane's served name). A twin lane found cleanly down is launched
# first by the `launch` runbook (its own record); a real lane found down fails here: run `launch`.

# %% tags=["parameters"]
lane = "twin"          # lane name under params/ or a lane YAML path
dry_run = False        # record what would be sent instead of sending it (opens no connection)
workloads = None       # None: the lane's (its baseline's; probe, code, prose without one), or e.g. "probe,code"
concurrency = None     # None: C1, C4, C6 (the seed's levels), or e.g. "1,4"
trials = 3             # trials per level: at least 3 (a band is the median and min–max of three or more)
max_tokens = 256       # tokens per stream: the seed's 256 (a smaller value is not comparable to a 256 baseline)
baseline = None        # None: the lane's stored baseline (lib/lanebook/speed/baselines/LANE.json), or a baseline file
tolerance = 0.10       # on the same setup, a median may fall this far below the baseline's before it fails
save_baseline = None   # a path: store this run (bands and provenance) there as a baseline file

# %%
import json
from datetime import datetime, timezone

from IPython.display import Image, Markdown, display

from lanebook import launcher
from lanebook.params import lane_path
from lanebook.pitfalls import troubleshooting_table
from lanebook.plugins import launch_lane_if_down
from lanebook.runbook import Runbook
from lanebook.speed import lanespeed
from lanebook.speed.baseline import counterpart, judge, load_baseline, stored_baseline, write_baseline
from lanebook.speed.plots import plot_workload
from lanebook.speed.provenance import compare_setups, read_provenance

rb = Runbook("speed", lane, dry_run=dry_run)
p = rb.params
twin_label = " · TWIN figures (not a real lane's)" if p.twin else ""

# %% [markdown]
# ## Troubleshooting
# What goes wrong at this stage and what to do, generated from the pitfall registry (the same
# entries lint and the book use).

# %%
troubleshooting_table("speed")

# %% [markdown]
# ## Prerequisites
# The parameters (checked here, also in a dry run), then the lane's API from this machine.

# %%
with rb.step("prerequisites", fix="correct the parameter named above; if the lane is down, run `launch`; "
                                 "if `status` finds it inconsistent, run `stop`, then `launch`"):
    plan = lanespeed.plan_speed(p, workloads, concurrency, trials, max_tokens)
    rb.expect(True, "parameters", plan.summary(), local=True)
    base = load_baseline(baseline) if baseline else stored_baseline(p.name)
    rb.record(plan={"workloads": list(plan.workloads), "levels": list(plan.levels), "trials": plan.trials,
                    "max_tokens": plan.max_tokens, "tolerance": tolerance,
                    "baseline": str(base.path) if base else None})
    launch_lane_if_down(rb)  # a twin lane found cleanly down: the launch runbook, its own record
    api = launcher.ask_api(rb.lane)
    rb.expect(api.healthy, "/health answers 200", api.detail)
    rb.expect(p.served_model_name in api.model_ids, f"/v1/models lists {p.served_model_name}", api.detail)

# %% [markdown]
# ## Step 1 — The setup being measured
# On the head: `docker inspect` of the lane's container (the image it runs), `docker image inspect` of
# that image (its registry digest and ID), `cat` of the model's `refs/main` in the hub tree; from here:
# `GET /version`; and the lane file's sha256. Expected: the head's container image is read. A fact
# that cannot be read is recorded as unknown (with why), and then no baseline is judged against this run.

# %%
with rb.step("1 provenance", fix="run `status`: the lane's container must run on the head"):
    provenance = read_provenance(rb.lane, lane_path(lane), launcher.container_name(rb.lane))
    rb.record(provenance=provenance.to_json())
    display(Markdown(provenance.markdown()))
    rb.expect(provenance.image is not None, "the image the head's container runs", provenance.image)
    setup = compare_setups(provenance, base.provenance) if base else None
    if base:
        print(f"baseline {base.path}: {base.source}")
        print(setup.summary())
    else:
        print(f"lane {p.name} has no stored baseline: the bands below are shown, not judged")

# %% [markdown]
# ## Step 2 — The waves, one workload at a time
# For each workload: trials × (C1, C4, C6) waves, each C streamed requests sent at once after
# `vllm:num_requests_running` and `vllm:num_requests_waiting` read 0. Expected: every request measured
# (a wave with a failed request ends the workload there: a dying server would fail every later wave),
# every wave checked for idle queues. Each workload's bands follow as a table and a plot.

# %%
documents, bands, failed_waves = [], {}, {}
baseline_label = f"baseline median ({setup.headline}: {'judged' if setup.same else 'not judged'})" if setup else ""
for workload in plan.workloads:
    with rb.step(f"2 waves {workload}", fix="read the failed waves' reasons above and run `status`; an engine "
                                           "that died or an orphaned worker: run `stop`, then `launch`, then speed again"):
        result = lanespeed.measure_workload(plan, workload, rb.lane.executor, p.twin)
        if result is None:  # a dry run: the request as it would be sent
            display(Markdown(f"**{workload}** would send, first request of its first wave:"))
            display(Markdown("```json\n" + json.dumps(plan.example_body(workload), indent=1) + "\n```"))
            rb.expect(False, f"every request of {workload} measured")
            continue
        document = result.document()
        documents.append(document)
        failures = lanespeed.wave_failures(result)
        bands[workload], failed_waves[workload] = document["bands"], failures
        rb.record(bands=bands, wave_failures=failed_waves)
        display(Markdown(lanespeed.bands_table(document)))
        display(Image(plot_workload(document, counterpart(base, document), baseline_label,
                                    f"{p.name} · {workload} · max_tokens {plan.max_tokens} · {plan.trials} trials{twin_label}")))
        rb.expect(not failures, f"every request of {workload} measured", "; ".join(failures) or
                  f"{len(result.waves)} waves, {plan.requests_per_workload} requests")
        unchecked = lanespeed.unchecked_idle(result)
        rb.expect(not unchecked, "queues idle before every wave", "no /metrics before " + ", ".join(unchecked)
                  if unchecked else "vllm:num_requests_running and vllm:num_requests_waiting were 0 before each wave")

# %% [markdown]
# ## Step 3 — Against the lane's baseline
# Judged only on the same setup (image, its digest or ID, model revision, server version, lane file,
# twin or not) and the same `max_tokens`: then a median stream or aggregate rate more than the
# tolerance below the baseline's fails. Otherwise the change is shown and the check is skipped,
# saying which fact differs.

# %%
with rb.step("3 baseline", fix="a regression on the same setup: run `diagnose` (matched A/B canary), "
                              "or `rollback` to the lane's rollback lane"):
    if rb.dry_run:
        rb.expect(False, "speed against the lane's baseline")
    else:
        judgement = judge(documents, provenance, base, tolerance)
        rb.record(baseline=judgement.to_json())
        if judgement.comparison is not None:
            display(judgement.comparison.frame())
        if judgement.judged:
            rb.expect(not judgement.failed, f"medians within {tolerance:.0%} of the baseline's on the same setup",
                      judgement.summary())
        else:
            rb.skip("speed judged against the baseline", judgement.summary())

# %% [markdown]
# ## Step 4 — Store this run as a baseline (only with `save_baseline`)
# Writes the bands and the provenance to the path given (an existing file is backed up first). A run
# with failed requests or short bands is refused. To adopt it as the lane's baseline, save it to
# `lib/lanebook/speed/baselines/LANE.json` and commit it.

# %%
with rb.step("4 save baseline", fix="a run with failed requests is no baseline: fix the lane, then measure again"):
    if not save_baseline:
        rb.skip("stored as a baseline", "no save_baseline path given")
    elif rb.dry_run:
        rb.skip("stored as a baseline", "a dry run measures nothing")
    else:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        source = (f"speed runbook on lane {p.name}, {stamp}: {plan.trials} trials per level, max_tokens {plan.max_tokens}"
                  + ("; twin figures, not a real lane's" if p.twin else ""))
        written = write_baseline(save_baseline, documents, provenance, source)
        rb.expect(load_baseline(written).workloads == list(plan.workloads), "stored as a baseline", str(written))

# %% [markdown]
# ## Verdict
# The bands, the provenance and the baseline judgement are in the figures of the record.

# %%
rb.show_commands()
verdict = rb.finish()
