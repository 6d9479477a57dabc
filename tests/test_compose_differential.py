"""lanebook's own Compose interpolation (recipe/envfile.py, recipe/effective/compose_model.py) against the real Docker
Compose v2 binary: the fixture checkout, and generated lane variants, compared key by key, expecting no difference.

The emulation decides only where no Compose can run (compose_cli.NO_COMPOSE); this holds it equal to the binary. Each
hypothesis example is a batch of variants in one compose file (a service environment entry per variant, each with
variable names of its own) and one env file, so 1,000+ variants cost a handful of binary runs. Derandomized like
tests/test_input_properties.py (`make fuzz` style fresh draws with LANEBOOK_FUZZ=1)."""

from __future__ import annotations

import json
import os

import pytest
from helpers.recipe_fixtures import EXAMPLE, checkout, fixture_text
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from lanebook.base.errors import LanebookError
from lanebook.recipe.effective.checkout import CheckoutFiles
from lanebook.recipe.effective.compose_cli import container_from_config, run_config
from lanebook.recipe.effective.compose_model import container_from_text
from lanebook.recipe.effective.compose_tool import find_compose
from lanebook.recipe.effective.config import Effective
from lanebook.recipe.envfile import parse_env_text, resolve_env

BATCHES = 10
PER_BATCH = 120  # BATCHES x PER_BATCH = 1,200 variants, in BATCHES runs of the binary
COMPARED = {"variants": 0, "keys": 0, "runs": 0}
SERVICE = "    command: [bash, -lc, 'exec /usr/local/bin/vllm serve m']\n"

# Pieces of an env-file value: spaces, quotes, `#` (an inline comment only after whitespace, unquoted), `$` (alone,
# escaped as `$$`, or a reference to the variant's own earlier line REF, set or not), `=`, a backslash.
TOKENS = [
    "a",
    "b c",
    "\\'",
    " ",
    "#",
    " #c",
    "'",
    '"',
    "$$",
    "$",
    "${REF}",
    "$REF",
    "${REF:-x y}",
    "${UNSET-d}",
    "=",
    "\\",
]
# What each quoting style cannot hold as written. In single quotes Compose reads `\'` as a quote, so a value there
# does not end in a backslash (its closing quote would be escaped, the value running on over lines: not read).
NOT_IN = {"'": {"'"}, '"': {'"', "\\"}, "": {"'", '"'}}
DEFAULTS = ["d", "x y", "$$", "#", "", "a'b", "${REF}"]


@st.composite
def variant(draw, i: int) -> tuple[list[str], str]:
    """(env-file lines, compose environment value) for variant I; its variables are K{i} and R{i}."""
    key, ref = f"K{i}", f"R{i}"
    lines = []
    if draw(st.booleans()):
        lines.append(f"{ref}={draw(st.sampled_from(['r', 'r s', '', 'q$$']))}")
    quote = draw(st.sampled_from(["'", '"', ""]))
    tokens = draw(st.lists(st.sampled_from([t for t in TOKENS if not set(t) & NOT_IN[quote]]), max_size=5))
    value = "".join(tokens).replace("REF", ref)
    if quote == "" and value.strip() != value:
        value = value.strip() or "a"  # unquoted surrounding whitespace is not the value in either reader
    if quote == "'" and value.endswith("\\"):
        value += "a"
    if quote == "" and value.startswith("#"):
        value = "a" + value
    form = draw(st.sampled_from(["${K}", "${K:-D}", "${K-D}", "$K", "${K:+D}", "${K+D}", "${K:?need K}", "lit"]))
    present = draw(st.integers(0, 4)) > 0
    if form == "${K:?need K}":
        present, quote, value = True, quote, "a" + value.replace("\\", "")  # set non-empty: the batch must run
    if present:
        lines.append(f"{key}={quote}{value}{quote}" if draw(st.booleans()) or value else f"{key}=")
    default = draw(st.sampled_from(DEFAULTS)).replace("REF", ref)
    around = draw(st.sampled_from([("", ""), ("p-", ""), ("$$x ", " $$"), ("", "#t")]))
    expression = form.replace("K", key).replace("D", default) if form != "lit" else "lit$$eral"
    return lines, around[0] + expression + around[1]


@st.composite
def batch(draw) -> tuple[str, str, int]:
    """(compose text, env text, variants) for PER_BATCH variants."""
    env_lines, entries = [], []
    for i in range(PER_BATCH):
        lines, value = draw(variant(i))
        env_lines += lines
        entries.append(f"      E{i}: {json.dumps(value)}\n")
    compose = "services:\n  s:\n    image: img\n" + SERVICE + "    environment:\n" + "".join(entries)
    return compose, "\n".join(env_lines) + "\n", PER_BATCH


def tool():
    found = find_compose()
    if found is None:
        pytest.skip("no Docker Compose v2 here: make setup names what to install")
    return found


def emulated(compose: str, env: str) -> dict[str, str]:
    return container_from_text(compose, "c.yml", resolve_env(parse_env_text(env)), "p").environment


def real(compose: str, env: str) -> dict[str, str]:
    answer = run_config(tool(), compose, env, environ={}, project="p")
    COMPARED["runs"] += 1
    return container_from_config(answer, compose, "c.yml", "p").environment


def differences(compose: str, env: str) -> list[str]:
    ours, theirs = emulated(compose, env), real(compose, env)
    return [
        f"{key}: lanebook {ours.get(key)!r}, compose {theirs.get(key)!r}"
        for key in sorted(set(ours) | set(theirs))
        if ours.get(key) != theirs.get(key)
    ]


@settings(
    max_examples=BATCHES,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a failing batch prints its differing keys as drawn
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    derandomize=os.environ.get("LANEBOOK_FUZZ") != "1",
)
@given(batch())
def test_generated_variants_interpolate_as_compose_does(drawn):
    compose, env, count = drawn
    found = differences(compose, env)
    assert not found, f"{len(found)} difference(s):\n" + "\n".join(found[:20]) + f"\n--- env file:\n{env}"
    COMPARED["variants"] += count
    COMPARED["keys"] += count


def test_the_count_of_variants_compared():
    """Runs after the property (file order): it compared at least 1,000 variants, in a handful of binary runs."""
    print(f"compose differential: {COMPARED['variants']} variants, {COMPARED['runs']} binary runs, 0 differences")
    assert COMPARED["variants"] >= 1000 and COMPARED["runs"] <= 2 * BATCHES


def test_an_escaped_quote_in_single_quotes_is_read_as_compose_reads_it():
    compose = "services:\n  s:\n    image: img\n" + SERVICE + "    environment:\n      A: ${A}\n      B: ${B}\n"
    env = "A='it\\'s'\nB='x\\y'\n"
    assert emulated(compose, env) == real(compose, env) == {"A": "it's", "B": "x\\y"}


def test_a_required_variable_unset_is_refused_by_both(tmp_path):
    compose = "services:\n  s:\n    image: img\n" + SERVICE + "    environment:\n      E: ${K:?need K}\n"
    for env in ("", "K=\n", "K=''\n"):
        with pytest.raises(LanebookError, match="required variable K is missing a value: need K"):
            emulated(compose, env)
        with pytest.raises(LanebookError, match="required variable K is missing a value: need K"):
            real(compose, env)


def test_the_fixture_checkout_is_the_same_container_both_ways(tmp_path):
    eff = Effective(CheckoutFiles.read(checkout(tmp_path, env=fixture_text(EXAMPLE))))
    assert eff.notice == "", "the real Compose decided"
    ours = eff._emulated().to_json()
    theirs = eff.spec.to_json()
    keys = [k for k in theirs if k not in ("warnings", "env_file")]
    assert {k: ours[k] for k in keys} == {k: theirs[k] for k in keys}
    assert ours["environment"] and ours["argv"][0] == "serve"
