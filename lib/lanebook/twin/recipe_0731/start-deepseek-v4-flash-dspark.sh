#!/usr/bin/env bash
# Start the two-node DSpark lane from the head as the recipe's launcher did on July 31, 2026 (MiaAI-Lab, 764e6a6),
# written for lanebook's twin in its shape: its options, required keys, checks, messages and exit codes. It reads
# .env.dspark and passes it on as it is (GPU_MEMORY_UTILIZATION included: no memory profile, no revision pin),
# refuses when the head's container already exists, copies the compose file, .env.dspark and the DSpark proposer
# to the worker's checkout, starts the worker's headless rank, then the head's, and polls /v1/models (not
# /health) every WAIT_SECONDS; then a minimal chat request. No post-readiness warmup.
# Twin differences: the RoCE v2 GID index is not resolved from sysfs (the twin's nodes have no HCA), and the chat
# request carries max_tokens (the twin answers free text to its length; the published launcher sends none), and scp
# is told to use the node's ssh (-S ssh: the twin's ssh reads the node's config; scp would run /usr/bin/ssh).
# Usage: PROJECT_NAME=ds4-f-mia-anemll-0731 WAIT_ATTEMPTS=120 WAIT_SECONDS=15 ./start-deepseek-v4-flash-dspark.sh [--host H] [--port P]
# Exit: 0 serving. 1 a missing file, command or image, an unreachable worker, a required key missing from
# .env.dspark, the head's container already there, a failed compose or chat request, or no API after
# WAIT_ATTEMPTS x WAIT_SECONDS. 2 a bad option or value.
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "$0")" && pwd)"
ENV_FILE="${ENV_FILE:-$SCRIPT_DIR/.env.dspark}"
COMPOSE_FILE="${COMPOSE_FILE:-$SCRIPT_DIR/docker-compose.dspark.yml}"
PROJECT_NAME="${PROJECT_NAME:-deepseek-v4-flash}"
WAIT_ATTEMPTS="${WAIT_ATTEMPTS:-100}"
WAIT_SECONDS="${WAIT_SECONDS:-15}"
DSPARK_PROPOSER_FILE="${DSPARK_PROPOSER_FILE:-$SCRIPT_DIR/recipe/vllm/v1/spec_decode/dspark_proposer.py}"
CLI_VLLM_HOST=""
CLI_VLLM_PORT=""

usage() {
  cat <<USAGE
Usage: $(basename "$0") [--host HOST] [--port PORT]

  --host HOST  vLLM API bind address (default: VLLM_HOST or 127.0.0.1)
  --port PORT  vLLM API listen port (default: VLLM_PORT or 8888)
  -h, --help   Show this help message

Command-line options override values from $ENV_FILE.
USAGE
}

while [ "$#" -gt 0 ]; do
  case "$1" in
    --host|--port)
      [ "$#" -ge 2 ] && [ -n "$2" ] || { echo "$1 requires a value." >&2; exit 2; }
      if [ "$1" = --host ]; then CLI_VLLM_HOST=$2; else CLI_VLLM_PORT=$2; fi
      shift 2 ;;
    --host=*) CLI_VLLM_HOST=${1#*=}; [ -n "$CLI_VLLM_HOST" ] || { echo "--host requires a value." >&2; exit 2; }; shift ;;
    --port=*) CLI_VLLM_PORT=${1#*=}; [ -n "$CLI_VLLM_PORT" ] || { echo "--port requires a value." >&2; exit 2; }; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; [ "$#" -eq 0 ] || { echo "Unexpected positional argument: $1" >&2; usage >&2; exit 2; } ;;
    *) echo "Unknown option: $1" >&2; usage >&2; exit 2 ;;
  esac
done

if [ ! -f "$ENV_FILE" ]; then
  echo "Missing $ENV_FILE. Copy .env.dspark.example to .env.dspark and edit node-specific values." >&2
  exit 1
fi
[ -f "$COMPOSE_FILE" ] || { echo "Missing $COMPOSE_FILE." >&2; exit 1; }
set -a
# shellcheck disable=SC1090
source "$ENV_FILE"
set +a

VLLM_HOST="${CLI_VLLM_HOST:-${VLLM_HOST:-127.0.0.1}}"
VLLM_PORT="${CLI_VLLM_PORT:-${VLLM_PORT:-${PORT:-8888}}}"
[ -n "$VLLM_HOST" ] || { echo "VLLM host must not be empty." >&2; exit 2; }
[[ "$VLLM_PORT" =~ ^[0-9]+$ ]] || { echo "VLLM port must be an integer between 1 and 65535: $VLLM_PORT" >&2; exit 2; }
(( 10#$VLLM_PORT >= 1 && 10#$VLLM_PORT <= 65535 )) || { echo "VLLM port must be between 1 and 65535: $VLLM_PORT" >&2; exit 2; }
VLLM_PORT="$((10#$VLLM_PORT))"
PORT="$VLLM_PORT"
export VLLM_HOST VLLM_PORT PORT
API_HOST="${API_HOST:-$VLLM_HOST}"
case "$API_HOST" in 0.0.0.0|::|\[::\]) API_HOST=127.0.0.1 ;; esac
API_URL="${API_URL:-http://$API_HOST:$VLLM_PORT/v1/models}"
CHAT_URL="${CHAT_URL:-http://$API_HOST:$VLLM_PORT/v1/chat/completions}"

: "${WORKER_HOST:?WORKER_HOST must be set in $ENV_FILE}"
: "${MASTER_ADDR:?MASTER_ADDR must be set in $ENV_FILE}"
: "${MASTER_PORT:?MASTER_PORT must be set in $ENV_FILE}"
: "${NCCL_IB_HCA:?NCCL_IB_HCA must be set in $ENV_FILE}"
: "${NCCL_SOCKET_IFNAME:?NCCL_SOCKET_IFNAME must be set in $ENV_FILE}"
: "${DSPARK_VLLM_IMAGE:?DSPARK_VLLM_IMAGE must be set in $ENV_FILE}"
VLLM_HOST_IP="${VLLM_HOST_IP:-$MASTER_ADDR}"
WORKER_VLLM_HOST_IP="${WORKER_VLLM_HOST_IP:-$WORKER_HOST}"
WORKER_HF_CACHE="${WORKER_HF_CACHE:-${HF_CACHE:-}}"
# The worker's checkout: WORKER_SCRIPT_DIR, WORKER_DIR, else this checkout's path. The twin's nodes have homes of
# their own, so a path under the home is sent relative to it (ssh starts in the home).
WORKER_DIR="${WORKER_SCRIPT_DIR:-${WORKER_DIR:-}}"
if [ -z "$WORKER_DIR" ]; then
  case "$SCRIPT_DIR" in "$HOME"/*) WORKER_DIR="${SCRIPT_DIR#"$HOME"/}" ;; *) WORKER_DIR="$SCRIPT_DIR" ;; esac
fi
REMOTE_WORKER_DIR="$(printf '%q' "$WORKER_DIR")"
REMOTE_COMPOSE="cd $REMOTE_WORKER_DIR && env -u MASTER_ADDR -u MASTER_PORT -u NODE_RANK -u HEADLESS COMPOSE_DISABLE_ENV_FILE=1"
CONTAINER="${PROJECT_NAME}-vllm-dspark-1"

need_cmd() { command -v "$1" >/dev/null 2>&1 || { echo "Missing required command: $1" >&2; exit 1; }; }

compose_base() {
  env -u NODE_RANK -u HEADLESS COMPOSE_DISABLE_ENV_FILE=1 WORKER_HOST="$WORKER_HOST" MASTER_ADDR="$MASTER_ADDR" \
    MASTER_PORT="$MASTER_PORT" VLLM_HOST="$VLLM_HOST" VLLM_PORT="$VLLM_PORT" VLLM_HOST_IP="$VLLM_HOST_IP" \
    NODE_RANK="$1" HEADLESS="$2" docker compose -p "$PROJECT_NAME" --env-file "$ENV_FILE" -f "$COMPOSE_FILE" "${@:3}"
}

remote_compose() { ssh "$WORKER_HOST" "$REMOTE_COMPOSE VLLM_HOST=$(printf '%q' "$VLLM_HOST") VLLM_PORT=$VLLM_PORT $*"; }

worker_compose_args() {
  printf "NODE_RANK=1 HEADLESS=1 HF_CACHE=%q VLLM_HOST_IP=%q docker compose -p %q --env-file .env.dspark -f docker-compose.dspark.yml" \
    "$WORKER_HF_CACHE" "$WORKER_VLLM_HOST_IP" "$PROJECT_NAME"
}

print_failure_logs() {
  echo "Startup failed. Recent head logs:" >&2
  compose_base 0 "" logs --tail=120 vllm-dspark >&2 || true
  echo "Recent worker logs:" >&2
  remote_compose "$(worker_compose_args) logs --tail=120 vllm-dspark" >&2 || true
}

on_error() {
  local status=$?
  trap - ERR
  print_failure_logs
  exit "$status"
}

for cmd in docker ssh scp curl; do need_cmd "$cmd"; done
[ -f "$DSPARK_PROPOSER_FILE" ] || { echo "Missing DSpark proposer bind-mount source: $DSPARK_PROPOSER_FILE" >&2; exit 1; }
docker compose version >/dev/null
docker image inspect "$DSPARK_VLLM_IMAGE" >/dev/null 2>&1 || {
  echo "Missing local Docker image $DSPARK_VLLM_IMAGE." >&2
  echo "Pull it (e.g. docker pull $DSPARK_VLLM_IMAGE) before starting." >&2
  exit 1
}
ssh -o BatchMode=yes -o ConnectTimeout=10 "$WORKER_HOST" true >/dev/null 2>&1 || {
  echo "Cannot reach worker with passwordless SSH: $WORKER_HOST" >&2
  exit 1
}
ssh "$WORKER_HOST" "docker image inspect $(printf '%q' "$DSPARK_VLLM_IMAGE") >/dev/null 2>&1" || {
  echo "Missing worker Docker image $DSPARK_VLLM_IMAGE." >&2
  echo "Pull it on the worker (e.g. docker pull $DSPARK_VLLM_IMAGE) before starting." >&2
  exit 1
}
if docker ps --format '{{.Names}}' | grep -qx "$CONTAINER"; then
  echo "DSpark head container already exists for project $PROJECT_NAME. Stop it first or use PROJECT_NAME=..." >&2
  exit 1
fi

cd "$SCRIPT_DIR"
trap on_error ERR
echo "Resolved DSpark profile:"
echo "  project: $PROJECT_NAME"
echo "  image: $DSPARK_VLLM_IMAGE"
echo "  model: ${DSPARK_MODEL:-deepseek-ai/DeepSeek-V4-Flash-DSpark}"
echo "  served model: ${SERVED_MODEL_NAME:-deepseek-v4-flash-dspark}"
echo "  gpu memory utilization: ${GPU_MEMORY_UTILIZATION:-0.80}"
echo "  API probe: $API_URL"
echo "  worker host/ip: $WORKER_HOST / $WORKER_VLLM_HOST_IP (dir $WORKER_DIR)"

echo "Syncing DSpark deployment files to ${WORKER_HOST}:${WORKER_DIR}"
ssh "$WORKER_HOST" "mkdir -p $REMOTE_WORKER_DIR/recipe/vllm/v1/spec_decode"
scp -q -S ssh "$COMPOSE_FILE" "${WORKER_HOST}:${WORKER_DIR}/docker-compose.dspark.yml"
scp -q -S ssh "$ENV_FILE" "${WORKER_HOST}:${WORKER_DIR}/.env.dspark"
scp -q -S ssh "$DSPARK_PROPOSER_FILE" "${WORKER_HOST}:${WORKER_DIR}/recipe/vllm/v1/spec_decode/dspark_proposer.py"

echo "Starting DSpark worker on ${WORKER_HOST}..."
remote_compose "$(worker_compose_args) up -d"
echo "Starting DSpark head..."
compose_base 0 "" up -d
trap - ERR

echo "Waiting for DSpark vLLM API..."
for attempt in $(seq 1 "$WAIT_ATTEMPTS"); do
  if curl -fsS --max-time 5 "$API_URL" >/dev/null 2>&1; then
    echo "DeepSeek V4 Flash DSpark is running: $API_URL"
    echo "Running minimal OpenAI-compatible chat request..."
    curl -fsS --max-time 60 "$CHAT_URL" -H "Content-Type: application/json" \
      -d '{"model":"'"${SERVED_MODEL_NAME:-deepseek-v4-flash-dspark}"'","messages":[{"role":"user","content":"Reply with OK."}],"max_tokens":32,"temperature":0.0}' \
      >/dev/null || { print_failure_logs; exit 1; }
    echo "Minimal chat request succeeded."
    exit 0
  fi
  echo "Waiting for $API_URL (attempt $attempt/$WAIT_ATTEMPTS, next check in ${WAIT_SECONDS}s)"
  sleep "$WAIT_SECONDS"
done

echo "Timed out waiting for DSpark API. Recent head logs:" >&2
compose_base 0 "" logs --tail=120 vllm-dspark >&2 || true
echo "Recent worker logs:" >&2
remote_compose "$(worker_compose_args) logs --tail=120 vllm-dspark" >&2 || true
exit 1
