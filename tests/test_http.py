"""HTTP from the operator's machine (lanebook.nodes.http): one JSON request against a real local server, its
transport failure as one line, and the one TLS context every client of the process shares."""

import json
from http.server import BaseHTTPRequestHandler

import pytest
from http_helpers import serving
from lanebook.base.errors import LanebookError
from lanebook.nodes.http import direct_client, request_json, tls_context


class Echo(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        answer = json.dumps({"got": body, "path": self.path}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    with serving(Echo) as root:
        yield root


def test_a_json_request_returns_the_status_and_the_parsed_body(server):
    answer = request_json("POST", f"{server}/v1/chat/completions", {"max_tokens": 1}, timeout_s=10)
    assert answer.status == 201 and answer.body == {"got": {"max_tokens": 1}, "path": "/v1/chat/completions"}
    assert answer.duration_s > 0


def test_a_transport_failure_is_one_line_naming_the_request():
    with pytest.raises(LanebookError) as raised:
        request_json("GET", "http://127.0.0.1:9/health", timeout_s=2)  # the discard port: nothing listens
    assert str(raised.value).startswith("GET http://127.0.0.1:9/health failed: ConnectError") and "\n" not in str(
        raised.value
    )


def test_the_process_has_one_tls_context():
    assert tls_context() is tls_context()


def test_a_direct_client_goes_to_the_lane_past_a_proxy_the_environment_names(server, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # the discard port: a client that used it would fail
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    with direct_client(timeout=10) as client:
        assert client.post(f"{server}/v1/models", json={}).status_code == 201
