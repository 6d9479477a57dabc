#!/usr/bin/env bash
# Status of the two-node lane from the head: both containers, the log lines operators grep, /v1/models.
# Exit 0 when the head container runs and /v1/models answers, 1 otherwise, 2 bad config.
set -uo pipefail
cd "$(dirname "$0")" || exit 2
. scripts/lane-env.sh
load_lane_env
code=0
echo "== head: $CONTAINER: $(docker ps -a --filter "name=^${CONTAINER}\$" --format '{{.Status}}' | grep . || echo 'not created')"
worker=$(ssh "$WORKER_HOST" "docker ps -a --filter name=^$(printf '%q' "$CONTAINER")\\\$ --format '{{.Status}}'" 2>&1) || worker="unreachable: $worker"
echo "== worker $WORKER_HOST: $CONTAINER: ${worker:-not created}"
echo "== log (head)"
docker logs "$CONTAINER" 2>&1 | grep -E 'BREAKABLE|Breakable CUDA|KV cache size|Maximum concurrency|Application startup complete' | tail -n 20
[ "$(container_state)" = running ] || code=1
echo "== $API/v1/models"
if models=$(curl -sf -m 5 "$API/v1/models"); then echo "$models"; else echo "(no answer)"; code=1; fi
exit $code
