#!/usr/bin/env bash
# Stop the two-node lane from the head: the head's container first, then the worker's (compose down).
# Exit 0 stopped, 1 the worker could not be stopped (stop the orphaned worker there), 2 bad config.
set -uo pipefail
cd "$(dirname "$0")" || exit 2
. scripts/lane-env.sh
load_lane_env
code=0
echo "stop: head: compose down"
compose down || code=1
echo "stop: worker $WORKER_HOST: compose down"
worker_compose down || { echo "stop: worker $WORKER_HOST not stopped: stop its container there before restarting" >&2; code=1; }
exit $code
