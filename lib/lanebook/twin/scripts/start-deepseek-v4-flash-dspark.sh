#!/usr/bin/env bash
# Start the two-node DSpark lane from the head, as the recipe's launcher does: check the configuration,
# the image on both nodes and the worker's ssh; start the worker's headless rank, then the head's; wait
# until /health answers 200 and a minimal chat request succeeds; then the bounded post-readiness warmup
# (fail-open: a failed warmup does not fail a healthy start). It polls /health as the recipe's write-up
# does (seed 000), where the published launcher (MiaAI-Lab, 489af95) polls /v1/models.
# Usage: PROJECT_NAME=ds4-f-mia-anemll-0731 WAIT_ATTEMPTS=120 WAIT_SECONDS=15 ./start-deepseek-v4-flash-dspark.sh [--host H] [--port P]
# Exit: 0 serving. 1 a missing file, command or image, an unreachable worker, a required key missing from
# .env.dspark, a failed compose or chat request, or no API after WAIT_ATTEMPTS x WAIT_SECONDS (the last 120
# log lines of both ranks printed). 2 a bad option or refused configuration. 129/130/143 on HUP/INT/TERM.
# No "already up" code: on a running lane `docker compose up -d` leaves a rank whose configuration is
# unchanged running (and recreates one whose configuration changed), and the wait finds the API.
set -uo pipefail
SCRIPT_DIR="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=scripts/lane-env.sh
. "$SCRIPT_DIR/scripts/lane-env.sh"

parse_host_port_options "$@"
require_files
load_env
apply_memory_profile
resolve_api
WAIT_ATTEMPTS="${WAIT_ATTEMPTS:-100}"
WAIT_SECONDS="${WAIT_SECONDS:-15}"
[[ "$WAIT_ATTEMPTS" =~ ^[1-9][0-9]*$ ]] || refuse "WAIT_ATTEMPTS must be a positive integer (got: $WAIT_ATTEMPTS)"
[[ "$WAIT_SECONDS" =~ ^[1-9][0-9]*$ ]] || refuse "WAIT_SECONDS must be a positive integer (got: $WAIT_SECONDS)"

# A missing key stops the script as bash's ${VAR:?} does: the message, exit 1.
: "${WORKER_HOST:?WORKER_HOST must be set in $ENV_FILE}"
: "${MASTER_ADDR:?MASTER_ADDR must be set in $ENV_FILE}"
: "${MASTER_PORT:?MASTER_PORT must be set in $ENV_FILE}"
: "${DSPARK_VLLM_IMAGE:?DSPARK_VLLM_IMAGE must be set in $ENV_FILE}"
VLLM_HOST_IP="${VLLM_HOST_IP:-$MASTER_ADDR}"
WORKER_VLLM_HOST_IP="${WORKER_VLLM_HOST_IP:-$WORKER_HOST}"

for cmd in docker ssh curl; do need_cmd "$cmd"; done

docker image inspect "$DSPARK_VLLM_IMAGE" >/dev/null 2>&1 || {
  echo "Missing local Docker image $DSPARK_VLLM_IMAGE." >&2
  echo "Pull it (docker pull $DSPARK_VLLM_IMAGE) before starting." >&2
  exit 1
}
ssh -o BatchMode=yes -o ConnectTimeout=10 "$WORKER_HOST" true >/dev/null 2>&1 || {
  echo "Cannot reach worker with passwordless SSH: $WORKER_HOST" >&2
  exit 1
}
ssh "$WORKER_HOST" "docker image inspect $(printf '%q' "$DSPARK_VLLM_IMAGE") >/dev/null 2>&1" || {
  echo "Missing worker Docker image $DSPARK_VLLM_IMAGE." >&2
  echo "Pull it on the worker (docker pull $DSPARK_VLLM_IMAGE) before starting." >&2
  exit 1
}

# A pinned revision that is not in the local HF cache would be downloaded by the first start (~155 GB).
model="${DSPARK_MODEL:-deepseek-ai/DeepSeek-V4-Flash-0731}"  # what the compose file serves when it is unset
if [ -n "${DSPARK_REVISION:-}" ]; then
  model_dir="${HF_CACHE:-$HOME/.cache/huggingface}/hub/models--${model//\//--}"
  if [ ! -d "$model_dir/snapshots/$DSPARK_REVISION" ] && [ ! -f "$model_dir/refs/$DSPARK_REVISION" ]; then
    echo "WARN: DSPARK_REVISION=$DSPARK_REVISION of $model is not in the local HF cache ($model_dir): the first start downloads the checkpoint (~155 GB)." >&2
  fi
fi

echo "Resolved DSpark profile:"
echo "  project: $PROJECT_NAME"
echo "  image: $DSPARK_VLLM_IMAGE"
echo "  model: $model (revision: ${DSPARK_REVISION:-unpinned})"
echo "  served model: ${SERVED_MODEL_NAME:-}"
echo "  gpu memory utilization: $GPU_MEMORY_UTILIZATION (ENABLE_VL_SIDECAR=${ENABLE_VL_SIDECAR:-0}: from GPU_MEMORY_UTILIZATION_$([ "${ENABLE_VL_SIDECAR:-0}" = 1 ] && echo VISION || echo TEXT))"
echo "  readiness probe: $HEALTH_URL"
echo "  head fabric IP: $VLLM_HOST_IP   worker: $WORKER_HOST / $WORKER_VLLM_HOST_IP (checkout $WORKER_CHECKOUT)"

startup_failed() {
  echo "$1" >&2
  echo "Startup failed. Recent head logs:" >&2
  head_compose 0 "" logs --tail=120 "$SERVICE" >&2
  echo "Recent worker logs:" >&2
  worker_compose logs --tail=120 "$SERVICE" >&2
  exit 1
}

echo "Starting DSpark worker on ${WORKER_HOST}..."
worker_compose NODE_RANK=1 HEADLESS=1 "VLLM_HOST_IP=$WORKER_VLLM_HOST_IP" "GPU_MEMORY_UTILIZATION=$GPU_MEMORY_UTILIZATION" \
  "DSPARK_REVISION=${DSPARK_REVISION:-}" up -d || startup_failed "Worker compose up failed on $WORKER_HOST."
echo "Starting DSpark head..."
head_compose 0 "" up -d || startup_failed "Head compose up failed."

echo "Waiting for DSpark vLLM API..."
for attempt in $(seq 1 "$WAIT_ATTEMPTS"); do
  if curl -fsS --max-time 5 "${AUTH_HEADER[@]}" "$HEALTH_URL" >/dev/null 2>&1; then
    echo "DeepSeek V4 Flash DSpark is running: $HEALTH_URL"
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

echo "Timed out waiting for DSpark API. Recent head logs:" >&2
head_compose 0 "" logs --tail=120 "$SERVICE" >&2
echo "Recent worker logs:" >&2
worker_compose logs --tail=120 "$SERVICE" >&2
exit 1
