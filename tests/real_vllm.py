"""The real vLLM of the test bed as a module-scoped fixture: vLLM's CPU build (`make vllm-cpu`, .tools/vllm-cpu) serving
its tiny random model on a free loopback port, with prefix caching and ngram speculative decoding on the recipe's
5/4/3 verify schedule, and the twin's server started with the same flags beside it.

One real server per module: it takes 25-75 s to boot on two cores. Its readiness is waited for with lanebook's own
wait (ops.readiness.wait_health), and what that wait saw is kept for the readiness test.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from lanebook.base.errors import LanebookError
from lanebook.nodes.http import WaitProgress
from lanebook.ops.readiness import wait_health

REPO = Path(__file__).resolve().parents[1]
VLLM_VENV = REPO / ".tools" / "vllm-cpu"
INSTALLED = VLLM_VENV / ".installed"
TINY_MODEL = VLLM_VENV / "tiny-model"
NAME = "tiny-real"
HOST = "127.0.0.1"
MAX_MODEL_LEN = 2048
SCHEDULE = [[1, 1, 5], [2, 4, 4], [5, 6, 3]]  # the recipe's verify schedule: K 5 at C1, 4 at C2-C4, 3 at C5-C6
SPECULATIVE = {
    "method": "ngram",
    "num_speculative_tokens": 5,
    "prompt_lookup_max": 3,
    "prompt_lookup_min": 1,
    "num_speculative_tokens_per_batch_size": SCHEDULE,
}
SERVE_FLAGS = [
    "--served-model-name",
    NAME,
    "--max-model-len",
    str(MAX_MODEL_LEN),
    "--enable-prefix-caching",
    "--speculative-config",
    json.dumps(SPECULATIVE),
]
BOOT_BOUND_S = 300.0  # 25-75 s seen alone on two cores; more while another vLLM boots beside it


def missing_reason() -> str | None:
    """Why the real server cannot run here (None when it can)."""
    if not INSTALLED.exists():
        return f"the real vLLM is not installed ({INSTALLED.relative_to(REPO)} absent): run `make vllm-cpu`"
    return None


def free_port(host: str = HOST) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@dataclass
class RealServer:
    process: subprocess.Popen
    url: str
    log_path: Path
    boot: list[WaitProgress] = field(default_factory=list)  # what lanebook's readiness wait saw, attempt by attempt
    ready_s: float = 0.0

    @property
    def api(self) -> str:
        return f"{self.url}/v1"

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM to the server's process group (the API server and its engine core), SIGKILL after 30 s."""
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # whatever of the group is left (engine core, workers)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=10)


def start_real(log_path: Path) -> RealServer:
    """`python -m vllm.entrypoints.openai.api_server` in a session of its own, ready when lanebook's wait says so."""
    port = free_port()
    # LANEBOOK_TWIN_DIR stays: a parallel suite finds what it left running by it (tests/conftest.py)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_") and "proxy" not in k.lower()}
    env.update(VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    command = [
        str(VLLM_VENV / "bin" / "python"),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(TINY_MODEL),
        *SERVE_FLAGS,
        "--host",
        HOST,
        "--port",
        str(port),
        "--enforce-eager",
    ]
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=log_path.parent
        )
    server = RealServer(process, f"http://{HOST}:{port}", log_path)
    started = time.monotonic()
    try:
        wait_health(server.api, timeout_s=BOOT_BOUND_S, interval_s=1.0, progress=server.boot.append)
    except LanebookError as exc:
        tail = server.log_tail()
        server.stop()
        raise RuntimeError(f"the real vLLM did not become ready: {exc}\n{tail}") from None
    server.ready_s = time.monotonic() - started
    print(f"real vLLM ready in {server.ready_s:.1f} s at {server.url}", flush=True)
    return server


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    server = start_real(tmp_path_factory.mktemp("real-vllm") / "vllm.log")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def twin_server(tmp_path_factory):
    """The twin's `vllm serve` with the real server's flags (no SSH nodes), on a free loopback port; fast time."""
    from lanebook.twin.vllm import start_local

    server = start_local(
        [str(TINY_MODEL), *SERVE_FLAGS],
        tmp_path_factory.mktemp("twin-vllm") / "vllm.log",
        host=HOST,
        env={"LANEBOOK_TWIN_TIME_SCALE": "0.005"},
    )
    yield server
    server.stop()
