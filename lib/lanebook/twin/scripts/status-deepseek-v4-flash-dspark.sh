#!/usr/bin/env bash
# Status of the two-node lane from the head: both ranks' containers, the startup lines operators grep,
# and /v1/models. Reads .env.dspark as the launcher does (scripts/lane-env.sh).
# Exit: 0 whatever it finds, as the recipe's status script (it shows, it does not judge: every probe ends
# `|| true`); 1 a missing file or WORKER_HOST; 2 a bad option.
set -uo pipefail
SCRIPT_DIR="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=scripts/lane-env.sh
. "$SCRIPT_DIR/scripts/lane-env.sh"

parse_host_port_options "$@"
require_files
load_env
resolve_api
: "${WORKER_HOST:?WORKER_HOST must be set in $ENV_FILE}"
echo "== head: $CONTAINER: $(docker ps -a --filter "name=^${CONTAINER}\$" --format '{{.Status}}' | grep . || echo 'not created')"
worker=$(ssh -o BatchMode=yes -o ConnectTimeout=10 "$WORKER_HOST" \
  "docker ps -a --filter name=^$(printf '%q' "$CONTAINER")\\\$ --format '{{.Status}}'" 2>&1) || worker="unreachable: $worker"
echo "== worker $WORKER_HOST: $CONTAINER: ${worker:-not created}"
echo "== log (head)"
docker logs "$CONTAINER" 2>&1 | grep -E 'BREAKABLE|Breakable CUDA|KV cache size|Maximum concurrency|Application startup complete' | tail -n 20
echo "== $API_URL"
if models=$(curl -fsS --max-time 5 "${AUTH_HEADER[@]}" "$API_URL"); then echo "$models"; else echo "(no answer)"; fi
exit 0
