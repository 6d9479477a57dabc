"""lanebook.verify.preflight (`lanebook check`): ready on a healthy twin; each problem a twin node is given is named
with its fix; a dry run prints every probe and opens no connection."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest
from lanebook.ops.memory import sudo_commands
from lanebook.verify.preflight import sudoers_line

REPO = Path(__file__).resolve().parents[1]
LANEBOOK = REPO / ".venv" / "bin" / "lanebook"
TWIN_LANE = REPO / "params" / "twin.yaml"
WORKER = "{alias: worker, role: worker, host: 127.0.0.3, port: 2222, roce_ip: 127.0.0.3}"  # the twin lane's worker


def cli(*args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, str(LANEBOOK), *args], capture_output=True, text=True, timeout=180)


def check(lane_name: str | Path) -> tuple[int, dict]:
    done = cli("check", "--lane", str(lane_name), "--json")
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def failed(report: dict) -> dict[tuple[str, str], dict]:
    return {(i["node"], i["item"]): i for i in report["items"] if i["ok"] is False}


def lane_copy(tmp_path: Path, old: str, new: str, count: int = 1) -> Path:
    text = TWIN_LANE.read_text()
    assert text.count(old) == count, old
    path = tmp_path / "twin-copy.yaml"
    path.write_text(text.replace(old, new))
    return path


@contextmanager
def condition(alias: str, name: str):
    """A twin node made to lack something for the duration (its stand-ins answer as such a node's would)."""
    from lanebook.twin.control import set_node_conditions

    assert set_node_conditions(alias, [name]) == [name]
    try:
        yield
    finally:
        set_node_conditions(alias, [])


def test_dry_run_prints_every_probe_and_opens_no_connection():
    prefix = ("unshare", "-n") if shutil.which("unshare") else ()
    done = cli("check", "--lane", "anemll-0731", "--dry-run", prefix=prefix)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "none were sent" in out and "dry run: nothing was observed" in out
    for node in ("head", "worker"):
        for probe in ("true", "command -v python3", "command -v rsync", "docker ps -q", "docker compose version"):
            assert f"  {node}: {probe}" in out
        assert f"  {node}: sudo -n -l sh -c 'rm -rf /dev/shm/*; sync; echo 3 > /proc/sys/vm/drop_caches'" in out
        assert f"  {node}: docker image inspect --format '{{{{.Id}}}}' ghcr.io/anemll/dspark-vllm-gx10:0.1.1" in out
    assert "  head: ssh -o BatchMode=yes -o ConnectTimeout=5 10.0.0.2 true" in out
    listed = json.loads(cli("check", "--lane", "anemll-0731", "--dry-run", "--json", prefix=prefix).stdout)
    assert listed["dry_run"] is True and listed["ready"] is None and len(listed["probes"]) == out.count("\n  ")


def test_bad_input_is_exit_2():
    done = cli("check", "--lane", "no-such-lane")
    assert done.returncode == 2 and "unknown lane" in done.stderr and "Traceback" not in done.stderr


def test_sudoers_line_names_exactly_the_commands_lanebook_sends_as_root():
    line = sudoers_line("milo", sudo_commands(["aiden-vllm.service"]))
    assert line == (
        "milo ALL=(root) NOPASSWD: /bin/sh -c rm -rf /dev/shm/*; sync; echo 3 > /proc/sys/vm/drop_caches, "
        "/bin/sh -c systemctl mask --now aiden-vllm.service"
    )
    assert "\\," in sudoers_line("u", ["a,b"]) and "\\=" in sudoers_line("u", ["a=b"])


@pytest.mark.twin
def test_healthy_twin_is_ready(twin):
    code, report = check("twin")
    assert code == 0 and report["ready"] is True, failed(report)
    seen = {(i["node"], i["item"]) for i in report["items"] if i["ok"]}
    for node in ("head", "worker"):
        for item in ("ssh reach", "host key known", "python3", "rsync", "docker without a password", "Compose v2"):
            assert (node, item) in seen
        assert (node, "sudo for lanebook's commands") in seen and (node, "the lane's image") in seen
    assert ("head", "RoCE link to worker (127.0.0.3)") in seen and ("local", "Hermes CLI") in seen


@pytest.mark.twin
def test_unknown_host_key_is_named_with_how_to_add_it(twin, tmp_path):
    config = Path(twin["ssh_config"]).read_text()
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    text = re.sub(r"UserKnownHostsFile .*", f"UserKnownHostsFile {empty}", config)
    (tmp_path / "ssh_config").write_text(text)
    lane = lane_copy(tmp_path, "ssh_config: twin", f"ssh_config: {tmp_path / 'ssh_config'}")
    code, report = check(lane)
    item = failed(report)[("head", "host key known")]
    assert code == 1 and "ssh-keyscan -p" in item["fix"] and "lanebook refuses unknown keys" in item["seen"]


@pytest.mark.twin
def test_a_sudo_that_asks_is_named_with_the_sudoers_line(twin):
    with condition("worker", "sudo-asks"):
        code, report = check("twin")
    item = failed(report)[("worker", "sudo for lanebook's commands")]
    assert code == 1 and "password is required" in item["seen"]
    assert "NOPASSWD: /bin/sh -c rm -rf /dev/shm/*" in item["fix"]
    assert ("head", "sudo for lanebook's commands") not in failed(report)


@pytest.mark.twin
@pytest.mark.parametrize(
    "node, given, item, seen, fix",
    [
        ("head", "docker-denied", "docker without a password", "permission denied", "usermod -aG docker"),
        ("worker", "no-compose", "Compose v2", "'compose' is not a docker command", "docker-compose-plugin"),
    ],
    ids=["a user outside the docker group", "no Compose v2"],
)
def test_a_docker_that_cannot_serve_the_lane_is_named(twin, node, given, item, seen, fix):
    with condition(node, given):
        code, report = check("twin")
    found = failed(report)[(node, item)]
    assert code == 1 and seen in found["seen"] and fix in found["fix"]


@pytest.mark.twin
def test_a_missing_image_is_named_with_the_pull(twin, tmp_path):
    lane = lane_copy(tmp_path, "dspark-vllm-gx10:0.1.1\n", "dspark-vllm-gx10:9.9.9\n")
    code, report = check(lane)
    for node in ("head", "worker"):
        assert "docker pull ghcr.io/anemll/dspark-vllm-gx10:9.9.9" in failed(report)[(node, "the lane's image")]["fix"]
    assert code == 1


@pytest.mark.twin
def test_a_roce_address_that_does_not_answer_is_named(twin, tmp_path):
    lane = lane_copy(tmp_path, WORKER, "{alias: worker, role: worker, host: 127.0.0.3, port: 2222, roce_ip: 127.0.0.9}")
    code, report = check(lane)
    item = failed(report)[("head", "RoCE link to worker (127.0.0.9)")]
    assert code == 1 and "ssh 127.0.0.9 true" in item["fix"]


@pytest.mark.twin
def test_missing_weights_on_a_full_disk_are_named_and_room_passes(twin, tmp_path):
    model = "deepseek-ai/DeepSeek-V4-Flash-0731"
    lane = lane_copy(tmp_path, model, "deepseek-ai/DeepSeek-V4-Flash-0801", count=2)  # weights no node holds
    code, report = check(lane)
    assert code == 0, failed(report)
    room = {i["node"]: i["seen"] for i in report["items"] if i["item"] == "weights or room for them"}
    assert room["head"].startswith("0 of 48 shards present;") and "need 160" in room["head"]
    with condition("worker", "disk-full"):
        code, report = check(lane)
    item = failed(report)[("worker", "weights or room for them")]
    assert code == 1 and "2 GiB free (need 160)" in item["seen"] and "free 160 GB under" in item["fix"]
    assert ("head", "weights or room for them") not in failed(report)


@pytest.mark.twin
def test_an_active_legacy_unit_is_a_warning_the_launch_deals_with(twin):
    from lanebook.lane.params import load_lane
    from lanebook.nodes.ssh import LaneNodes

    with LaneNodes(load_lane("twin")) as nodes:
        head = nodes.node("head")
        # The worker's twin is shared: a launch run before this test leaves the unit masked, as the runbook does.
        was_masked = head.run("systemctl is-enabled aiden-vllm.service", check=False).stdout.strip() == "masked"
        head.run("systemctl unmask aiden-vllm.service && systemctl start aiden-vllm.service")
        try:
            code, report = check("twin")
        finally:
            head.run(
                "systemctl stop aiden-vllm.service" + (" && systemctl mask aiden-vllm.service" if was_masked else "")
            )
    item = next(i for i in report["items"] if i["item"] == "legacy units (P13)" and i["node"] == "head")
    assert item["ok"] is False and item["blocking"] is False and "aiden-vllm.service" in item["seen"]
    assert code == 0 and "systemctl mask --now aiden-vllm.service" in item["fix"]


@pytest.mark.twin
def test_a_promotion_runs_the_same_list_first_and_refuses_a_lane_not_ready(twin, tmp_path):
    outputs = tmp_path / "outputs"
    with condition("head", "docker-denied"):
        done = subprocess.run(
            [str(LANEBOOK), "promote", "--lane", "twin"],
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, "LANEBOOK_OUTPUTS": str(outputs)},
        )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "lane twin is not ready, nothing was run: head docker without a password: permission denied" in done.stderr
    assert "usermod -aG docker" in done.stderr and "Traceback" not in done.stderr
    assert not (outputs / "runs.jsonl").exists() or not (outputs / "runs.jsonl").read_text().strip()


@pytest.mark.twin
def test_a_node_ssh_cannot_reach_is_named_with_user_keys_and_jump(twin, tmp_path):
    worker9 = "{alias: worker9, role: worker, host: 127.0.0.3, port: 2222, roce_ip: 127.0.0.3, jump: head}"
    lane = lane_copy(tmp_path, WORKER, worker9)
    code, report = check(lane)
    item = failed(report)[("worker9", "ssh reach")]
    assert code == 1 and "unreachable" in item["seen"] and "-J head" in item["fix"] and "ssh-copy-id" in item["fix"]
    probes = [i for i in report["items"] if i["node"] == "worker9" and i["item"] != "ssh reach"]
    assert probes and all(i["ok"] is None and i["seen"].startswith("not probed") for i in probes)


@pytest.mark.twin
def test_hermes_on_a_node_is_looked_for_there(twin, tmp_path):
    on_head = "  context_length: 200000\n  host: head\n  config: ~/.hermes/none.yaml\n"
    lane = lane_copy(tmp_path, "  context_length: 200000\n", on_head)
    code, report = check(lane)
    broken = failed(report)
    assert code == 1 and "hermes setup" in broken[("hermes on head", "Hermes config")]["fix"]
    assert ("hermes on head", "Hermes CLI") in {(i["node"], i["item"]) for i in report["items"]}


@pytest.mark.twin
def test_a_missing_hf_cache_is_a_warning_with_where_the_weights_go(twin, tmp_path):
    lane = lane_copy(tmp_path, "  max_workers: 4\n", "  max_workers: 4\n  hf_cache: ~/elsewhere/hf\n")
    code, report = check(lane)
    item = next(i for i in report["items"] if i["item"] == "HF cache path" and i["node"] == "head")
    assert code == 0 and item["ok"] is False and item["blocking"] is False and item["seen"] == "no ~/elsewhere/hf"
    assert "set weights.hf_cache" in item["fix"]
    room = next(i for i in report["items"] if i["item"] == "weights or room for them" and i["node"] == "head")
    assert room["ok"] is True and room["seen"].startswith("0 of 48 shards present;")
