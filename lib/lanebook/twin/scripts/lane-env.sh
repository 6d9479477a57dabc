# Shared by the launcher, status, stop and warmup scripts (sourced from the checkout directory):
# reads .env.dspark as the launcher does and derives the project, container, API and worker paths.
# Written for lanebook's twin in the shape of the public recipe's scripts.

ENV_FILE=.env.dspark
COMPOSE_FILE=docker-compose.dspark.yml
SERVICE=vllm-dspark

config_error() { echo "$(basename "$0"): $*" >&2; exit 2; }

# Source .env.dspark (the launcher's contract), keep the caller's PROJECT_NAME, check what every script needs.
load_lane_env() {
  [ -f "$ENV_FILE" ] || config_error "$ENV_FILE not found in $PWD (copy env.dspark.example and edit it)"
  [ -f "$COMPOSE_FILE" ] || config_error "$COMPOSE_FILE not found in $PWD"
  [ -n "${PROJECT_NAME:-}" ] || config_error "PROJECT_NAME is not set (PROJECT_NAME=name $0)"
  local project=$PROJECT_NAME
  set -a
  # shellcheck disable=SC1090
  . "./$ENV_FILE" || config_error "cannot read $ENV_FILE"
  set +a
  PROJECT_NAME=$project
  export PROJECT_NAME
  local key
  for key in MASTER_ADDR WORKER_HOST VLLM_HOST_IP WORKER_VLLM_HOST_IP SERVED_MODEL_NAME; do
    [ -n "${!key:-}" ] || config_error "$key is not set in $ENV_FILE"
  done
  CONTAINER="${PROJECT_NAME}-${SERVICE}-1"
  local api_host=${VLLM_HOST:-127.0.0.1}
  [ "$api_host" = 0.0.0.0 ] && api_host=127.0.0.1
  API="http://${api_host}:${VLLM_PORT:-8888}"
  # The worker's checkout: WORKER_SCRIPT_DIR, WORKER_DIR, else this path relative to the home directory.
  WORKER_CHECKOUT=${WORKER_SCRIPT_DIR:-${WORKER_DIR:-}}
  if [ -z "$WORKER_CHECKOUT" ]; then
    case "$PWD" in "$HOME"/*) WORKER_CHECKOUT=${PWD#"$HOME"/} ;; *) WORKER_CHECKOUT=$PWD ;; esac
  fi
}

compose() { docker compose -p "$PROJECT_NAME" --env-file "$ENV_FILE" -f "$COMPOSE_FILE" "$@"; }

# Run `docker compose ARGS` in the worker's checkout over ssh (extra VAR=value words go first).
worker_compose() {
  local prefix=""
  while [[ "${1:-}" == *=* ]]; do prefix+="$(printf '%q ' "$1")"; shift; done
  local args="" arg
  for arg in "$@"; do args+=" $(printf '%q' "$arg")"; done
  ssh "$WORKER_HOST" "cd $(printf '%q' "$WORKER_CHECKOUT") && ${prefix}docker compose -p $(printf '%q' "$PROJECT_NAME") --env-file $ENV_FILE -f $COMPOSE_FILE${args}"
}

container_state() { docker ps -a --filter "name=^${CONTAINER}\$" --format '{{.State}}'; }
