"""Values crafted to inject shell reach the twin's nodes as data, never as code: hosts, logins and model ids are
refused when the lane file loads (nothing is sent), paths and env values are quoted (nodes.q/qpath). The proof is on
the twin: every payload would create a file in a sentinel directory, and after the runbook and the library calls the
runbooks make, the directory is empty, while the nodes' command logs show they were given the values and the crafted
directories exist under their exact names."""

from __future__ import annotations

import ast
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.lanebook_runs import run
from lanebook.base.errors import LanebookError, LaneError
from lanebook.lane.params import PARAMS_DIR, lane_with, load_lane
from lanebook.nodes.ssh import LaneNodes, NodeError, qpath
from lanebook.ops import checkout_env, launcher, rollback, transfers, weights
from lanebook.ops.logs import scan_log
from lanebook.twin.nodes import TwinLayout

pytestmark = pytest.mark.twin


def payloads(sentinel: Path, tag: str) -> str:
    """Every way a shell could be made to run `touch SENTINEL/TAG-n`: substitution, backticks, separators, quotes."""
    s = shlex.quote(str(sentinel))
    return (
        f"$(touch {s}/{tag}-1) `touch {s}/{tag}-2`; touch {s}/{tag}-3 && touch {s}/{tag}-4 | touch {s}/{tag}-5 "
        f"' \" ; touch {s}/{tag}-6 #"
    )


@pytest.fixture(scope="module")
def crafted(twin, tmp_path_factory):
    """The twin lane with a crafted checkout, HF cache, project name and env value, and a copy of the twin's
    checkout under that crafted name on the head; what ran is collected once for the tests below."""
    sentinel = tmp_path_factory.mktemp("sentinel")
    base = load_lane("twin")
    params = lane_with(
        base,
        checkout=f"~/lbt-inj-{os.getpid()} {payloads(sentinel, 'checkout')}",
        launcher={
            **base.launcher.model_dump(),
            "env": {**base.launcher.env, "PROJECT_NAME": f"p {payloads(sentinel, 'project')}"},
        },
        weights={**base.weights.model_dump(), "hf_cache": f"~/lbt-inj-hf {payloads(sentinel, 'hf')}"},
        env={"NCCL_SOCKET_IFNAME": f"bond0 {payloads(sentinel, 'env')}"},
    )
    lay = TwinLayout(Path(twin["twin_dir"]))
    logs = {alias: lay.command_log(alias) for alias in ("head", "worker")}
    sizes = {alias: path.stat().st_size if path.exists() else 0 for alias, path in logs.items()}
    seen: dict[str, object] = {}
    with LaneNodes(params) as nodes:
        nodes.each(f"mkdir -p {qpath(params.checkout)}")  # nested (the payloads hold '/'): rsync makes no parents
        nodes.head.run(f"cp -a {qpath(base.checkout)}/. {qpath(params.checkout)}/")
        try:
            seen["missing"] = transfers.missing_paths(nodes.head, [params.checkout, f"{params.checkout}/nope"])
            seen["rsync"] = transfers.sync_checkout(nodes)
            seen["checkout_ok"] = transfers.checkout_ok(nodes).ok  # every node: the worker's came by rsync
            seen["fingerprint"] = rollback.fingerprint(nodes)
            seen["status"] = launcher.run_status_script(nodes)
            for call in (
                lambda: weights.verify_weights(nodes.head, params.weights),
                lambda: weights.clean_incomplete_on_workers(nodes),
                lambda: scan_log(nodes.head, launcher.container_name(nodes), ["x"]),
            ):
                try:
                    call()
                except NodeError:
                    pass  # a missing HF cache or container is an error; what matters is what it ran
            env_file = f"{qpath(params.checkout)}/.env.dspark"
            seen["env_before"] = nodes.head.run(f"cat {env_file}").stdout
            try:
                seen["render"] = checkout_env.render_on_head(nodes)
            except LanebookError as exc:  # no line both bash and Docker Compose read as that value
                seen["render"] = exc
            seen["env_after"] = nodes.head.run(f"cat {env_file}").stdout
        finally:
            nodes.each(f"rm -rf {qpath(params.checkout)} {qpath(params.weights.hf_cache)}")
    given = {alias: path.read_bytes()[sizes[alias] :].split(b"\0") for alias, path in logs.items()}
    return {"sentinel": sentinel, "params": params, "seen": seen, "given": given, "lay": lay}


def test_no_payload_ran_on_any_node_or_here(crafted):
    assert sorted(os.listdir(crafted["sentinel"])) == []


def _words(command: bytes) -> list[str]:
    try:
        return shlex.split(command.decode())
    except ValueError:
        return []


def test_the_nodes_were_given_the_crafted_values_as_single_words(crafted):
    params, given = crafted["params"], crafted["given"]
    head = [_words(c) for c in given["head"]]
    project = f"PROJECT_NAME={params.launcher.env['PROJECT_NAME']}"
    assert any(words[:2] == ["cd", params.checkout] for words in head)  # qpath keeps ~/ and quotes the rest
    assert any(project in words for words in head)
    assert any(params.weights.hub_dir in words for words in head)
    assert any(c.startswith(b"rsync --server") for c in given["worker"])


def test_crafted_paths_exist_under_their_exact_names_and_rsync_copied_one(crafted):
    seen, params = crafted["seen"], crafted["params"]
    assert seen["missing"] == [f"{params.checkout}/nope"]
    assert seen["checkout_ok"] is True
    assert seen["rsync"]["worker"].files_transferred >= 1
    assert seen["fingerprint"]["nodes"]["worker"]["checkout"]["exists"] is True
    assert seen["fingerprint"]["nodes"]["worker"]["checkout"]["path"].endswith(params.checkout[2:])


def test_a_crafted_env_value_no_reader_agrees_on_is_refused_and_nothing_is_written(crafted):
    # The value holds both quotes: bash would source a shell-quoted line, but Docker Compose's env-file reader refuses
    # it, so the launcher's Compose would not start the lane. render asks Compose before it writes, and stops there.
    refused = crafted["seen"]["render"]
    assert isinstance(refused, LanebookError), refused
    assert "Docker Compose refuses the configuration" in str(refused) and "/.env.dspark: line " in str(refused)
    assert crafted["seen"]["env_after"] == crafted["seen"]["env_before"]


def _lane_file(tmp_path: Path, **changes) -> Path:
    data = json.loads(json.dumps(load_lane("twin").model_dump()))
    data["rollback"] = None
    data["watch"]["then"] = "page"  # a watch cannot fall back to no lane
    for key, value in changes.items():
        data["nodes"][0][key] = value
    path = tmp_path / "crafted.json"
    path.write_text(json.dumps(data))
    return path


def test_a_runbook_run_with_crafted_values_runs_none_of_them(twin, tmp_path):
    """`lanebook run status` on the crafted lane: its verdict is recorded and no payload created a file."""
    sentinel = tmp_path / "sentinel"
    sentinel.mkdir()
    data = json.loads(json.dumps(load_lane("twin").model_dump()))
    data.update(rollback=None, checkout=f"~/lbt-inj-run {payloads(sentinel, 'run')}")
    data["watch"]["then"] = "page"
    data["launcher"]["env"]["PROJECT_NAME"] = f"p {payloads(sentinel, 'runproject')}"
    lane_file = tmp_path / "crafted.json"
    lane_file.write_text(json.dumps(data))
    record, done = run(tmp_path, "status", str(lane_file), expect_exit=1)  # no such checkout: status fails
    assert record["verdict"] == "fail" and os.listdir(sentinel) == []


@pytest.mark.parametrize(
    "field,value",
    [("host", "127.0.0.2;touch {s}/host"), ("user", "$(touch {s}/user)"), ("roce_ip", "127.0.0.3`touch {s}/fabric`")],
)
def test_crafted_hosts_and_logins_are_refused_before_any_node_is_asked(twin, tmp_path, field, value):
    sentinel = tmp_path / "sentinel"
    sentinel.mkdir()
    lay = TwinLayout(Path(twin["twin_dir"]))
    before = lay.command_log("head").stat().st_size
    lane_file = _lane_file(tmp_path, **{field: value.format(s=sentinel)})
    with pytest.raises(LaneError, match=f"'nodes.0.{field}'"):
        load_lane(lane_file)
    record_dir = tmp_path / "outputs"
    done = subprocess.run(
        [str(Path(sys.executable).parent / "lanebook"), "run", "status", "--lane", str(lane_file)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LANEBOOK_OUTPUTS": str(record_dir)},
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (record_dir / "runs.jsonl").exists() and os.listdir(sentinel) == []
    assert lay.command_log("head").stat().st_size == before  # the head was never asked anything


def test_a_crafted_model_id_is_refused(tmp_path):
    text = (
        (PARAMS_DIR / "twin.yaml")
        .read_text()
        .replace("SERVED_MODEL_NAME: deepseek-v4-flash-0731", 'SERVED_MODEL_NAME: "m; touch /tmp/x"')
    )
    (tmp_path / "lane.yaml").write_text(text)
    with pytest.raises(LaneError, match="env.SERVED_MODEL_NAME must be a model id"):
        load_lane(tmp_path / "lane.yaml")


# --- every value in a remote command is quoted (static) -------------------------------------------------------

# quote, or build from quoted parts (perftest_args: ib_write_bw's options, each value q()'d)
SAFE_CALLS = {"q", "qpath", "int", "env_prefix", "shell_line", "in_checkout", "perftest_args"}
# Names interpolated unquoted into a command, each already quoted or a constant where it is built (reviewed).
PRE_QUOTED = {
    "listed": "paths or names joined after q/qpath each",
    "n": "q(name)",
    "base": "q(name + '.bak-' + stamp)",
    "keep": "the constant cp -p or mv",
    "command": "a command built by its caller",
    "flag": "a test(1) flag constant (-e, -f, -x)",
    "limit": "--bwlimit=int(...) or ''",
    "REFUSED_EXIT": "an int constant",
    "SHM_CLEANUP": "a constant command",
    "DROP_CACHES": "a constant command",
    "LOCK_DIR": "the constant ~/.lanebook",
    "LOCK_FILE": "a constant path under it",
    "TAKEN": "a constant word",
    "same": "a test built from q(claim) or the int mtime",
    "stamp": "a UTC stamp and the claim's alphanumerics",
    "found.mtime": "an int the head's stat printed",
    "systemctl": "the constant `systemctl --user` or `sudo -n systemctl`",
    "folder": "a constant unit folder (the user's keeps ~ for the shell to expand)",
    "remove": "an rm line built from q(path)",
    "PAIR_MARK": "a constant marker word",
}


def _command_strings(tree: ast.AST):
    """f-strings that become remote commands: arguments of .run/.sudo/.each, and those returned or assigned in
    functions whose name ends in _command or _probe, or that build one (the module's command helpers)."""
    builders = {
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef)
        and (n.name.endswith(("_command", "_probe")) or n.name in {"in_checkout", "_failed_tests"})
    }
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("run", "sudo", "each")
        ):
            found += [a for a in node.args if isinstance(a, ast.JoinedStr)]
    for fn in builders:
        for node in ast.walk(fn):
            if isinstance(node, (ast.Return, ast.Assign)) and isinstance(node.value, ast.JoinedStr):
                found.append(node.value)
    return found


def _joins_quoted(expr: ast.AST) -> bool:
    """`' '.join(q(u) for u in units)`: a join of values each quoted."""
    return (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr == "join"
        and len(expr.args) == 1
        and isinstance(expr.args[0], (ast.GeneratorExp, ast.ListComp))
        and isinstance(expr.args[0].elt, ast.Call)
        and isinstance(expr.args[0].elt.func, ast.Name)
        and expr.args[0].elt.func.id in SAFE_CALLS
    )


def test_every_value_in_a_remote_command_is_quoted():
    from lanebook.base.paths import REPO

    unquoted, seen = [], 0
    for path in sorted((REPO / "lib" / "lanebook").rglob("*.py")):
        if "twin" in path.relative_to(REPO / "lib" / "lanebook").parts:
            continue
        for joined in _command_strings(ast.parse(path.read_text())):
            seen += 1
            for value in joined.values:
                if not isinstance(value, ast.FormattedValue):
                    continue
                expr = value.value
                if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in SAFE_CALLS:
                    continue
                if ast.unparse(expr) in PRE_QUOTED or _joins_quoted(expr):
                    continue
                unquoted.append(f"{path.relative_to(REPO)}:{joined.lineno}: {{{ast.unparse(expr)}}}")
    assert unquoted == [] and seen >= 15, seen  # 18 command f-strings when written: the scan finds them
