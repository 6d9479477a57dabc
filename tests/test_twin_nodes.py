"""The twin's nodes over real ssh (lanebook.twin.nodes, on the session twin): own homes and PATH, sftp and rsync
relative to the home, host-key checking, the lane checkouts and HF caches a node root holds."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.twin

CHECKOUT = "ds4-f-mia-anemll-0731"
REPO_0731 = "deepseek-ai/DeepSeek-V4-Flash-0731"


def ssh(twin, alias: str, command: str, check: bool = True, config: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(
        ["ssh", "-F", config or twin["ssh_config"], alias, command], capture_output=True, text=True, timeout=120
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{alias}: {command!r} exit {result.returncode}: {result.stderr[-800:]}")
    return result


def node(twin, alias: str) -> dict:
    return next(n for n in twin["nodes"] if n["alias"] == alias)


def test_status_has_the_spec_shape(twin):
    assert twin["running"] is True and twin["lane"] == "twin"
    assert twin["api"] == "http://127.0.0.2:8888/v1"
    assert [(n["alias"], n["host"], n["port"]) for n in twin["nodes"]] == [
        ("head", "127.0.0.2", 2222),
        ("worker", "127.0.0.3", 2222),
    ]
    assert Path(twin["ssh_config"]).is_file() and isinstance(twin["faults"], list)


@pytest.mark.parametrize("alias", ["head", "worker"])
def test_each_node_has_its_own_home_and_path(twin, alias):
    out = ssh(twin, alias, 'echo "$HOME"; pwd; command -v docker hf free systemctl sysctl sudo ssh').stdout.split()
    home = str(Path(node(twin, alias)["root"]) / "home")
    assert out[0] == home and out[1] == home
    assert all(path.startswith(node(twin, alias)["root"] + "/bin/") for path in out[2:])


def test_the_login_shell_reads_the_nodes_own_startup_file_not_the_controllers(twin):
    """sshd runs ForceCommand through the login shell, and Debian's bash reads ~/.bashrc under sshd: with the
    controller's home that was its pyenv init, whose rehash lock, once left stale, stalled every session 60 s."""
    bashrc = Path(node(twin, "head")["root"]) / "home" / ".bashrc"
    bashrc.write_text("export LANEBOOK_STARTUP_FILE=node\n")
    try:
        out = ssh(twin, "head", 'echo "${LANEBOOK_STARTUP_FILE:-none} ${PYENV_ROOT:-no-pyenv}"').stdout.split()
    finally:
        bashrc.unlink()
    assert out == ["node", "no-pyenv"]


def test_sftp_put_and_get_work_relative_to_the_node_home(twin, tmp_path):
    source, back = tmp_path / "up.txt", tmp_path / "back.txt"
    source.write_text(f"sftp {os.getpid()}\n")
    batch = f"put {source} sftp-test-{os.getpid()}.txt\nget sftp-test-{os.getpid()}.txt {back}\n"
    result = subprocess.run(
        ["sftp", "-F", twin["ssh_config"], "-b", "-", "head"], input=batch, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert back.read_text() == source.read_text()
    landed = Path(node(twin, "head")["root"]) / "home" / f"sftp-test-{os.getpid()}.txt"
    assert landed.read_text() == source.read_text()
    landed.unlink()


def test_rsync_from_outside_and_head_to_worker_over_the_worker_address(twin, tmp_path):
    (tmp_path / "f.txt").write_text("payload\n")
    target = f"rsync-test-{os.getpid()}"
    subprocess.run(
        ["rsync", "-a", "-e", f"ssh -F {shlex.quote(twin['ssh_config'])}", str(tmp_path / "f.txt"), f"head:{target}/"],
        check=True,
        timeout=60,
    )
    # As the real head does `rsync ... milo@10.0.0.2:...`: the head reaches the worker by address.
    ssh(twin, "head", f"rsync -aH --partial {target}/ 127.0.0.3:{target}/")
    assert ssh(twin, "worker", f"cat {target}/f.txt").stdout == "payload\n"
    assert (Path(node(twin, "worker")["root"]) / "home" / target / "f.txt").is_file()
    ssh(twin, "head", f"rm -rf {target}; ssh 127.0.0.3 rm -rf {target}")


@pytest.mark.parametrize("alias", ["head", "worker"])
def test_the_nodes_exchange_keys_by_x25519_alone(twin, alias):
    """Not OpenSSH 9's default hybrid with sntrup761, about 70 ms of CPU on each side of every connection."""

    def verbose(*options: str) -> subprocess.CompletedProcess:
        command = ["ssh", "-v", "-F", twin["ssh_config"], *options, alias, "true"]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    chosen = verbose()
    assert chosen.returncode == 0 and "kex: algorithm: curve25519-sha256\n" in chosen.stderr, chosen.stderr[-800:]
    refused = verbose("-o", "KexAlgorithms=sntrup761x25519-sha512@openssh.com")
    assert refused.returncode == 255 and "no matching key exchange method" in refused.stderr, refused.stderr


def test_host_key_checking_is_on(twin, tmp_path):
    config = Path(twin["ssh_config"]).read_text()
    keys = Path(twin["ssh_config"]).parent / "keys"
    wrong = tmp_path / "known_hosts"
    worker_key = (keys / "ssh_host_worker_ed25519.pub").read_text().split()[:2]
    wrong.write_text(f"[127.0.0.2]:2222 {' '.join(worker_key)}\n")  # the head presented with the worker's key
    for known in (wrong, tmp_path / "empty"):
        (tmp_path / "empty").write_text("")
        bad = tmp_path / "ssh_config"
        bad.write_text(config.replace(str(keys / "known_hosts"), str(known)))
        result = ssh(twin, "head", "true", check=False, config=str(bad))
        assert result.returncode == 255 and "Host key verification failed" in result.stderr


def test_node_checkouts_hold_the_recipe_files(twin):
    for lane_dir in (CHECKOUT, "ds4-f-mia-anemll-1m6", "ds4-f-wesche-keys-c12"):
        listing = ssh(twin, "worker", f"cd {lane_dir} && ls -a . scripts").stdout.split()
        assert {
            "docker-compose.dspark.yml",
            ".env.dspark",
            "start-deepseek-v4-flash-dspark.sh",
            "status-deepseek-v4-flash-dspark.sh",
            "stop-deepseek-v4-flash-dspark.sh",
            "run-post-readiness-warmup.sh",
        } <= set(listing)
    compose = ssh(twin, "head", f"cat {CHECKOUT}/docker-compose.dspark.yml").stdout
    assert 'VLLM_USE_BREAKABLE_CUDAGRAPH: "${VLLM_USE_BREAKABLE_CUDAGRAPH:-0}"' in compose
    assert '\\"num_speculative_tokens_per_batch_size\\":[[1,1,5],[2,4,4],[5,6,3]]}";' in compose
    assert (
        "per_batch_size"
        not in ssh(twin, "head", "grep SPECULATIVE_CONFIG= ds4-f-mia-anemll-1m6/docker-compose.dspark.yml").stdout
    )
    env = ssh(twin, "head", f"cat {CHECKOUT}/.env.dspark").stdout
    assert "MASTER_ADDR=127.0.0.2" in env and "WORKER_HOST=127.0.0.3" in env and "10.0.0." not in env
    # the launcher takes its memory from the profile key: the twin's checkout sets it to the lane's value
    assert "GPU_MEMORY_UTILIZATION_TEXT=0.85" in env.splitlines() and "ENABLE_VL_SIDECAR=0" in env.splitlines()


@pytest.mark.parametrize("alias", ["head", "worker"])
def test_each_node_root_holds_its_system_paths(twin, alias):
    root = Path(node(twin, alias)["root"])
    assert (root / "dev" / "shm").is_dir() and (root / "etc" / "systemd" / "system").is_dir()
    assert (root / "proc" / "sys" / "vm" / "drop_caches").is_file()
    assert (root / "usr" / "lib" / "systemd" / "system" / "aiden-vllm.service").is_file()  # the legacy unit, installed


def test_hf_cache_is_laid_out_as_the_hub_lays_it(twin):
    hub = (
        Path(node(twin, "worker")["root"]) / "home/.cache/huggingface/hub" / ("models--" + REPO_0731.replace("/", "--"))
    )
    revision = (hub / "refs" / "main").read_text()
    snapshot = hub / "snapshots" / revision
    shards = sorted(snapshot.glob("model-*-of-*.safetensors"))
    assert len(shards) == 48 and not list(hub.rglob("*.incomplete"))
    for shard in shards[:3]:
        assert os.readlink(shard).startswith("../../blobs/")
        assert hashlib.sha256(shard.read_bytes()).hexdigest() == Path(os.readlink(shard)).name
    index = json.loads((snapshot / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == sum(s.stat().st_size for s in shards)
    assert set(index["weight_map"].values()) == {s.name for s in shards}


def test_each_node_logs_every_command_line_it_is_given(twin):
    """var/commands.log: each session's command exactly as sent (NUL-terminated), so a test can prove what a node
    ran."""
    from lanebook.twin.nodes import TwinLayout

    marker = f"echo 'logged; $(not run)' {os.getpid()}"
    assert ssh(twin, "worker", marker).stdout == f"logged; $(not run) {os.getpid()}\n"
    log = TwinLayout(Path(twin["twin_dir"])).command_log("worker").read_bytes().split(b"\0")
    assert marker.encode() in log


def run_sleep_shim(
    tmp_path: Path, args: str, trace: bool = False, **env: str
) -> tuple[subprocess.CompletedProcess, str]:
    """Run the --fast sleep shim (TRACE: under sh -x) with a python that logs each call before it runs the stand-in:
    the result, and what reached Python ("" when the shim slept by itself)."""
    from lanebook.twin.nodes import LIB_DIR, sleep_shim

    calls = tmp_path / "python-calls"
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\necho "$*" >> {shlex.quote(str(calls))}\nexec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    shim = tmp_path / "sleep"
    shim.write_text(sleep_shim(shlex.quote(str(python))))
    environ = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(LIB_DIR), "LANEBOOK_TWIN_TIME_SCALE": "0.01", **env}
    result = subprocess.run(
        ["sh", *(["-x"] if trace else []), str(shim), *shlex.split(args)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result, calls.read_text() if calls.exists() else ""


@pytest.mark.parametrize("args, seconds", [("2", "0.020000000"), ("1 0.5", "0.015000000"), ("0", "0.000000000")])
def test_the_fast_sleep_shim_scales_plain_seconds_without_python(tmp_path, args, seconds):
    result, python_calls = run_sleep_shim(tmp_path, args, trace=True)
    assert result.returncode == 0 and python_calls == ""
    assert f"exec /bin/sleep {seconds}" in result.stderr


@pytest.mark.parametrize(
    "args, env, code, message",
    [
        ("1s", {}, 0, ""),  # a suffix
        ("1x", {}, 1, "sleep: invalid time interval '1x'"),  # coreutils' message, from the stand-in
        ("-5", {}, 1, "sleep: invalid time interval '-5'"),
        ("--help", {}, 1, "sleep: invalid time interval '--help'"),
        ("", {}, 0, ""),  # no operand
        ("0.1", {"LANEBOOK_TWIN_TIME_SCALE": "fast"}, 0, ""),  # a clock that is no plain number: the stand-in's rule
        ("0.1", {"LANEBOOK_TWIN_REAL_ENGINE": "vllm-cpu"}, 0, ""),  # the real engine's launcher waits in real time
    ],
)
def test_the_fast_sleep_shim_leaves_anything_else_to_the_stand_in(tmp_path, args, env, code, message):
    result, python_calls = run_sleep_shim(tmp_path, args, **env)
    assert python_calls == f"-m lanebook.twin.standins sleep {args}".rstrip() + "\n"
    assert (result.returncode, result.stderr) == (code, f"{message}\n" if message else "")


def test_a_fast_node_sleeps_by_the_clock_its_stand_ins_read(twin):
    """The head's own shim, over ssh: the scale it applies is the node session's LANEBOOK_TWIN_TIME_SCALE, the value
    the Python stand-in reads, from the twin's time scale."""
    traced = ssh(twin, "head", 'echo "$LANEBOOK_TWIN_TIME_SCALE"; sh -x "$(command -v sleep)" 3')
    assert float(traced.stdout) == twin["time_scale"] < 1
    assert f"exec /bin/sleep {3 * twin['time_scale']:.9f}" in traced.stderr


def _terminal_problem_as(*groups: int) -> str:
    """terminal_problem() in a process of the unprivileged user nobody, with GROUPS as its supplementary groups."""
    code = "from lanebook.twin.nodes import terminal_problem; print(terminal_problem() or 'none')"
    setpriv = ["setpriv", "--reuid=65534", "--regid=65534", *(["--groups", ",".join(map(str, groups))] if groups
               else ["--clear-groups"])]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "lib"), "USER": "nobody"}
    done = subprocess.run([*setpriv, sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_plain_user_whose_sshd_could_not_hand_out_terminals_is_told_the_fix_before_the_twin_starts():
    import grp
    import shutil

    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to act as another user")
    tty = grp.getgrnam("tty").gr_gid
    devpts = [line.split() for line in Path("/proc/self/mountinfo").read_text().splitlines() if " devpts " in line]
    hosts_mount = any(f"gid={tty}" in " ".join(fields) for fields in devpts)
    assert _terminal_problem_as(tty) == "none"  # in group tty: sshd's chown of the terminal succeeds
    said = _terminal_problem_as()
    if hosts_mount:  # new terminals are group tty already: nothing to change
        assert said == "none"
    else:
        assert "cannot hand its sessions a terminal" in said and "sudo usermod -aG tty nobody" in said
