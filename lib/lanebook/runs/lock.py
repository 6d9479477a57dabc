"""One operator at a time on a lane pair: a lock file on the head node, naming who holds it.

The lock is ~/.lanebook/lane-pair.lock in the home of the user lanebook logs in as on the head, so every lane of a
pair (and its rollback lane) meets on it, however its file spells the head. Taking it is atomic (link(2) of a
written holder record): two racing runs cannot both win and nobody reads half a record. A held lock refuses the run
with the holder's details. The holder touches its mtime every LEASE_S / 5 s (the head's clock); a lock whose holder
is dead (its pid gone on this machine, or a heartbeat older than its lease) is stale, refused as stale and broken
only with `--break-lock` (its record kept as lane-pair.lock.broken-STAMP); a live lock is never broken. Runs nested
inside the holder (it exports LOCK_CLAIM_ENV) go ahead without taking or releasing it. Why: docs/decisions.md.
"""

from __future__ import annotations

import getpass
import json
import os
import signal
import socket
import sys
import threading
import uuid
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Callable, Iterator, Optional

from lanebook.base.errors import LanebookError
from lanebook.base.files import utc_stamp
from lanebook.base.processes import process_alive
from lanebook.lane.params import LaneParams
from lanebook.lane.plugins import prepare_lane
from lanebook.nodes.ssh import LaneNodes, Node, NodeError, q

LOCK_DIR = "~/.lanebook"
LOCK_FILE = f"{LOCK_DIR}/lane-pair.lock"
LOCK_CLAIM_ENV = "LANEBOOK_LANE_PAIR_LOCK"
LEASE_S = 300  # a holder that has not touched its lock for this long is taken for dead
TAKEN = "lanebook-lock-taken"
ATTEMPTS = 3  # a lock released (or broken) between our attempt and our read is simply tried again


class LockRefused(LanebookError):
    """The lane pair's lock is held (live or stale) or cannot be taken: nothing was run. Not bad usage, so the
    command line exits 1, not 2."""

    exit_code = 1


@dataclass(frozen=True)
class Holder:
    """Who holds a lane pair: the operator's user and machine, the process, the runbook and its run."""

    claim: str
    user: str
    host: str
    pid: int
    runbook: str
    run_id: str
    lane: str
    since: str  # UTC, the holder's clock, for people to read
    lease_s: int = LEASE_S

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Optional["Holder"]:
        """The record in a lock file, or None when it is not one (a truncated or foreign file)."""
        try:
            data = json.loads(text)
            if not (isinstance(data.get("claim"), str) and data["claim"].isalnum()):
                return None  # the claim names the lock in shell tests (grep -F): never empty
            return cls(**{**data, "pid": int(data["pid"]), "lease_s": int(data.get("lease_s", LEASE_S))})
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    def describe(self) -> str:
        return (
            f"{self.user}@{self.host} (pid {self.pid}) running {self.runbook} on lane {self.lane}, "
            f"run id {self.run_id}, since {self.since}"
        )


def new_holder(lane_name: str, runbook: str, run_id: str) -> Holder:
    return Holder(
        claim=uuid.uuid4().hex,
        user=getpass.getuser(),
        host=socket.gethostname(),
        pid=os.getpid(),
        runbook=runbook,
        run_id=run_id,
        lane=lane_name,
        since=datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
    )


@dataclass(frozen=True)
class Found:
    """A lock found held: its record (None when unreadable, `raw` kept), and its heartbeat's age by the head's clock."""

    holder: Optional[Holder]
    raw: str
    mtime: int  # the head's epoch seconds
    heartbeat_age_s: int

    def describe(self) -> str:
        who = self.holder.describe() if self.holder else f"an unreadable record {self.raw[:120]!r}"
        return f"{who}; last heartbeat {self.heartbeat_age_s} s ago"


def parse_found(stdout: str) -> Optional[Found]:
    """The lock as the take command lists it when the lock exists: the head's time, the file's mtime, the record.
    None when the lock was gone by the time it was read."""
    lines = stdout.splitlines()
    if len(lines) < 2 or not (lines[0].strip().isdigit() and lines[1].strip().isdigit()):
        return None
    raw = "\n".join(lines[2:]).strip()
    now, mtime = int(lines[0]), int(lines[1])
    return Found(Holder.from_json(raw), raw, mtime, now - mtime)


def stale_reason(found: Found, local_host: str, pid_alive: Callable[[int], bool]) -> Optional[str]:
    """Why the lock's holder is dead, or None while it may live: a process of this machine that is gone, or a
    heartbeat older than the holder's lease (an unreadable record has only its heartbeat to go by)."""
    holder = found.holder
    if holder and holder.host == local_host and not pid_alive(holder.pid):
        return f"its process {holder.pid} on {holder.host} is gone"
    lease = holder.lease_s if holder else LEASE_S
    if found.heartbeat_age_s > lease:
        return f"its heartbeat is {found.heartbeat_age_s} s old, past its {lease} s lease"
    return None


def take_command(holder: Holder) -> str:
    """Create the lock whole (temp file + hard link), or list the one there: head time, mtime, record."""
    return (
        f"umask 077; mkdir -p {LOCK_DIR} && t=$(mktemp {LOCK_DIR}/.lane-pair.XXXXXX) && "
        f"printf '%s\\n' {q(holder.to_json())} > \"$t\" && "
        f'if ln "$t" {LOCK_FILE} 2>/dev/null; then rm -f "$t"; echo {TAKEN}; '
        f'else rm -f "$t"; date +%s; stat -c %Y {LOCK_FILE} 2>/dev/null && cat {LOCK_FILE}; true; fi'
    )


def break_command(found: Found, stamp: str) -> str:
    """Move a stale lock aside, kept, if it is still the one judged stale: the same claim, or for an unreadable
    record the same mtime."""
    same = (
        f"grep -qF {q(found.holder.claim)} {LOCK_FILE}"
        if found.holder
        else f'[ "$(stat -c %Y {LOCK_FILE})" = {found.mtime} ]'
    )
    return f"{same} && mv {LOCK_FILE} {LOCK_FILE}.broken-{stamp}"


def heartbeat_command(claim: str) -> str:
    return f"grep -qF {q(claim)} {LOCK_FILE} && touch {LOCK_FILE}"


def release_command(claim: str) -> str:
    """Remove the lock only while it is ours (a lock broken and taken by another run is left to it)."""
    return f"grep -qF {q(claim)} {LOCK_FILE} && rm -f {LOCK_FILE}"


def _say(message: str) -> None:
    print(f"lanebook: {message}", file=sys.stderr, flush=True)


def take(head: Node, holder: Holder, *, break_lock: bool = False, inherited: Optional[str] = None) -> Holder:
    """Take the lane pair's lock on the head for `holder`; returns who holds it now: `holder`, or the run this one
    is nested in when its claim (`inherited`) holds it. Refuses (LockRefused) a lock held by anyone else."""
    for _ in range(ATTEMPTS):
        try:
            out = head.run(take_command(holder), timeout=30).stdout
        except NodeError as exc:
            raise LockRefused(
                f"cannot take the lock of the lane pair whose head is {head.address}, so nothing was run: {exc}"
            ) from None
        where = f"the lane pair whose head is {head.address}"  # as the connection resolved it
        if out.strip() == TAKEN:
            return holder
        found = parse_found(out)
        if found is None:
            continue  # released between our attempt and our read
        if found.holder and inherited and found.holder.claim == inherited:
            return found.holder
        reason = stale_reason(found, socket.gethostname(), process_alive)
        if reason is None:
            extra = " (--break-lock breaks only a stale lock)" if break_lock else ""
            raise LockRefused(f"{where} is locked by {found.describe()}{extra}: wait for that run to end")
        if not break_lock:
            raise LockRefused(
                f"{where} has a stale lock: {found.describe()}; {reason}. If that run is dead, "
                f"add --break-lock to break it (its record is kept on the head)"
            )
        stamp = utc_stamp() + f"-{holder.claim[:8]}"
        if head.run(break_command(found, stamp), check=False, timeout=30).ok:
            _say(
                f"broke the stale lock of {where}: {found.describe()}; {reason}; "
                f"its record is kept there as {LOCK_FILE}.broken-{stamp}"
            )
    raise LockRefused(
        f"could not take the lock of the lane pair whose head is {head.address} in {ATTEMPTS} attempts: "
        "other runs keep taking and releasing it"
    )


class _Heartbeat(threading.Thread):
    """Touches the lock every lease / 5 while the run holds it; says so once if the lock is lost."""

    def __init__(self, head: Node, holder: Holder):
        super().__init__(name="lanebook-lock-heartbeat", daemon=True)
        self.head, self.holder, self.stopped = head, holder, threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.holder.lease_s / 5):
            try:
                beat = self.head.run(heartbeat_command(self.holder.claim), check=False, timeout=30)
            except NodeError as exc:
                _say(f"could not refresh the lane pair's lock on {self.head.alias}: {exc}")
                continue
            if not beat.ok:
                _say(
                    f"the lane pair's lock on {self.head.alias} is no longer this run's (it was broken); "
                    f"another run may be acting on the pair"
                )
                return

    def stop(self) -> None:
        self.stopped.set()
        self.join()


@contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """A SIGTERM (a closed terminal, `kill`) unwinds like Ctrl-C, so the lock is released; SIGKILL leaves it stale."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def unwind(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def lane_pair_lock(params: LaneParams, runbook: str, run_id: str, *, break_lock: bool = False) -> Iterator[Holder]:
    """Hold the lane pair's lock for the body, yielding its holder (this run's, or the enclosing run's for a nested
    run); released at the end even on failure (see the module docstring)."""
    prepare_lane(params)  # e.g. the twin starts itself for a twin lane
    holder = new_holder(params.name, runbook, run_id)
    inherited = os.environ.get(LOCK_CLAIM_ENV)
    with LaneNodes(params) as nodes:
        holding = take(nodes.head, holder, break_lock=break_lock, inherited=inherited)
        if holding is not holder:
            yield holding  # the enclosing run takes and releases it
            return
        heartbeat = _Heartbeat(nodes.head, holder)
        heartbeat.start()
        os.environ[LOCK_CLAIM_ENV] = holder.claim
        try:
            with _sigterm_unwinds():
                yield holder
        finally:
            os.environ.pop(LOCK_CLAIM_ENV, None)
            if inherited:
                os.environ[LOCK_CLAIM_ENV] = inherited
            heartbeat.stop()
            _release(nodes.head, holder)


def _release(head: Node, holder: Holder) -> None:
    """Never raises: the run's own outcome matters more; a lock left behind is reported stale, not lost."""
    try:
        if not head.run(release_command(holder.claim), check=False, timeout=30).ok:
            _say(f"the lane pair's lock on {head.alias} was no longer this run's at its end (it was broken)")
    except NodeError as exc:
        _say(f"could not release the lane pair's lock on {head.alias} ({exc}); the next run will find it stale")


def hold_lane_pair(params: LaneParams, runbook: str, run_id: str, *, needed: bool, break_lock: bool = False):
    """The lock for a run that changes the pair (`needed`); nothing at all, no connection, for one that does not
    (a read-only runbook, a dry run)."""
    return lane_pair_lock(params, runbook, run_id, break_lock=break_lock) if needed else nullcontext()
