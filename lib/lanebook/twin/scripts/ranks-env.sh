# Shared by the four-node launcher's start, status and stop scripts (start-tp4.sh, ...), sourced after
# scripts/lane-env.sh. lanebook's own scripts for the twin, derived from its two-node launcher: the public recipe's
# launcher is two-node only (WORKER_HOST), so the workers come from the keys public four-Spark profiles use
# (MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks, .env.tp4.example): NNODES, TP_SIZE, WORKER_HOSTS (ssh targets, rank
# order) and WORKER_IPS (RoCE addresses, rank order), space-separated, rank i = the i-th word.

RANK_HOSTS=()
RANK_IPS=()

# The workers in rank order; a count that does not match NNODES - 1 is refused (exit 2) before anything starts.
read_ranks() {
  : "${WORKER_HOSTS:?WORKER_HOSTS must be set in $ENV_FILE}"
  read -r -a RANK_HOSTS <<< "$WORKER_HOSTS"
  read -r -a RANK_IPS <<< "${WORKER_IPS:-}"
  if [ "${1:-}" = --all-keys ]; then
    : "${NNODES:?NNODES must be set in $ENV_FILE}"
    : "${TP_SIZE:?TP_SIZE must be set in $ENV_FILE}"
    : "${WORKER_IPS:?WORKER_IPS must be set in $ENV_FILE}"
    [[ "$NNODES" =~ ^[1-9][0-9]*$ ]] || refuse "NNODES must be a positive integer (got: $NNODES)"
    [ "$TP_SIZE" = "$NNODES" ] || refuse "TP_SIZE ($TP_SIZE) must equal NNODES ($NNODES): one GPU per Spark"
    [ "${#RANK_HOSTS[@]}" -eq $((NNODES - 1)) ] \
      || refuse "WORKER_HOSTS names ${#RANK_HOSTS[@]} worker(s); NNODES=$NNODES needs $((NNODES - 1))"
    [ "${#RANK_IPS[@]}" -eq "${#RANK_HOSTS[@]}" ] \
      || refuse "WORKER_IPS names ${#RANK_IPS[@]} address(es) for ${#RANK_HOSTS[@]} WORKER_HOSTS"
  fi
}

# `docker compose ARGS` in rank HOST's checkout over ssh; leading VAR=value words set its environment.
rank_compose() {
  local host=$1 prefix="" args="" arg
  shift
  while [[ "${1:-}" == *=* ]]; do prefix+="$(printf '%q ' "$1")"; shift; done
  for arg in "$@"; do args+=" $(printf '%q' "$arg")"; done
  ssh "$host" "cd $(printf '%q' "$WORKER_CHECKOUT") && env -u MASTER_ADDR -u MASTER_PORT -u NODE_RANK -u HEADLESS ${prefix}docker compose -p $(printf '%q' "$PROJECT_NAME") --env-file .env.dspark -f docker-compose.dspark.yml${args}"
}
