"""Pages: an incident sent where the lane file's `page:` (or `lanebook watch --page-command`) says, and nowhere else.

A page is one JSON object (`page_payload`): the lane, the incident's id, cause, times and runs, and what happened
(`event`: opened, repaired, served-again, needs-operator, regression, link). It goes to a command, which gets it on
stdin (run as `sh -c CMD`, so an operator's pipe works), and/or to a webhook as a JSON POST; the webhook's URL comes
from an environment variable or a file of mode 0600, like an API key, and is registered with the redactor, so it
is never printed or recorded. Every page and payload is redacted before it leaves.

Pages go out from a thread of their own: a pager that hangs or fails never holds up a repair. A failed page is
logged (outputs/watch/LANE/pages.jsonl: when, event, where to, ok, why; never the URL) and tried again, up to
ATTEMPTS times with growing waits. Rate limit (`due`, pure): one page per incident and event within the lane's
`page.min_interval_s`.
"""

from __future__ import annotations

import json
import os
import queue
import stat
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Optional
from urllib.parse import urlsplit

from lanebook.base.errors import LaneError
from lanebook.base.redact import add_secrets, redact, redact_data
from lanebook.lane.params import LaneParams, PageParams

ATTEMPTS = 4
RETRY_S = (2.0, 10.0, 60.0)
COMMAND_TIMEOUT_S = 30.0
WEBHOOK_TIMEOUT_S = 10.0


def webhook_url(page: PageParams, *, where: str) -> Optional[str]:
    """The webhook URL the page block names (None: no webhook), registered with the redactor as a secret (its path and
    query too, where a token usually sits). A file must be mode 0600; an unset variable or an unreadable file is one
    LaneError line before anything runs."""
    if page.webhook_url_env is not None:
        url = os.environ.get(page.webhook_url_env, "").strip()
        if not url:
            raise LaneError(f"{where}: page.webhook_url_env: ${page.webhook_url_env} is not set in this environment")
    elif page.webhook_file is not None:
        path = Path(os.path.expanduser(page.webhook_file))
        try:
            info = path.stat()
        except OSError:
            raise LaneError(f"{where}: page.webhook_file {page.webhook_file} cannot be read") from None
        if info.st_mode & 0o077:
            raise LaneError(
                f"{where}: page.webhook_file {page.webhook_file} is readable by group or others (mode "
                f"{stat.S_IMODE(info.st_mode):04o}); chmod 600 {page.webhook_file}"
            )
        url = path.read_text().strip()
    else:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LaneError(f"{where}: the page webhook is not an http(s) URL")
    add_secrets([url, parts.path + (f"?{parts.query}" if parts.query else ""), parts.query])
    return url


def page_payload(lane: LaneParams, incident: dict, event: str, *, note: str = "") -> dict:
    """What a page says: the incident as its record keeps it, without its probes, and the event; redacted."""
    kept = {k: v for k, v in incident.items() if k != "probes"}
    return redact_data(
        {
            "lane": lane.name,
            "figures": lane.figures_label,
            "event": event,
            "note": note,
            "incident": kept,
        }
    )


def due(sent: dict[tuple[str, str], float], key: tuple[str, str], now: float, min_interval_s: float) -> bool:
    """Whether a page of KEY (incident id, event) may go now: none of the same key within min_interval_s."""
    last = sent.get(key)
    return last is None or now - last >= min_interval_s


class Pager:
    """Sends pages from a thread of its own (see the module docstring); `log` gets one dict per attempt."""

    def __init__(
        self,
        lane: LaneParams,
        *,
        command: Optional[str],
        url: Optional[str],
        log: Callable[[dict], None],
        clock: Callable[[], float] = time.time,
    ):
        self.lane, self.command, self.url, self.log, self.clock = lane, command, url, log, clock
        self.sent: dict[tuple[str, str], float] = {}
        self._queue: queue.Queue = queue.Queue()
        self._thread: Optional[threading.Thread] = None

    @property
    def targets(self) -> list[str]:
        return (["command"] if self.command else []) + (["webhook"] if self.url else [])

    def page(self, incident: dict, event: str, *, note: str = "") -> bool:
        """Queue a page of the incident's EVENT, unless one of the same went out within the rate limit; whether it
        was queued. Never blocks and never raises."""
        key = (str(incident.get("id")), event)
        now = self.clock()
        if not self.targets or not due(self.sent, key, now, self.lane.page.min_interval_s):
            return False
        self.sent[key] = now
        payload = page_payload(self.lane, incident, event, note=note)
        for target in self.targets:
            self._queue.put((target, payload, 1))
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._deliver, name="lanebook-pager", daemon=True)
            self._thread.start()
        return True

    def flush(self, timeout_s: float = 60.0) -> None:
        """Wait (bounded) until every queued page was sent or given up: before `--once` exits."""
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.05)

    def _deliver(self) -> None:
        while True:
            try:
                target, payload, attempt = self._queue.get(timeout=5.0)
            except queue.Empty:
                return
            try:
                why = self._send(target, payload)
                entry = {
                    "t": round(self.clock(), 3),
                    "event": payload["event"],
                    "incident": payload["incident"].get("id"),
                    "to": target,
                    "attempt": attempt,
                    "ok": why is None,
                    "why": why,
                }
                self.log(redact_data(entry))
                if why is not None and attempt < ATTEMPTS:
                    delay = RETRY_S[min(attempt - 1, len(RETRY_S) - 1)]
                    retry = threading.Timer(delay, self._queue.put, args=((target, payload, attempt + 1),))
                    retry.daemon = True
                    retry.start()
            finally:
                self._queue.task_done()

    def _send(self, target: str, payload: dict) -> Optional[str]:
        """None when sent; else why not, redacted, in one line."""
        text = json.dumps(payload, sort_keys=True)
        if target == "command":
            try:
                done = subprocess.run(
                    ["sh", "-c", self.command],
                    input=text + "\n",  # one line per page: a command appending pages keeps them apart
                    capture_output=True,
                    text=True,
                    timeout=COMMAND_TIMEOUT_S,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                return redact(f"page command: {type(exc).__name__}")
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
                return redact(f"page command exited {done.returncode}: {tail[0][:200]}")
            return None
        from lanebook.nodes.http import direct_client

        try:
            with direct_client(auth=None) as client:
                response = client.post(
                    self.url, content=text, headers={"Content-Type": "application/json"}, timeout=WEBHOOK_TIMEOUT_S
                )
        except Exception as exc:  # noqa: BLE001 - any transport failure is a failed page, retried
            return redact(f"webhook: {type(exc).__name__}")
        if response.status_code >= 300:
            return f"webhook answered HTTP {response.status_code}"
        return None
