"""The one place remote commands go through (lanebook.nodes), against the twin's nodes over real SSH:
run/sudo with timeouts, put/get, streaming, redaction, and the failures (a node down, a command timing out)."""
import time
import uuid

import pytest

from lanebook import nodes
from lanebook.nodes import CommandFailed, CommandTimeout, NodeUnreachable
from lanebook.params import load_lane
from lanebook.redact import REDACTED
from twin_helpers import private_twin, process_gone

pytestmark = pytest.mark.twin
FAKE_TOKEN = "hf_" + "a1B2c3D4e5" * 3


@pytest.fixture
def lane(twin):
    with nodes.Lane(load_lane("twin")) as lane:
        yield lane


def test_each_node_runs_in_its_own_home(lane, twin):
    homes = {alias: r.stdout.strip() for alias, r in lane.each("echo $HOME").items()}
    roots = {n["alias"]: n["root"] for n in twin["nodes"]}
    assert set(homes) == {"head", "worker"} and homes["head"] != homes["worker"]
    for alias, home in homes.items():
        assert home.startswith(roots[alias])
    recorded = lane.executor.history[-2:]
    assert [r.node for r in recorded] == ["head", "worker"]
    assert all(r.exit_code == 0 and r.duration_s > 0 for r in recorded)


def test_a_failing_command_raises_with_its_exit_and_output(lane):
    with pytest.raises(CommandFailed, match=r"worker: exit 3: .*went wrong"):
        lane.node("worker").run("echo went wrong >&2; exit 3")
    result = lane.node("worker").run("exit 3", check=False)
    assert (result.exit_code, result.ok) == (3, False)


def test_sudo_runs_without_a_prompt(lane):
    result = lane.head.sudo("echo as root: $((6 * 7))")
    assert result.stdout.strip() == "as root: 42"
    assert lane.executor.history[-1].command == "sudo -n sh -c 'echo as root: $((6 * 7))'"


def test_a_command_timing_out(lane):
    """/bin/sleep, not the twin's `sleep` (which --fast scales): the wait must really last."""
    worker = lane.node("worker")
    started = time.monotonic()
    with pytest.raises(CommandTimeout, match=r"worker: command timed out after 1 s: /bin/sleep 5"):
        worker.run("/bin/sleep 5", timeout=1)
    assert time.monotonic() - started < 4
    assert lane.executor.history[-1].exit_code == 124
    assert worker.run("echo back").stdout == "back\n"  # the node is usable again (new connection)


def test_a_timed_out_command_with_a_terminal_is_stopped_on_the_node(lane):
    """pty=True: our timeout hangs the command up on the node instead of leaving it running."""
    seconds = f"3{uuid.uuid4().int % 1000}.5"
    with pytest.raises(CommandTimeout):
        lane.head.run(f"/bin/sleep {seconds}; echo not reached", pty=True, timeout=1)
    assert process_gone(lane.head, f"slee[p] {seconds}"), f"sleep {seconds} still runs on the head"


def test_put_and_get_round_trip(lane, tmp_path):
    source = tmp_path / "a file with spaces.txt"
    source.write_bytes(b"line one\n\x00binary tail\n")
    worker = lane.node("worker")
    worker.run("mkdir -p lanebook-test-transfer")
    worker.put(source, "lanebook-test-transfer/copy.txt")  # relative = the node's home
    assert worker.run("wc -c < ~/lanebook-test-transfer/copy.txt").stdout.strip() == str(source.stat().st_size)
    back = tmp_path / "back.txt"
    worker.get("lanebook-test-transfer/copy.txt", back)
    assert back.read_bytes() == source.read_bytes()
    assert lane.executor.commands()[-1].startswith("worker: sftp get lanebook-test-transfer/copy.txt")
    worker.run("rm -rf ~/lanebook-test-transfer")


def test_output_streams_line_by_line_and_secrets_are_redacted(lane):
    lines = []
    result = lane.head.run(f"echo HF_TOKEN={FAKE_TOKEN}; sleep 0.2; printf 'two\\nthree'", on_line=lines.append)
    assert lines == [f"HF_TOKEN={REDACTED}", "two", "three"]
    assert FAKE_TOKEN not in result.stdout and FAKE_TOKEN not in lane.executor.history[-1].command


def test_stdin_feeds_a_local_file(lane, tmp_path):
    script = tmp_path / "probe.py"
    script.write_text("import sys, os\nprint(sys.argv[1:], os.environ['HOME'] != '')\n")
    result = lane.node("worker").run("python3 - one 'two words'", stdin=script)
    assert result.stdout.strip() == "['one', 'two words'] True"
    assert lane.executor.history[-1].command == "python3 - one 'two words' < probe.py"


def test_a_node_down_is_one_clear_error(tmp_path):
    """Fault worker-unreachable (the worker's sshd is not running): NodeUnreachable naming the node, recorded,
    and the head unaffected."""
    with private_twin(tmp_path / "twin", ["worker-unreachable"]), nodes.Lane(load_lane("twin")) as lane:
        started = time.monotonic()
        with pytest.raises(NodeUnreachable, match=r"^worker \(\w+@127\.0\.0\.3:\d+\) unreachable: .*Unable to connect") as caught:
            lane.each("hostname")
        assert "\n" not in str(caught.value) and time.monotonic() - started < 15
        assert [(r.node, r.exit_code) for r in lane.executor.history] == [("head", 0), ("worker", 255)]
        assert lane.head.run("echo head fine").stdout == "head fine\n"


def test_host_key_checking_is_on(twin, tmp_path):
    """A node whose host key is not in the known_hosts the lane uses is refused, not trusted on first use."""
    from pathlib import Path

    from lanebook.params import lane_with

    empty = tmp_path / "known_hosts"
    empty.write_text("")
    config = Path(twin["ssh_config"]).read_text()
    known = next(line.split()[1] for line in config.splitlines() if line.strip().startswith("UserKnownHostsFile"))
    strict = tmp_path / "ssh_config"
    strict.write_text(config.replace(known, str(empty)))
    lane_params = lane_with(load_lane("twin"), ssh_config=str(strict))
    with nodes.Lane(lane_params) as lane, pytest.raises(NodeUnreachable, match="head"):
        lane.head.run("true")
    assert empty.read_text() == ""  # nothing was added behind our back
    with nodes.Lane(load_lane("twin")) as lane:
        assert lane.head.run("true").ok  # the twin's own known_hosts is accepted
