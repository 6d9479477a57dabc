"""Waiting, from the operator's machine, until a lane's server answers: /health, then /v1/models.

Each wait is bounded, shows its progress as it happens (a bar in JupyterLab, a few lines headless; a
caller's own `progress` callback instead) and goes into the executor's history, so a dry run lists
the waits it would make (and makes none).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

import httpx

from lanebook.base.errors import LanebookError
from lanebook.base.progress import Progress
from lanebook.nodes.http import WaitProgress, direct_client, wait_for
from lanebook.nodes.prometheus import server_root
from lanebook.nodes.ssh import Executor, LaneNodes


def _wait(
    url: str,
    ready,
    *,
    what: str,
    timeout_s: float,
    interval_s: float,
    progress: Optional[Callable[[WaitProgress], None]],
    executor: Optional[Executor],
):
    """wait_for, recorded in the executor's history; in dry-run only recorded (no HTTP)."""
    description = f"wait for {what}: GET {url} every {interval_s:g} s, bound {timeout_s:g} s"
    if executor is not None and executor.dry_run:
        executor.record_local(description)
        return None
    started = time.monotonic()
    shown = None if progress else Progress(f"waiting for {what}", timeout_s)  # shown from the first miss on
    follow = progress or (lambda p: shown.update(p.elapsed_s, f"attempt {p.attempt}, last: {p.last}"))
    try:
        response = wait_for(url, ready, what=what, timeout_s=timeout_s, interval_s=interval_s, progress=follow)
    except LanebookError as exc:
        if shown:
            shown.finish(time.monotonic() - started, f"not ready within the bound: {exc}", ok=False)
        if executor is not None:
            executor.record_local(description, exit_code=1, duration_s=time.monotonic() - started, detail=str(exc))
        raise
    if shown:
        shown.finish(time.monotonic() - started, "ready")
    if executor is not None:
        executor.record_local(description, duration_s=time.monotonic() - started)
    return response


def wait_health(
    api: str,
    timeout_s: float = 900.0,
    interval_s: float = 5.0,
    progress: Optional[Callable[[WaitProgress], None]] = None,
    executor: Optional[Executor] = None,
) -> bool:
    """Poll the server's /health until 200 (vLLM answers 503 when the engine is dead, nothing while it boots)."""
    response = _wait(
        f"{server_root(api)}/health",
        lambda r: r.status_code == 200,
        what="/health",
        timeout_s=timeout_s,
        interval_s=interval_s,
        progress=progress,
        executor=executor,
    )
    return response is not None


def wait_models(
    api: str,
    model: Optional[str] = None,
    timeout_s: float = 900.0,
    interval_s: float = 5.0,
    progress: Optional[Callable[[WaitProgress], None]] = None,
    executor: Optional[Executor] = None,
) -> Optional[list[dict]]:
    """Poll /v1/models until it lists `model` (any model when None); returns the model entries (None in dry-run)."""

    def lists_model(response) -> bool:
        if response.status_code != 200:
            return False
        try:
            ids = [m.get("id") for m in response.json().get("data", [])]
        except ValueError:
            return False
        return bool(ids) and (model is None or model in ids)

    response = _wait(
        f"{api.rstrip('/')}/models",
        lists_model,
        what=f"/v1/models listing {model or 'a model'}",
        timeout_s=timeout_s,
        interval_s=interval_s,
        progress=progress,
        executor=executor,
    )
    return response.json()["data"] if response is not None else None


def wait_lane_ready(
    nodes: LaneNodes,
    timeout_s: Optional[float] = None,
    interval_s: float = 5.0,
    progress: Optional[Callable[[WaitProgress], None]] = None,
) -> Optional[list[dict]]:
    """/health then /v1/models listing the lane's served model, within the launcher's wait budget by default."""
    bound = timeout_s if timeout_s is not None else float(nodes.params.launcher.wait_budget_s)
    api, executor = nodes.params.api, nodes.executor
    wait_health(api, bound, interval_s, progress, executor)
    return wait_models(api, nodes.params.served_model_name, bound, interval_s, progress, executor)


class ReadinessWatch:
    """Watch, from this machine, for the moment a starting server lists its model, while something else waits.

    The recipe's launcher polls every WAIT_SECONDS (15 s) and exits at the poll after the server is ready;
    lanebook follows readiness as it happens, polling /v1/models every `interval_s` in a background thread, so
    the run shows (and records, as `seen_at`, time.time()) when the server became ready. Used as a context
    manager around the launcher; it never fails the launch and stops with it.
    """

    def __init__(
        self, api: str, model: str, interval_s: float = 0.25, on_seen: Optional[Callable[[float], None]] = None
    ):
        self.url, self.model, self.interval_s, self.on_seen = f"{api.rstrip('/')}/models", model, interval_s, on_seen
        self.seen_at: Optional[float] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="readiness-watch", daemon=True)

    def _lists_model(self, client: httpx.Client) -> bool:
        try:
            response = client.get(self.url, timeout=2.0)
            return response.status_code == 200 and any(
                m.get("id") == self.model for m in response.json().get("data", [])
            )
        except (httpx.HTTPError, ValueError, AttributeError):
            return False

    def _watch(self) -> None:
        with direct_client() as client:
            while not self._stop.is_set():
                if self._lists_model(client):
                    self.seen_at = time.time()
                    if self.on_seen:
                        self.on_seen(self.seen_at)
                    return
                self._stop.wait(self.interval_s)

    def __enter__(self) -> "ReadinessWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
