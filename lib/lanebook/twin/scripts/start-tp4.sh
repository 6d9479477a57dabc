#!/usr/bin/env bash
# Start the four-node (N-node) DSpark lane from the head: lanebook's own launcher for the twin, derived from its
# two-node one (start-deepseek-v4-flash-dspark.sh) with the workers of WORKER_HOSTS / WORKER_IPS (scripts/ranks-env.sh).
# Check the configuration, the image on the head, every worker reachable and holding the image; copy the checkout's
# compose and env files to every worker; start ranks 1..N-1 headless (NODE_RANK=i, VLLM_HOST_IP=that worker's
# address), then the head's rank 0; wait until /health answers 200 and a minimal chat request succeeds; then the
# bounded post-readiness warmup (fail-open).
# Usage: PROJECT_NAME=NAME WAIT_ATTEMPTS=120 WAIT_SECONDS=15 ./start-tp4.sh [--host H] [--port P]
# Exit: 0 serving. 1 a missing file, command or image, an unreachable worker, a required key missing from
# .env.dspark, a failed copy, compose or chat request, or no API after WAIT_ATTEMPTS x WAIT_SECONDS (the last 120 log
# lines of every rank printed). 2 a bad option or refused configuration (the worker count against NNODES).
# 129/130/143 on HUP/INT/TERM.
set -uo pipefail
SCRIPT_DIR="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=scripts/lane-env.sh
. "$SCRIPT_DIR/scripts/lane-env.sh"
# shellcheck source=scripts/ranks-env.sh
. "$SCRIPT_DIR/scripts/ranks-env.sh"

parse_host_port_options "$@"
require_files
load_env
apply_memory_profile
resolve_api
WAIT_ATTEMPTS="${WAIT_ATTEMPTS:-100}"
WAIT_SECONDS="${WAIT_SECONDS:-15}"
[[ "$WAIT_ATTEMPTS" =~ ^[1-9][0-9]*$ ]] || refuse "WAIT_ATTEMPTS must be a positive integer (got: $WAIT_ATTEMPTS)"
[[ "$WAIT_SECONDS" =~ ^[1-9][0-9]*$ ]] || refuse "WAIT_SECONDS must be a positive integer (got: $WAIT_SECONDS)"

: "${MASTER_ADDR:?MASTER_ADDR must be set in $ENV_FILE}"
: "${MASTER_PORT:?MASTER_PORT must be set in $ENV_FILE}"
: "${DSPARK_VLLM_IMAGE:?DSPARK_VLLM_IMAGE must be set in $ENV_FILE}"
read_ranks --all-keys
VLLM_HOST_IP="${VLLM_HOST_IP:-$MASTER_ADDR}"

for cmd in docker ssh scp curl; do need_cmd "$cmd"; done

docker image inspect "$DSPARK_VLLM_IMAGE" >/dev/null 2>&1 || {
  echo "Missing local Docker image $DSPARK_VLLM_IMAGE." >&2
  echo "Pull it (docker pull $DSPARK_VLLM_IMAGE) before starting." >&2
  exit 1
}
for host in "${RANK_HOSTS[@]}"; do
  ssh -o BatchMode=yes -o ConnectTimeout=10 "$host" true >/dev/null 2>&1 || {
    echo "Cannot reach worker with passwordless SSH: $host" >&2
    exit 1
  }
  ssh "$host" "docker image inspect $(printf '%q' "$DSPARK_VLLM_IMAGE") >/dev/null 2>&1" || {
    echo "Missing worker Docker image $DSPARK_VLLM_IMAGE on $host." >&2
    echo "Pull it on the worker (docker pull $DSPARK_VLLM_IMAGE) before starting." >&2
    exit 1
  }
done

model="${DSPARK_MODEL:-deepseek-ai/DeepSeek-V4-Flash-0731}"
echo "Resolved DSpark profile ($NNODES nodes, tensor parallel $TP_SIZE):"
echo "  project: $PROJECT_NAME"
echo "  image: $DSPARK_VLLM_IMAGE"
echo "  model: $model (revision: ${DSPARK_REVISION:-unpinned})"
echo "  served model: ${SERVED_MODEL_NAME:-}"
echo "  gpu memory utilization: $GPU_MEMORY_UTILIZATION"
echo "  readiness probe: $HEALTH_URL"
echo "  head (rank 0) fabric IP: $VLLM_HOST_IP"
for i in "${!RANK_HOSTS[@]}"; do
  echo "  rank $((i + 1)): ${RANK_HOSTS[$i]} / ${RANK_IPS[$i]} (checkout $WORKER_CHECKOUT)"
done

all_logs() {
  echo "Recent head logs:" >&2
  head_compose 0 "" logs --tail=120 "$SERVICE" >&2
  for i in "${!RANK_HOSTS[@]}"; do
    echo "Recent logs of rank $((i + 1)) (${RANK_HOSTS[$i]}):" >&2
    rank_compose "${RANK_HOSTS[$i]}" logs --tail=120 "$SERVICE" >&2
  done
}

startup_failed() {
  echo "$1" >&2
  echo "Startup failed." >&2
  all_logs
  exit 1
}

for host in "${RANK_HOSTS[@]}"; do
  echo "Copying DSpark deployment files to ${host}:${WORKER_CHECKOUT}"
  ssh "$host" "mkdir -p $(printf '%q' "$WORKER_CHECKOUT")" \
    && scp -q -S ssh "$COMPOSE_FILE" "${host}:${WORKER_CHECKOUT}/docker-compose.dspark.yml" \
    && scp -q -S ssh "$ENV_FILE" "${host}:${WORKER_CHECKOUT}/.env.dspark" \
    || { echo "Copying the deployment files to $host failed." >&2; exit 1; }
done

for i in "${!RANK_HOSTS[@]}"; do
  rank=$((i + 1))
  echo "Starting DSpark rank $rank on ${RANK_HOSTS[$i]}..."
  rank_compose "${RANK_HOSTS[$i]}" "NODE_RANK=$rank" HEADLESS=1 "VLLM_HOST_IP=${RANK_IPS[$i]}" \
    "GPU_MEMORY_UTILIZATION=$GPU_MEMORY_UTILIZATION" "DSPARK_REVISION=${DSPARK_REVISION:-}" up -d \
    || startup_failed "Rank $rank compose up failed on ${RANK_HOSTS[$i]}."
done
echo "Starting DSpark head (rank 0)..."
head_compose 0 "" up -d || startup_failed "Head compose up failed."

echo "Waiting for DSpark vLLM API..."
for attempt in $(seq 1 "$WAIT_ATTEMPTS"); do
  if curl -fsS --max-time 5 "${AUTH_HEADER[@]}" "$HEALTH_URL" >/dev/null 2>&1; then
    echo "DeepSeek V4 Flash DSpark is running on $NNODES nodes: $HEALTH_URL"
    echo "Running minimal OpenAI-compatible chat request..."
    curl -fsS --max-time 60 "${AUTH_HEADER[@]}" "$CHAT_URL" -H "Content-Type: application/json" \
      -d '{"model":"'"${SERVED_MODEL_NAME:-deepseek-v4-flash-dspark}"'","messages":[{"role":"user","content":"Reply with OK."}],"max_tokens":32,"temperature":0,"chat_template_kwargs":{"thinking":false}}' \
      >/dev/null || startup_failed "Minimal chat request failed."
    echo "Minimal chat request succeeded."
    if [ "${POST_READINESS_WARMUP_ENABLED:-1}" = "0" ]; then
      echo "Post-readiness warmup: SKIPPED (POST_READINESS_WARMUP_ENABLED=0)"
    elif "$SCRIPT_DIR/scripts/run-post-readiness-warmup.sh"; then
      echo "Post-readiness warmup: ok"
    else
      echo "WARN: post-readiness warmup failed (fail-open: the server is up and serving)" >&2
    fi
    exit 0
  fi
  echo "Waiting for $HEALTH_URL (attempt $attempt/$WAIT_ATTEMPTS, next check in ${WAIT_SECONDS}s)"
  sleep "$WAIT_SECONDS"
done

echo "Timed out waiting for DSpark API." >&2
all_logs
exit 1
