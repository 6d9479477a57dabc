"""Pages (lanebook.runs.pager): the rate limit, pure; a page command that gets the incident as JSON on stdin; a
failing command logged and tried again, never raising; a webhook that gets a JSON POST on loopback, its URL (and the
token in it) read from an environment variable or a 0600 file and never in a page, the log or an error line."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from helpers.waits import eventually
from lanebook.base.errors import LaneError
from lanebook.base.redact import redact
from lanebook.lane.params import PageParams, lane_with, load_lane
from lanebook.runs import pager
from lanebook.runs.pager import Pager, due, page_payload, webhook_url

INCIDENT = {"id": "20261207T000000Z-a1b2c3d4", "cause": "engine down", "probes": [{"t": 1}], "runs": ["b1"]}
TOKEN = "whk-planted-token-0123456789abcdef"


def test_one_page_per_incident_and_event_within_the_interval():
    sent = {("i1", "opened"): 100.0}
    assert not due(sent, ("i1", "opened"), 120.0, 30.0)
    assert due(sent, ("i1", "opened"), 130.0, 30.0)
    assert due(sent, ("i1", "served-again"), 101.0, 30.0)
    assert due({}, ("i2", "opened"), 0.0, 300.0)


def test_a_page_is_the_incident_without_its_probes_with_the_lane_and_event():
    payload = page_payload(load_lane("twin"), INCIDENT, "opened", note="why")
    assert payload == {
        "lane": "twin",
        "figures": "twin",
        "event": "opened",
        "note": "why",
        "incident": {"id": INCIDENT["id"], "cause": "engine down", "runs": ["b1"]},
    }


def test_the_page_command_gets_the_incident_as_json_on_stdin(tmp_path):
    got, log = tmp_path / "page.json", []
    sender = Pager(load_lane("twin"), command=f"cat > {got}", url=None, log=log.append)
    assert sender.page(INCIDENT, "opened")
    assert not sender.page(INCIDENT, "opened")  # rate-limited: the lane's page.min_interval_s
    sender.flush(10)
    assert json.loads(got.read_text())["incident"]["id"] == INCIDENT["id"]
    assert [(e["to"], e["ok"], e["event"]) for e in log] == [("command", True, "opened")]


def test_a_failing_page_command_is_logged_and_tried_again_without_raising(tmp_path, monkeypatch):
    monkeypatch.setattr(pager, "RETRY_S", (0.05,))
    log: list[dict] = []
    sender = Pager(load_lane("twin"), command="echo pager down >&2; exit 3", url=None, log=log.append)
    sender.page(INCIDENT, "opened")
    assert eventually(lambda: len(log) == pager.ATTEMPTS, 10)
    assert [e["attempt"] for e in log] == [1, 2, 3, 4]
    assert {e["why"] for e in log} == {"page command exited 3: pager down"}


class _Hook(BaseHTTPRequestHandler):
    posts: list[tuple[str, dict]] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.posts.append((self.path, json.loads(body)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def hook():
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Hook.posts.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}/hooks/{TOKEN}"
    server.shutdown()


def test_the_webhook_gets_a_json_post_and_its_url_is_never_shown(hook, monkeypatch, capsys):
    monkeypatch.setenv("LANEBOOK_TEST_WEBHOOK", hook)
    lane = lane_with(load_lane("twin"), page=PageParams(webhook_url_env="LANEBOOK_TEST_WEBHOOK").model_dump())
    url = webhook_url(lane.page, where="lane twin")
    assert url == hook and TOKEN not in redact(f"posting to {url}")
    log: list[dict] = []
    sender = Pager(lane, command=None, url=url, log=log.append)
    sender.page({**INCIDENT, "note": f"see {url}"}, "opened")
    sender.flush(10)
    path, body = _Hook.posts[0]
    assert path == f"/hooks/{TOKEN}" and body["incident"]["id"] == INCIDENT["id"]
    assert TOKEN not in json.dumps(body) and TOKEN not in json.dumps(log)
    assert TOKEN not in capsys.readouterr().out


def test_a_webhook_file_must_be_0600_and_an_unset_variable_is_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv("LANEBOOK_TEST_WEBHOOK", raising=False)
    with pytest.raises(LaneError, match=r"^lane twin: page.webhook_url_env: \$LANEBOOK_TEST_WEBHOOK is not set"):
        webhook_url(PageParams(webhook_url_env="LANEBOOK_TEST_WEBHOOK"), where="lane twin")
    secret = tmp_path / "hook"
    secret.write_text(f"https://hooks.example/{TOKEN}\n")
    secret.chmod(0o644)
    with pytest.raises(LaneError, match="readable by group or others .*chmod 600") as refused:
        webhook_url(PageParams(webhook_file=str(secret)), where="lane twin")
    assert TOKEN not in str(refused.value)
    secret.chmod(0o600)
    assert webhook_url(PageParams(webhook_file=str(secret)), where="lane twin") == f"https://hooks.example/{TOKEN}"
