#!/usr/bin/env bash
# Bounded post-readiness warmup: touch the request shapes production uses (a long prefill, then C4 and
# C6 waves, which the 5/4/3 verify schedule serves at K4 and K3) so first-use JIT happens here and
# not in the first real burst. Requires idle queues (/metrics) before and after, then scans the
# container log for fatal runtime errors. The launcher treats a failure as fail-open.
# Reads .env.dspark as the launcher does (scripts/lane-env.sh).
# Exit 0 warm, 1 a step failed or a missing file, 2 a bad option.
set -uo pipefail
SCRIPT_DIR="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=lane-env.sh
. "$SCRIPT_DIR/scripts/lane-env.sh"

parse_host_port_options "$@"
require_files
load_env
resolve_api

python3 - "$API_ROOT" "${SERVED_MODEL_NAME:-deepseek-v4-flash-dspark}" <<'PY' || exit 1
import json, os, sys, threading, time, urllib.request

api, model = sys.argv[1], sys.argv[2]
key = os.environ.get("VLLM_API_KEY") or (os.environ.get("DSPARK_API_KEYS") or "").split(" ")[0].strip()
auth = {"Authorization": f"Bearer {key}"} if key else {}

def get(path):
    with urllib.request.urlopen(urllib.request.Request(api + path, headers=auth), timeout=10) as response:
        return response.read().decode()

def chat(prompt, max_tokens):
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "temperature": 0,
            "max_tokens": max_tokens, "chat_template_kwargs": {"thinking": False}}
    request = urllib.request.Request(api + "/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json", **auth})
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())["usage"]["completion_tokens"]

def wait_idle(label, attempts=60):
    for _ in range(attempts):
        queued = sum(float(line.rsplit(" ", 1)[1]) for line in get("/metrics").splitlines()
                     if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting")))
        if queued == 0:
            print(f"warmup: queues idle ({label})", flush=True)
            return
        time.sleep(1)
    raise SystemExit(f"warmup: queues not idle {label}")

def wave(size, max_tokens, label):
    errors, started = [], time.monotonic()
    def one(i):
        try:
            chat(f"Warmup {label} request {i}: count from 1 to 40, comma separated.", max_tokens)
        except Exception as exc:  # reported below
            errors.append(f"{type(exc).__name__}: {exc}")
    threads = [threading.Thread(target=one, args=(i,)) for i in range(size)]
    for t in threads: t.start()
    for t in threads: t.join()
    if errors:
        raise SystemExit(f"warmup: {label} failed: {errors[0]}")
    print(f"warmup: {label} ok ({size} requests, {time.monotonic() - started:.1f}s)", flush=True)

wait_idle("before")
long_prompt = "Summarize the following operator log in one line.\n" + " ".join(f"step{i} ok;" for i in range(3000))
chat(long_prompt, 8)
print("warmup: bounded long prefill ok", flush=True)
wave(4, 32, "C4 (K4)")
wave(6, 32, "C6 (K3)")
wait_idle("after")
PY

fatal=$(docker logs --tail 500 "$CONTAINER" 2>&1 | grep -E 'Traceback|CUDA error|NCCL error|EngineDeadError|Engine core .*died|Fatal Python error' | tail -n 5)
if [ -n "$fatal" ]; then
  echo "warmup: fatal runtime errors in the log of $CONTAINER:" >&2
  echo "$fatal" >&2
  exit 1
fi
echo "warmup: log clean"
