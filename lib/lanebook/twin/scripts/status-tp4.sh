#!/usr/bin/env bash
# Status of the four-node (N-node) lane from the head: every rank's container, the startup lines operators grep, and
# /v1/models. lanebook's own script for the twin, derived from its two-node status script; the workers come from
# WORKER_HOSTS (scripts/ranks-env.sh). Exit: 0 whatever it finds (it shows, it does not judge); 1 a missing file or
# WORKER_HOSTS; 2 a bad option.
set -uo pipefail
SCRIPT_DIR="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=scripts/lane-env.sh
. "$SCRIPT_DIR/scripts/lane-env.sh"
# shellcheck source=scripts/ranks-env.sh
. "$SCRIPT_DIR/scripts/ranks-env.sh"

parse_host_port_options "$@"
require_files
load_env
resolve_api
read_ranks
echo "== head (rank 0): $CONTAINER: $(docker ps -a --filter "name=^${CONTAINER}\$" --format '{{.Status}}' | grep . || echo 'not created')"
for i in "${!RANK_HOSTS[@]}"; do
  host="${RANK_HOSTS[$i]}"
  worker=$(ssh -o BatchMode=yes -o ConnectTimeout=10 "$host" \
    "docker ps -a --filter name=^$(printf '%q' "$CONTAINER")\\\$ --format '{{.Status}}'" 2>&1) || worker="unreachable: $worker"
  echo "== rank $((i + 1)) $host: $CONTAINER: ${worker:-not created}"
done
echo "== log (head)"
docker logs "$CONTAINER" 2>&1 | grep -E 'BREAKABLE|Breakable CUDA|KV cache size|Maximum concurrency|world_size|Application startup complete' | tail -n 20
echo "== $API_URL"
if models=$(curl -fsS --max-time 5 "${AUTH_HEADER[@]}" "$API_URL"); then echo "$models"; else echo "(no answer)"; fi
exit 0
