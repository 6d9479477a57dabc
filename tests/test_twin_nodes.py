"""The twin's nodes over real ssh (the session twin): own homes, sftp, rsync, host-key checking, stand-ins, launcher."""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.twin

CHECKOUT = "ds4-f-mia-anemll-0731"
REPO_0731 = "deepseek-ai/DeepSeek-V4-Flash-0731"
PLACEHOLDER = 'LANEBOOK_TWIN_ENGINE="python3 -c \'import sys, time; print(\\"placeholder up\\", *sys.argv[1:], flush=True); time.sleep(120)\'"'


def ssh(twin, alias: str, command: str, check: bool = True, config: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(["ssh", "-F", config or twin["ssh_config"], alias, command], capture_output=True,
                            text=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"{alias}: {command!r} exit {result.returncode}: {result.stderr[-800:]}")
    return result


def node(twin, alias: str) -> dict:
    return next(n for n in twin["nodes"] if n["alias"] == alias)


def test_status_has_the_spec_shape(twin):
    assert twin["running"] is True and twin["lane"] == "twin"
    assert twin["api"] == "http://127.0.0.2:8888/v1"
    assert [(n["alias"], n["host"], n["port"]) for n in twin["nodes"]] == [("head", "127.0.0.2", 2222), ("worker", "127.0.0.3", 2222)]
    assert Path(twin["ssh_config"]).is_file() and isinstance(twin["faults"], list)


@pytest.mark.parametrize("alias", ["head", "worker"])
def test_each_node_has_its_own_home_and_path(twin, alias):
    out = ssh(twin, alias, 'echo "$HOME"; pwd; command -v docker hf free systemctl sudo ssh').stdout.split()
    home = str(Path(node(twin, alias)["root"]) / "home")
    assert out[0] == home and out[1] == home
    assert all(path.startswith(node(twin, alias)["root"] + "/bin/") for path in out[2:])


def test_sftp_put_and_get_work_relative_to_the_node_home(twin, tmp_path):
    source, back = tmp_path / "up.txt", tmp_path / "back.txt"
    source.write_text(f"sftp {os.getpid()}\n")
    batch = f"put {source} sftp-test-{os.getpid()}.txt\nget sftp-test-{os.getpid()}.txt {back}\n"
    result = subprocess.run(["sftp", "-F", twin["ssh_config"], "-b", "-", "head"], input=batch, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert back.read_text() == source.read_text()
    landed = Path(node(twin, "head")["root"]) / "home" / f"sftp-test-{os.getpid()}.txt"
    assert landed.read_text() == source.read_text()
    landed.unlink()


def test_rsync_from_outside_and_head_to_worker_over_the_worker_address(twin, tmp_path):
    (tmp_path / "f.txt").write_text("payload\n")
    target = f"rsync-test-{os.getpid()}"
    subprocess.run(["rsync", "-a", "-e", f"ssh -F {shlex.quote(twin['ssh_config'])}", str(tmp_path / "f.txt"),
                    f"head:{target}/"], check=True, timeout=60)
    # As the real head does `rsync ... milo@10.0.0.2:...`: the head reaches the worker by address.
    ssh(twin, "head", f"rsync -aH --partial {target}/ 127.0.0.3:{target}/")
    assert ssh(twin, "worker", f"cat {target}/f.txt").stdout == "payload\n"
    assert (Path(node(twin, "worker")["root"]) / "home" / target / "f.txt").is_file()
    ssh(twin, "head", f"rm -rf {target}; ssh 127.0.0.3 rm -rf {target}")


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
        assert {"docker-compose.dspark.yml", ".env.dspark", "start-deepseek-v4-flash-dspark.sh",
                "status-deepseek-v4-flash-dspark.sh", "stop-deepseek-v4-flash-dspark.sh", "run-post-readiness-warmup.sh"} <= set(listing)
    compose = ssh(twin, "head", f"cat {CHECKOUT}/docker-compose.dspark.yml").stdout
    assert 'VLLM_USE_BREAKABLE_CUDAGRAPH: "${VLLM_USE_BREAKABLE_CUDAGRAPH:-0}"' in compose
    assert '\\"num_speculative_tokens_per_batch_size\\":[[1,1,5],[2,4,4],[5,6,3]]}";' in compose
    assert "per_batch_size" not in ssh(twin, "head", "grep SPECULATIVE_CONFIG= ds4-f-mia-anemll-1m6/docker-compose.dspark.yml").stdout
    env = ssh(twin, "head", f"cat {CHECKOUT}/.env.dspark").stdout
    assert "MASTER_ADDR=127.0.0.2" in env and "WORKER_HOST=127.0.0.3" in env and "10.0.0." not in env


def test_hf_cache_is_laid_out_as_the_hub_lays_it(twin):
    hub = Path(node(twin, "worker")["root"]) / "home/.cache/huggingface/hub" / ("models--" + REPO_0731.replace("/", "--"))
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


def test_hf_download_writes_resumes_and_refuses_offline(twin):
    cache = f"hf-test-{os.getpid()}"
    model_dir = f"{cache}/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731"
    offline = ssh(twin, "head", f"HF_HOME=~/{cache} HF_HUB_OFFLINE=1 hf download {REPO_0731}", check=False)
    assert offline.returncode == 1 and "HF_HUB_OFFLINE=0" in offline.stderr
    # Interrupt a download once it is under way (up to 3 tries, each resuming the last).
    interrupt = (f"HF_HOME=~/{cache} HF_HUB_OFFLINE=0 hf download {REPO_0731} --max-workers 4 2> {cache}.err & pid=$!; "
                 f"until grep -q Fetching {cache}.err 2>/dev/null; do sleep 0.02; done; kill -TERM $pid; wait $pid; "
                 f"find {model_dir} -name '*.incomplete' | wc -l; find {model_dir} -name 'model-*-of-*.safetensors' | wc -l")
    for _ in range(3):
        incomplete, linked = map(int, ssh(twin, "head", interrupt, check=False).stdout.split()[-2:])
        if incomplete:
            break
    assert incomplete >= 1 and linked < 48  # interrupted: a partial blob is left, not all shards linked
    done = ssh(twin, "head", f"HF_HOME=~/{cache} HF_HUB_OFFLINE=0 hf download {REPO_0731} --max-workers 4 && "
                             f"find {model_dir} -name '*.incomplete' | wc -l && find {model_dir} -name 'model-*-of-*.safetensors' | wc -l").stdout.split()
    assert done[-2:] == ["0", "48"] and done[0].endswith("/snapshots/" + Path(done[0]).name)
    assert ssh(twin, "head", f"HF_HOME=~/{cache} HF_HUB_OFFLINE=1 hf download {REPO_0731}").stdout.strip() == done[0]
    ssh(twin, "head", f"rm -rf {cache} {cache}.err")


def test_docker_stand_in_runs_a_compose_project(twin):
    project = f"standin-{os.getpid()}"
    name = f"{project}-vllm-dspark-1"
    compose = f"docker compose -p {project} --env-file .env.dspark -f docker-compose.dspark.yml"
    try:
        up = ssh(twin, "head", f"cd {CHECKOUT} && NODE_RANK=0 {PLACEHOLDER} {compose} up -d")
        assert f"Container {name}  Started" in up.stderr
        out = ssh(twin, "head", f"sleep 0.3; cd {CHECKOUT} && {compose} ps --format json && docker ps --filter name=^{name}$ "
                                f"--format '{{{{.Names}}}} {{{{.State}}}}' && docker logs --tail 1 {name} && docker top {name} "
                                f"&& docker inspect --format '{{{{.State.Status}}}}' {name}").stdout.splitlines()
        assert json.loads(out[0])["State"] == "running" and out[1] == f"{name} running"
        assert out[2].startswith("placeholder up serve deepseek-ai/DeepSeek-V4-Flash-0731 --served-model-name deepseek-v4-flash-0731")
        assert out[3].split()[:2] == ["UID", "PID"] and any("num_speculative_tokens_per_batch_size" in l for l in out[4:-1])
        assert out[-1] == "running"
        running = ssh(twin, "head", "free -g").stdout.splitlines()[1].split()
        assert int(running[1]) == 119 and int(running[2]) > 100  # 0.85 of 128 GB is held while the engine runs
    finally:
        ssh(twin, "head", f"cd {CHECKOUT} && {compose} down")
    assert ssh(twin, "head", f"docker ps -a --filter name={project} -q").stdout.strip() == ""
    assert int(ssh(twin, "head", "free -g").stdout.splitlines()[1].split()[2]) < 10


def test_docker_images_present_and_prune_refused(twin):
    assert "ghcr.io/anemll/dspark-vllm-gx10" in ssh(twin, "head", "docker image ls").stdout
    prune = ssh(twin, "head", "docker system prune -af", check=False)
    assert prune.returncode != 0 and "Anemll image" in prune.stderr


def test_launcher_bad_config_is_exit_2(twin):
    assert ssh(twin, "head", f"cd {CHECKOUT} && ./start-deepseek-v4-flash-dspark.sh", check=False).returncode == 2
    moved = ssh(twin, "head", f"cp -a {CHECKOUT} noenv-{os.getpid()} && cd noenv-{os.getpid()} && rm .env.dspark && "
                              "PROJECT_NAME=x ./start-deepseek-v4-flash-dspark.sh; echo \"exit=$?\"; cd && rm -rf noenv-*",
                check=False)
    assert "exit=2" in moved.stdout and ".env.dspark not found" in moved.stderr


def test_launcher_already_up_is_exit_3(twin):
    project = f"already-{os.getpid()}"
    compose = f"docker compose -p {project} --env-file .env.dspark -f docker-compose.dspark.yml"
    ssh(twin, "head", f"cd {CHECKOUT} && NODE_RANK=0 {PLACEHOLDER} {compose} up -d")
    try:
        again = ssh(twin, "head", f"cd {CHECKOUT} && PROJECT_NAME={project} ./start-deepseek-v4-flash-dspark.sh", check=False)
        assert again.returncode == 3 and "already up" in again.stderr
    finally:
        ssh(twin, "head", f"cd {CHECKOUT} && {compose} down")


def test_sudo_keeps_privileged_commands_on_the_node(twin):
    shm = Path(node(twin, "head")["root"]) / "var" / "shm"
    (shm / "psm_leftover").write_text("x")
    ssh(twin, "head", "sudo -n sh -c 'rm -rf /dev/shm/*; sync; echo 3 > /proc/sys/vm/drop_caches'")
    assert not (shm / "psm_leftover").exists()
    assert "inactive" in ssh(twin, "head", "systemctl is-active aiden-vllm.service", check=False).stdout
