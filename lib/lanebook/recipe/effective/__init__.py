"""What a checkout runs: the effective serving configuration, read as the launcher, Compose and the image would.

Four layers decide what `vllm serve` gets, each able to undo the one before: the env file (.env.dspark, last
assignment wins); the launcher's own exports (`launcher_env`, read from its start script, e.g. GPU_MEMORY_UTILIZATION
from a profile key); Compose, which interpolates and passes only the keys its `environment:` names (the real Compose
v2 decides, `compose_cli`; `compose_model` emulates it only where none runs, and says so); the image's command
script, whose statements are run with bash (those patching the image skipped). `checkout` reads a checkout's files
(local or over SSH), `config` says for each value which line wins (`Effective`), `mismatches` compares the lane
with a checkout and the live command. Lint, render, the launch runbook and the twin's `docker compose` stand-in all
use this one computation.
"""
