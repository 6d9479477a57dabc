"""lanebook.recipe.compose: the recipe's compose file read with line numbers, and the line-edit patcher."""

from __future__ import annotations

import re

import pytest
from helpers.recipe_fixtures import COMPOSE, fixture_text, line_of, replace_once
from lanebook.base.errors import LanebookError
from lanebook.recipe.compose import ComposeFile, _closest_key, load_compose, service_names
from lanebook.recipe.effective.checkout import REFERENCE
from ruamel.yaml import YAML

BREAKABLE_LINE = '      VLLM_USE_BREAKABLE_CUDAGRAPH: "${VLLM_USE_BREAKABLE_CUDAGRAPH:-0}"\n'
NEW_SPEC = 'SPECULATIVE_CONFIG="{\\"method\\":\\"dspark\\"}";'


def test_fixture_lines_are_the_file_lines():
    text = fixture_text(COMPOSE)
    compose = ComposeFile(text, COMPOSE)
    assert compose.service_name == "vllm-dspark" and compose.service_line == line_of(text, "  vllm-dspark:")
    assert compose.environment["VLLM_USE_BREAKABLE_CUDAGRAPH"].line == line_of(text, "VLLM_USE_BREAKABLE_CUDAGRAPH: ")
    assert compose.environment["TP_SOCKET_IFNAME"].raw == "${TP_SOCKET_IFNAME:-${NCCL_SOCKET_IFNAME}}"
    assert compose.environment_line == line_of(text, "    environment:")
    assert compose.flag("--gpu-memory-utilization") == (
        "${GPU_MEMORY_UTILIZATION:-0.80}",
        line_of(text, "--gpu-memory-utilization"),
    )
    assert compose.flag("--no-such-flag") is None
    assert compose.served_model() == (
        "${DSPARK_MODEL:-deepseek-ai/DeepSeek-V4-Flash-0731}",
        line_of(text, "exec /usr/local/bin/vllm serve"),
    )
    assert compose.service_value("image") == (
        "${DSPARK_VLLM_IMAGE:-ghcr.io/anemll/dspark-vllm-gx10:0.1.1}",
        line_of(text, "    image:"),
    )
    assert compose.service_value("environment") is None  # a map, not a scalar
    [(spec, _match)] = compose.speculative_assignments()
    assert spec == line_of(text, 'SPECULATIVE_CONFIG="')
    assert compose.volumes()[0] == ("${HF_CACHE:-${HOME}/.cache/huggingface}:/cache/huggingface", 24)


def test_reference_has_the_same_shape():
    compose = load_compose(REFERENCE / COMPOSE)
    assert compose.service_name == "vllm-dspark"
    assert {"VLLM_USE_BREAKABLE_CUDAGRAPH", "DSPARK_REVISION", "TP_SOCKET_IFNAME"} <= set(compose.environment)
    assert compose.flag("--gpu-memory-utilization")[0] == "${GPU_MEMORY_UTILIZATION:-0.80}"
    assert len(compose.speculative_assignments()) == 1


def test_patch_inserts_a_missing_key_next_to_its_kin_and_changes_nothing_else():
    original = fixture_text(COMPOSE)
    older = replace_once(original, BREAKABLE_LINE, "")
    compose = ComposeFile(older, COMPOSE)
    [(spec_line, match)] = compose.speculative_assignments()
    patched = compose.patched({"VLLM_USE_BREAKABLE_CUDAGRAPH": "${VLLM_USE_BREAKABLE_CUDAGRAPH:-0}"}, NEW_SPEC)
    assert patched == original.replace(match.group(0), NEW_SPEC)


def test_patch_keeps_a_replaced_lines_comment_and_is_idempotent():
    forced = replace_once(fixture_text(COMPOSE), BREAKABLE_LINE, '      VLLM_USE_BREAKABLE_CUDAGRAPH: "1"  # forced\n')
    once = ComposeFile(forced, COMPOSE).patched({"VLLM_USE_BREAKABLE_CUDAGRAPH": "0"}, NEW_SPEC)
    assert '      VLLM_USE_BREAKABLE_CUDAGRAPH: "0"  # forced\n' in once
    assert ComposeFile(once, COMPOSE).patched({"VLLM_USE_BREAKABLE_CUDAGRAPH": "0"}, NEW_SPEC) == once


def listed_environment(text: str) -> str:
    """The compose text with its environment: map written as a `- KEY=value` list."""
    start, end = text.index("    environment:\n"), text.index("    command:\n")
    return (
        text[:start] + re.sub(r'^(\s+)([A-Z0-9_]+): "?(.*?)"?$', r"\1- \2=\3", text[start:end], flags=re.M) + text[end:]
    )


def test_patch_of_a_list_environment_keeps_the_list_form():
    text = replace_once(fixture_text(COMPOSE), BREAKABLE_LINE, "")
    patched = ComposeFile(listed_environment(text), COMPOSE).patched({"VLLM_USE_BREAKABLE_CUDAGRAPH": "0"}, NEW_SPEC)
    env = YAML(typ="safe").load(patched)["services"]["vllm-dspark"]["environment"]
    position = env.index("VLLM_USE_BREAKABLE_CUDAGRAPH=0")
    assert env[position - 1].startswith("VLLM_USE_FLASHINFER_SAMPLER=")


@pytest.mark.parametrize(
    "bare", ["      VLLM_USE_BREAKABLE_CUDAGRAPH:\n", "      VLLM_USE_BREAKABLE_CUDAGRAPH: null\n"]
)
def test_a_key_without_a_value_is_not_the_empty_string(bare):
    """`KEY:` has Compose take KEY from the environment it runs in (or leave it unset): patching it to the empty
    string writes `KEY: ""`, found by the property test (a patch that left `KEY:` as it was)."""
    text = replace_once(fixture_text(COMPOSE), BREAKABLE_LINE, bare)
    compose = ComposeFile(text, COMPOSE)
    assert compose.environment["VLLM_USE_BREAKABLE_CUDAGRAPH"].raw is None
    patched = compose.patched({"VLLM_USE_BREAKABLE_CUDAGRAPH": ""}, NEW_SPEC)
    assert '      VLLM_USE_BREAKABLE_CUDAGRAPH: ""\n' in patched
    assert (
        YAML(typ="safe").load(patched)["services"]["vllm-dspark"]["environment"]["VLLM_USE_BREAKABLE_CUDAGRAPH"] == ""
    )
    as_list = ComposeFile(listed_environment(text.replace(bare, "      - VLLM_USE_BREAKABLE_CUDAGRAPH\n")), COMPOSE)
    assert as_list.environment["VLLM_USE_BREAKABLE_CUDAGRAPH"].raw is None
    env = YAML(typ="safe").load(as_list.patched({"VLLM_USE_BREAKABLE_CUDAGRAPH": ""}, NEW_SPEC))["services"][
        "vllm-dspark"
    ]["environment"]
    assert "VLLM_USE_BREAKABLE_CUDAGRAPH=" in env and "VLLM_USE_BREAKABLE_CUDAGRAPH" not in env


def test_patch_refuses_what_a_line_edit_cannot_express():
    text = fixture_text(COMPOSE)
    two = text.replace(
        '        case "$${DEFAULT_THINKING:-low}" in\n',
        '        SPECULATIVE_CONFIG="{}";\n        case "$${DEFAULT_THINKING:-low}" in\n',
        1,
    )
    with pytest.raises(LanebookError, match="expected one SPECULATIVE_CONFIG"):
        ComposeFile(two, COMPOSE).patched({}, NEW_SPEC)
    start, end = text.index("    environment:\n"), text.index("    command:\n")
    flow = (
        text[:start]
        + '    environment: {HF_HOME: /cache/huggingface, VLLM_USE_FLASHINFER_SAMPLER: "1"}\n\n'
        + text[end:]
    )
    with pytest.raises(LanebookError, match="nothing written"):
        ComposeFile(flow, COMPOSE).patched({"VLLM_USE_BREAKABLE_CUDAGRAPH": "0"}, NEW_SPEC)


def test_closest_key_shares_the_most_leading_words():
    keys = ["HF_HOME", "VLLM_USE_FLASHINFER_SAMPLER", "VLLM_HOST_IP", "NODE_RANK"]
    assert _closest_key("VLLM_USE_BREAKABLE_CUDAGRAPH", keys) == "VLLM_USE_FLASHINFER_SAMPLER"
    assert _closest_key("VLLM_OTHER", keys) == "VLLM_USE_FLASHINFER_SAMPLER"  # the first of equals
    assert _closest_key("ZZZ", keys) == "NODE_RANK"  # no kin: after the last key


@pytest.mark.parametrize(
    "text,message",
    [
        ("services: [unclosed\n", "not valid YAML"),
        ("version: '3'\n", "no services: map"),
        (
            "services:\n  a:\n    command: echo\n",
            "expected one service whose command runs `vllm serve`, found no service",
        ),
    ],
)
def test_bad_files_are_one_clear_error(text, message):
    with pytest.raises(LanebookError, match=message):
        ComposeFile(text, COMPOSE)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(LanebookError, match="compose file not found"):
        load_compose(tmp_path / COMPOSE)
    with pytest.raises(LanebookError, match="compose file is a directory"):
        load_compose(tmp_path)


def test_what_yaml_reads_but_a_compose_file_cannot_be_is_one_line(tmp_path):
    from lanebook.recipe.effective.compose_model import container_from_text

    with pytest.raises(LanebookError) as exc:
        ComposeFile("services:\n  x: 2001-13-01\n", "c.yml")
    assert str(exc.value) == "c.yml: not valid YAML (unreadable value: month must be in 1..12)"
    with pytest.raises(LanebookError) as exc:  # plain data (YAML's safe loader) would hold itself
        container_from_text("services: &a [*a]\n", "c.yml", {}, "p")
    assert str(exc.value) == "c.yml: not a valid compose file (an alias refers to a node holding it (&a [*a]))"
    (tmp_path / "bin.yml").write_bytes(b"services: \xff\n")
    with pytest.raises(LanebookError, match="is not UTF-8 text"):
        load_compose(tmp_path / "bin.yml")


def test_safe_data_is_a_fresh_copy_of_one_parse():
    from lanebook.recipe.compose import safe_data

    text = "services:\n  a: {command: vllm serve m}\n"
    first = safe_data(text)
    first["services"]["a"]["command"] = "changed"
    assert safe_data(text) == {"services": {"a": {"command": "vllm serve m"}}}


def test_a_scalar_the_round_trip_loader_trips_on_is_one_line():
    with pytest.raises(LanebookError) as exc:
        ComposeFile("services:\n  a: -_\n", "c.yml")
    assert str(exc.value) == "c.yml: not valid YAML (unreadable value: string index out of range)"


def test_service_names_are_in_the_files_order():
    """Compose's `config` output sorts services; which one is first is read from the file (the parse ComposeFile
    keeps)."""
    assert service_names("services:\n  zeta:\n    image: a\n  alpha:\n    image: b\n") == ["zeta", "alpha"]
    assert service_names("name: x\n") == [] and service_names("- a\n") == []
