"""What a checkout runs: the effective serving configuration, read as the launcher, Compose and the image would.

Four layers decide what `vllm serve` gets, and each can undo a value set in the one before:
1. the env file, .env.dspark, as the launcher reads it (normalized, the last assignment of a key wins);
2. the launcher's own overrides (launcher_env). The recipe's current start script exports GPU_MEMORY_UTILIZATION
   from a profile key (GPU_MEMORY_UTILIZATION_TEXT, default 0.835, or GPU_MEMORY_UTILIZATION_VISION,
   default 0.80, when ENABLE_VL_SIDECAR=1) and DSPARK_MODEL / DSPARK_REVISION from ABLITERATED, so a
   line setting those keys directly is dead. Which overrides a checkout's launcher makes is read from
   its start script (it names the profile key), else from its env file or example;
3. Compose: it interpolates the compose file with the shell environment over the env file, and passes into the
   container only the keys its `environment:` map names. The real Docker Compose v2 decides (compose_cli: its
   `config --format json` with the launcher's exports, a local binary or the head's `docker compose` over SSH);
   compose_model's emulation only where no Compose can run, and then the report says so;
4. the image's command script, which builds the speculative config and the `vllm serve` argv in bash
   in that environment: we run the same statements with bash, skipping those that patch the image.

By job: `checkout` reads a checkout's files (a local directory, or a node's over SSH), `launcher_env` the
launcher's overrides, `compose_cli` asks the real Compose for the container (layer 3) and reads its answer,
`compose_model` emulates Compose where none can run and builds the serve argv from the image's script (layer 4),
`config` the effective configuration (`Effective` says, for each value, which line wins) and `mismatches` the lane
against what a checkout runs and against the live command. The twin's `docker compose` stand-in runs the real
binary for `config` and starts `up -d`'s container from `compose_cli.container_spec` with the environment its
launcher exported; lint, render and the launch runbook's live-command check read the same computation.
"""
