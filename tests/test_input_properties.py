"""Bad input, generated: 1,000 examples per surface lanebook reads (lane files, `-p` overrides, env and compose
files, lint's inputs, the CLI's arguments) end in a value or in one clear line (LanebookError, exit 2), never a
traceback. Each example is cheap (in-process, no twin); the values are made to look like the ones that hurt:
shell metacharacters, line breaks, quotes, options, non-ASCII digits, wrong types.
"""

from __future__ import annotations

import json
import os
import shlex
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers.recipe_fixtures import FIXTURES
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from lanebook.base.errors import LanebookError, LaneError
from lanebook.base.paths import PARAMS_DIR
from lanebook.lane.params import ENV_KEY_RE, MODEL_RE, NAME_RE, USER_RE, LaneParams, check_host, lane_names, load_lane
from lanebook.nodes.ssh import LaneNodes
from lanebook.ops.launcher import launcher_command
from lanebook.ops.transfers import rsync_command
from lanebook.ops.weights import download_command
from lanebook.recipe.compose import ComposeFile, load_compose, safe_data
from lanebook.recipe.envfile import (
    interpolate,
    normalized_lines,
    parse_env_file,
    parse_env_text,
    references,
    resolve_env,
    unreadable_lines,
)
from lanebook.recipe.lint import lint_env_and_compose
from lanebook.runs.execute import RUNBOOKS, parse_params, run_runbook
from ruamel.yaml import YAML
from typer.testing import CliRunner

# Derandomized: the suite draws the same 300 examples on every run, so CI's verdict is the code's, never the draw's;
# `make fuzz` draws 3,000 fresh ones (each input it finds that fails becomes an @example here, and a fix).
FUZZ = os.environ.get("LANEBOOK_FUZZ") == "1"
EXAMPLES = settings(
    max_examples=3000 if FUZZ else 300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=not FUZZ,
)

# What crafted input looks like: shell code, line breaks, quotes, an option, a path escape, digits int() refuses.
PAYLOADS = [
    "; rm -rf ~",
    "fe80::1%a;b",
    "$(touch /tmp/lbt-pwned)",
    "`touch /tmp/lbt-pwned`",
    "\n",
    "\r\n",
    "'",
    '"',
    "\\",
    "-oProxyCommand=sh",
    "--delete",
    "../..",
    "\x00",
    "²",
    " ",
    "~",
    "*",
    "&&",
    "|",
    "${HOME}",
    "$$",
    "#",
    ":",
    "\ufeff",
    "{",
    "[",
    "!!python/object:os.system",
    "&a [*a]",
    "2001-13-01",
    "1e400",
    "0x1F",
    "-1",
    "65536",
]
crafted = st.one_of(
    st.text(max_size=12),
    st.sampled_from(PAYLOADS),
    st.builds(lambda a, b, c: a + b + c, st.text(max_size=4), st.sampled_from(PAYLOADS), st.text(max_size=4)),
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), crafted)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(crafted, inner, max_size=3), max_leaves=6
)


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert text and "\n" not in text and "Traceback" not in text, repr(text)
    return text


def _tree_paths(node, prefix=()):
    """Every key path of a parsed YAML tree (mappings and sequences), containers included."""
    if isinstance(node, dict):
        items = node.items()
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        return []
    found = []
    for key, child in items:
        found.append((*prefix, key))
        found += _tree_paths(child, (*prefix, key))
    return found


TWIN_TEXT = (PARAMS_DIR / "twin.yaml").read_text()
TWIN_DATA = YAML(typ="safe").load(TWIN_TEXT)
TWIN_PATHS = _tree_paths(TWIN_DATA)


def _mutated(data, path, action, value):
    data = json.loads(json.dumps(data))
    *parents, last = path
    node = data
    for key in parents:
        node = node[key]
    if action == "delete":
        del node[last]
    elif action == "add" and isinstance(node, dict):
        node[f"{last}_{value!r}"[:40]] = value
    else:
        node[last] = value
    return data


def _accepted_lane_invariants(params: LaneParams) -> None:
    """What an accepted lane guarantees: addresses, logins and model ids match their strict patterns, and every
    path and value reaches the commands built from it as one shell word, whatever characters it holds."""
    for node in params.nodes:
        check_host(node.host), check_host(node.roce_ip)
        assert NAME_RE.fullmatch(node.alias) and (node.user is None or USER_RE.fullmatch(node.user))
    assert MODEL_RE.fullmatch(params.weights.repo) and MODEL_RE.fullmatch(params.served_model_name)
    assert all(ENV_KEY_RE.fullmatch(k) for k in [*params.env, *params.launcher.env, *params.weights.download_env])
    dry = LaneNodes(params, dry_run=True)
    words = shlex.split(launcher_command(dry, params.launcher.start, dict(params.launcher.env)))
    assert words[:3] == ["cd", params.checkout, "&&"]
    assert words[3:] == [f"{k}={v}" for k, v in params.launcher.env.items()] + [params.launcher.start]
    for worker in dry.workers:
        words = shlex.split(rsync_command(dry, worker, params.checkout))
        assert words[-2] == params.checkout.rstrip("/") + "/" and "--delete" not in words
    assert shlex.split(download_command(params.weights))[-3] == params.weights.repo


# --- lane files ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lane_file(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lanes") / "lane.yaml"


@EXAMPLES
@given(path=st.sampled_from(TWIN_PATHS), action=st.sampled_from(["set", "set", "delete", "add"]), value=values)
def test_a_changed_lane_file_loads_or_fails_with_one_line(lane_file, path, action, value):
    lane_file.write_text(json.dumps(_mutated(TWIN_DATA, path, action, value)))  # JSON is YAML
    try:
        params = load_lane(lane_file)
    except LaneError as exc:
        assert one_line(exc).startswith(str(lane_file))
        return
    _accepted_lane_invariants(params)


@EXAMPLES
@given(
    text=st.one_of(
        st.text(), st.builds(lambda a, b: TWIN_TEXT[:a] + b + TWIN_TEXT[a:], st.integers(0, len(TWIN_TEXT)), crafted)
    ),
    raw=st.binary(max_size=40),
)
def test_any_lane_file_text_or_bytes_loads_or_fails_with_one_line(lane_file, text, raw):
    for content in (text.encode("utf-8", "surrogatepass"), raw):
        lane_file.write_bytes(content)
        try:
            _accepted_lane_invariants(load_lane(lane_file))
        except LaneError as exc:
            one_line(exc)


# --- -p overrides --------------------------------------------------------------------------------------------

keys = st.one_of(st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True), crafted)
pairs = st.one_of(
    crafted,
    st.builds(
        lambda k, v: f"{k}={v}",
        keys,
        st.one_of(
            crafted,
            st.sampled_from(
                ["[1, 4]", "{a: 1}", "true", "null", "0.10", "'quoted'", "!!binary aGk=", "!!int x", "[", "a: b: c"]
            ),
        ),
    ),
)


@pytest.mark.parametrize(
    "pair,error",
    [
        ("k=2001-13-01", True),
        ("k=!!int x", True),
        ("k=&a [*a]", True),
        ("k=1e400", True),
        ("k=x=y", False),
        ("k=[1, 4]", False),
        ("=1", True),
    ],
)
def test_parse_params_refuses_what_is_not_a_plain_value(pair, error):
    """Values a run record (JSON) and a notebook's parameters cell can carry; a date, a cycle, inf or a bad tag is
    refused with one line instead of a traceback (or a record that cannot be written)."""
    if error:
        with pytest.raises(LanebookError) as exc:
            parse_params([pair])
        assert one_line(exc.value).startswith(f"bad parameter {pair!r}")
    else:
        assert parse_params([pair]) == {"k": YAML(typ="safe").load(pair[2:])}


@EXAMPLES
@given(given_pairs=st.lists(pairs, max_size=4))
def test_p_overrides_parse_to_json_values_or_fail_with_one_line(given_pairs):
    try:
        params = parse_params(given_pairs)
    except LanebookError as exc:
        one_line(exc)
        return
    assert all(k.isidentifier() for k in params)
    assert json.loads(json.dumps(params, allow_nan=False)) == params  # a record and papermill can carry them


@contextmanager
def _guarded(monkeypatch_obj, outputs: Path):
    """Every way out of lanebook's checks into an action raises Reached instead: opening an SSH connection, claiming
    a run's output (papermill would run next), a speed or HTTP run, the twin, the demo, the book, the lab. papermill's
    notebook inspection (the same answer for the same file) is remembered, as a long-lived process would."""
    import lanebook.demo
    import lanebook.nodes.ssh
    import lanebook.runs.execute
    import lanebook.runs.lab
    import lanebook.site.book
    import lanebook.speed.command
    import lanebook.twin.control

    inspected = {}
    real_inspect = lanebook.runs.execute.notebook_parameters

    def remembered(path):
        if path not in inspected:
            inspected[path] = real_inspect(path)
        return inspected[path]

    def reached(what):
        def act(*args, **kwargs):
            raise Reached(what)

        return act

    monkeypatch_obj.setenv("LANEBOOK_OUTPUTS", str(outputs))
    monkeypatch_obj.setattr(lanebook.runs.execute, "notebook_parameters", remembered)
    monkeypatch_obj.setattr(lanebook.runs.execute, "_new_output", reached("run"))
    monkeypatch_obj.setattr(lanebook.nodes.ssh.Node, "connection", reached("ssh"))
    monkeypatch_obj.setattr(lanebook.speed.command, "speed_command", reached("speed"))
    for module, name in (
        (lanebook.twin.control, "up"),
        (lanebook.twin.control, "down"),
        (lanebook.demo, "run_demo"),
        (lanebook.site.book, "build_book"),
        (lanebook.runs.lab, "run_lab"),
    ):
        monkeypatch_obj.setattr(module, name, reached(name))
    yield


class Reached(Exception):
    """The input got through every check to the action it asks for."""


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    outputs = tmp_path_factory.mktemp("outputs")
    with _guarded(mp, outputs):
        yield outputs
    mp.undo()


lanes = st.one_of(st.sampled_from(lane_names()), crafted, st.sampled_from(["params/twin.yaml", "/dev/null", "/", "."]))


@EXAMPLES
@given(
    runbook=st.one_of(st.sampled_from(RUNBOOKS), crafted),
    lane=lanes,
    given_pairs=st.lists(pairs, max_size=3),
    unknown=st.from_regex(r"[a-z]{1,8}", fullmatch=True),
    dry_run=st.booleans(),
    yes=st.booleans(),
)
def test_run_runbook_refuses_unknown_parameters_before_anything_runs(
    guarded, runbook, lane, given_pairs, unknown, dry_run, yes
):
    try:
        params = {**parse_params(given_pairs), f"not_a_parameter_{unknown}": 1}
        run_runbook(runbook, load_lane(lane), params, dry_run=dry_run, yes=yes)
    except LanebookError as exc:
        one_line(exc)
        return
    raise AssertionError("an unknown parameter went through")  # Reached would have said what ran


# --- env and compose files, lint's inputs --------------------------------------------------------------------

env_lines = st.one_of(
    crafted,
    st.builds(
        lambda export, k, eq, q, v: f"{export}{k}{eq}{q}{v}{q}",
        st.sampled_from(["", "export ", "  "]),
        keys,
        st.sampled_from(["=", " = ", "=="]),
        st.sampled_from(["", "'", '"']),
        crafted,
    ),
)
env_texts = st.builds(
    lambda bom, lines, end: bom + end.join(lines),
    st.sampled_from(["", "\ufeff"]),
    st.lists(env_lines, max_size=8),
    st.sampled_from(["\n", "\r\n"]),
)


@EXAMPLES
@given(text=env_texts, environ=st.dictionaries(keys, crafted, max_size=3), template=crafted)
def test_env_files_parse_every_line_once_and_interpolate_or_fail_with_one_line(text, environ, template):
    entries = parse_env_text(text)
    lines = normalized_lines(text)
    assert all(ENV_KEY_RE.fullmatch(e.key) and lines[e.line - 1] == e.raw for e in entries)
    unread = {n for n, _ in unreadable_lines(text)}
    blank_or_comment = {n for n, line in enumerate(lines, 1) if not line.strip() or line.strip().startswith("#")}
    assert {e.line for e in entries} | unread | blank_or_comment == set(range(1, len(lines) + 1))
    assert not unread & {e.line for e in entries}
    for attempt in (
        lambda: resolve_env(entries, environ),
        lambda: interpolate(template, environ),
        lambda: references(template),
    ):
        try:
            attempt()
        except LanebookError as exc:
            one_line(exc)


def _fixture(name: str) -> str:
    path = FIXTURES / name
    if not path.exists():
        pytest.skip(f"shared fixture not found: {path}")
    return path.read_text()


class RecipeFiles(tuple):
    """(compose text, env example text, scratch dir); shown by name only, so a failing example's report does not
    print the recipe's files."""

    def __repr__(self) -> str:
        return "RecipeFiles(the shared fixture's compose file and env example)"


@pytest.fixture(scope="module")
def recipe_files(tmp_path_factory):
    """The recipe's compose file and env example (read where they are), and a scratch dir to write changed copies."""
    return RecipeFiles(
        (_fixture("docker-compose.dspark.yml"), _fixture("env.dspark.example"), tmp_path_factory.mktemp("recipe"))
    )


def _line_edit(text: str, index: int, action: str, value: str) -> str:
    lines = text.splitlines()
    i = index % max(1, len(lines))
    if action == "delete" and lines:
        del lines[i]
    elif action == "insert":
        lines.insert(i, value)
    elif action == "replace-value" and lines:
        head, sep, _ = lines[i].partition(":" if ":" in lines[i] else "=")
        lines[i] = head + sep + " " + value
    else:
        lines[i:i] = [value + lines[i] if lines else value]
    return "\n".join(lines) + "\n"


line_edits = st.tuples(st.integers(0, 400), st.sampled_from(["delete", "insert", "replace-value", "prefix"]), crafted)


@EXAMPLES
@given(edit=line_edits, env_value=crafted)
@example(edit=(385, "replace-value", ""), env_value="")  # a key left without a value is not the empty string
def test_a_changed_compose_file_reads_and_patches_or_fails_with_one_line(recipe_files, edit, env_value):
    compose_text, _, _ = recipe_files
    try:
        compose = ComposeFile(_line_edit(compose_text, *edit), "docker-compose.dspark.yml")
        compose.environment, compose.volumes(), compose.served_model(), compose.flag("--max-num-seqs")
        patched = compose.patched({"VLLM_USE_BREAKABLE_CUDAGRAPH": env_value}, 'SPECULATIVE_CONFIG="{}";')
    except LanebookError as exc:
        one_line(exc)
        return
    environment = safe_data(patched)["services"][compose.service_name]["environment"]  # as Compose reads the patch
    if isinstance(environment, list):
        environment = dict(str(item).partition("=")[::2] for item in environment)
    assert str(environment["VLLM_USE_BREAKABLE_CUDAGRAPH"]) == env_value


@EXAMPLES
@given(text=st.text(), raw=st.binary(max_size=40))
def test_any_compose_or_env_file_text_or_bytes_reads_or_fails_with_one_line(recipe_files, text, raw):
    scratch = recipe_files[2] / "any.yml"
    for content in (text.encode("utf-8", "surrogatepass"), raw):
        scratch.write_bytes(content)
        for read in (load_compose, parse_env_file):
            try:
                read(scratch)
            except LanebookError as exc:
                one_line(exc)


@EXAMPLES
@given(which=st.sampled_from(["env", "compose"]), edit=line_edits)
@example(which="compose", edit=(339, "replace-value", "|"))  # environment: a block scalar, not a map
def test_lint_of_changed_recipe_files_reports_or_fails_with_one_line(recipe_files, which, edit):
    compose_text, env_text, scratch = recipe_files
    env_path, compose_path = scratch / ".env.dspark", scratch / "docker-compose.dspark.yml"
    env_path.write_text(_line_edit(env_text, *edit) if which == "env" else env_text)
    compose_path.write_text(_line_edit(compose_text, *edit) if which == "compose" else compose_text)
    try:
        report = lint_env_and_compose(env_path, compose_path)
    except LanebookError as exc:
        one_line(exc)
        return
    assert isinstance(report.ok, bool) and all(f.line >= 0 and "\n" not in f.message for f in report.findings)


# --- the command line ------------------------------------------------------------------------------------------

paths = st.one_of(crafted, st.sampled_from([".", "/", "/dev/null", "missing.yml", "params/twin.yaml"]))
commands = st.one_of(
    st.builds(
        lambda rb, lane, ps, flags: ["run", rb, "--lane", lane, *[a for p in ps for a in ("-p", p)], *flags],
        st.one_of(st.sampled_from(RUNBOOKS), crafted),
        lanes,
        st.lists(pairs, max_size=2),
        st.lists(st.sampled_from(["--dry-run", "--yes"]), max_size=2, unique=True),
    ),
    st.builds(
        lambda opts, flags: ["lint", *[a for o in opts for a in o], *flags],
        st.lists(
            st.one_of(
                st.tuples(st.just("--lane"), lanes),
                st.tuples(st.just("--checkout"), paths),
                st.tuples(st.just("--env"), paths),
                st.tuples(st.just("--compose"), paths),
            ),
            max_size=3,
        ),
        st.lists(st.sampled_from(["--dry-run", "--json"]), max_size=2, unique=True),
    ),
    st.builds(lambda lane, d: ["env", "render", "--lane", lane, "--checkout", d], lanes, paths),
    st.builds(
        lambda api, model, c, t: ["speed", "--api", api, "--model", model, "--concurrency", c, "--max-tokens", t],
        crafted,
        crafted,
        st.one_of(crafted, st.sampled_from(["1,4,6", "0", "-1", "1,,2"])),
        crafted,
    ),
    st.builds(lambda lane, j: ["audit", "--lane", lane, *j], lanes, st.lists(st.just("--json"), max_size=1)),
    st.builds(lambda lane: ["promote", "--lane", lane, "--dry-run"], lanes),
    st.lists(crafted, max_size=5),
)


@EXAMPLES
@given(argv=commands)
def test_the_cli_refuses_bad_arguments_with_one_line_or_usage_never_a_traceback(guarded, argv):
    from lanebook.cli import app

    result = CliRunner().invoke(app, argv, catch_exceptions=True)
    error = result.exception
    if isinstance(error, (Reached, LanebookError)):
        one_line(error)  # Reached: every check passed; LanebookError: main() prints this line and exits 2
        return
    assert error is None or isinstance(error, SystemExit), f"{argv}: {error!r}"
    assert result.exit_code in (0, 1, 2) and "Traceback" not in result.output, (argv, result.output)
