"""lanebook.base.yamltext: every way ruamel.yaml fails on a text is one YAMLError, worded as one line."""

from __future__ import annotations

import pytest
from lanebook.base import yamltext
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError


def test_safe_and_round_trip_documents():
    assert yamltext.load("a: [1, x]\n") == {"a": [1, "x"]}
    doc = yamltext.load("a: 1  # kept\nb: 2\n", "rt")
    assert isinstance(doc, CommentedMap) and doc.lc.key("b") == (1, 0)


@pytest.mark.parametrize("typ", ["safe", "rt"])
@pytest.mark.parametrize(
    "text, what",
    [
        ("-_\n", "unreadable value"),  # ruamel's parser trips: IndexError (rt), ValueError (safe)
        ("0x_\n", "unreadable value"),
        ("when: 2001-13-01\n", "unreadable value: month must be in 1..12"),
        ("a: [unclosed\n", "expected ',' or ']'"),
    ],
)
def test_every_failure_is_a_yaml_error(typ, text, what):
    with pytest.raises(YAMLError) as err:
        yamltext.load(text, typ)
    assert what in yamltext.problem("f.yaml", err.value)


def test_an_alias_holding_itself_is_refused_where_the_loader_builds_it():
    with pytest.raises(YAMLError, match="an alias refers to a node holding it"):
        yamltext.load("a: &a [*a]\n")
    assert yamltext.load("a: &a [*a]\n", "rt") == {"a": [None]}  # the round-trip loader leaves the alias empty


def test_the_problem_names_the_source_and_the_line_where_known():
    with pytest.raises(YAMLError) as err:
        yamltext.load("a: 1\nb: [unclosed\n")
    assert (
        yamltext.problem("lane.yaml", err.value)
        == "lane.yaml line 3: not valid YAML (expected ',' or ']', but got '<stream end>')"
    )
    with pytest.raises(YAMLError) as err:
        yamltext.load("when: 2001-13-01\n")
    assert (
        yamltext.problem("lane.yaml", err.value)
        == "lane.yaml: not valid YAML (unreadable value: month must be in 1..12)"
    )
