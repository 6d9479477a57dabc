"""The lane pair lock (lanebook.runs.lock): its record and staleness decision exactly; its shell commands run by
bash and sh in a home of the test's own (two takers, one winner, nothing half-written); and on the twin, through
`lanebook run` as an operator types it: two concurrent launches (one proceeds, the other exits 1 naming the
holder), a run killed with SIGKILL leaving a stale lock that is refused until --break-lock, read-only runs and
dry runs that need no lock, and a promotion that holds one lock across its runbooks."""

from __future__ import annotations

import getpass
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from helpers.waits import eventually
from lanebook.base.redact import redact
from lanebook.nodes.ssh import CommandResult
from lanebook.runs import lock
from lanebook.runs.lock import Found, Holder, LockRefused, parse_found, stale_reason

HOLDER = Holder(
    claim="a" * 32,
    user="alice",
    host="laptop",
    pid=4242,
    runbook="launch",
    run_id="b1c2d3e4",
    lane="twin",
    since="2025-01-02T03:04:05Z",
)
HOLDER_JSON = (
    '{"claim":"' + "a" * 32 + '","host":"laptop","lane":"twin","lease_s":300,"pid":4242,"run_id":"b1c2d3e4",'
    '"runbook":"launch","since":"2025-01-02T03:04:05Z","user":"alice"}'
)


def found(age: int, holder=HOLDER) -> Found:
    return Found(holder, holder.to_json() if holder else "garbage", 1_700_000_000, age)


# --- the record and the decision (pure) ---


def test_the_holder_record_is_one_json_line_that_reads_back():
    assert HOLDER.to_json() == HOLDER_JSON
    assert Holder.from_json(HOLDER_JSON) == HOLDER
    assert redact(HOLDER_JSON) == HOLDER_JSON  # the node library redacts what it reads back: nothing here looks secret
    assert HOLDER.describe() == (
        "alice@laptop (pid 4242) running launch on lane twin, run id b1c2d3e4, since 2025-01-02T03:04:05Z"
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "[]",
        '{"user": "alice"}',
        HOLDER_JSON.replace("a" * 32, ""),
        HOLDER_JSON.replace("a" * 32, "x' ; rm -rf ~"),
        HOLDER_JSON.replace("4242", '"many"'),
    ],
)
def test_a_record_that_is_not_a_holder_reads_as_none(text):
    assert Holder.from_json(text) is None


def test_the_listing_gives_the_heartbeat_age_by_the_heads_clock():
    assert parse_found(f"1700000100\n1700000000\n{HOLDER_JSON}\n") == Found(HOLDER, HOLDER_JSON, 1_700_000_000, 100)
    assert parse_found("1700000100\n1700000000\n").holder is None  # an empty record: only its heartbeat counts
    assert parse_found("1700000100\n") is None  # stat found no lock: released meanwhile
    assert parse_found("") is None


def test_a_holder_on_this_machine_whose_process_is_gone_is_stale_at_once():
    assert stale_reason(found(0), "laptop", lambda pid: pid != 4242) == "its process 4242 on laptop is gone"
    assert stale_reason(found(0), "laptop", lambda pid: True) is None


def test_a_holder_on_another_machine_is_judged_by_its_heartbeat_alone():
    assert stale_reason(found(300), "desk", lambda pid: False) is None  # pid 4242 here says nothing of the laptop
    assert stale_reason(found(301), "desk", lambda pid: True) == "its heartbeat is 301 s old, past its 300 s lease"


def test_an_unreadable_record_goes_by_the_default_lease():
    assert stale_reason(found(lock.LEASE_S, None), "laptop", lambda pid: False) is None
    assert (
        stale_reason(found(lock.LEASE_S + 1, None), "laptop", lambda pid: False)
        == f"its heartbeat is {lock.LEASE_S + 1} s old, past its {lock.LEASE_S} s lease"
    )


# --- the commands, run by a real shell in a home of the test's own ---


class ShellHead:
    """Stands in for the head Node: runs each command with `shell` in HOME=home, as the node's login would."""

    alias, address = "head", "tester@localhost:22"

    def __init__(self, home: Path, shell: str = "bash"):
        self.home, self.shell = home, shell

    def run(self, command: str, *, check: bool = True, timeout: float = 30) -> CommandResult:
        done = subprocess.run(
            [self.shell, "-c", command],
            env={**os.environ, "HOME": str(self.home)},
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert not check or done.returncode == 0, done.stderr
        return CommandResult(self.alias, command, done.returncode, done.stdout, done.stderr)

    def lock_file(self) -> Path:
        return self.home / ".lanebook" / "lane-pair.lock"


def holder(name: str, pid: int = 4242, host: str = "laptop") -> Holder:
    return Holder(
        claim=name * 32,
        user="alice",
        host=host,
        pid=pid,
        runbook="launch",
        run_id=name * 8,
        lane="twin",
        since="2025-01-02T03:04:05Z",
    )


@pytest.mark.parametrize("shell", ["bash", "sh"])
def test_the_commands_take_list_refresh_and_release_only_their_own_lock(tmp_path, shell):
    head = ShellHead(tmp_path, shell)
    assert head.run(lock.take_command(holder("a"))).stdout == f"{lock.TAKEN}\n"
    assert json.loads(head.lock_file().read_text()) == json.loads(holder("a").to_json())
    assert oct(head.lock_file().stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in head.lock_file().parent.iterdir()] == ["lane-pair.lock"]  # no temp file left
    listing = parse_found(head.run(lock.take_command(holder("b"))).stdout)
    assert listing.holder == holder("a") and 0 <= listing.heartbeat_age_s <= 2
    os.utime(head.lock_file(), (1_000_000, 1_000_000))
    assert (
        not head.run(lock.heartbeat_command("b" * 32), check=False).ok and head.lock_file().stat().st_mtime == 1_000_000
    )
    assert head.run(lock.heartbeat_command("a" * 32), check=False).ok and head.lock_file().stat().st_mtime > 1_000_000
    assert not head.run(lock.release_command("b" * 32), check=False).ok and head.lock_file().exists()
    assert head.run(lock.release_command("a" * 32), check=False).ok and not head.lock_file().exists()


def test_of_many_takers_racing_exactly_one_wins_and_the_rest_read_its_whole_record(tmp_path):
    head = ShellHead(tmp_path)
    names = "abcdefgh"
    with ThreadPoolExecutor(len(names)) as pool:
        outs = list(pool.map(lambda name: head.run(lock.take_command(holder(name))).stdout, names))
    winners = [name for name, out in zip(names, outs) if out == f"{lock.TAKEN}\n"]
    assert len(winners) == 1
    assert all(parse_found(out).holder == holder(winners[0]) for out in outs if out != f"{lock.TAKEN}\n")


def test_a_live_lock_is_refused_naming_its_holder_and_never_broken(tmp_path):
    head = ShellHead(tmp_path)
    live = holder("a", pid=os.getpid(), host=socket.gethostname())
    assert lock.take(head, live) == live
    for break_lock in (False, True):
        with pytest.raises(LockRefused) as refused:
            lock.take(head, holder("b"), break_lock=break_lock)
        said = " (--break-lock breaks only a stale lock)" if break_lock else ""
        assert re.fullmatch(
            re.escape(f"the lane pair whose head is tester@localhost:22 is locked by {live.describe()}; ")
            + rf"last heartbeat [0-2] s ago{re.escape(said)}: wait for that run to end",
            str(refused.value),
        )
    assert Holder.from_json(head.lock_file().read_text()) == live


def test_a_run_nested_in_the_holder_goes_ahead_without_taking_the_lock(tmp_path):
    head = ShellHead(tmp_path)
    live = holder("a", pid=os.getpid(), host=socket.gethostname())
    assert lock.take(head, live) == live
    assert lock.take(head, holder("b"), inherited=live.claim) == live
    with pytest.raises(LockRefused, match="is locked by"):
        lock.take(head, holder("c"), inherited="d" * 32)  # a claim that does not hold it is no one's


def test_a_stale_lock_is_refused_as_stale_and_broken_only_when_asked_keeping_its_record(tmp_path, capsys):
    head = ShellHead(tmp_path)
    gone = int(
        subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout
    )
    dead = holder("a", pid=gone, host=socket.gethostname())
    assert lock.take(head, dead) == dead
    with pytest.raises(LockRefused) as refused:
        lock.take(head, holder("b"))
    assert f"has a stale lock: {dead.describe()}; last heartbeat " in str(refused.value)
    assert str(refused.value).endswith(
        f"; its process {gone} on {socket.gethostname()} is gone. If that run is dead, "
        "add --break-lock to break it (its record is kept on the head)"
    )
    assert Holder.from_json(head.lock_file().read_text()) == dead  # not broken silently
    assert lock.take(head, holder("b"), break_lock=True) == holder("b")
    assert Holder.from_json(head.lock_file().read_text()) == holder("b")
    (kept,) = head.lock_file().parent.glob("lane-pair.lock.broken-*")
    assert Holder.from_json(kept.read_text()) == dead and kept.name.endswith("-" + "b" * 8)
    assert (
        f"broke the stale lock of the lane pair whose head is tester@localhost:22: {dead.describe()}"
        in capsys.readouterr().err
    )


def test_an_unreadable_lock_is_broken_by_its_mtime_when_stale(tmp_path):
    head = ShellHead(tmp_path)
    head.lock_file().parent.mkdir()
    head.lock_file().write_text("")
    os.utime(head.lock_file(), (time.time() - lock.LEASE_S - 60,) * 2)
    with pytest.raises(
        LockRefused, match=r"has a stale lock: an unreadable record ''; last heartbeat 3\d\d s ago; its heartbeat"
    ):
        lock.take(head, holder("b"))
    assert lock.take(head, holder("b"), break_lock=True) == holder("b")
    assert Holder.from_json(head.lock_file().read_text()) == holder("b")


def test_a_run_that_needs_no_lock_gets_nothing_and_opens_nothing():
    from lanebook.lane.params import load_lane

    with lock.hold_lane_pair(load_lane("anemll-0731"), "launch", "r1", needed=False) as held:
        assert held is None


def test_the_heartbeat_touches_the_lock_while_held_and_stops_when_it_is_broken(tmp_path, capsys):
    head = ShellHead(tmp_path)
    quick = Holder(**{**json.loads(holder("a").to_json()), "lease_s": 1})  # a beat every 0.2 s
    lock.take(head, quick)
    os.utime(head.lock_file(), (1_000_000, 1_000_000))
    beat = lock._Heartbeat(head, quick)
    beat.start()
    assert eventually(lambda: head.lock_file().stat().st_mtime > 1_000_000, 30)
    head.lock_file().rename(head.lock_file().with_name("broken"))
    beat.join(timeout=30)
    assert not beat.is_alive() and not head.lock_file().exists()  # it never recreates a lock it lost
    assert "is no longer this run's (it was broken)" in capsys.readouterr().err


def test_exactly_the_runbooks_that_change_the_lane_take_the_lock():
    from lanebook.runs.execute import CHANGING, RUNBOOKS

    assert sorted(CHANGING) == ["diagnose", "env", "launch", "rollback", "stop", "warmup", "weights"]
    assert sorted(set(RUNBOOKS) - CHANGING) == ["doctor", "gates", "speed", "status"]  # they read, change nothing


# --- on the twin, through `lanebook run` ---

LANEBOOK = str(Path(sys.executable).parent / "lanebook")


def lanebook_run(outputs: Path, *args: str) -> subprocess.Popen:
    env = {key: value for key, value in os.environ.items() if key != lock.LOCK_CLAIM_ENV}
    return subprocess.Popen(
        [LANEBOOK, "run", *args],
        env={**env, "LANEBOOK_OUTPUTS": str(outputs)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=600)
    return proc.returncode, out, err


def records(outputs: Path) -> list[dict]:
    index = outputs / "runs.jsonl"
    return [json.loads(line) for line in index.read_text().splitlines()] if index.exists() else []


def head_lock(nodes) -> str:
    """The lock file on the twin head as its login reads it; "" when there is none."""
    return nodes.head.run(f"cat {lock.LOCK_FILE} 2>/dev/null; true").stdout


@pytest.fixture(scope="module")
def twin_nodes(twin):
    from lanebook.lane.params import load_lane
    from lanebook.nodes.ssh import LaneNodes

    with LaneNodes(load_lane("twin")) as nodes:
        assert head_lock(nodes) == "", "a lane pair lock left on the twin head before this module"
        yield nodes


@pytest.fixture(scope="module")
def contested(twin_nodes, tmp_path_factory):
    """Two `lanebook run launch --lane twin` started together."""
    outputs = tmp_path_factory.mktemp("contested")
    procs = [lanebook_run(outputs, "launch", "--lane", "twin") for _ in range(2)]
    return outputs, [finished(proc) for proc in procs], head_lock(twin_nodes)


@pytest.mark.twin
def test_of_two_concurrent_launches_one_proceeds_and_the_other_is_refused_naming_the_holder(contested):
    outputs, ends, left = contested
    assert sorted(code for code, _, _ in ends) == [0, 1], ends
    (winner,) = records(outputs)  # the refused run leaves no record and no notebook
    assert winner["runbook"] == "launch" and winner["verdict"] == "pass"
    assert [p.name for p in (outputs / "twin").iterdir()] == [Path(winner["output"]).name]
    _, _, refusal = next(end for end in ends if end[0] == 1)
    assert refusal.startswith("lanebook: the lane pair whose head is ")
    assert (
        f"is locked by {getpass.getuser()}@{socket.gethostname()} (pid " in refusal
        and f"running launch on lane twin, run id {winner['run_id']}, since 20" in refusal
    )
    assert refusal.rstrip().endswith(": wait for that run to end") and "Traceback" not in refusal
    assert left == ""  # released at the end of the winner's run


@pytest.fixture(scope="module")
def killed(contested, twin_nodes, tmp_path_factory):
    """`lanebook run stop --lane twin` killed with SIGKILL as soon as it holds the lock: the lock it leaves."""
    outputs = tmp_path_factory.mktemp("killed")
    proc = lanebook_run(outputs, "stop", "--lane", "twin")
    deadline = time.monotonic() + 120
    while not (held := head_lock(twin_nodes)) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return outputs, proc.pid, held


@pytest.mark.twin
def test_status_and_a_dry_run_need_no_lock(killed, twin_nodes, tmp_path):
    """Run while the killed run's stale lock is still there (this test runs before the one that breaks it)."""
    from helpers.lanebook_runs import dry_run_offline

    _, _, held = killed
    code, out, err = finished(lanebook_run(tmp_path, "status", "--lane", "twin"))
    assert code == 0 and (records(tmp_path)[-1]["verdict"], records(tmp_path)[-1]["figures"]["state"]) == (
        "pass",
        "up",
    ), out + err
    record, _ = dry_run_offline(tmp_path / "dry", "launch", "twin")  # no network at all: no connection, no lock
    assert record["verdict"] == "dry-run"
    assert head_lock(twin_nodes) == held


@pytest.mark.twin
def test_a_killed_run_leaves_a_stale_lock_that_only_break_lock_breaks(killed, twin_nodes, tmp_path):
    outputs, pid, held = killed
    dead = Holder.from_json(held)
    assert (dead.pid, dead.runbook, dead.lane) == (pid, "stop", "twin")

    code, _, refusal = finished(lanebook_run(outputs, "stop", "--lane", "twin"))
    assert code == 1 and f"has a stale lock: {dead.describe()}; last heartbeat " in refusal, refusal
    assert refusal.rstrip().endswith(
        f"; its process {pid} on {dead.host} is gone. If that run is dead, add --break-lock "
        "to break it (its record is kept on the head)"
    )
    assert head_lock(twin_nodes) == held and records(outputs) == []  # refused, not broken, nothing run

    code, out, said = finished(lanebook_run(outputs, "stop", "--lane", "twin", "--break-lock"))
    assert code == 0 and "verdict: pass" in out, out + said
    assert "broke the stale lock of the lane pair whose head is " in said and dead.describe() in said
    (stopped,) = records(outputs)
    assert stopped["runbook"] == "stop" and stopped["verdict"] == "pass"
    assert head_lock(twin_nodes) == ""  # the breaker released its own lock at its end
    kept = twin_nodes.head.run(f"cat {lock.LOCK_FILE}.broken-*").stdout
    assert Holder.from_json(kept) == dead  # the broken record is kept on the head


@pytest.mark.twin
def test_a_promotion_holds_one_lock_its_runbooks_run_inside(twin_nodes, tmp_path, monkeypatch):
    """Stand-in stages: `weights` (in its papermill kernel) takes the lock as a nested run would and reports who
    holds it; `env` fails, so the promotion stops there. Meanwhile an operator's `run stop` is refused."""
    from helpers.lanebook_runs import stand_in_notebook, use_runbooks, verdict_cell
    from lanebook.lane.params import lane_path, load_lane
    from lanebook.runs import promote

    lane = tmp_path / "twin.yaml"  # no rollback lane: no fingerprint to take first
    text = lane_path("twin").read_text().replace("rollback: twin-1m6", "rollback: null")
    lane.write_text(text.replace("then: rollback", "then: page"))  # a watch cannot fall back to no lane
    folder = tmp_path / "runbooks"
    folder.mkdir()
    nested = (
        "from lanebook.runs.lock import lane_pair_lock\nfrom lanebook.lane.params import load_lane\n"
        "with lane_pair_lock(load_lane(lane), 'launch', 'nested') as held:\n    holder = held\n"
        "verdict, figures = 'pass', {'held_by': [holder.runbook, holder.run_id]}\n"
    )
    for name, code in [("weights", nested), ("env", "verdict, figures = 'fail', {}\n")] + [
        (name, "verdict, figures = 'pass', {}\n") for name in promote.MAIN_JOB[2:]
    ]:
        nbformat.write(stand_in_notebook(code + verdict_cell()), folder / f"{name}.ipynb")
    use_runbooks(monkeypatch, folder, tmp_path / "outputs")
    refusals = []

    def meanwhile(name: str) -> None:
        if name == "weights":
            refusals.append(finished(lanebook_run(tmp_path / "other", "stop", "--lane", "twin")))

    promotion = promote.promote(load_lane(lane), on_start=meanwhile)
    assert [(r["runbook"], r["verdict"]) for r in promotion.records] == [("weights", "pass"), ("env", "fail")]
    assert promotion.records[0]["figures"] == {"held_by": ["promote", promotion.plan.promotion_id]}
    ((code, _, refusal),) = refusals
    assert code == 1 and f"running promote on lane twin, run id {promotion.plan.promotion_id}, since " in refusal, (
        refusal
    )
    assert head_lock(twin_nodes) == "" and lock.LOCK_CLAIM_ENV not in os.environ  # released at its end


@pytest.mark.twin
def test_the_lock_is_released_when_the_run_raises_or_is_terminated(twin_nodes):
    from lanebook.lane.params import load_lane

    with pytest.raises(RuntimeError, match="the runbook broke"):
        with lock.lane_pair_lock(load_lane("twin"), "stop", "r1") as held:
            assert Holder.from_json(head_lock(twin_nodes)) == held and os.environ[lock.LOCK_CLAIM_ENV] == held.claim
            raise RuntimeError("the runbook broke")
    assert head_lock(twin_nodes) == "" and lock.LOCK_CLAIM_ENV not in os.environ

    env = {key: value for key, value in os.environ.items() if key != lock.LOCK_CLAIM_ENV}
    holding = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nfrom lanebook.runs.lock import lane_pair_lock\n"
            "from lanebook.lane.params import load_lane\nwith lane_pair_lock(load_lane('twin'), 'stop', 'r2'):\n"
            "    print('held', flush=True)\n    time.sleep(300)",
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holding.stdout.readline() == "held\n" and Holder.from_json(head_lock(twin_nodes)).pid == holding.pid
    holding.terminate()  # SIGTERM: a closed terminal, a `kill`
    assert holding.wait(timeout=60) == 128 + signal.SIGTERM and head_lock(twin_nodes) == ""
