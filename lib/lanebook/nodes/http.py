"""HTTP from the operator's machine: bounded waits (poll until an endpoint answers as wanted, show progress, give up at
the bound) and single JSON requests (the gates' smokes).

Every client lanebook opens to a lane is built here (`direct_client`, and the speed harness's through `lane_auth`):
it sends a keyed lane's key (lanebook.lane.keys) as `Authorization: Bearer KEY` exactly where vLLM's `--api-key`
asks for one, the paths under /v1, /v2 and /inference (its API server's AuthenticationMiddleware; /health, /metrics,
/version, /ping and the rest stay keyless), and nowhere else: a Prometheus or JupyterLab on another origin never
sees it."""

from __future__ import annotations

import functools
import ssl
import time
from dataclasses import dataclass
from typing import Callable, Generator, Optional
from urllib.parse import urlsplit

import httpx

from lanebook.base.errors import LanebookError
from lanebook.lane.keys import client_key_for

# The path prefixes vLLM's AuthenticationMiddleware guards when started with --api-key (vllm/entrypoints/openai/
# server_utils.py in 0.32.0: `url_path.startswith(("/v1", "/v2", "/inference"))` after the root path; OPTIONS
# requests pass). The recipe's env example says the same of its pinned runtime.
GUARDED_PREFIXES = ("/v1", "/v2", "/inference")


def guarded(url: str) -> bool:
    """Whether vLLM's --api-key guards this URL's path."""
    return urlsplit(url).path.startswith(GUARDED_PREFIXES)


class LaneKeyAuth(httpx.Auth):
    """Adds the keyed lane's bearer key to a request of a guarded path on that lane's API origin, and to nothing
    else; looked up at each request, so a client made before a lane's keys were read still sends them."""

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if request.method != "OPTIONS" and request.url.path.startswith(GUARDED_PREFIXES):
            key = client_key_for(str(request.url))
            if key is not None and "authorization" not in request.headers:
                request.headers["Authorization"] = f"Bearer {key}"
        yield request


def lane_auth() -> LaneKeyAuth:
    return LaneKeyAuth()


def refused_key(status: int, url: str) -> Optional[str]:
    """What a 401/403 from a lane's guarded route means, as one line (None for any other answer)."""
    if status not in (401, 403) or not guarded(url):
        return None
    if client_key_for(url) is None:
        return (
            f"HTTP {status} from {urlsplit(url).path}: the lane wants an API key and none was sent "
            "(name where it comes from in the lane file: auth:)"
        )
    return f"HTTP {status} from {urlsplit(url).path}: the lane refused the key sent (it serves with another key)"


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The one TLS context of the process, for every client lanebook opens: httpx makes a new one for each client
    otherwise, loading the CA bundle each time (about 25 ms of CPU), even for a lane's plain-HTTP API."""
    return httpx.create_ssl_context()


def direct_client(**options) -> httpx.Client:
    """An httpx client that goes to the address it is given, never through a proxy from the environment, with the
    process's one TLS context, sending a keyed lane's key where it is asked for (LaneKeyAuth); OPTIONS as httpx.Client
    takes them (timeout, ...)."""
    options.setdefault("auth", lane_auth())
    return httpx.Client(trust_env=False, verify=tls_context(), **options)


class WaitTimeout(LanebookError):
    """The endpoint did not become ready within the bound."""


class KeyRefused(LanebookError):
    """A keyed lane's guarded route answered 401/403: no key, or another key than the lane serves with."""


@dataclass(frozen=True)
class WaitProgress:
    what: str
    attempt: int
    elapsed_s: float
    bound_s: float
    last: str  # the last answer: "HTTP 503", "ConnectError", ...

    def line(self) -> str:
        return (
            f"waiting for {self.what}: {self.elapsed_s:.0f}/{self.bound_s:.0f} s, attempt {self.attempt}, "
            f"last: {self.last}"
        )


def wait_for(
    url: str,
    ready: Callable[[httpx.Response], bool],
    *,
    what: str,
    timeout_s: float,
    interval_s: float,
    progress: Optional[Callable[[WaitProgress], None]] = None,
) -> httpx.Response:
    """GET `url` every `interval_s` until `ready(response)`; raise WaitTimeout once `timeout_s` has passed."""
    started = time.monotonic()
    attempt, last = 0, "no answer yet"
    with direct_client() as client:
        while True:
            attempt += 1
            remaining = timeout_s - (time.monotonic() - started)
            try:
                response = client.get(url, timeout=max(0.5, min(10.0, remaining)))
                if ready(response):
                    return response
                refused = refused_key(response.status_code, url)
                if refused:  # no later attempt is answered otherwise: the key is the lane's setting, not its state
                    raise KeyRefused(f"{what}: {refused}")
                last = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                last = type(exc).__name__
            elapsed = time.monotonic() - started
            if progress:
                progress(WaitProgress(what, attempt, elapsed, timeout_s, last))
            if elapsed >= timeout_s:
                raise WaitTimeout(f"{what}: {url} not ready within {timeout_s:g} s ({attempt} attempts, last: {last})")
            time.sleep(min(interval_s, timeout_s - elapsed))


@dataclass(frozen=True)
class JsonAnswer:
    """One request's answer: its HTTP status, its JSON body (None when the body is not JSON) and text, and its time."""

    status: int
    body: Optional[object]
    text: str
    duration_s: float
    refused: Optional[str] = None  # a 401/403 of a guarded route, said as what it means (refused_key)


def request_json(method: str, url: str, body: Optional[dict] = None, *, timeout_s: float) -> JsonAnswer:
    """One request with an optional JSON body, directly (never through a proxy); a transport failure is one
    LanebookError line naming the request."""
    started = time.monotonic()
    try:
        with direct_client() as client:
            response = client.request(method, url, json=body, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise LanebookError(f"{method} {url} failed: {type(exc).__name__}: {exc}") from None
    try:
        parsed = response.json()
    except ValueError:
        parsed = None
    return JsonAnswer(
        response.status_code,
        parsed,
        response.text,
        time.monotonic() - started,
        refused_key(response.status_code, url),
    )
