"""HTTP from the operator's machine (lanebook.nodes.http): one JSON request against a real local server, its
transport failure as one line, and the one TLS context every client of the process shares."""

import json
from http.server import BaseHTTPRequestHandler

import pytest
from helpers.http_helpers import serving
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


class KeyedServer(BaseHTTPRequestHandler):
    """vLLM's --api-key as its middleware answers: 401 {"error": "Unauthorized"} on a guarded path without the key;
    every request's Authorization header kept, by path."""

    key = "lb-http-key-5e6f7a8b"
    seen: dict = {}

    def _answer(self):
        KeyedServer.seen[self.path] = self.headers.get("Authorization")
        guarded = self.path.startswith(("/v1", "/v2", "/inference", "/cohere"))
        status = 401 if guarded and self.headers.get("Authorization") != f"Bearer {self.key}" else 200
        answer = json.dumps({"error": "Unauthorized"} if status == 401 else {"data": [{"id": "m"}]}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


def keyed_lane_at(tmp_path, root: str, keys: str):
    """twin-keyed's lane file with its API at ROOT and its key file in TMP_PATH holding KEYS."""
    from lanebook.base.paths import PARAMS_DIR
    from lanebook.lane.params import load_lane

    (tmp_path / "keys").write_text(keys)
    (tmp_path / "keys").chmod(0o600)
    text = (PARAMS_DIR / "twin-keyed.yaml").read_text()
    text = text.replace("api: http://127.0.4.2:8888/v1", f"api: {root}/v1")
    text = text.replace("{key_file: ../.twin/twin-keyed.keys}", "{key_file: keys}")
    (tmp_path / "lane.yaml").write_text(text)
    return load_lane(tmp_path / "lane.yaml")


@pytest.fixture(autouse=True)
def no_keyed_lanes(monkeypatch):
    """Each test starts with no keyed lane known to the process's clients."""
    from lanebook.lane import keys

    monkeypatch.setattr(keys, "_CLIENT_KEYS", {})


def test_a_keyed_lanes_key_goes_to_its_guarded_paths_only(tmp_path):
    """vLLM 0.32.0 guards /v1, /v2, /inference and /cohere: the key goes there, on the lane's origin, and nowhere
    else (/health, /metrics, /version stay keyless; another server never sees it)."""
    from lanebook.lane.keys import lane_keys

    KeyedServer.seen = {}
    with serving(KeyedServer) as root, serving(KeyedServer) as other:
        lane_keys(keyed_lane_at(tmp_path, root, f"{KeyedServer.key} lb-http-second-0000"))
        with direct_client(timeout=10) as client:
            for path in ("/health", "/metrics", "/version", "/v1/models"):
                assert client.get(f"{root}{path}").status_code == 200, path
            assert client.get(f"{other}/elsewhere").status_code == 200
        assert request_json("POST", f"{root}/v1/chat/completions", {}, timeout_s=10).status == 200
    assert KeyedServer.seen == {
        "/health": None,
        "/metrics": None,
        "/version": None,
        "/v1/models": f"Bearer {KeyedServer.key}",
        "/elsewhere": None,
        "/v1/chat/completions": f"Bearer {KeyedServer.key}",
    }


def test_a_401_of_a_keyed_route_says_the_lane_wants_a_key_and_a_wait_stops_at_once(tmp_path):
    from lanebook.lane.keys import lane_keys
    from lanebook.nodes.http import KeyRefused, wait_for

    with serving(KeyedServer) as root:
        answer = request_json("GET", f"{root}/v1/models", timeout_s=10)  # no keyed lane of this process serves there
        assert answer.status == 401 and answer.body == {"error": "Unauthorized"}
        assert answer.refused == "HTTP 401 from /v1/models: the lane wants an API key and none was sent " + (
            "(name where it comes from in the lane file: auth:)"
        )
        lane_keys(keyed_lane_at(tmp_path, root, "lb-another-key-9999"))
        refused = request_json("GET", f"{root}/v1/models", timeout_s=10).refused
        assert refused == "HTTP 401 from /v1/models: the lane refused the key sent (it serves with another key)"
        with pytest.raises(KeyRefused) as raised:
            wait_for(f"{root}/v1/models", lambda r: r.status_code == 200, what="models", timeout_s=60, interval_s=1)
        assert str(raised.value) == f"models: {refused}"
        assert request_json("GET", f"{root}/health", timeout_s=10).refused is None  # keyless paths are no refusal
