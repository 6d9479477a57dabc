# Shared by the lane checkout's start, status, stop and warmup scripts (sourced, with SCRIPT_DIR set to
# the checkout). Reads .env.dspark as the recipe's launcher does and derives the API, container and
# worker paths. Written for lanebook's twin in the shape of the public recipe's launcher: its file
# names, variables, messages and exit codes (2 a bad option or refused configuration, 1 a missing
# file, 129/130/143 on HUP/INT/TERM).

ENV_FILE="${ENV_FILE:-$SCRIPT_DIR/.env.dspark}"
COMPOSE_FILE="${COMPOSE_FILE:-$SCRIPT_DIR/docker-compose.dspark.yml}"
PROJECT_NAME="${PROJECT_NAME:-deepseek-v4-flash}"
SERVICE=vllm-dspark
COMPOSE_ENV_FILE=""
CLI_VLLM_HOST=""
CLI_VLLM_PORT=""

trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
trap '[ -z "$COMPOSE_ENV_FILE" ] || rm -f -- "$COMPOSE_ENV_FILE"' EXIT

refuse() { echo "$*" >&2; exit 2; }

usage() {
  cat <<EOF
Usage: $(basename "$0") [--host HOST] [--port PORT]

  --host HOST  vLLM API bind address (default: VLLM_HOST or 127.0.0.1)
  --port PORT  vLLM API listen port (default: VLLM_PORT or 8888)
  -h, --help   show this help

Command-line options override values from $ENV_FILE.
EOF
}

# --host/--port overrides, -h/--help; anything else is refused with the usage (exit 2).
parse_host_port_options() {
  while [ "$#" -gt 0 ]; do
    case "$1" in
      --host|--port)
        [ "$#" -ge 2 ] && [ -n "$2" ] || refuse "$1 requires a value."
        if [ "$1" = --host ]; then CLI_VLLM_HOST=$2; else CLI_VLLM_PORT=$2; fi
        shift 2 ;;
      --host=*) CLI_VLLM_HOST=${1#*=}; [ -n "$CLI_VLLM_HOST" ] || refuse "--host requires a value."; shift ;;
      --port=*) CLI_VLLM_PORT=${1#*=}; [ -n "$CLI_VLLM_PORT" ] || refuse "--port requires a value."; shift ;;
      -h|--help) usage; exit 0 ;;
      *) echo "Unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
  done
}

require_files() {
  [ -f "$ENV_FILE" ] || { echo "Missing $ENV_FILE. Copy .env.dspark.example to .env.dspark and edit node-specific values." >&2; exit 1; }
  [ -f "$COMPOSE_FILE" ] || { echo "Missing $COMPOSE_FILE." >&2; exit 1; }
}

# Source a private copy of .env.dspark with a UTF-8 byte-order mark and CRLF line ends stripped, so
# an edit made on Windows reads as intended while the operator's file stays byte-identical; Compose
# reads the same copy (COMPOSE_ENV_FILE). Every key is exported, as `set -a` does in the launcher.
load_env() {
  COMPOSE_ENV_FILE="$(mktemp "${TMPDIR:-/tmp}/dspark-env.XXXXXX")" || { echo "Cannot create a private copy of $ENV_FILE." >&2; exit 1; }
  chmod 600 "$COMPOSE_ENV_FILE"
  sed $'1s/^\xEF\xBB\xBF//; s/\r$//' "$ENV_FILE" > "$COMPOSE_ENV_FILE"
  set -a
  # shellcheck disable=SC1090
  . "$COMPOSE_ENV_FILE"
  set +a
}

# The memory profile: the launcher exports GPU_MEMORY_UTILIZATION from the profile key, so an explicit
# GPU_MEMORY_UTILIZATION line in .env.dspark does not reach vLLM.
apply_memory_profile() {
  if [ "${ENABLE_VL_SIDECAR:-0}" = "1" ]; then
    GPU_MEMORY_UTILIZATION="${GPU_MEMORY_UTILIZATION_VISION:-0.80}"
  else
    GPU_MEMORY_UTILIZATION="${GPU_MEMORY_UTILIZATION_TEXT:-0.835}"
  fi
  export GPU_MEMORY_UTILIZATION
}

# VLLM_HOST/VLLM_PORT (command line first), the URLs the scripts probe, and the bearer header if keyed.
resolve_api() {
  VLLM_HOST="${CLI_VLLM_HOST:-${VLLM_HOST:-127.0.0.1}}"
  VLLM_PORT="${CLI_VLLM_PORT:-${VLLM_PORT:-${PORT:-8888}}}"
  [ -n "$VLLM_HOST" ] || refuse "VLLM host must not be empty."
  [[ "$VLLM_PORT" =~ ^[0-9]+$ ]] || refuse "VLLM port must be an integer between 1 and 65535: $VLLM_PORT"
  (( 10#$VLLM_PORT >= 1 && 10#$VLLM_PORT <= 65535 )) || refuse "VLLM port must be between 1 and 65535: $VLLM_PORT"
  VLLM_PORT="$((10#$VLLM_PORT))"
  export VLLM_HOST VLLM_PORT
  local api_host="${API_HOST:-$VLLM_HOST}"
  case "$api_host" in 0.0.0.0|::|\[::\]) api_host=127.0.0.1 ;; esac  # a wildcard binds, it is no destination
  API_ROOT="http://$api_host:$VLLM_PORT"
  API_URL="${API_URL:-$API_ROOT/v1/models}"
  # The recipe's readiness (seed 000: the warmup runs "only after /health and the existing minimal chat smoke"):
  # the start script polls /health, vLLM's 200 once the engine is up; the status script still shows /v1/models.
  HEALTH_URL="${HEALTH_URL:-$API_ROOT/health}"
  CHAT_URL="${CHAT_URL:-$API_ROOT/v1/chat/completions}"
  # The recipe's keys: VLLM_API_KEY (one) or DSPARK_API_KEYS (several, space-separated; the scripts send the first);
  # both set is refused, as the container's entrypoint refuses it.
  AUTH_HEADER=()
  local client_key="${VLLM_API_KEY:-}"
  if [[ "${DSPARK_API_KEYS:-}" == *[!$' \t']* ]]; then
    [ -z "${VLLM_API_KEY:-}" ] || refuse "VLLM_API_KEY and DSPARK_API_KEYS are both set; set exactly one of them"
    read -r client_key _ <<< "$DSPARK_API_KEYS"
  fi
  if [ -n "$client_key" ]; then AUTH_HEADER=(-H "Authorization: Bearer $client_key"); fi
  CONTAINER="${PROJECT_NAME}-${SERVICE}-1"
  # The worker's checkout: WORKER_SCRIPT_DIR, WORKER_DIR, else this checkout's path. On a real pair both
  # homes are the same path; the twin's nodes have homes of their own, so a path under the home is
  # sent relative to it (ssh starts in the home).
  WORKER_CHECKOUT="${WORKER_SCRIPT_DIR:-${WORKER_DIR:-}}"
  if [ -z "$WORKER_CHECKOUT" ]; then
    case "$SCRIPT_DIR" in "$HOME"/*) WORKER_CHECKOUT="${SCRIPT_DIR#"$HOME"/}" ;; *) WORKER_CHECKOUT="$SCRIPT_DIR" ;; esac
  fi
}

need_cmd() {
  command -v "$1" >/dev/null 2>&1 || { echo "Missing required command: $1" >&2; exit 1; }
}

# `docker compose` for the head's rank: NODE_RANK and HEADLESS as given, the private env copy.
head_compose() {
  local rank=$1 headless=$2
  shift 2
  env -u NODE_RANK -u HEADLESS NODE_RANK="$rank" HEADLESS="$headless" VLLM_HOST_IP="${VLLM_HOST_IP:-}" \
    docker compose -p "$PROJECT_NAME" ${COMPOSE_ENV_FILE:+--env-file "$COMPOSE_ENV_FILE"} -f "$COMPOSE_FILE" "$@"
}

# `docker compose ARGS` in the worker's checkout over ssh; leading VAR=value words set its environment.
worker_compose() {
  local prefix="" args="" arg
  while [[ "${1:-}" == *=* ]]; do prefix+="$(printf '%q ' "$1")"; shift; done
  for arg in "$@"; do args+=" $(printf '%q' "$arg")"; done
  ssh "$WORKER_HOST" "cd $(printf '%q' "$WORKER_CHECKOUT") && env -u MASTER_ADDR -u MASTER_PORT -u NODE_RANK -u HEADLESS ${prefix}docker compose -p $(printf '%q' "$PROJECT_NAME") --env-file .env.dspark -f docker-compose.dspark.yml${args}"
}

container_state() { docker ps -a --filter "name=^${CONTAINER}\$" --format '{{.State}}'; }
