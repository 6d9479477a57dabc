"""A keyed lane's keys (lanebook.lane.keys): the lane file names only where they come from (`auth:`); a key written
in it, a key file others can read, both recipe variables at once, or a key the recipe cannot take is refused in one
line (exit 2 in the CLI) before any node is touched; the keys read are known to the redactor and sent by the
clients to the lane's origin only."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from lanebook.base.errors import LaneError
from lanebook.base.paths import PARAMS_DIR
from lanebook.base.redact import redact
from lanebook.lane.keys import client_key_for, key_file_path, lane_keys, read_keys
from lanebook.lane.params import load_lane

LANEBOOK = Path(sys.executable).parent / "lanebook"
KEYED = (PARAMS_DIR / "twin-keyed.yaml").read_text()
AUTH_LINE = "  DSPARK_API_KEYS: {key_file: ../.twin/twin-keyed.keys}"


def keyed_lane(tmp_path: Path, auth: str = "  DSPARK_API_KEYS: {key_file: keys}", **replace: str) -> Path:
    """twin-keyed's lane file in TMP_PATH with its auth: lines replaced by AUTH (and other lines by REPLACE)."""
    assert AUTH_LINE in KEYED
    text = KEYED.replace(AUTH_LINE, auth)
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "lane.yaml"
    path.write_text(text)
    return path


def key_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "keys"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_twin_keyed_names_dspark_api_keys_from_a_key_file_beside_the_twin():
    params = load_lane("twin-keyed")
    assert params.keyed and params.auth.variable == "DSPARK_API_KEYS" and params.auth.source.key_file
    assert key_file_path(params) == PARAMS_DIR.parent / ".twin" / "twin-keyed.keys"
    assert params.hermes_key_env == "SPARK_DS4_API_KEY"
    assert not load_lane("twin").keyed and load_lane("twin").hermes_key_env is None


def test_keys_from_a_file_are_read_in_order_registered_and_redacted(tmp_path):
    key_file(tmp_path, "# the lane's keys\nlb-alpha-7f3c9d2e\n  lb-bravo-11aa22bb\n")
    params = load_lane(keyed_lane(tmp_path))
    keys = lane_keys(params)
    assert keys.variable == "DSPARK_API_KEYS" and keys.keys == ("lb-alpha-7f3c9d2e", "lb-bravo-11aa22bb")
    assert keys.env_value == "lb-alpha-7f3c9d2e lb-bravo-11aa22bb" and keys.client_key == "lb-alpha-7f3c9d2e"
    assert client_key_for("http://127.0.4.2:8888/v1/models") == "lb-alpha-7f3c9d2e"
    assert client_key_for("http://127.0.4.2:9090/metrics") is None  # another origin: never sent there
    assert "lb-alpha" not in redact("a line with lb-alpha-7f3c9d2e and lb-bravo-11aa22bb in it")


def test_keys_from_an_environment_variable(tmp_path, monkeypatch):
    path = keyed_lane(tmp_path, "  VLLM_API_KEY: {key_env: LB_TEST_LANE_KEY}")
    monkeypatch.setenv("LB_TEST_LANE_KEY", "lb-env-key-0042")
    keys = read_keys(load_lane(path))
    assert keys.variable == "VLLM_API_KEY" and keys.keys == ("lb-env-key-0042",) and keys.source == "$LB_TEST_LANE_KEY"
    monkeypatch.delenv("LB_TEST_LANE_KEY")
    with pytest.raises(LaneError, match=r"\$LB_TEST_LANE_KEY is not set"):
        read_keys(load_lane(path))


@pytest.mark.parametrize(
    "text,mode,needle",
    [
        ("lb-alpha-7f3c9d2e\n", 0o644, "readable by group or others (mode 0644); chmod 600"),
        ("lb-alpha-7f3c9d2e\n", 0o640, "mode 0640"),
        ("# nothing\n\n", 0o600, "holds no key"),
        ("-lb-alpha-7f3c9d2e\n", 0o600, "key 1 of key file keys is not a key the recipe takes"),
        ("lb-alpha-7f3c9d2e short\n", 0o600, "key 2 of key file keys"),
        ('lb-alpha-7f3c9d2e lb-"quoted"-x\n', 0o600, "key 2"),
    ],
)
def test_a_key_file_others_can_read_or_that_holds_no_usable_key_is_refused(tmp_path, text, mode, needle):
    key_file(tmp_path, text, mode)
    with pytest.raises(LaneError) as err:
        read_keys(load_lane(keyed_lane(tmp_path)))
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert "lb-alpha" not in str(err.value)  # the refusal never quotes a key


def test_a_missing_key_file_and_one_key_variable_given_two(tmp_path):
    with pytest.raises(LaneError, match="key file keys not found"):
        read_keys(load_lane(keyed_lane(tmp_path)))
    key_file(tmp_path, "lb-alpha-7f3c9d2e lb-bravo-11aa22bb")
    with pytest.raises(LaneError, match="VLLM_API_KEY takes one key, key file keys holds 2"):
        read_keys(load_lane(keyed_lane(tmp_path, "  VLLM_API_KEY: {key_file: keys}")))


@pytest.mark.parametrize(
    "auth,replace,needle",
    [
        ("  DSPARK_API_KEYS: lb-alpha-7f3c9d2e", {}, "auth.DSPARK_API_KEYS holds an API key written in the lane file"),
        ("  DSPARK_API_KEYS: {key: lb-alpha-7f3c9d2e}", {}, "auth.DSPARK_API_KEYS.key holds an API key"),
        (
            "  DSPARK_API_KEYS: {key_file: keys}",
            {"  HF_HUB_OFFLINE: 1": "  HF_HUB_OFFLINE: 1\n  VLLM_API_KEY: lb-alpha-7f3c9d2e"},
            "env.VLLM_API_KEY holds an API key",
        ),
        (
            "  DSPARK_API_KEYS: {key_file: keys}",
            {"  key_env: SPARK_DS4_API_KEY": "  api_key: lb-alpha-7f3c9d2e"},
            "hermes.api_key holds an API key",
        ),
        (
            "  DSPARK_API_KEYS: {key_file: keys}\n  VLLM_API_KEY: {key_env: X}",
            {},
            "VLLM_API_KEY and DSPARK_API_KEYS are both set",
        ),
        ("  DSPARK_API_KEYS: {key_file: keys, key_env: X}", {}, "name exactly one of key_file or key_env"),
        ("  OTHER_KEY: {key_file: keys}", {}, "unknown key 'auth.OTHER_KEY'"),
    ],
)
def test_a_key_in_the_lane_file_or_both_variables_is_refused_when_the_lane_loads(tmp_path, auth, replace, needle):
    with pytest.raises(LaneError) as err:
        load_lane(keyed_lane(tmp_path, auth, **replace))
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert "lb-alpha-7f3c9d2e" not in str(err.value)


def lanebook(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "LANEBOOK_OUTPUTS": str(cwd / "outputs")}
    return subprocess.run([str(LANEBOOK), *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


@pytest.mark.parametrize(
    "auth,replace,keys,needle",
    [
        ("  DSPARK_API_KEYS: lb-alpha-7f3c9d2e", {}, None, "holds an API key written in the lane file"),
        ("  DSPARK_API_KEYS: {key_file: keys}", {}, ("lb-alpha-7f3c9d2e\n", 0o644), "readable by group or others"),
        ("  DSPARK_API_KEYS: {key_file: keys}\n  VLLM_API_KEY: {key_env: X}", {}, None, "both set"),
    ],
)
def test_the_cli_refuses_in_one_line_with_exit_2_and_touches_nothing(tmp_path, auth, replace, keys, needle):
    """Each command that acts on a lane refuses before it starts anything: no run record, no twin, no output."""
    if keys:
        key_file(tmp_path, *keys)
    lane = keyed_lane(tmp_path, auth, **replace)
    for args in (
        ["promote", "--lane", str(lane)],
        ["run", "env", "--lane", str(lane)],
        ["doctor", "--lane", str(lane)],
    ):
        out = lanebook(*args, cwd=tmp_path)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert out.stderr.count("\n") == 1 and needle in out.stderr and "Traceback" not in out.stderr
        assert "lb-alpha" not in out.stdout + out.stderr
    assert not (tmp_path / "outputs").exists()  # no run was recorded or begun
