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
# **Time:** the canary write-up's 256-token probe takes about 15 s per trial (C1 + C4 + C6); the lane's
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
lane = "twin"  # lane name under params/ or a lane YAML path
dry_run = False  # record what would be sent instead of sending it (opens no connection)
workloads = None  # None: the lane's (its baseline's; probe, code, prose without one), or e.g. "probe,code"
concurrency = None  # None: C1, C4, C6 (the canary write-up's levels), or e.g. "1,4"
trials = 3  # trials per level: at least 3 (a band is the median and min–max of three or more)
max_tokens = 256  # tokens per stream: the canary write-up's 256 (a smaller value is not comparable to a 256 baseline)
baseline = None  # None: the lane's stored baseline (lib/lanebook/speed/baselines/LANE.json), or a baseline file
tolerance = 0.10  # on the same setup, a median may fall this far below the baseline's before it fails
save_baseline = None  # a path: store this run (bands and provenance) there as a baseline file

# %%
from lanebook.lane.params import lane_path
from lanebook.lane.plugins import launch_lane_if_down
from lanebook.ops import launcher
from lanebook.speed import lanespeed
from lanebook.speed.baseline import load_baseline, stored_baseline
from lanebook.speed.provenance import compare_setups, read_provenance
from lanebook.steps.runbook import Runbook

rb = Runbook("speed", lane_name=lane, dry_run=dry_run)
p = rb.params

# %% [markdown]
# ## Prerequisites
# The parameters (checked here, also in a dry run), then the lane's API from this machine.

# %%
with rb.step(
    "prerequisites",
    fix="correct the parameter named above; if the lane is down, run `launch`; "
    "if `status` finds it inconsistent, run `stop`, then `launch`",
):
    plan = lanespeed.plan_speed(p, workloads=workloads, concurrency=concurrency, trials=trials, max_tokens=max_tokens)
    rb.expect(True, what="parameters", detail=plan.summary(), local=True)
    base = load_baseline(baseline) if baseline else stored_baseline(p.name)
    rb.record(plan=plan.figures(tolerance, str(base.path) if base else None))
    launch_lane_if_down(rb)  # a twin lane found cleanly down: the launch runbook, its own record
    api = launcher.ask_api(rb.nodes)
    rb.expect(api.healthy is True, what="/health answers 200", detail=api.detail)
    rb.expect(p.served_model_name in api.model_ids, what=f"/v1/models lists {p.served_model_name}", detail=api.detail)

# %% [markdown]
# ## Step 1 — The setup being measured
# On the head: `docker inspect` of the lane's container (the image it runs), `docker image inspect` of
# that image (its registry digest and ID), `cat` of the model's `refs/main` in the hub tree; from here:
# `GET /version`; and the lane file's sha256. Expected: the head's container image is read. A fact
# that cannot be read is recorded as unknown (with why), and then no baseline is judged against this run.

# %%
with rb.step("1 provenance", fix="run `status`: the lane's container must run on the head"):
    provenance = read_provenance(rb.nodes, lane_path(lane), launcher.container_name(rb.nodes))
    rb.record(provenance=provenance.to_json())
    rb.show(markdown=provenance.markdown())
    rb.expect(provenance.image is not None, what="the image the head's container runs", detail=provenance.image)
    setup = compare_setups(provenance, base.provenance) if base else None
    print(lanespeed.baseline_note(p.name, base, setup))

# %% [markdown]
# ## Step 2 — The waves, one workload at a time
# For each workload: trials × (C1, C4, C6) waves, each C streamed requests sent at once after
# `vllm:num_requests_running` and `vllm:num_requests_waiting` read 0. Expected: every request measured
# (a wave with a failed request ends the workload there: a dying server would fail every later wave),
# every wave checked for idle queues. Each workload's bands follow as a table and a plot.

# %%
documents = lanespeed.waves_steps(rb, plan, baseline=base, setup=setup)  # one step a workload: "2 waves WORKLOAD"

# %% [markdown]
# ## Step 3 — Against the lane's baseline
# Judged only on the same setup (image, its digest or ID, model revision, server version, lane file,
# twin or not) and the same `max_tokens`: then a median stream or aggregate rate more than the
# tolerance below the baseline's fails. Otherwise the change is shown and the check is skipped,
# saying which fact differs.

# %%
with rb.step(
    "3 baseline",
    fix="a regression on the same setup: run `diagnose` (matched A/B canary), "
    "or `rollback` to the lane's rollback lane",
):
    lanespeed.judge_step(rb, documents, provenance=provenance, baseline=base, tolerance=tolerance)

# %% [markdown]
# ## Step 4 — Store this run as a baseline (only with `save_baseline`)
# Writes the bands and the provenance to the path given (an existing file is backed up first). A run
# with failed requests or short bands is refused. To adopt it as the lane's baseline, save it to
# `lib/lanebook/speed/baselines/LANE.json` and commit it.

# %%
with rb.step("4 save baseline", fix="a run with failed requests is no baseline: fix the lane, then measure again"):
    lanespeed.save_step(rb, documents, path=save_baseline, plan=plan, provenance=provenance)

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
# | **P12** First-use inference JIT | Readiness does not compile every production shape: an untouched request shape triggers Triton/JIT compilation during inference, turning the first production burst into a latency event. | Keep the bounded post-readiness warmup enabled (POST_READINESS_WARMUP_ENABLED=1); treat cold-bind proof as pending until observed. |
# | **P14** K above the drafter block size | The Flash drafter's dspark_block_size is 5: K=7 is not free speed. | Keep the draft maximum at K=5 (MTP_NUM_TOKENS=5); shorten verification under load with the 5/4/3 schedule. |
# | **P15** Unwatched long cold needles | Unwatched ≥128k synthetic cold needles on the sole production head can hard-hang the box. | Step long probes up gradually and watch the console. |
# | **P17** Marketing the synthetic ceiling | The ~94 t/s count stream is real but is not Hermes chat; agent/code work lives in the 47–70 t/s band. | Publish code/prose bands (median, min–max), never the single best synthetic run. |

# %% [markdown]
# ## Verdict
# The bands, the provenance and the baseline judgement are in the figures of the record.

# %%
rb.show_commands()
verdict = rb.finish()
