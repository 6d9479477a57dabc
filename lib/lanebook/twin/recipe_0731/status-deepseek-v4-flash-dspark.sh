#!/usr/bin/env bash
# Status of the two-node lane from the head as the recipe's status script did on July 31, 2026, in its shape for
# lanebook's twin: both ranks' compose projects, the matching containers on each node, the image on each, and
# /v1/models. Every probe's failure is only shown: the script exits 0 whatever it finds (it says, it does not judge).
# Exit: 0; 1 WORKER_HOST not set (bash's ${VAR:?}).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "$0")" && pwd)"
ENV_FILE="${ENV_FILE:-$SCRIPT_DIR/.env.dspark}"
COMPOSE_FILE="${COMPOSE_FILE:-$SCRIPT_DIR/docker-compose.dspark.yml}"
PROJECT_NAME="${PROJECT_NAME:-deepseek-v4-flash}"
API_URL="${API_URL:-http://127.0.0.1:8888/v1/models}"
if [ -f "$ENV_FILE" ]; then
  set -a
  # shellcheck disable=SC1090
  source "$ENV_FILE"
  set +a
fi
: "${WORKER_HOST:?WORKER_HOST must be set in $ENV_FILE or environment}"
cd "$SCRIPT_DIR"
WORKER_DIR="${WORKER_SCRIPT_DIR:-${WORKER_DIR:-}}"
if [ -z "$WORKER_DIR" ]; then
  case "$SCRIPT_DIR" in "$HOME"/*) WORKER_DIR="${SCRIPT_DIR#"$HOME"/}" ;; *) WORKER_DIR="$SCRIPT_DIR" ;; esac
fi
echo "== head compose: $PROJECT_NAME =="
COMPOSE_DISABLE_ENV_FILE=1 docker compose -p "$PROJECT_NAME" --env-file "$ENV_FILE" -f "$COMPOSE_FILE" ps || true
echo "== worker compose: $PROJECT_NAME =="
ssh "$WORKER_HOST" "cd $(printf '%q' "$WORKER_DIR") && COMPOSE_DISABLE_ENV_FILE=1 docker compose -p $(printf '%q' "$PROJECT_NAME") --env-file .env.dspark -f docker-compose.dspark.yml ps" || true
echo "== head matching containers =="
docker ps -a --format '{{.Names}} {{.Status}} {{.Image}}' | grep -E 'deepseek|dspark|vllm' || true
echo "== worker matching containers =="
ssh "$WORKER_HOST" "docker ps -a --format '{{.Names}} {{.Status}} {{.Image}}' | grep -E 'deepseek|dspark|vllm' || true" || true
echo "== port/API =="
curl -fsS --max-time 5 "$API_URL" || true
echo
