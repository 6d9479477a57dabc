"""lanebook.recipe.envfile: env files read as Compose and the recipe's launcher read them, and Compose interpolation."""

from __future__ import annotations

import pytest
from lanebook.base.errors import LanebookError
from lanebook.recipe.envfile import (
    EnvEntry,
    env_map,
    interpolate,
    normalized_lines,
    parse_env_file,
    parse_env_text,
    references,
    resolve_env,
    unreadable_lines,
)


def test_assignments_with_their_lines_quotes_and_comments():
    text = (
        '# a comment\n\nexport A=1\nB = two  # trailing comment\nC=\'lit $HOME\'\nD="x \\"y\\""\n'
        'E="quoted"  # note\nF=has#hash\nnot an assignment\n'
    )
    entries = parse_env_text(text)
    assert [(e.key, e.value, e.line, e.quote) for e in entries] == [
        ("A", "1", 3, ""),
        ("B", "two", 4, ""),
        ("C", "lit $HOME", 5, "'"),
        ("D", 'x "y"', 6, '"'),
        ("E", "quoted", 7, '"'),
        ("F", "has#hash", 8, ""),
    ]
    assert entries[0] == EnvEntry("A", "1", 3, "export A=1", "")
    assert unreadable_lines(text) == [(9, "not an assignment")]


def test_byte_order_mark_and_crlf_read_as_the_launcher_reads_them():
    """The recipe's launcher sources a copy with the BOM and CRs stripped; line numbers stay the operator's."""
    text = "\ufeffGPU_MEMORY_UTILIZATION_TEXT=0.85\r\n# c\r\nMAX_NUM_SEQS=6\r\n"
    assert normalized_lines(text) == ["GPU_MEMORY_UTILIZATION_TEXT=0.85", "# c", "MAX_NUM_SEQS=6", ""]
    assert [(e.key, e.value, e.line) for e in parse_env_text(text)] == [
        ("GPU_MEMORY_UTILIZATION_TEXT", "0.85", 1),
        ("MAX_NUM_SEQS", "6", 3),
    ]
    assert unreadable_lines(text) == []


def test_last_assignment_wins():
    assert env_map(parse_env_text("A=1\nB=2\nA=3\n")) == {"A": "3", "B": "2"}


def test_values_interpolate_earlier_lines_and_the_environment_single_quotes_stay_literal():
    entries = parse_env_text(
        "HF_CACHE=${HOME}/.cache/huggingface\nSUB=\"$HF_CACHE/hub\"\nRAW='${HOME}'\n"
        "DEF=${UNSET:-fallback}\nHOME=/other\nAFTER=${HOME}\n"
    )
    assert resolve_env(entries, {"HOME": "/home/milo"}) == {
        "HF_CACHE": "/home/milo/.cache/huggingface",
        "SUB": "/home/milo/.cache/huggingface/hub",
        "RAW": "${HOME}",
        "DEF": "fallback",
        "HOME": "/other",
        "AFTER": "/other",
    }


def test_missing_env_file_is_one_clear_error(tmp_path):
    with pytest.raises(LanebookError, match="env file not found"):
        parse_env_file(tmp_path / "nope")


@pytest.mark.parametrize(
    "text,expected",
    [
        ("${A}", "1"),
        ("$A-x", "1-x"),
        ("${EMPTY:-d}", "d"),
        ("${EMPTY-d}", ""),
        ("${UNSET-d}", "d"),
        ("${A:+alt}", "alt"),
        ("${EMPTY:+alt}", ""),
        ("${EMPTY+alt}", "alt"),
        ("${UNSET+alt}", ""),
        ("$${A}", "${A}"),
        ("$$(( ${A:-6} * 2 ))", "$(( 1 * 2 ))"),
        ("${UNSET:-${A}}", "1"),
        ("${UNSET}", ""),
    ],
)
def test_interpolation_operators(text, expected):
    assert interpolate(text, {"A": "1", "EMPTY": ""}) == expected


def test_required_variable_and_bad_format_raise():
    with pytest.raises(LanebookError, match="required variable MASTER_ADDR is missing a value: set it"):
        interpolate("${MASTER_ADDR:?set it}", {})
    with pytest.raises(LanebookError, match="invalid interpolation format"):
        interpolate("${1BAD}", {})


def test_references_name_compose_variables_not_escaped_ones():
    assert references('"${TP_SOCKET_IFNAME:-${NCCL_SOCKET_IFNAME}}"') == ["TP_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"]
    assert references("$${MTP_NUM_TOKENS:-5}") == []
    assert references("$$(( ${MAX_NUM_SEQS:-6} * (${MTP_NUM_TOKENS:-5} + 1) ))") == ["MAX_NUM_SEQS", "MTP_NUM_TOKENS"]
    assert references("plain $VAR text") == ["VAR"]


def test_an_env_file_that_is_not_text_is_one_line(tmp_path):
    from lanebook.recipe.envfile import parse_env_file

    (tmp_path / ".env.dspark").write_bytes(b"A=\x80\n")
    with pytest.raises(LanebookError) as exc:
        parse_env_file(tmp_path / ".env.dspark")
    assert str(exc.value) == f"env file {tmp_path / '.env.dspark'} is not UTF-8 text (byte 2)"
