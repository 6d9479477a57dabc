#!/usr/bin/env bash
# Stop the two-node lane from the head, as the recipe's stop script does: the head's rank, then the
# worker's (`docker compose down` on each). Reads .env.dspark, when present, as the launcher does.
# Exit: 0 both ranks stopped; 1 a rank could not be stopped (an unreachable worker keeps its rank: stop
# it there before the next start) or WORKER_HOST is not set; 2 a bad argument.
set -uo pipefail
SCRIPT_DIR="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=scripts/lane-env.sh
. "$SCRIPT_DIR/scripts/lane-env.sh"

for arg in "$@"; do
  case "$arg" in
    -h|--help) echo "Usage: $(basename "$0")   (stop the head's rank, then the worker's)"; exit 0 ;;
    *) echo "Unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done
[ ! -f "$ENV_FILE" ] || load_env
resolve_api
: "${WORKER_HOST:?WORKER_HOST must be set in $ENV_FILE or environment}"

failures=0
echo "Stopping DSpark on head (project ${PROJECT_NAME})..."
head_compose 0 "" down --remove-orphans -t 1 || { echo "WARN: head compose down failed" >&2; failures=$((failures + 1)); }
if ssh -o BatchMode=yes -o ConnectTimeout=10 "$WORKER_HOST" true >/dev/null 2>&1; then
  echo "Stopping DSpark on worker $WORKER_HOST (project ${PROJECT_NAME})..."
  worker_compose NODE_RANK=1 HEADLESS=1 down --remove-orphans -t 1 \
    || { echo "WARN: worker compose down failed on $WORKER_HOST" >&2; failures=$((failures + 1)); }
else
  echo "WARN: cannot reach worker ${WORKER_HOST}; its ranks will NOT be stopped." >&2
  failures=$((failures + 1))
fi
if [ "$failures" -gt 0 ]; then
  echo "WARN: $failures stop step(s) failed; the worker may still be serving a stale rank. Re-run $(basename "$0") once it is reachable." >&2
  exit 1
fi
echo "DeepSeek V4 Flash DSpark stopped."
