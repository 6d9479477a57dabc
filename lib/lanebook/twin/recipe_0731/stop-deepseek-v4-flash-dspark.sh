#!/usr/bin/env bash
# Stop the two-node lane from the head as the recipe's stop script did on July 31, 2026, in its shape for
# lanebook's twin: `docker compose down` for the project on the head, then on the worker, each failure only
# reported (the script exits 0 once it has tried both); then the same for the legacy project named after the
# checkout directory, when that differs.
# Exit: 0 tried both ranks; 1 WORKER_HOST not set (bash's ${VAR:?}).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "$0")" && pwd)"
ENV_FILE="${ENV_FILE:-$SCRIPT_DIR/.env.dspark}"
COMPOSE_FILE="${COMPOSE_FILE:-$SCRIPT_DIR/docker-compose.dspark.yml}"
PROJECT_NAME="${PROJECT_NAME:-deepseek-v4-flash}"
LEGACY_PROJECT_NAME="${LEGACY_PROJECT_NAME:-$(basename "$SCRIPT_DIR" | tr '[:upper:]' '[:lower:]')}"
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

stop_project() {
  local project="$1"
  echo "Stopping DSpark head project ${project}..."
  COMPOSE_DISABLE_ENV_FILE=1 docker compose -p "$project" --env-file "$ENV_FILE" -f "$COMPOSE_FILE" down || true
  echo "Stopping DSpark worker project ${project} on ${WORKER_HOST}..."
  ssh "$WORKER_HOST" "cd $(printf '%q' "$WORKER_DIR") && env -u MASTER_ADDR -u MASTER_PORT -u NODE_RANK -u HEADLESS COMPOSE_DISABLE_ENV_FILE=1 docker compose -p $(printf '%q' "$project") --env-file .env.dspark -f docker-compose.dspark.yml down" || true
}

stop_project "$PROJECT_NAME"
if [ "$LEGACY_PROJECT_NAME" != "$PROJECT_NAME" ]; then
  stop_project "$LEGACY_PROJECT_NAME"
fi
echo "DeepSeek V4 Flash DSpark stopped."
