"""Running one row of the fault matrix (lanebook.twin.fault_matrix) against a private fast twin.

The twin comes up with the row's fault (its own state dir and ports, so a shared twin is never touched);
the row's setup happens; the meeting runbook runs as an operator types it (`lanebook run RUNBOOK --lane FILE
-p ...`, timed from start to record); the doctor reads the lane (what `lanebook doctor --lane` calls, read-only:
after the meeting run, or before it where the row says that run repairs the fault); then the runbook the fix
names; then the nodes are looked at: the row's state check, and every file of the weights and the checkout on each
node listed before and after.
What was observed comes back as a fault_matrix.Observed; the caller (the test, the benchmark) judges it.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

import httpx

from lanebook.base.errors import LanebookError
from lanebook.base.files import sha256_file
from lanebook.lane.params import LaneParams, lane_with, load_lane
from lanebook.nodes.http import direct_client, request_json
from lanebook.nodes.prometheus import RUNNING, metrics_url, parse_metrics
from lanebook.nodes.ssh import LaneNodes, Node, NodeError, q, qpath
from lanebook.ops import launcher, memory, weights
from lanebook.speed.client import chat_url
from lanebook.twin import control
from lanebook.twin.fault_matrix import NODE_REBOOTS, FaultRow, Observed
from lanebook.verify import doctor_gather
from lanebook.verify.doctor import GENERATION

LANEBOOK = str(Path(sys.executable).parent / "lanebook")
RUN_TIMEOUT_S = 600
SETTLE_S = 60.0  # bounded waits for a state the twin reaches by itself (a dying head, an idle engine)


# --- the executed notebook ----------------------------------------------------------------------


def failure_message(notebook: dict) -> str:
    """The StepFailed message a failed run showed (the failing step, what was expected, what was seen); "" if none."""
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error" and output.get("ename") == "StepFailed":
                return output.get("evalue", "")
    return ""


def shown_text(notebook: dict) -> str:
    """Everything the executed notebook showed: streams, Markdown and plain text outputs, errors."""
    parts = []
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []):
            text = output.get("text") or "".join(
                output.get("data", {}).get(kind, "") for kind in ("text/markdown", "text/plain")
            )
            parts.append("".join(text) if isinstance(text, list) else text)
            if output.get("output_type") == "error":
                parts.append(f"{output.get('ename')}: {output.get('evalue')}")
    return "\n".join(parts)


# --- runs ---------------------------------------------------------------------------------------


def lanebook_run(workdir: Path, runbook: str, lane_file: Path, params: tuple[str, ...] = ()) -> tuple[dict, float]:
    """`lanebook run RUNBOOK --lane FILE -p ...` with its outputs in WORKDIR/outputs: its record and wall seconds."""
    outputs = workdir / "outputs"
    args = [LANEBOOK, "run", runbook, "--lane", str(lane_file), *(a for p in params for a in ("-p", p))]
    started = time.monotonic()
    done = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env={**os.environ, "LANEBOOK_OUTPUTS": str(outputs)},
    )
    elapsed = time.monotonic() - started
    if done.returncode not in (0, 1):
        raise LanebookError(f"`lanebook run {runbook}` exit {done.returncode}: {(done.stderr or done.stdout)[-800:]}")
    record = json.loads((outputs / "runs.jsonl").read_text().splitlines()[-1])
    if (done.returncode == 0) != (record["verdict"] == "pass"):
        raise LanebookError(f"`lanebook run {runbook}` exit {done.returncode} with verdict {record['verdict']}")
    return record, elapsed


def private_lane_file(status: dict, path: Path) -> Path:
    """The twin lane pointed at the private twin's API."""
    path.write_text(json.dumps(lane_with(load_lane("twin"), api=status["api"]).model_dump(mode="json")))
    return path


# --- the nodes ----------------------------------------------------------------------------------


def kept_files(node: Node, params: LaneParams) -> set[str]:
    """Every file and link of the lane's weights and checkout on a node."""
    roots = " ".join(qpath(p) for p in (params.weights.hub_dir, params.checkout))
    return set(node.run(f"find {roots} -type f -o -type l 2>/dev/null; true").stdout.split("\n")) - {""}


def reachable_nodes(nodes: LaneNodes) -> list[Node]:
    """The nodes that answer ssh (a worker with fault worker-unreachable does not)."""
    found = []
    for node in nodes:
        try:
            node.run("true")
            found.append(node)
        except NodeError:
            pass
    return found


def _until(condition: Callable[[], bool], within_s: float = SETTLE_S) -> bool:
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def _started(nodes: LaneNodes) -> None:
    started = launcher.start_lane(nodes)
    if not started.ok:
        raise LanebookError(f"setup: the launcher did not bring the lane up: {started.summary()}")


def _head_dead(nodes: LaneNodes) -> None:
    launcher.start_lane(nodes)  # may see the head die before its chat request: what matters is what follows
    if not _until(lambda: launcher.lane_containers(nodes).state == launcher.ORPHANED_WORKER):
        raise LanebookError(f"setup: the head did not die: {launcher.lane_containers(nodes).summary()}")


def _started_and_stopped(nodes: LaneNodes) -> None:
    _started(nodes)
    if not launcher.stop_lane(nodes).launcher.ok:
        raise LanebookError("setup: the stop script failed")
    if memory.check_sticky_uma(nodes).ok:
        raise LanebookError("setup: no memory stayed held after the stop (fault sticky-uma)")


def _worker_rebooted(nodes: LaneNodes) -> None:
    """The worker reboots under the recipe's restart policy (unless-stopped): docker starts its container again,
    so every node runs the lane's container, but the head's engine died with the rank it lost: /health is not 200."""
    _started(nodes)
    control.reboot("worker")
    with LaneNodes(nodes.params) as rebooted:  # the worker's connection ended with its reboot
        if not _until(
            lambda: (
                launcher.lane_containers(rebooted).state == launcher.LANE_UP
                and launcher.ask_api(rebooted, timeout_s=2.0).healthy is False
            )
        ):
            raise LanebookError(
                f"setup: after the worker's reboot, not both containers up with the head unhealthy: "
                f"{launcher.lane_containers(rebooted).summary()}; {launcher.ask_api(rebooted).detail}"
            )


def _counters(nodes: LaneNodes) -> tuple[float, float]:
    """(requests running, generation tokens) as the head's /metrics says now."""
    snapshot = parse_metrics(request_json("GET", metrics_url(nodes.params.api), timeout_s=10.0).text)
    return snapshot.total(RUNNING) or 0.0, snapshot.total(GENERATION) or 0.0


def _frozen(nodes: LaneNodes) -> tuple[bool, float, float]:
    """Hung: requests running and no token generated over a second; with (running, generated) at the first read."""
    running, generated = _counters(nodes)
    time.sleep(1.0)
    return running > 0 and _counters(nodes) == (running, generated), running, generated


def _stream(nodes: LaneNodes, prompt: str, max_tokens: int) -> None:
    """One streaming chat request read to its end (or until the twin goes down under it)."""
    body = {
        "model": nodes.params.served_model_name,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    url = chat_url(nodes.params.api)
    try:
        with direct_client(timeout=httpx.Timeout(RUN_TIMEOUT_S, connect=10.0)) as client:
            with client.stream("POST", url, json=body) as response:
                for _ in response.iter_bytes():
                    pass
    except httpx.HTTPError:
        pass  # a hung request ends when its twin goes down


def _requests_hung(nodes: LaneNodes) -> None:
    """Fault tp-hang: long requests under concurrency wedge the pair; left running (daemon threads) until the twin
    goes down. Waits until two /metrics reads a second apart show requests running and no token generated."""
    _started(nodes)
    for n in range(4):
        prompt = f"Write a long story about lighthouse keeper number {n}."
        threading.Thread(target=_stream, args=(nodes, prompt, 2000), daemon=True).start()

    if not _until(lambda: _frozen(nodes)[0]):
        raise LanebookError(f"setup: the requests did not hang: running, generated = {_counters(nodes)}")


def _stats_lines(nodes: LaneNodes) -> int:
    container = q(launcher.container_name(nodes))
    return int(nodes.head.run(f"docker logs {container} 2>&1 | grep -c 'SpecDecoding metrics' || true").stdout or 0)


def _wave_served(nodes: LaneNodes) -> None:
    """Two streaming requests served to their end, then the engine's next periodic stats lines (vLLM logs them
    every 10 s while there was traffic) in the head's container log."""
    _started(nodes)
    before = _stats_lines(nodes)
    waves = [
        threading.Thread(target=_stream, args=(nodes, f"Explain how tide tables are made, part {n}.", 200))
        for n in range(2)
    ]
    for thread in waves:
        thread.start()
    for thread in waves:
        thread.join(RUN_TIMEOUT_S)
    if not _until(lambda: _stats_lines(nodes) > before):
        raise LanebookError("setup: no SpecDecoding stats line logged after the wave")


SETUP_ACTIONS: dict[str, Callable[[LaneNodes], None]] = {
    "none": lambda lane: None,
    "started": _started,
    "started, head dead": _head_dead,
    "started and stopped": _started_and_stopped,
    "started, worker rebooted": _worker_rebooted,
    "started, requests hung": _requests_hung,
    "started, a wave served": _wave_served,
}


def _on_head_only(nodes: LaneNodes) -> tuple[bool, str]:
    running = launcher.running_containers(nodes, [nodes.head])
    return not running[nodes.head.alias], f"head: {', '.join(running[nodes.head.alias]) or 'none'}"


def _cleanly_down(nodes: LaneNodes) -> tuple[bool, str]:
    containers = launcher.lane_containers(nodes)
    return containers.state == launcher.LANE_DOWN, f"{containers.state}: {containers.summary()}"


def _up(nodes: LaneNodes) -> tuple[bool, str]:
    containers, api = launcher.lane_containers(nodes), launcher.ask_api(nodes)
    return containers.state == launcher.LANE_UP and bool(api.healthy), f"{containers.state}; {api.detail}"


def _left_for_stop(nodes: LaneNodes) -> tuple[bool, str]:
    containers, api = launcher.lane_containers(nodes), launcher.ask_api(nodes, timeout_s=2.0)
    return containers.state == launcher.LANE_UP and not api.healthy, f"{containers.state}; {api.detail}"


def _worker_tree_whole(nodes: LaneNodes) -> tuple[bool, str]:
    report = weights.verify_weights(nodes.node("worker"), nodes.params.weights, sha256=True)
    return report.ok and report.sha256_checked == nodes.params.weights.shards, report.summary()


def _units_masked_lane_up(nodes: LaneNodes) -> tuple[bool, str]:
    units = list(nodes.params.legacy_units)
    states = {node.alias: memory.parse_unit_states(node.run(memory.unit_probe(units)).stdout) for node in nodes}
    masked = all(states[a].get(u) == ("inactive", "masked") for a in states for u in units)
    up, detail = _up(nodes)
    return masked and up, f"units {states}; {detail}"


def _hung_left_for_stop(nodes: LaneNodes) -> tuple[bool, str]:
    containers, api = launcher.lane_containers(nodes), launcher.ask_api(nodes, timeout_s=2.0)
    frozen, running, generated = _frozen(nodes)
    return (
        containers.state == launcher.LANE_UP and bool(api.healthy) and frozen,
        f"{containers.state}; {api.detail}; running {running:g}, generated {generated:g} (frozen: {frozen})",
    )


STATE_ACTIONS: dict[str, Callable[[LaneNodes], tuple[bool, str]]] = {
    "nothing started": _on_head_only,
    "lane cleanly down": _cleanly_down,
    "lane up": _up,
    "left for stop": _left_for_stop,
    "worker tree whole": _worker_tree_whole,
    "units masked, lane up": _units_masked_lane_up,
    "hung, left for stop": _hung_left_for_stop,
}


def doctor_answer(params: LaneParams) -> dict:
    """What `lanebook doctor --lane LANE --json` prints, from the library call it makes (read-only, no lock)."""
    with LaneNodes(params) as nodes:
        gathered = doctor_gather.gather(nodes)
    return {**gathered.diagnosis().to_json(), **gathered.to_json()}


def lost(before: dict[str, set[str]], after: dict[str, set[str]]) -> list[str]:
    """Files present before and gone after, per node, except unfinished downloads (*.incomplete)."""
    return sorted(
        f"{alias}:{path}"
        for alias, paths in before.items()
        for path in paths - after.get(alias, set())
        if not path.endswith(".incomplete")
    )


def run_row(row: FaultRow, workdir: Path) -> Observed:
    """The row on its own private twin (always taken down after): its runs and what the nodes show after."""
    import nbformat

    workdir.mkdir(parents=True, exist_ok=True)
    faults = [] if row.fault == NODE_REBOOTS else [row.fault]
    with control.private_twin(workdir / "twin", faults) as status:
        lane_file = private_lane_file(status, workdir / "lane.json")
        params = load_lane(lane_file)
        with LaneNodes(params) as nodes:
            before = {node.alias: kept_files(node, params) for node in reachable_nodes(nodes)}
            SETUP_ACTIONS[row.setup](nodes)
        doctor = doctor_answer(params) if row.doctor and row.doctor_before else None
        record, detection_s = lanebook_run(workdir, row.runbook, lane_file, row.params)
        output = workdir / "outputs" / record["output"]
        notebook, output_sha256 = nbformat.read(output, as_version=4), sha256_file(output)
        if row.doctor and not row.doctor_before:
            doctor = doctor_answer(params)
        repair_record: Optional[dict] = lanebook_run(workdir, row.repair, lane_file)[0] if row.repair else None
        with LaneNodes(params) as nodes:
            state_ok, state_detail = STATE_ACTIONS[row.state_after](nodes)
            after = {node.alias: kept_files(node, params) for node in reachable_nodes(nodes)}
    return Observed(
        record=record,
        output_sha256=output_sha256,
        failure=failure_message(notebook),
        report=shown_text(notebook),
        repair_record=repair_record,
        state_ok=state_ok,
        state_detail=state_detail,
        lost_files=lost(before, after),
        detection_s=detection_s,
        doctor=doctor,
    )


def _run_logged(row: FaultRow, workdir: Path) -> Observed:
    workdir.mkdir(parents=True, exist_ok=True)
    with open(workdir / "run.log", "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    return run_row(row, workdir)


@contextmanager
def concurrent_rows(rows: Iterable[FaultRow], workdir: Path, jobs: int) -> Iterator[dict[str, Future]]:
    """Each row in a worker process of its own, `jobs` at a time (a private twin points its whole process at
    itself), the longest bounds first; each row's terminal output (progress lines) in WORKDIR/FAULT/run.log.
    Yields each row's future Observed by fault; leaving waits for every row."""
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield {
            row.fault: pool.submit(_run_logged, row, workdir / row.fault)
            for row in sorted(rows, key=lambda r: -r.bound_s)
        }
