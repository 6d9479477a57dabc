"""The Hermes gates: the provider block rendered from the lane and read from an operator's config, its checks
(P09 api_key, P10 thinking as a string), the recipe's command line, state.db read as Hermes Agent 0.19 writes
it, the route judgement, a dry run on this machine and on another host over SSH, and the real `hermes` CLI
against a twin `vllm serve` stand-in, where a string "false" shows up as reasoning in state.db (fact T11)."""

from __future__ import annotations

import sqlite3

import pytest
from helpers.twin_serve import (
    NAME,
    main,  # noqa: F401 - module-scoped server fixture, used by name
)
from lanebook.base import yamltext
from lanebook.base.errors import LanebookError
from lanebook.lane.params import lane_with, load_lane
from lanebook.nodes.ssh import LaneNodes
from lanebook.verify import hermes

LANE = load_lane("anemll-0731")
STEP = "5 hermes provider block"


def with_thinking(block: dict, value) -> dict:
    return {**block, "extra_body": {"chat_template_kwargs": {"thinking": value}}}


def test_the_block_rendered_from_the_lane_is_the_recipes():
    assert hermes.lane_provider_block(LANE) == {
        "api": "http://192.168.1.11:8888/v1",
        "api_key": "no-key-required",
        "context_length": 200000,
        "default_model": "deepseek-v4-flash-0731",
        "extra_body": {"chat_template_kwargs": {"thinking": False}},
    }
    assert hermes.lane_provider_block(load_lane("anemll-1m6"))["default_model"] == "deepseek-v4-flash-dspark"


def test_config_text_keeps_each_value_typed_as_given():
    block = hermes.lane_provider_block(LANE)
    text = hermes.config_text("spark-ds4", block)
    assert text.startswith("providers:\n  spark-ds4:\n    api: http://192.168.1.11:8888/v1\n")
    assert "        thinking: false\n" in text
    assert "        thinking: 'false'\n" in hermes.config_text("spark-ds4", with_thinking(block, "false"))
    assert hermes.block_from_config(text, "spark-ds4", "config.yaml") == block
    assert (
        hermes.block_from_config(hermes.config_text("spark-ds4", with_thinking(block, "false")), "spark-ds4", "c")[
            "extra_body"
        ]["chat_template_kwargs"]["thinking"]
        == "false"
    )


def test_the_smoke_home_holds_the_block_as_given_and_turns_hermes_toolchain_probe_off():
    block = with_thinking(hermes.lane_provider_block(LANE), "false")
    text = hermes.smoke_config_text("spark-ds4", block)
    assert hermes.block_from_config(text, "spark-ds4", "c") == block
    assert yamltext.load(text)["agent"] == {"environment_probe": False}


def test_reading_an_operators_config_names_what_is_missing():
    with pytest.raises(LanebookError, match=r"^c.yaml: no providers.spark-ds4 block \(providers there: openrouter\)$"):
        hermes.block_from_config("providers:\n  openrouter: {api: https://x/v1}\n", "spark-ds4", "c.yaml")
    with pytest.raises(LanebookError, match=r"^c.yaml line 2: not valid YAML"):
        hermes.block_from_config("providers: [unclosed\n", "spark-ds4", "c.yaml")


def test_the_lanes_own_block_passes_every_check():
    checks = hermes.block_checks(STEP, hermes.lane_provider_block(LANE), LANE)
    assert [(c.what, c.outcome, c.pitfall) for c in checks] == [
        ("api is the lane's API", "pass", None),
        ("api_key is no-key-required", "pass", "P09"),
        ("thinking is a JSON boolean, as the lane means it", "pass", "P10"),
        ("context_length is 200,000 (within the server's 1,048,576)", "pass", None),
        ("default_model is deepseek-v4-flash-0731", "pass", None),
    ]
    assert all(c.local for c in checks)


@pytest.mark.parametrize(
    "change, failing, detail",
    [
        ({"api_key": "none"}, "api_key is no-key-required", "'none': \"none\" is not the keyless value"),
        ({"api_key": "sk-live-0123456789"}, "api_key is no-key-required", "'[REDACTED]'"),
        (
            {"extra_body": {"chat_template_kwargs": {"thinking": "false"}}},
            "thinking is a JSON boolean, as the lane means it",
            (
                "extra_body.chat_template_kwargs.thinking is str 'false': any non-empty string turns thinking ON; use "
                "a JSON boolean"
            ),
        ),
        ({"extra_body": {}}, "thinking is a JSON boolean, as the lane means it", "chat_template_kwargs None"),
        (
            {"extra_body": {"chat_template_kwargs": {"thinking": True}}},
            "thinking is a JSON boolean, as the lane means it",
            "chat_template_kwargs {'thinking': True}",
        ),
        ({"context_length": 2000000}, "context_length is 200,000 (within the server's 1,048,576)", "2000000"),
        (
            {"default_model": "deepseek-v4-flash-dspark"},
            "default_model is deepseek-v4-flash-0731",
            "'deepseek-v4-flash-dspark'",
        ),
        ({"api": "http://192.168.1.12:8888/v1"}, "api is the lane's API", "http://192.168.1.12:8888/v1"),
    ],
)
def test_each_wrong_value_fails_its_own_check(change, failing, detail):
    checks = hermes.block_checks(STEP, {**hermes.lane_provider_block(LANE), **change}, LANE)
    assert [c.what for c in checks if not c.ok] == [failing]
    assert next(c for c in checks if not c.ok).detail == detail


def test_the_route_command_is_the_recipes():
    argv = hermes.route_argv("hermes", "spark-ds4", "deepseek-v4-flash-0731", "Reply exactly ROUTE_OK.")
    assert hermes.shell_line(argv, "/tmp/h") == (
        "HERMES_HOME=/tmp/h hermes --provider spark-ds4 -m deepseek-v4-flash-0731 -t safe -z 'Reply exactly ROUTE_OK.'"
    )


def test_an_ssh_destination_for_hermes():
    node = hermes.parse_destination("james@192.168.1.20:2200")
    assert (node.alias, node.host, node.port, node.user) == ("james@192.168.1.20:2200", "192.168.1.20", 2200, "james")
    assert (hermes.parse_destination("laptop").user, hermes.parse_destination("laptop").port) == (None, 22)
    with pytest.raises(LanebookError, match="hermes.host 'a:b'"):
        hermes.parse_destination("a:b")


def hermes_state_db(path, replies, reasoning_tokens=0):
    """A state.db with the tables and columns Hermes Agent 0.19.0 reads and writes for a session."""
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, model TEXT, """
        """reasoning_tokens INTEGER DEFAULT 0);
        CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, role TEXT NOT NULL,
                               content TEXT, reasoning TEXT, reasoning_content TEXT, reasoning_details TEXT);
        CREATE TABLE session_model_usage (session_id TEXT NOT NULL, model TEXT NOT NULL,
                                          reasoning_tokens INTEGER NOT NULL DEFAULT 0);"""
    )
    db.execute("INSERT INTO sessions VALUES ('s1', 'cli', 'm', 0)")
    db.execute("INSERT INTO session_model_usage VALUES ('s1', 'm', ?)", (reasoning_tokens,))
    db.execute("INSERT INTO messages (session_id, role, content) VALUES ('s1', 'user', 'Reply exactly ROUTE_OK.')")
    for content, reasoning in replies:
        db.execute(
            "INSERT INTO messages (session_id, role, content, reasoning, reasoning_content) VALUES ('s1', "
            "'assistant', ?, ?, ?)",
            (content, reasoning, reasoning),
        )
    db.commit()
    db.close()
    return path


def test_state_db_shows_reasoning_that_the_printed_reply_hides(tmp_path):
    off = hermes.read_state(hermes_state_db(tmp_path / "off.db", [("ROUTE_OK", None)]))
    assert off == hermes.StateReading(1, ("ROUTE_OK",), 0, 0, 0) and not off.thinking_seen
    assert off.summary() == "state.db: 1 session(s), no reasoning recorded"
    on = hermes.read_state(hermes_state_db(tmp_path / "on.db", [("ROUTE_OK", "The user asks for ROUTE_OK.")]))
    assert (on.reasoning_chars, on.reasoning_messages, on.thinking_seen) == (27, 1, True)
    counted = hermes.read_state(hermes_state_db(tmp_path / "tokens.db", [("ROUTE_OK", None)], reasoning_tokens=51))
    assert counted.thinking_seen and counted.summary().endswith("reasoning_tokens 51")
    (tmp_path / "junk.db").write_text("not sqlite")
    with pytest.raises(LanebookError, match="is not as Hermes Agent 0.19 writes it"):
        hermes.read_state(tmp_path / "junk.db")


def route_run(db, stdout="ROUTE_OK\n", code=0, replies=(("ROUTE_OK", None),)):
    """A finished route smoke whose state.db (at `db`) holds `replies`; None replies: no state.db was written."""
    state = hermes.read_state(hermes_state_db(db, list(replies))) if replies is not None else None
    return hermes.RouteRun("HERMES_HOME=/tmp/h hermes ...", "this machine", code, stdout, "", 1.0, state)


def test_route_judgement(tmp_path):
    block = hermes.lane_provider_block(LANE)
    passed = hermes.judge_route("6", route_run(tmp_path / "a.db"), LANE, block)
    assert [c.outcome for c in passed] == ["pass"] * 4
    thought = hermes.judge_route("6", route_run(tmp_path / "b.db", replies=[("ROUTE_OK", "let me think")]), LANE, block)
    assert [c.outcome for c in thought] == ["pass", "pass", "pass", "fail"] and thought[3].pitfall == "P10"
    assert thought[3].detail.endswith('thinking was ON: a string "false" is truthy')
    wrong = hermes.judge_route(
        "6", route_run(tmp_path / "c.db", stdout="ROUTE_OK.\n", replies=[("ROUTE_OK.", None)]), LANE, block
    )
    assert [c.outcome for c in wrong] == ["pass", "fail", "fail", "pass"]
    failed = hermes.judge_route("6", route_run(tmp_path / "d.db", stdout="", code=1, replies=None), LANE, block)
    assert [(c.what, c.outcome) for c in failed] == [
        ("hermes exited 0", "fail"),
        ("hermes printed exactly ROUTE_OK", "fail"),
        ("Hermes recorded the session in state.db", "fail"),
    ]


def test_a_dry_run_records_the_route_smoke_here_and_sends_nothing():
    with LaneNodes(LANE, dry_run=True) as nodes:
        assert hermes.run_route_smoke(nodes, hermes.lane_provider_block(LANE)) is None
        lines = nodes.executor.commands()
    assert lines[0] == "local: mktemp -d -t lanebook-hermes-XXXXXX"
    assert lines[2].startswith("local: HERMES_HOME=/tmp/lanebook-hermes-XXXXXX ") and lines[2].endswith(
        " --provider spark-ds4 -m deepseek-v4-flash-0731 -t safe -z 'Reply exactly ROUTE_OK.'"
    )


def test_a_dry_run_on_another_host_goes_over_ssh():
    lane_params = lane_with(LANE, hermes={**LANE.hermes.model_dump(), "host": "james@192.168.1.20"})
    with LaneNodes(lane_params, dry_run=True) as nodes:
        provider, checks = hermes.block_gate(STEP, nodes, "~/.hermes/config.yaml")
        assert provider.settings is None and [c.outcome for c in checks] == ["not observed"]
        hermes.run_route_smoke(nodes, hermes.lane_provider_block(LANE))
        lines = nodes.executor.commands()
    home = "/tmp/lanebook-hermes-XXXXXX"
    assert lines[0] == "james@192.168.1.20: cat ~/.hermes/config.yaml"
    assert lines[1] == "james@192.168.1.20: mktemp -d -t lanebook-hermes-XXXXXX"
    assert lines[2].startswith("james@192.168.1.20: sftp put ") and lines[2].endswith(f" {home}/config.yaml")
    assert lines[4] == (
        f"james@192.168.1.20: HERMES_HOME={home} hermes --provider spark-ds4 -m deepseek-v4-flash-0731 "
        "-t safe -z 'Reply exactly ROUTE_OK.' </dev/null"
    )
    assert lines[5].startswith(f"james@192.168.1.20: sftp get {home}/state.db ")
    assert lines[6] == f"james@192.168.1.20: rm -rf {home}"
    head = lane_with(LANE, hermes={**LANE.hermes.model_dump(), "host": "head", "bin": "/opt/hermes/bin/hermes"})
    with LaneNodes(head, dry_run=True) as nodes:
        hermes.run_route_smoke(nodes, hermes.lane_provider_block(LANE))
        assert "head: HERMES_HOME=/tmp/lanebook-hermes-XXXXXX /opt/hermes/bin/hermes --provider" in "\n".join(
            nodes.executor.commands()
        )


needs_hermes = pytest.mark.skipif(
    not hermes.OWN_INSTALL.exists(), reason=f"Hermes Agent not installed ({hermes.OWN_INSTALL}): make setup"
)


@pytest.fixture(scope="module")
def served(main):  # noqa: F811 - the module-scoped twin server
    """A lane whose API is a real twin `vllm serve` (its own default: thinking on), reached without ssh."""
    return lane_with(load_lane("twin"), api=f"{main.url}/v1", env={"SERVED_MODEL_NAME": NAME}, ssh_config=None)


@needs_hermes
def test_the_real_cli_routes_route_ok_and_state_db_shows_a_string_false_turned_thinking_on(served):
    block = hermes.lane_provider_block(served)
    with LaneNodes(served) as nodes:
        off = hermes.run_route_smoke(nodes, block)
        on = hermes.run_route_smoke(nodes, with_thinking(block, "false"))
    assert (off.exit_code, off.stdout.strip(), off.state.thinking_seen) == (0, "ROUTE_OK", False)
    assert [c.outcome for c in hermes.judge_route("6", off, served, block)] == ["pass"] * 4
    # Hermes prints the same reply; only state.db shows the reasoning the string "false" turned on
    assert (on.exit_code, on.stdout.strip(), on.state.thinking_seen) == (0, "ROUTE_OK", True)
    assert on.state.reasoning_chars > 0
    assert [c.outcome for c in hermes.judge_route("6", on, served, with_thinking(block, "false"))] == [
        "pass",
        "pass",
        "pass",
        "fail",
    ]


def test_what_the_gates_runbook_prints_of_the_block_and_the_route():
    block = hermes.lane_provider_block(LANE)
    name = LANE.hermes.provider
    rendered = hermes.ProviderBlock(block, f"rendered from lane {LANE.name}", True)
    assert hermes.block_text(rendered, name) == (
        f"# providers.{name}, rendered from lane {LANE.name}\n{hermes.config_text(name, hermes.shown_block(block))}\n"
    )
    assert hermes.block_text(None, name) == hermes.block_text(hermes.ProviderBlock(None, "x", False), name) == ""
    state = hermes.StateReading(1, ("ROUTE_OK",), 12, 1, 3)
    run = hermes.RouteRun("hermes chat", "this machine", 0, "ROUTE_OK\n", "", 1.25, state)
    assert hermes.route_text(run) == f"$ hermes chat    # on this machine, 1.2 s\nROUTE_OK\n{state.summary()}\n"
    assert hermes.route_figures(run) == {"hermes_reasoning_chars": 12, "hermes_reasoning_tokens": 3}
    silent = hermes.RouteRun("hermes chat", "spark-1", 1, " \n", "", 2.0, None)
    assert hermes.route_text(silent) == "$ hermes chat    # on spark-1, 2.0 s\n(nothing printed)\n"
    assert hermes.route_figures(silent) == hermes.route_figures(None) == {} and hermes.route_text(None) == ""


OPERATOR_CONFIG = """\
# my Hermes: keep this comment
model:
  default: spark-ds4
providers:
  cloud:
    base_url: https://example.invalid/v1
  spark-ds4:
    base_url: http://192.168.1.11:8888/v1/   # the head
    api_key: no-key-required
    default_model: deepseek-v4-flash-0731
"""


def test_following_a_lane_changes_default_model_and_the_url_and_keeps_every_other_line():
    target = lane_with(load_lane("anemll-1m6"), api="http://192.168.1.12:8888/v1")
    text, changes = hermes.followed_config(OPERATOR_CONFIG, target, "config.yaml")
    assert changes == [
        "default_model: deepseek-v4-flash-0731 → deepseek-v4-flash-dspark",
        "base_url: http://192.168.1.11:8888/v1/ → http://192.168.1.12:8888/v1",
    ]
    assert text == OPERATOR_CONFIG.replace("deepseek-v4-flash-0731", "deepseek-v4-flash-dspark").replace(
        "http://192.168.1.11:8888/v1/   # the head",
        "http://192.168.1.12:8888/v1    # the head",  # comment column kept
    )
    assert "api" not in hermes.block_from_config(text, "spark-ds4", "x")  # the operator's key name kept
    assert hermes.followed_config(text, target, "config.yaml") == (text, [])  # already there: nothing to change
    assert hermes.followed_config(OPERATOR_CONFIG, LANE, "config.yaml")[1] == []  # a trailing slash is the same URL
    with pytest.raises(LanebookError, match=r"^config.yaml: no providers.spark-ds4 block \(providers there: cloud\)"):
        hermes.followed_config("providers:\n  cloud: {}\n", target, "config.yaml")


def test_the_local_config_is_backed_up_then_replaced_and_never_over_an_edit(tmp_path):
    from lanebook.nodes.ssh import Executor

    config = tmp_path / "config.yaml"
    config.write_text(OPERATOR_CONFIG)
    config.chmod(0o600)
    host = hermes.LocalHost(Executor(), "hermes")
    kept = host.replace(str(config), OPERATOR_CONFIG, "providers: {}\n")
    assert config.read_text() == "providers: {}\n" and config.stat().st_mode & 0o777 == 0o600
    assert open(kept).read() == OPERATOR_CONFIG and kept.startswith(f"{config}.bak-")
    with pytest.raises(LanebookError, match="changed since it was read: nothing changed"):
        host.replace(str(config), OPERATOR_CONFIG, "x: 1\n")
    assert config.read_text() == "providers: {}\n"
    assert hermes.LocalHost(Executor(dry_run=True), "hermes").replace(str(config), "", "y: 2\n") is None
    assert config.read_text() == "providers: {}\n"  # a dry run writes nothing


@pytest.mark.twin
def test_a_config_on_another_host_is_backed_up_and_replaced_there_in_one_command(twin):
    path = "~/.lbt-hermes-follow/config.yaml"
    with LaneNodes(load_lane("twin")) as nodes:
        head = nodes.head
        head.run("mkdir -p ~/.lbt-hermes-follow && printf 'providers: {}\\n' > ~/.lbt-hermes-follow/config.yaml")
        try:
            host = hermes.RemoteHost(head, None)
            read = host.read(path)
            kept = host.replace(path, read, OPERATOR_CONFIG)
            assert host.read(path) == OPERATOR_CONFIG and host.read(kept) == read
            with pytest.raises(LanebookError, match="not the bytes lanebook expected"):
                host.replace(path, read, "x: 1\n")  # it changed since `read`
            assert host.read(path) == OPERATOR_CONFIG
        finally:
            head.run("rm -rf ~/.lbt-hermes-follow")


KEYED = load_lane("twin-keyed")


def test_a_keyed_lanes_block_names_the_variable_hermes_reads_the_key_from_never_a_key():
    block = hermes.lane_provider_block(KEYED)
    assert block["key_env"] == "SPARK_DS4_API_KEY" and "api_key" not in block
    checks = hermes.block_checks(STEP, block, KEYED)
    assert (checks[1].what, checks[1].outcome, checks[1].pitfall) == (
        "key_env is SPARK_DS4_API_KEY (a keyed lane)",
        "pass",
        "P09",
    )


@pytest.mark.parametrize(
    "change,outcome,seen",
    [
        ({"api_key": "no-key-required"}, "fail", "a keyless block; the lane wants a key"),
        ({"api_key": "none"}, "fail", "a keyless block"),
        ({"key_env": "OTHER_KEY"}, "fail", "key_env 'OTHER_KEY'"),
        ({"api_key": "lb-literal-key-12345678"}, "fail", "api_key '[REDACTED]'"),  # not the variable the lane names
    ],
)
def test_p09_on_a_keyed_lane_wants_its_key_never_a_keyless_value(change, outcome, seen):
    block = {k: v for k, v in hermes.lane_provider_block(KEYED).items() if k != "key_env"} | change
    check = hermes.block_checks(STEP, block, KEYED)[1]
    assert (check.outcome, check.pitfall) == (outcome, "P09") and seen in check.detail
    assert "lb-literal" not in check.detail


def test_following_a_lane_carries_its_key_setting_and_a_keyless_lane_takes_it_away():
    """The rollback's Hermes switch: the operator's block pointed at a keyed lane gets that lane's key_env; pointed
    back at a keyless lane, key_env goes and api_key says no-key-required; every other line is kept."""
    operator = (
        "model: {default: x}\nproviders:\n  spark-ds4:\n    api: http://127.0.0.2:8888/v1\n"
        "    api_key: no-key-required\n    default_model: deepseek-v4-flash-0731\n    context_length: 200000\n"
    )
    keyed, changes = hermes.followed_config(operator, KEYED, "c.yaml")
    block = hermes.block_from_config(keyed, "spark-ds4", "c.yaml")
    assert block["key_env"] == "SPARK_DS4_API_KEY" and block["api"] == KEYED.api
    assert "key_env: None → SPARK_DS4_API_KEY" in changes and keyed.startswith("model: {default: x}\n")
    assert hermes.block_checks(STEP, block, KEYED)[1].outcome == "pass"
    back, changes = hermes.followed_config(keyed, load_lane("twin"), "c.yaml")
    block = hermes.block_from_config(back, "spark-ds4", "c.yaml")
    assert "key_env" not in block and block["api_key"] == "no-key-required"
    assert "key_env: SPARK_DS4_API_KEY → (none)" in changes
    assert hermes.followed_config(back, load_lane("twin"), "c.yaml")[1] == []  # already there: nothing changes
