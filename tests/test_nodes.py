"""The one place remote commands go through (lanebook.nodes.ssh), against the twin's nodes over real SSH:
run/sudo with timeouts, put/get, streaming, redaction, the failures (a node down, a command timing out),
`each` collecting every node's outcome, and how a lane's ssh config resolves (plugins, dry runs)."""

import os
import signal
import threading
import time
import uuid

import pytest
from helpers.twin_helpers import private_twin, process_gone
from lanebook.base.errors import LanebookError
from lanebook.base.redact import REDACTED
from lanebook.lane import plugins
from lanebook.lane.params import lane_with, load_lane
from lanebook.nodes import ssh
from lanebook.nodes.ssh import (
    CommandFailed,
    CommandResult,
    CommandTimeout,
    NodesFailed,
    NodesResult,
    NodeUnreachable,
    q,
)

twin = pytest.mark.twin
FAKE_TOKEN = "hf_" + "a1B2c3D4e5" * 3


@pytest.fixture
def nodes(twin):
    with ssh.LaneNodes(load_lane("twin")) as nodes:
        yield nodes


@twin
def test_each_node_runs_in_its_own_home(nodes, twin):
    homes = {alias: r.stdout.strip() for alias, r in nodes.each("echo $HOME").items()}
    roots = {n["alias"]: n["root"] for n in twin["nodes"]}
    assert set(homes) == {"head", "worker"} and homes["head"] != homes["worker"]
    for alias, home in homes.items():
        assert home.startswith(roots[alias])
    recorded = nodes.executor.history[-2:]
    assert [r.node for r in recorded] == ["head", "worker"]
    assert all(r.exit_code == 0 and r.duration_s > 0 for r in recorded)


@twin
def test_a_failing_command_raises_with_its_exit_and_output(nodes):
    with pytest.raises(CommandFailed, match=r"worker: exit 3: .*went wrong"):
        nodes.node("worker").run("echo went wrong >&2; exit 3")


@twin
def test_a_command_that_ends_before_reading_its_input_keeps_its_own_exit_and_message(nodes, tmp_path):
    """Input still being sent when the command has already ended is dropped: the command's own exit status and
    message come back, never an unreachable node (a race the refusing checks of checkout_env lost under load)."""
    big = tmp_path / "input.txt"
    big.write_text("x" * (16 << 20))  # far more than the channel's window: still being sent when the command ends
    result = nodes.head.run("echo refused >&2; exit 3", stdin=big, check=False)
    assert (result.exit_code, result.stderr.strip()) == (3, "refused")
    result = nodes.node("worker").run("exit 3", check=False)
    assert (result.exit_code, result.ok) == (3, False)


@twin
def test_sudo_runs_without_a_prompt(nodes):
    result = nodes.head.sudo("echo as root: $((6 * 7))")
    assert result.stdout.strip() == "as root: 42"
    assert nodes.executor.history[-1].command == "sudo -n sh -c 'echo as root: $((6 * 7))'"


@twin
def test_a_command_timing_out(nodes):
    """/bin/sleep, not the twin's `sleep` (which --fast scales): the wait must really last."""
    worker = nodes.node("worker")
    with pytest.raises(CommandTimeout, match=r"worker: command timed out after 1 s: /bin/sleep 5"):
        worker.run("/bin/sleep 5", timeout=1)
    assert nodes.executor.history[-1].exit_code == 124
    assert worker.run("echo back").stdout == "back\n"  # the node is usable again (new connection)


@twin
def test_the_timeouts_kill_finds_a_connection_already_closed_quietly(nodes):
    """The state the timeout's race leaves (seen once in a suite as a thread's EOFError traceback): invoke's timer
    kills the command while the transport is being closed, its channel still open. The kill says nothing."""
    connection = nodes.node("worker").connection()
    connection.open()
    seen, killed = connection.create_session(), connection.create_session()
    runner = ssh._remote_runner()(context=connection)
    runner.channel = killed
    connection.transport.packetizer.close()  # the transport going away: a channel close can no longer be sent
    with pytest.raises(EOFError):
        seen.close()  # what fabric's own kill raised on the timer's thread
    runner.kill()
    nodes.node("worker").close()
    assert nodes.node("worker").run("echo back").stdout == "back\n"


@twin
def test_an_interrupt_with_the_transport_gone_is_still_the_interrupt(nodes):
    """The transport closing as the stop arrives: the channel's close fails, the KeyboardInterrupt still goes up."""
    connection = nodes.node("worker").connection()
    connection.open()
    runner = ssh._remote_runner()(context=connection)
    runner.channel = connection.create_session()
    connection.transport.packetizer.close()
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        runner.send_interrupt(KeyboardInterrupt("SIGTERM"))
    nodes.node("worker").close()
    assert nodes.node("worker").run("echo back").stdout == "back\n"


@twin
def test_a_timed_out_command_with_a_terminal_is_stopped_on_the_node(nodes):
    """pty=True: our timeout hangs the command up on the node instead of leaving it running."""
    seconds = f"3{uuid.uuid4().int % 1000}.5"
    with pytest.raises(CommandTimeout):
        nodes.head.run(f"/bin/sleep {seconds}; echo not reached", pty=True, timeout=1)
    assert process_gone(nodes.head, f"slee[p] {seconds}"), f"sleep {seconds} still runs on the head"


def raised_as_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


@twin
@pytest.mark.parametrize("pty", [False, True], ids=["no-terminal", "terminal"])
def test_a_stop_signal_during_a_command_stops_at_once_and_goes_on_up(nodes, pty):
    """A SIGTERM raised as KeyboardInterrupt (as `lanebook watch` takes it) while a command runs: invoke alone would
    send the command a ^C and swallow the stop (with a terminal) or hold it until the command ends (without). It goes
    on up at once, the command recorded as interrupted, and with a terminal the command is hung up on the node."""
    seconds = f"6{uuid.uuid4().int % 1000}.5"
    previous = signal.signal(signal.SIGTERM, raised_as_keyboard_interrupt)
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
    started = time.monotonic()
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            nodes.head.run(f"/bin/sleep {seconds}; echo not reached", pty=pty, timeout=120)
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, previous)
    assert time.monotonic() - started < 30, "the stop waited for the command"
    assert (nodes.executor.history[-1].exit_code, nodes.executor.history[-1].stderr) == (130, "interrupted")
    if pty:
        assert process_gone(nodes.head, f"slee[p] {seconds}"), f"sleep {seconds} still runs on the head"
    else:
        nodes.head.run(f"pkill -f {q(f'slee[p] {seconds}')}", check=False)
    assert nodes.head.run("echo back").stdout == "back\n"


@twin
def test_put_and_get_round_trip(nodes, tmp_path):
    source = tmp_path / "a file with spaces.txt"
    source.write_bytes(b"line one\n\x00binary tail\n")
    worker = nodes.node("worker")
    worker.run("mkdir -p lanebook-test-transfer")
    worker.put(source, "lanebook-test-transfer/copy.txt")  # relative = the node's home
    assert worker.run("wc -c < ~/lanebook-test-transfer/copy.txt").stdout.strip() == str(source.stat().st_size)
    back = tmp_path / "back.txt"
    worker.get("lanebook-test-transfer/copy.txt", back)
    assert back.read_bytes() == source.read_bytes()
    assert nodes.executor.commands()[-1].startswith("worker: sftp get lanebook-test-transfer/copy.txt")
    worker.run("rm -rf ~/lanebook-test-transfer")


@twin
def test_output_streams_line_by_line_and_secrets_are_redacted(nodes):
    lines = []
    result = nodes.head.run(f"echo HF_TOKEN={FAKE_TOKEN}; sleep 0.2; printf 'two\\nthree'", on_line=lines.append)
    assert lines == [f"HF_TOKEN={REDACTED}", "two", "three"]
    assert FAKE_TOKEN not in result.stdout and FAKE_TOKEN not in nodes.executor.history[-1].command


@twin
def test_stdin_feeds_a_local_file(nodes, tmp_path):
    script = tmp_path / "probe.py"
    script.write_text("import sys, os\nprint(sys.argv[1:], os.environ['HOME'] != '')\n")
    result = nodes.node("worker").run("python3 - one 'two words'", stdin=script)
    assert result.stdout.strip() == "['one', 'two words'] True"
    assert nodes.executor.history[-1].command == "python3 - one 'two words' < probe.py"


@twin
def test_a_node_down_is_one_clear_error(tmp_path):
    """Fault worker-unreachable (the worker's sshd is not running): NodeUnreachable naming the node, recorded,
    and the head unaffected; `each` still has the head's result."""
    with private_twin(tmp_path / "twin", ["worker-unreachable"]), ssh.LaneNodes(load_lane("twin")) as nodes:
        with pytest.raises(NodeUnreachable, match=r"^worker \(\w+@127\.0\.0\.3:\d+\) unreachable: .*Unable to connect"):
            nodes.node("worker").run("hostname")
        with pytest.raises(
            NodesFailed, match=r"^worker \(\w+@127\.0\.0\.3:\d+\) unreachable: .*\(1 of 2 nodes failed\)$"
        ) as caught:
            nodes.each("hostname")
        assert "\n" not in str(caught.value)
        results = caught.value.results
        assert isinstance(results["worker"], NodeUnreachable) and results["head"].ok and not results.ok
        assert list(results.failed) == ["worker"] and list(results.succeeded) == ["head"]
        assert [(r.node, r.exit_code) for r in nodes.executor.history] == [
            ("worker", 255),
            ("head", 0),
            ("worker", 255),
        ]
        assert nodes.head.run("echo head fine").stdout == "head fine\n"


@twin
def test_host_key_checking_is_on(twin, tmp_path):
    """A node whose host key is not in the known_hosts the lane uses is refused, not trusted on first use."""
    from pathlib import Path

    empty = tmp_path / "known_hosts"
    empty.write_text("")
    config = Path(twin["ssh_config"]).read_text()
    known = next(line.split()[1] for line in config.splitlines() if line.strip().startswith("UserKnownHostsFile"))
    strict = tmp_path / "ssh_config"
    strict.write_text(config.replace(known, str(empty)))
    lane_params = lane_with(load_lane("twin"), ssh_config=str(strict))
    with ssh.LaneNodes(lane_params) as nodes, pytest.raises(NodeUnreachable, match="head"):
        nodes.head.run("true")
    assert empty.read_text() == ""  # nothing was added behind our back
    with ssh.LaneNodes(load_lane("twin")) as nodes:
        assert nodes.head.run("true").ok  # the twin's own known_hosts is accepted


@twin
def test_each_runs_on_every_node_after_one_fails(nodes):
    """The head fails first; the worker still runs, and the failure names the head (Fabric's GroupResult)."""
    only_head_fails = '[ "$LANEBOOK_NODE" != head ] || { echo no head >&2; exit 4; }; echo ran'
    with pytest.raises(NodesFailed, match=r"^head: exit 4: .*no head \(1 of 2 nodes failed\)$") as caught:
        nodes.each(only_head_fails)
    results = caught.value.results
    assert isinstance(results["head"], CommandFailed) and results["worker"].stdout == "ran\n"
    kept = nodes.each(only_head_fails, check=False)  # a non-zero exit stays a result
    assert isinstance(kept, NodesResult) and not kept.ok and list(kept.failed) == ["head"]
    assert kept.summary() == "head: exit 4 (1 of 2 nodes failed)"
    fine = nodes.each("true")
    assert fine.ok and fine.summary() == "ok on head, worker"


def test_nodes_result_of_a_dry_run_observed_nothing():
    nodes = ssh.LaneNodes(load_lane("anemll-0731"), dry_run=True)
    results = nodes.each("free -m")
    assert list(results) == ["head", "worker"] and all(r.dry_run for r in results.values())
    assert not results.ok and results.summary() == "not observed (dry run)"
    assert nodes.executor.commands() == ["head: free -m", "worker: free -m"]


def test_lane_nodes_iterate_in_the_lane_files_order_and_only_a_subset_runs_with_only():
    nodes = ssh.LaneNodes(load_lane("anemll-0731"), dry_run=True)
    assert [n.alias for n in nodes] == ["head", "worker"] and len(nodes) == 2
    assert nodes.head.alias == "head" and [w.alias for w in nodes.workers] == ["worker"]
    assert not hasattr(nodes, "nodes")  # one way to reach the nodes: iterate
    assert list(nodes.each("hostname", only=nodes.workers)) == ["worker"]
    assert nodes.executor.commands() == ["worker: hostname"]


def test_nodes_result_counts_every_kind_of_failure():
    ok = CommandResult("head", "true", 0)
    bad = CommandResult("worker", "false", 1)
    down = NodeUnreachable("worker2 (milo@10.0.0.3:22) unreachable: timed out")
    results = NodesResult(head=ok, worker=bad, worker2=down)
    assert list(results.failed) == ["worker", "worker2"] and list(results.succeeded) == ["head"]
    assert (
        results.summary() == "worker: exit 1; worker2 (milo@10.0.0.3:22) unreachable: timed out (2 of 3 nodes failed)"
    )
    assert not NodesResult().ok  # no node ran anything


@pytest.fixture
def registry(monkeypatch):
    """A registry of this test's own, in place of the installed plugins."""
    fresh = plugins.Registry()
    monkeypatch.setattr(plugins, "_loaded", fresh)
    return fresh


def test_a_plugin_resolves_a_named_ssh_config(registry, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host head\n  HostName 127.0.0.9\n")
    registry.ssh_config("lab", lambda: config)
    nodes = ssh.LaneNodes(lane_with(load_lane("twin"), ssh_config="lab"))
    assert nodes.head.ssh_config == config and nodes.head._connection is None  # resolved, nothing opened


def test_a_named_ssh_config_no_plugin_provides_is_one_clear_error(registry):
    registry.ssh_config("lab", lambda: None)
    with pytest.raises(
        LanebookError, match=r"ssh_config 'twin' is neither a file nor a plugin's name \(plugins' names: lab;"
    ):
        ssh.LaneNodes(load_lane("twin"))


def test_an_ssh_config_path_is_a_path(registry, tmp_path):
    nodes = ssh.LaneNodes(lane_with(load_lane("twin"), ssh_config="~/.ssh/lane_config"))
    assert str(nodes.head.ssh_config).endswith("/.ssh/lane_config") and "~" not in str(nodes.head.ssh_config)
    assert ssh.LaneNodes(lane_with(load_lane("twin"), ssh_config=None)).head.ssh_config is None  # ssh's own defaults


def test_a_dry_run_resolves_no_ssh_config(registry):
    """A dry run opens no connection, so it needs no plugin and no running twin."""
    nodes = ssh.LaneNodes(load_lane("twin"), dry_run=True)
    assert nodes.head.ssh_config is None
    with pytest.raises(AssertionError, match="dry-run must never open a connection"):
        nodes.head.connection()


def test_the_twin_is_the_installed_plugin_for_ssh_config_twin():
    """The twin registers through the `lanebook.lane.plugins` entry point (pyproject.toml), not by being imported."""
    loaded = plugins.load_registry()
    assert "twin" in loaded.plugins, "the installed metadata lacks pyproject.toml's entry point: run `make setup`"
    assert "twin" in loaded.ssh_configs and loaded.preparers
