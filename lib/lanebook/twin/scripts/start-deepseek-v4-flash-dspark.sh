#!/usr/bin/env bash
# Start the two-node DSpark lane from the head: the worker first (headless rank 1), then the head
# (rank 0, serves the API), then wait WAIT_ATTEMPTS x WAIT_SECONDS for /health and /v1/models, run a
# minimal chat smoke and the bounded post-readiness warmup (fail-open).
# Usage: PROJECT_NAME=ds4-f-mia-anemll-0731 WAIT_ATTEMPTS=120 WAIT_SECONDS=15 ./start-deepseek-v4-flash-dspark.sh
# Exit: 0 up, 1 failed, 2 bad config, 3 already up.
set -uo pipefail
cd "$(dirname "$0")" || exit 2
. scripts/lane-env.sh
load_lane_env
WAIT_ATTEMPTS=${WAIT_ATTEMPTS:-120}
WAIT_SECONDS=${WAIT_SECONDS:-15}
[[ "$WAIT_ATTEMPTS" =~ ^[1-9][0-9]*$ ]] || config_error "WAIT_ATTEMPTS must be a positive integer (got '$WAIT_ATTEMPTS')"
[[ "$WAIT_SECONDS" =~ ^[1-9][0-9]*$ ]] || config_error "WAIT_SECONDS must be a positive integer (got '$WAIT_SECONDS')"

if [ "$(container_state)" = running ]; then
  echo "start: $CONTAINER is already up (./stop-deepseek-v4-flash-dspark.sh first)" >&2
  exit 3
fi

fail_with_log() {
  echo "start: $1" >&2
  echo "start: last log lines of $CONTAINER:" >&2
  docker logs --tail 30 "$CONTAINER" >&2 2>&1
  exit 1
}

echo "start: worker $WORKER_HOST: compose up (NODE_RANK=1, headless, VLLM_HOST_IP=$WORKER_VLLM_HOST_IP)"
worker_compose NODE_RANK=1 HEADLESS=1 "VLLM_HOST_IP=$WORKER_VLLM_HOST_IP" up -d \
  || { echo "start: worker compose up failed on $WORKER_HOST" >&2; exit 1; }
echo "start: head: compose up (NODE_RANK=0, VLLM_HOST_IP=$VLLM_HOST_IP)"
NODE_RANK=0 HEADLESS= VLLM_HOST_IP=$VLLM_HOST_IP compose up -d || { echo "start: head compose up failed" >&2; exit 1; }

healthy=0
for attempt in $(seq 1 "$WAIT_ATTEMPTS"); do
  state=$(container_state)
  [ "$state" = running ] || fail_with_log "$CONTAINER is ${state:-gone} (attempt $attempt/$WAIT_ATTEMPTS)"
  if curl -sf -m 5 "$API/health" >/dev/null && curl -sf -m 5 "$API/v1/models" >/dev/null; then
    healthy=1
    break
  fi
  echo "start: attempt $attempt/$WAIT_ATTEMPTS: waiting for $API/health and /v1/models (next check in ${WAIT_SECONDS}s)"
  sleep "$WAIT_SECONDS"
done
[ "$healthy" = 1 ] || fail_with_log "no healthy API at $API after $WAIT_ATTEMPTS attempts x ${WAIT_SECONDS}s"
echo "start: healthy: $(curl -sf -m 5 "$API/v1/models")"

smoke=$(curl -sf -m 120 "$API/v1/chat/completions" -H 'Content-Type: application/json' \
  -d "{\"model\":\"$SERVED_MODEL_NAME\",\"messages\":[{\"role\":\"user\",\"content\":\"Reply exactly READY.\"}],\"temperature\":0,\"max_tokens\":8,\"chat_template_kwargs\":{\"thinking\":false}}") \
  || fail_with_log "the minimal chat smoke failed"
echo "start: chat smoke ok: ${smoke:0:200}"

if [ "${POST_READINESS_WARMUP_ENABLED:-1}" = 1 ]; then
  if scripts/run-post-readiness-warmup.sh; then
    echo "start: post-readiness warmup ok"
  else
    echo "start: post-readiness warmup FAILED (fail-open: the server is up and serving)" >&2
  fi
else
  echo "start: post-readiness warmup skipped (POST_READINESS_WARMUP_ENABLED=${POST_READINESS_WARMUP_ENABLED})"
fi
echo "start: $CONTAINER up at $API/v1"
exit 0
