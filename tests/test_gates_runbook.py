"""The gates runbook end to end. On the session twin, once the lane is launched: `lanebook run gates` passes every
gate, the ROUTE_OK smoke through the real Hermes CLI included; an operator's Hermes config with `thinking: "false"`
fails the run naming the step and P10, with the reasoning the real CLI's state.db recorded; bare papermill runs it.
A dry run on the real lane prints the gate requests as curl lines and the hermes command, and opens no connection."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.lanebook_runs import dry_run_offline, run
from lanebook.base.paths import RUNBOOKS_DIR
from lanebook.lane.params import lane_with, load_lane
from lanebook.nodes import ssh
from lanebook.ops import launcher
from lanebook.runs.execute import read_verdict
from lanebook.verify import hermes

PAPERMILL = str(Path(sys.executable).parent / "papermill")
STEPS = ["1 models", "2 startup log", "3 exact smoke", "4 tool smoke", "5 hermes provider block", "6 hermes route"]
needs_hermes = pytest.mark.skipif(
    not hermes.OWN_INSTALL.exists(), reason=f"Hermes Agent not installed ({hermes.OWN_INSTALL}): make setup"
)


def papermill(out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PAPERMILL, str(RUNBOOKS_DIR / "gates.ipynb"), str(out), *args], capture_output=True, text=True, timeout=300
    )


def by_what(record: dict) -> dict:
    return {(g["step"], g["what"]): g for g in record["figures"]["gates"]}


def test_a_dry_run_on_the_real_lane_shows_the_requests_and_the_hermes_line_and_opens_no_connection(tmp_path):
    record, done = dry_run_offline(tmp_path, "gates")
    assert record["verdict"] == "dry-run" and record["failed_step"] is None
    lines = [line.strip() for line in done.stdout.splitlines()]
    assert "local: curl -s http://192.168.1.11:8888/v1/models" in lines
    assert (
        "local: curl -s http://192.168.1.11:8888/v1/chat/completions -H 'Content-Type: application/json' -d "
        '\'{"model":"deepseek-v4-flash-0731","messages":[{"role":"user","content":"Reply exactly '
        'PROMOTE_0731_OK."}],"temperature":0,"max_tokens":32,"chat_template_kwargs":{"thinking":false}}\''
    ) in lines
    assert any(
        line.startswith("head: docker logs ds4-f-mia-anemll-0731-vllm-dspark-1 2>&1 | grep -E ") for line in lines
    )
    assert any('"tools":[{"type":"function","function":{"name":"get_weather"' in line for line in lines)
    assert any(
        line.startswith("local: HERMES_HOME=")
        and line.endswith("--provider spark-ds4 -m deepseek-v4-flash-0731 -t safe -z 'Reply exactly ROUTE_OK.'")
        for line in lines
    )
    outcomes = {g["outcome"] for g in record["figures"]["gates"] if not g["local"]}
    assert outcomes == {"not observed"}  # nothing on the lane was observed; the lane file's checks were made
    assert all(g["outcome"] == "pass" for g in record["figures"]["gates"] if g["local"])


def test_papermill_dry_run_on_the_preview_lane(tmp_path):
    done = papermill(tmp_path / "dry.ipynb", "-p", "lane", "anemll-1m6", "-p", "dry_run", "True")
    assert done.returncode == 0, done.stderr[-2000:]
    emitted = read_verdict(tmp_path / "dry.ipynb")
    assert (emitted["verdict"], emitted["lane"]) == ("dry-run", "anemll-1m6")
    assert any(
        "'Reply exactly CANARY_BLOG_OK.'" in c or "Reply exactly CANARY_BLOG_OK." in c for c in emitted["commands"]
    )
    assert any(
        c.endswith("-m deepseek-v4-flash-dspark -t safe -z 'Reply exactly ROUTE_OK.'") for c in emitted["commands"]
    )


@pytest.fixture(scope="module")
def launched(twin):
    """The twin lane launched once for this module's runs (by the launcher: the launch runbook has its own tests),
    stopped after."""
    with ssh.LaneNodes(load_lane("twin")) as nodes:
        assert launcher.start_lane(nodes).ok
        yield nodes
        launcher.stop_lane(nodes)


@needs_hermes
@pytest.mark.twin
def test_every_gate_passes_on_the_twin(launched, tmp_path):
    record, done = run(tmp_path, "gates", "twin", expect_exit=0)
    assert record["verdict"] == "pass" and record["twin"] is True, done.stdout
    gates = record["figures"]["gates"]
    assert sorted({g["step"] for g in gates}) == STEPS and {g["outcome"] for g in gates} == {"pass"}
    seen = by_what(record)
    assert (
        seen[("3 exact smoke", "the reply is exactly PROMOTE_0731_OK")]["detail"]
        == "'PROMOTE_0731_OK' (finish_reason stop)"
    )
    assert seen[("4 tool smoke", 'the call is get_weather({"city": "Pensacola, FL"})')]["outcome"] == "pass"
    assert seen[("6 hermes route", "hermes printed exactly ROUTE_OK")]["detail"] == "'ROUTE_OK'"
    assert record["figures"]["hermes_reasoning_chars"] == 0 and record["figures"]["gates_failed"] == []

    # bare papermill: the twin lane, every gate again
    done = papermill(tmp_path / "bare.ipynb")
    assert done.returncode == 0, done.stderr[-2000:]
    assert read_verdict(tmp_path / "bare.ipynb")["verdict"] == "pass"


@needs_hermes
@pytest.mark.twin
def test_thinking_as_the_string_false_in_the_hermes_config_fails_through_the_real_cli(launched, tmp_path):
    """P10 / T11: Hermes prints ROUTE_OK either way; its state.db shows the reasoning the string turned on."""
    config = tmp_path / "config.yaml"
    block = hermes.lane_provider_block(launched.params)
    config.write_text(
        hermes.config_text("spark-ds4", {**block, "extra_body": {"chat_template_kwargs": {"thinking": "false"}}})
    )
    assert "thinking: 'false'" in config.read_text()
    record, _ = run(tmp_path, "gates", "twin", "-p", f"hermes_config={config}", expect_exit=1)
    assert (record["verdict"], record["failed_step"]) == ("fail", "5 hermes provider block"), record
    assert record["figures"]["gates_failed"] == ["5 hermes provider block", "6 hermes route"]
    seen = by_what(record)
    static = seen[("5 hermes provider block", "thinking is a JSON boolean, as the lane means it")]
    assert (static["outcome"], static["pitfall"]) == ("fail", "P10") and "str 'false'" in static["detail"]
    printed = seen[("6 hermes route", "hermes printed exactly ROUTE_OK")]
    assert printed["outcome"] == "pass"  # the CLI's output alone cannot show it
    cli = seen[("6 hermes route", "thinking off as the provider block means it (reasoning in state.db)")]
    assert (cli["outcome"], cli["pitfall"]) == ("fail", "P10")
    assert cli["detail"].startswith("state.db: reasoning of ") and "thinking was ON" in cli["detail"]
    assert record["figures"]["hermes_reasoning_chars"] > 0
    executed = (tmp_path / "outputs" / record["output"]).read_text()
    assert "What to do next:" in executed and "thinking: false as a boolean" in executed
    assert json.loads(json.dumps(record["params"])) == {"confirm": True, "hermes_config": str(config)}


@needs_hermes
@pytest.mark.twin
def test_a_lane_whose_hermes_runs_on_another_host_runs_the_route_smoke_there_over_ssh(launched):
    """hermes.host names the twin's head: config put by SFTP, the CLI run there, state.db fetched back."""
    base = launched.params
    params = lane_with(base, hermes={**base.hermes.model_dump(), "host": "head", "bin": str(hermes.OWN_INSTALL)})
    with ssh.LaneNodes(params) as nodes:
        provider, _ = hermes.block_gate("5 hermes provider block", nodes, None)
        route, found = hermes.route_gate("6 hermes route", nodes, provider)
        sent = nodes.executor.commands()
    assert (route.where, route.exit_code, route.stdout.strip()) == ("head over SSH", 0, "ROUTE_OK")
    assert [c.outcome for c in found] == ["pass"] * 4
    assert any(c.startswith("head: sftp put ") for c in sent) and any(c.startswith("head: sftp get ") for c in sent)
    assert any(c.startswith("head: HERMES_HOME=/tmp/lanebook-hermes-") and " --provider spark-ds4 " in c for c in sent)
