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
# # Gates before calling the lane live
#
# **What you'll do:** ask the running lane what a client will meet, then route the operator's own client
# through it: `/v1/models` (the served name and 1M context), the startup log (no auto-enabled breakable
# graphs, a KV cache in band), the exact smoke (`Reply exactly TOKEN.` at temperature 0, thinking as a JSON
# boolean, the reply compared exactly), the tool-call smoke (a structured `tool_calls[]`), the Hermes
# provider block (api_key, thinking, context, default model), and the ROUTE_OK smoke through the real
# Hermes Agent CLI with that block in an isolated `HERMES_HOME`.
#
# Every gate runs before the verdict, so the table at the end shows them all; the run fails if any failed.
#
# **Time:** under a minute. **Risk:** none — it sends a few short requests and changes nothing on the lane (only the operator's
# Hermes config, when named and pointed at another lane: backed up first).
# **Rollback:** nothing to roll back. A lane that fails its gates is not live: fix what the table names, or
# run `rollback` to the lane's rollback lane.
#
# **Prerequisites:** the lane is up (`launch`); Hermes Agent is installed where the lane's `hermes.host`
# says (here: `make setup` puts the pinned version in `.tools/hermes`). To check the operator's own Hermes
# config instead of the block rendered from the lane, name it in the lane (`hermes.config`) or pass
# `hermes_config=PATH` (a config.yaml on the Hermes host): it is pointed at this lane first (backed up).

# %% tags=["parameters"]
lane = "twin"  # lane name under params/ or a lane YAML path
dry_run = False  # record the requests and commands instead of sending them (opens no connection)
confirm = None  # pointing the operator's Hermes config at this lane goes ahead: True (`--yes`), None: twin only
hermes_config = None  # the operator's Hermes config.yaml on the Hermes host; None: the lane's hermes.config, if any

# %%
from lanebook.steps.runbook import Runbook
from lanebook.verify import gates, hermes

rb = Runbook("gates", lane_name=lane, dry_run=dry_run, confirm=confirm)
p = rb.params
config = hermes_config or p.hermes.config
checks = []  # every gate's checks, judged together at the end

# %% [markdown]
# ## Gate 1 — `/v1/models`
# `curl -s API/models`. Expected: the lane's served name as `id`, and the lane's `max_model_len` (1,048,576).

# %%
with rb.step("1 models"):
    checks += gates.models_step(rb)

# %% [markdown]
# ## Gate 2 — The startup log
# `docker logs CONTAINER 2>&1 | grep -E …` on the head. Expected: no
# `Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1` (P01), `Application startup complete`, and
# `GPU KV cache size` in the lane's band.

# %%
with rb.step("2 startup log"):
    checks += gates.log_step(rb)

# %% [markdown]
# ## Gate 3 — The exact smoke
# `Reply exactly TOKEN.` with temperature 0, 32 tokens and the lane's `request:` (its `chat_template_kwargs`,
# thinking as a JSON boolean). Expected: the reply is the token exactly, and carries no reasoning when
# thinking is off (a string `"false"` turns thinking on: P10).

# %%
with rb.step("3 exact smoke"):
    checks += gates.exact_smoke_step(rb)

# %% [markdown]
# ## Gate 4 — The tool-call smoke
# One tool offered with `tool_choice: auto`. Expected: a structured `tool_calls[]` (not text that looks like a
# call) naming the lane's tool with its arguments as a JSON object: `get_weather({"city": "Pensacola, FL"})`.

# %%
with rb.step("4 tool smoke"):
    checks += gates.tool_smoke_step(rb)

# %% [markdown]
# ## The operator's Hermes config names this lane
# With the operator's Hermes config named (the lane's `hermes.config`, or `hermes_config`): when its
# `providers.spark-ds4` names another lane (after a rollback), it is backed up beside itself
# (`config.yaml.bak-UTCSTAMP`) and its `default_model` and URL pointed at this lane, after confirmation; every
# other line is kept. Expected: the config names this lane's served name and API. No config named: nothing to do.

# %%
with rb.step("hermes config", fix="put the backup named above back if the edit is not wanted; check the path"):
    hermes.follow_step(rb, config=config)

# %% [markdown]
# ## Gate 5 — The Hermes provider block
# `providers.spark-ds4` as Hermes will use it: rendered from the lane, or read from the operator's config.
# Expected: `api` the lane's API, `api_key: no-key-required` (not `none`: P09), `thinking` a JSON boolean
# (P10), `context_length` the lane's advertised context within the server's, `default_model` the served name.

# %%
with rb.step("5 hermes provider block"):
    provider, found = hermes.block_step(rb, config=config)
    checks += found

# %% [markdown]
# ## Gate 6 — Hermes ROUTE_OK, through the real CLI
# `hermes --provider spark-ds4 -m MODEL -t safe -z 'Reply exactly ROUTE_OK.'` with that block as the whole
# config of a fresh `HERMES_HOME`, on the Hermes host. Expected: exit 0 and `ROUTE_OK` printed exactly. Hermes
# hides reasoning in what it prints, so its `state.db` is read after the run: reasoning recorded while the
# block means thinking off is P10 (a string `"false"` is truthy).

# %%
with rb.step("6 hermes route"):
    checks += hermes.route_smoke_step(rb, provider)

# %% [markdown]
# ## Troubleshooting
# What goes wrong at this stage and what to do, from the pitfall registry
# (`lanebook.recipe.pitfalls`: the same entries lint and the book use; edit the registry, not this cell).
#
# | Symptom | Cause | Fix |
# |---|---|---|
# | **P01** Breakable CUDA graphs not disabled | Without VLLM_USE_BREAKABLE_CUDAGRAPH=0 the Anemll 0.1.1 image auto-enables breakable CUDA graphs, the slow decode path. The env file alone is not enough: Compose passes only the keys named in the service's environment: map, so the compose file needs the injection line as well. | VLLM_USE_BREAKABLE_CUDAGRAPH=0 in .env.dspark on every node and VLLM_USE_BREAKABLE_CUDAGRAPH: "${VLLM_USE_BREAKABLE_CUDAGRAPH:-0}" under environment: (`lanebook env render` writes both); the log must not say "Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1". |
# | **P07** Memory 0.80 at 1M context | GPU_MEMORY_UTILIZATION=0.80 with MAX_MODEL_LEN=1048576 failed on the operators' pair: ~7.16 GiB KV available vs 7.54 GiB needed (estimated max length ~953,088). 0.85 came up cleanly. | GPU_MEMORY_UTILIZATION=0.85 for the 1M profile; where the launcher exports it from the profile key, GPU_MEMORY_UTILIZATION_TEXT=0.85 (`lanebook env render` writes the key the launcher reads). |
# | **P09** Hermes api_key "none" | Hermes' provider block needs api_key: no-key-required for a keyless server; "none" is not that value. A keyed lane's block needs its key (Hermes reads it from the variable key_env names), never no-key-required. | Keyless lane: api_key: no-key-required in providers.spark-ds4. Keyed lane: key_env: NAME there (the lane file's hermes.key_env), with NAME=KEY in the Hermes host's environment or ~/.hermes/.env. |
# | **P10** thinking as a string | chat_template_kwargs.thinking must be a JSON boolean: the template tests truthiness, so the string "false" turns thinking on. | thinking: false (a boolean) in request and Hermes extra_body. |

# %% [markdown]
# ## Verdict
# Every gate's checks in one table; the run fails at the first failed gate below it, naming its step.

# %%
gates.judge_gates(rb, checks)  # every gate under its own step, with what to do when it fails

# %%
rb.show_commands()
verdict = rb.finish()
