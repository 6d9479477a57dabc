"""The real vLLM (CPU build) serving a keyed lane: real-vllm-cpu with `auth: {DSPARK_API_KEYS: {key_file: ...}}`, two
keys. The env runbook renders them into the head's .env.dspark, the recipe's compose passes them to `vllm serve
--api-key K1 K2`, and
the launch passes (lanebook's readiness and model checks send the key); a request without the key is refused by the
real server, 401 {"error": "Unauthorized"}, the same answer as the twin's server gives; /health and /metrics stay
keyless; the key is in no line of the container log. The head's env file is put back byte for byte after."""

from __future__ import annotations

import secrets

import httpx
import pytest
from helpers.lanebook_runs import lanebook_command, last_record
from helpers.real_vllm import LANE_NAME, REPO, await_build, missing_reason, stop_twin_lanes
from lanebook.nodes import ssh
from lanebook.ops import launcher

KEYED_BOUND_S = 900  # the env run, then the real server's boot (25-75 s alone, more beside the suite)


@pytest.fixture(scope="module")
def keyed(twin, tmp_path_factory):
    """real-vllm-cpu keyed, rendered and launched; stopped and its head's env file restored after."""
    await_build()
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("keyed-real")
    key, second = f"lb-real-{secrets.token_hex(12)}", f"lb-real-{secrets.token_hex(12)}"
    (folder / "keys").write_text(f"{key}\n{second}\n")
    (folder / "keys").chmod(0o600)
    lane_file = folder / f"{LANE_NAME}.yaml"
    text = (REPO / "params" / f"{LANE_NAME}.yaml").read_text()
    assert "  api_key: no-key-required\n" in text  # its Hermes block names the key's variable instead (P09)
    text = text.replace("  api_key: no-key-required\n", "  key_env: SPARK_DS4_API_KEY\n")
    lane_file.write_text(text + f"auth:\n  DSPARK_API_KEYS: {{key_file: {folder / 'keys'}}}\n")
    outputs = folder / "outputs"
    stop_twin_lanes()
    env = lanebook_command(["run", "env", "--lane", str(lane_file)], outputs, timeout=KEYED_BOUND_S)
    env_record = last_record(outputs)
    try:
        assert env.returncode == 0 and env_record["verdict"] == "pass", env.stdout + env.stderr
        launch = lanebook_command(["run", "launch", "--lane", str(lane_file)], outputs, timeout=KEYED_BOUND_S)
        yield key, second, launch, last_record(outputs), outputs
    finally:
        from lanebook.lane.params import load_lane

        with ssh.LaneNodes(load_lane(lane_file)) as nodes:
            launcher.stop_lane(nodes)
        if env_record["verdict"] == "pass":  # what it wrote into the head's checkout, put back byte for byte
            restore = ["run", "env", "--lane", str(lane_file), "-p", f"restore={env_record['run_id']}"]
            restored = lanebook_command(restore, outputs, timeout=KEYED_BOUND_S)
            assert restored.returncode == 0, restored.stdout + restored.stderr


def test_a_keyed_real_server_launches_and_refuses_a_request_without_the_key(keyed):
    key, second, launch, record, outputs = keyed
    assert launch.returncode == 0 and record["runbook"] == "launch" and record["verdict"] == "pass", launch.stdout
    root = "http://127.0.0.2:8888"
    with httpx.Client(trust_env=False, timeout=30) as client:
        keyless = client.get(f"{root}/v1/models")
        assert (keyless.status_code, keyless.json()) == (401, {"error": "Unauthorized"})
        wrong = client.get(f"{root}/v1/models", headers={"Authorization": "Bearer lb-not-the-key-0000"})
        assert wrong.status_code == 401
        for each in (key, second):  # either key: independently revocable, one flag carrying both
            keyed_answer = client.get(f"{root}/v1/models", headers={"Authorization": f"Bearer {each}"})
            assert keyed_answer.status_code == 200 and keyed_answer.json()["data"][0]["id"] == "lanebook-tiny-llama"
        assert client.get(f"{root}/health").status_code == 200  # vLLM's --api-key guards /v1, /v2, /inference only
        assert client.get(f"{root}/metrics").status_code == 200
    from lanebook.twin.control import layout

    # the head's container log as the twin keeps it (what `docker logs` shows before lanebook's executor redacts it)
    log = (layout().node("head") / "var" / "containers" / f"{LANE_NAME}-vllm-dspark-1" / "log").read_text()
    assert "--api-key <redacted:2 value(s)>" in log  # the stand-in's translation line, as the recipe's hotfix shows
    assert "'api_key': '***'" in log  # vLLM 0.32.0's own non-default args line redacts it
    written = b"".join(p.read_bytes() for p in outputs.rglob("*") if p.is_file())
    for each in (key, second):
        assert each not in log and each.encode() not in written and each not in launch.stdout + launch.stderr


def test_the_twin_server_refuses_a_keyless_request_as_the_real_one_does(keyed, tmp_path):
    """The twin's KeyGuard answers what vLLM's AuthenticationMiddleware answered above, on the same paths."""
    from helpers.twin_serve import SERVE_ARGS
    from lanebook.twin.vllm import start_local

    key = keyed[0]
    server = start_local(
        [*SERVE_ARGS, "--api-key", key],
        tmp_path / "vllm.log",
        host="127.0.0.1",
        env={"LANEBOOK_TWIN_TIME_SCALE": "0.005"},
    )
    try:
        server.wait_healthy(60)
        with httpx.Client(trust_env=False, timeout=30) as client:
            for root in ("http://127.0.0.2:8888", server.url):
                answers = [
                    (path, client.get(f"{root}{path}").status_code) for path in ("/v1/models", "/v1/nope", "/health")
                ]
                assert answers == [("/v1/models", 401), ("/v1/nope", 401), ("/health", 200)], root
                assert client.get(f"{root}/v1/models").json() == {"error": "Unauthorized"}
    finally:
        server.stop()
    assert key not in (tmp_path / "vllm.log").read_text()  # the twin logs the keys as the recipe's hotfix: redacted
