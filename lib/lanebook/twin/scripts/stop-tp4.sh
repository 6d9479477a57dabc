#!/usr/bin/env bash
# Stop the four-node (N-node) lane from the head: the head's rank, then every worker's (`docker compose down` on
# each). lanebook's own script for the twin, derived from its two-node stop script; the workers come from
# WORKER_HOSTS (scripts/ranks-env.sh). Exit: 0 every rank stopped; 1 a rank could not be stopped (an unreachable
# worker keeps its rank: stop it there before the next start) or WORKER_HOSTS is not set; 2 a bad argument.
set -uo pipefail
SCRIPT_DIR="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=scripts/lane-env.sh
. "$SCRIPT_DIR/scripts/lane-env.sh"
# shellcheck source=scripts/ranks-env.sh
. "$SCRIPT_DIR/scripts/ranks-env.sh"

for arg in "$@"; do
  case "$arg" in
    -h|--help) echo "Usage: $(basename "$0")   (stop the head's rank, then every worker's)"; exit 0 ;;
    *) echo "Unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done
[ ! -f "$ENV_FILE" ] || load_env
resolve_api
read_ranks

failures=0
echo "Stopping DSpark on head (project ${PROJECT_NAME})..."
head_compose 0 "" down --remove-orphans -t 1 || { echo "WARN: head compose down failed" >&2; failures=$((failures + 1)); }
for i in "${!RANK_HOSTS[@]}"; do
  host="${RANK_HOSTS[$i]}"
  if ssh -o BatchMode=yes -o ConnectTimeout=10 "$host" true >/dev/null 2>&1; then
    echo "Stopping DSpark rank $((i + 1)) on $host (project ${PROJECT_NAME})..."
    rank_compose "$host" "NODE_RANK=$((i + 1))" HEADLESS=1 down --remove-orphans -t 1 \
      || { echo "WARN: rank $((i + 1)) compose down failed on $host" >&2; failures=$((failures + 1)); }
  else
    echo "WARN: cannot reach worker ${host}; its rank will NOT be stopped." >&2
    failures=$((failures + 1))
  fi
done
if [ "$failures" -gt 0 ]; then
  echo "WARN: $failures stop step(s) failed; a worker may still be serving a stale rank. Re-run $(basename "$0") once it is reachable." >&2
  exit 1
fi
echo "DeepSeek V4 Flash DSpark stopped on every rank."
