"""Lane files: the shipped lanes carry the seeds' values; bad files fail with one line naming the key."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from lanebook.base.errors import LaneError
from lanebook.lane.params import lane_names, load_lane

LANEBOOK = [sys.executable, "-m", "lanebook.cli"]


def test_shipped_lanes_load():
    assert set(lane_names()) >= {"anemll-0731", "anemll-1m6", "patch3-c12", "twin"}
    for name in lane_names():
        assert load_lane(name).name == name


def test_current_recipe_values_from_seed_000():
    params = load_lane("anemll-0731")
    env = params.env
    assert env["GPU_MEMORY_UTILIZATION"] == 0.85
    assert env["MAX_NUM_BATCHED_TOKENS"] == 8192
    assert env["VLLM_USE_BREAKABLE_CUDAGRAPH"] == 0
    assert env["MAX_MODEL_LEN"] == 1048576 and env["MAX_NUM_SEQS"] == 6 and env["MTP_NUM_TOKENS"] == 5
    assert params.speculative.schedule_json() == "[[1,1,5],[2,4,4],[5,6,3]]"
    assert params.launcher.env == {"PROJECT_NAME": "ds4-f-mia-anemll-0731", "WAIT_ATTEMPTS": 120, "WAIT_SECONDS": 15}
    assert params.weights.shards == 48
    assert params.hermes.api_key == "no-key-required"
    assert params.hermes.extra_body["chat_template_kwargs"]["thinking"] is False
    assert params.request["chat_template_kwargs"]["thinking"] is False


def test_the_kv_cache_dtype_is_a_lane_value():
    """Seed 003's lane table gives the 1M/6 shape's KV dtype, nvfp4_ds_mla; the real vLLM's CPU build runs auto."""
    dtypes = {name: load_lane(name).kv_cache_dtype for name in lane_names()}
    assert {dtypes[n] for n in ("anemll-0731", "anemll-1m6", "patch3-c12", "twin", "twin-1m6")} == {"nvfp4_ds_mla"}
    assert dtypes["real-vllm-cpu"] == "auto"


def test_rollback_chain():
    assert load_lane("anemll-0731").rollback == "anemll-1m6"
    assert load_lane("anemll-1m6").rollback == "patch3-c12"
    assert load_lane("anemll-1m6").speculative.schedule is None  # rollback form: fixed K=5
    c12 = load_lane("patch3-c12")
    assert (c12.max_model_len, c12.max_num_seqs) == (358400, 12)


def test_twin_lane_is_marked_and_on_loopback():
    twin = load_lane("twin")
    assert twin.twin is True and twin.figures_label == "twin"
    assert load_lane("anemll-0731").figures_label == "real lane"
    assert twin.api == "http://127.0.0.2:8888/v1"
    assert [(n.alias, n.host) for n in twin.nodes] == [("head", "127.0.0.2"), ("worker", "127.0.0.3")]


def test_real_lanes_confirm_changes_and_watch_long_probes_and_twin_lane_files_say_otherwise():
    """A lane's policy defaults to a real lane's (changes need --yes, long probes an operator watching); every
    twin-labelled file sets the permissive values itself, so dropping the block can only make a lane stricter."""
    for name in lane_names():
        params = load_lane(name)
        policy = (params.policy.confirm_changes, params.policy.attended_long_probes)
        assert policy == ((False, False) if params.twin else (True, True)), name
        if params.twin:
            assert "\npolicy:" in params.file.read_text(), name


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "lane.yaml"
    path.write_text(text)
    return path


def _variant(old: str, new: str) -> str:
    text = Path(load_lane.__globals__["PARAMS_DIR"] / "anemll-0731.yaml").read_text()
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize(
    "old,new,needle",
    [
        ("rollback: anemll-1m6", "rollback: anemll-1m6\nrolback: x", "unknown key 'rolback'"),
        ("  MAX_NUM_SEQS: 6", "  MAX_NUM_SEQS: [6]", "'env.MAX_NUM_SEQS'"),
        ("  shards: 48", "  shards: many", "'weights.shards'"),
        ("    WAIT_SECONDS: 15\n", "", "WAIT_SECONDS"),
        ("  method: dspark\n", "  method: dspark\n  bogus: 1\n", "unknown key 'speculative.bogus'"),
        ("  MTP_NUM_TOKENS: 5", "  MTP_NUM_TOKENS: five", "env.MTP_NUM_TOKENS must be an integer"),
        ("    WAIT_SECONDS: 15", "    WAIT_SECONDS: soon", "launcher.env.WAIT_SECONDS must be an integer"),
        ("jump: head}", "jump: spark9}", "nodes.worker.jump must name another node"),
        ("kv_cache_dtype: nvfp4_ds_mla", "kv_cache_dtype: nvfp4 --x", "a KV cache dtype like nvfp4_ds_mla"),
        ("rollback: anemll-1m6", "checkout_from: true\nrollback: anemll-1m6", "must be a checkout path, false or null"),
        ("rollback: anemll-1m6", "checkout_from: rel/dir\nrollback: anemll-1m6", "'checkout_from'"),
        ("  context_length: 200000", "  context_length: 200000\n  config: hermes.yaml", "'hermes.config'"),
        ("twin: false", "twin: false\npolicy: {confirm_changes: no}", "'policy.confirm_changes'"),
        ("twin: false", "twin: false\npolicy: {attended: false}", "unknown key 'policy.attended'"),
    ],
)
def test_bad_lane_file_names_the_key(tmp_path, old, new, needle):
    path = _write(tmp_path, _variant(old, new))
    with pytest.raises(LaneError) as err:
        load_lane(path)
    assert str(path) in str(err.value) and needle in str(err.value)
    assert "\n" not in str(err.value)


def test_cli_unknown_lane_and_bad_file_exit_2(tmp_path):
    out = subprocess.run(LANEBOOK + ["lint", "--lane", "no-such-lane"], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [out.stderr.strip()] and "unknown lane 'no-such-lane'" in out.stderr
    assert "Traceback" not in out.stderr
    bad = _write(tmp_path, "name: [unclosed\n")
    out = subprocess.run(LANEBOOK + ["run", "launch", "--lane", str(bad), "--dry-run"], capture_output=True, text=True)
    assert out.returncode == 2 and "not valid YAML" in out.stderr and "Traceback" not in out.stderr
    for args, needle in [
        (["speed", "--api", "http://127.0.0.9:1/v1", "--model", "m", "--concurrency", "a"], "--concurrency"),
        (["run", "launch", "--lane", "twin", "-p", "x=["], "bad parameter 'x=['"),
    ]:
        out = subprocess.run(LANEBOOK + args, capture_output=True, text=True)
        assert out.returncode == 2 and needle in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_a_lane_file_that_still_says_fabric_ip_is_told_to_rename_it(tmp_path):
    """The key was renamed roce_ip: an operator's older lane file gets the fix in one line, not an alias."""
    path = _write(tmp_path, _variant("roce_ip:", "fabric_ip:").replace("roce_ip:", "fabric_ip:"))
    with pytest.raises(LaneError) as err:
        load_lane(path)
    assert str(err.value) == f"fabric_ip is now roce_ip: rename the key in {path}"
    before = path.read_bytes()
    out = subprocess.run(LANEBOOK + ["lint", "--lane", str(path)], capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines() == [f"lanebook: fabric_ip is now roce_ip: rename the key in {path}"]
    assert path.read_bytes() == before  # nothing rewritten behind the operator's back


# --- values that reach a shell or ssh: strict patterns, refused at load --------------------------------

INJECTIONS = ["x; rm -rf ~", "$(touch /tmp/lbt-pwned)", "`id`", "a\nb", "a'b", 'a"b', "-oProxyCommand=sh", "a b", ""]


@pytest.mark.parametrize(
    "old,template,needle",
    [
        ("host: 192.168.1.11,", "host: {},", "'nodes.0.host'"),
        ("roce_ip: 10.0.0.2,", "roce_ip: {},", "'nodes.1.roce_ip'"),
        ("user: milo, roce_ip: 10.0.0.1", "user: {}, roce_ip: 10.0.0.1", "'nodes.0.user'"),
        ("alias: worker,", "alias: {},", "'nodes.1.alias'"),
        ("  SERVED_MODEL_NAME: deepseek-v4-flash-0731", "  SERVED_MODEL_NAME: {}", "SERVED_MODEL_NAME"),
        ("  repo: deepseek-ai/DeepSeek-V4-Flash-0731", "  repo: {}", "'weights.repo'"),
        ("name: anemll-0731", "name: {}", "'name'"),
        ("rollback: anemll-1m6", "rollback: {}", "'rollback'"),
    ],
)
@pytest.mark.parametrize("crafted", INJECTIONS)
def test_crafted_addresses_logins_and_model_ids_are_refused(tmp_path, old, template, needle, crafted):
    path = _write(tmp_path, _variant(old, template.format(json.dumps(crafted))))  # a JSON string is a YAML string
    with pytest.raises(LaneError) as err:
        load_lane(path)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_an_ipv6_scope_must_be_an_interface_name():
    from lanebook.lane.params import check_host

    assert check_host("fe80::1%bond0") == "fe80::1%bond0"
    for crafted in ("fe80::1%a;b", "fe80::1%$(id)", "10.0.0.1%eth0", "fe80::1%"):
        with pytest.raises(ValueError, match="must be a host name or IP address"):
            check_host(crafted)


@pytest.mark.parametrize(
    "field,value",
    [("host", "spark-1.lan"), ("host", "fe80::1"), ("host", "10.0.0.2"), ("user", "milo.k-2"), ("port", 65535)],
)
def test_ordinary_addresses_and_logins_load(field, value):
    from lanebook.lane.params import lane_with

    params = load_lane("anemll-0731")
    nodes = [{**params.nodes[0].model_dump(), field: value}, params.nodes[1].model_dump()]
    assert getattr(lane_with(params, nodes=nodes).head, field) == value


@pytest.mark.parametrize(
    "old,new,needle",
    [
        (
            "  NCCL_SOCKET_IFNAME: bond0",
            '  NCCL_SOCKET_IFNAME: "bond0\\nLD_PRELOAD=/tmp/x.so"',
            "an env value must be one line",
        ),
        ("  NCCL_SOCKET_IFNAME: bond0", "  'NCCL IFNAME': bond0", "an env key (a shell identifier)"),
        ("    PROJECT_NAME: ds4-f-mia-anemll-0731", "    'X=1 PROJECT_NAME': p", "an env key"),
        (
            "checkout: ~/ds4-f-mia-anemll-0731",
            "checkout: ds4-f-mia-anemll-0731",
            "'checkout': Value error, must be an absolute path",
        ),
        ("checkout: ~/ds4-f-mia-anemll-0731", "checkout: -rf", "must be an absolute path"),
        ("checkout: ~/ds4-f-mia-anemll-0731", 'checkout: "~/a\\nb"', "on one line"),
        ("  MAX_MODEL_LEN: 1048576", "  MAX_MODEL_LEN: '²'", "env.MAX_MODEL_LEN must be an integer"),
        (
            "compose_environment: [VLLM_USE_BREAKABLE_CUDAGRAPH]",
            "compose_environment: ['A;B']",
            "'compose_environment'",
        ),
        ("  max_workers: 4", "  max_workers: 4\n  hf_cache: relative/cache", "'weights.hf_cache'"),
    ],
)
def test_env_keys_values_and_paths_that_would_break_a_line_or_a_command_are_refused(tmp_path, old, new, needle):
    path = _write(tmp_path, _variant(old, new))
    with pytest.raises(LaneError) as err:
        load_lane(path)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_paths_and_env_values_may_hold_shell_characters_they_are_quoted_where_used():
    from lanebook.lane.params import lane_with

    params = lane_with(load_lane("twin"), checkout="~/odd $(dir); `x`", env={"NCCL_SOCKET_IFNAME": "a;b $(c)"})
    assert params.checkout == "~/odd $(dir); `x`" and params.env["NCCL_SOCKET_IFNAME"] == "a;b $(c)"


def test_a_lane_file_that_is_not_text_or_holds_an_impossible_value_is_one_line(tmp_path):
    path = _write(tmp_path, "")
    path.write_bytes(b"name: \x80\n")
    with pytest.raises(LaneError, match=r"lane\.yaml is not UTF-8 text \(byte 6\)"):
        load_lane(path)
    path.write_text(_variant("name: anemll-0731", "name: 2001-13-01"))
    with pytest.raises(LaneError) as err:
        load_lane(path)
    assert str(err.value) == f"{path}: not valid YAML (unreadable value: month must be in 1..12)"


@pytest.mark.parametrize(
    "host,ok",
    [
        ("head", True),
        ("james@192.168.1.20", True),
        ("james@192.168.1.20:2200", True),
        ("spark-2.lan", True),
        ("j;rm@h", False),
        ("james@h$(id)", False),
        ("james@h:22;id", False),
        ("-oProxyCommand=sh", False),
    ],
)
def test_hermes_host_is_a_node_alias_or_a_valid_ssh_destination(host, ok):
    from lanebook.lane.params import lane_with

    params = load_lane("twin")
    change = {"hermes": {**params.hermes.model_dump(), "host": host}}
    if ok:
        assert lane_with(params, **change).hermes.host == host
    else:
        with pytest.raises(ValueError):
            lane_with(params, **change)


def test_a_lane_name_stays_a_name_where_a_directory_of_that_name_is(tmp_path, monkeypatch):
    (tmp_path / "twin").mkdir()  # a node's home holds checkouts named like lanes (~/real-vllm-cpu)
    monkeypatch.chdir(tmp_path)
    assert load_lane("twin").name == "twin"
