"""What the doctor reads on a live lane, gathered read-only: the records lanebook.verify.doctor diagnoses.

On every node, through the lane's one executor (logged, timed out, redacted; recorded instead of sent in a dry run):
the server container's log since its start, memory, services, the kernel log, the RoCE links, the weights in the HF
cache, the live `vllm serve` command and its CPU use; from this machine, two /metrics scrapes a few seconds apart.
Nothing here writes or takes a lock. What cannot be read is named in `not_read` with why, never left out silently.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional

from lanebook.base.errors import LanebookError
from lanebook.base.redact import redact
from lanebook.nodes.http import request_json
from lanebook.nodes.prometheus import MetricsUnavailable, metrics_url, parse_metrics
from lanebook.nodes.ssh import CommandResult, LaneNodes, Node, NodeError, NodeUnreachable, q, qpath
from lanebook.ops.launcher import container_name
from lanebook.ops.logs import serving_command
from lanebook.verify.doctor import CONFIRMED, Diagnosis, Line, Scrape, diagnose, read_lines

if TYPE_CHECKING:
    from lanebook.steps.runbook import Runbook

SCRAPE_INTERVAL_S = 3.0
STARTED_AT = "docker inspect -f '{{.State.StartedAt}}' "
KERNEL_NOW = "journalctl -k -b 0 --no-pager"
KERNEL_PREVIOUS = "journalctl -k -b -1 --no-pager"
DMESG = "dmesg"
FREE = "free -m"
SERVICES = "systemctl list-units --type=service --state=running --no-pager"
LINKS = "ip -o link"
# The container's processes (vLLM's engine processes first, top takes 20 at most) in the second frame of `top -b`: %CPU
# over the 0.5 s between the frames, not since each process started; the header and process rows only.
ENGINE_CPU_LABEL = "engine processes' CPU (top)"
ENGINE_CPU = (
    "p=$(docker top {container} -o pid,args | awk 'NR!=1{{print (/VLLM::|EngineCore|Worker_TP/ ? 0 : 1), $1}}' | "
    "sort -k1,1n -k2,2n | head -n 20 | cut -d' ' -f2 | paste -sd, -); "
    "[ -n \"$p\" ] || {{ echo 'docker top listed no process' >&2; exit 3; }}; "
    't=$(top -b -n 2 -d 0.5 -c -w 512 -p "$p") || exit; '
    "printf '%s\\n' \"$t\" | awk '/^top -/{{n++}} n==2 && /^ *([0-9]+|PID) /'"
)
GIDS = (
    'for f in /sys/class/infiniband/*/ports/*/gids/*; do [ -e "$f" ] || { echo \'no RoCE device: '
    '/sys/class/infiniband has no GID table\' >&2; exit 3; }; g=$(cat "$f" 2>/dev/null) || continue; '
    '[ "$g" = 0000:0000:0000:0000:0000:0000:0000:0000 ] || echo "$f $g"; done'
)


@dataclass
class Gathered:
    """The records read from a lane, where each came from, and what could not be read (with why)."""

    logs: list[Line] = field(default_factory=list)
    metrics: list[Scrape] = field(default_factory=list)
    kernel: list[Line] = field(default_factory=list)
    live_commands: dict[str, str] = field(default_factory=dict)  # node alias -> the live `vllm serve` command
    read: list[str] = field(default_factory=list)  # "head: docker logs ... (812 lines)"
    not_read: list[str] = field(default_factory=list)  # "worker: dmesg: Operation not permitted"
    dry_run: bool = False

    def diagnosis(self) -> Diagnosis:
        return diagnose(self.logs, self.metrics, self.kernel)

    def to_json(self) -> dict:
        return {"read": self.read, "not_read": self.not_read, "live_commands": self.live_commands}


def _why(result: CommandResult) -> str:
    text = (result.stderr or result.stdout).strip().splitlines()
    return f"exit {result.exit_code}" + (f": {text[-1][:200]}" if text else "")


class _Reader:
    def __init__(self, nodes: LaneNodes, out: Gathered):
        self.nodes, self.out = nodes, out
        self.unreachable = False

    def run(
        self, node: Node, command: str, label: Optional[str] = None, quote_failure: bool = False
    ) -> Optional[CommandResult]:
        """The command's result when it ran and exited 0; otherwise None, and why is named in not_read (with
        `quote_failure`, what the command said is kept as log lines too: "No such object" is evidence)."""
        try:
            result = node.run(command, check=False, timeout=60)
        except NodeError as exc:
            self.out.not_read.append(f"{node.alias}: {label or command}: {exc}")
            if isinstance(exc, NodeUnreachable) and not self.unreachable:
                self.unreachable = True  # the connection error is evidence (D14), quoted once per node
                self.out.logs.append(Line(f"{node.alias}:ssh", 1, str(exc)))
            return None
        if result.dry_run:
            return None
        if not result.ok:
            self.out.not_read.append(f"{node.alias}: {label or command}: {_why(result)}")
            if quote_failure:
                self.out.logs.extend(read_lines(f"{node.alias}:{label or command}", result.stderr or result.stdout))
            return None
        return result

    def lines(self, node: Node, command: str, into: list[Line], label: Optional[str] = None) -> bool:
        result = self.run(node, command, label)
        if result is None:
            return False
        source = f"{node.alias}:{label or command}"
        found = read_lines(source, result.stdout)
        into.extend(found)
        self.out.read.append(f"{node.alias}: {label or command} ({len(found)} lines)")
        return True


def _container_log(reader: _Reader, node: Node, container: str) -> None:
    started = reader.run(node, STARTED_AT + q(container), quote_failure=True)
    since = started.stdout.strip() if started else ""
    if since:
        command = f"docker logs --since {q(since)} {q(container)} 2>&1"
    elif reader.nodes.executor.dry_run:
        command = f"docker logs --since STARTED_AT {q(container)} 2>&1"
    else:
        return  # not_read says why
    reader.lines(node, command, reader.out.logs, label=f"docker logs {container}")


def _kernel(reader: _Reader, node: Node) -> None:
    if not reader.lines(node, KERNEL_NOW, reader.out.kernel):
        reader.lines(node, DMESG, reader.out.kernel)
    reader.lines(node, KERNEL_PREVIOUS, reader.out.kernel)


def _hf_links(nodes: LaneNodes) -> str:
    snapshots = f"{nodes.params.weights.hub_dir}/snapshots"
    return (
        f"find {qpath(snapshots)} -maxdepth 2 -type l -printf '%p -> %l\\n' && "
        f"find -L {qpath(snapshots)} -maxdepth 2 -type l -printf 'broken: %p\\n'"
    )


def _weights_tree(nodes: LaneNodes) -> str:
    """The shards the snapshot refs/main points at must hold, from its index's weight_map, against the links there
    (absent, or dangling), then every *.incomplete blob: one read-only pipeline, a line per gap."""
    return (
        f'hub={qpath(nodes.params.weights.hub_dir)}; rev=$(cat "$hub/refs/main") || exit 3; '
        's="$hub/snapshots/$rev"; i="$s/model.safetensors.index.json"; '
        '[ -f "$i" ] || { echo "no index: $i" >&2; exit 3; }; n=0; '
        'for f in $(grep -o \'"[^"]*\\.safetensors"\' "$i" | tr -d \'"\' | sort -u); do n=$((n+1)); '
        'if [ -L "$s/$f" ] && [ ! -e "$s/$f" ]; then echo "shard link dangling: $s/$f (target $(readlink "$s/$f"))"; '
        'elif [ ! -e "$s/$f" ]; then echo "shard absent: $s/$f (named in the index)"; fi; done; '
        'echo "index names $n shard(s)"; '
        "find \"$hub/blobs\" -name '*.incomplete' -printf 'incomplete blob: %p (%s bytes)\\n'"
    )


def _live_command(reader: _Reader, node: Node, container: str) -> None:
    result = reader.run(node, f"docker top {q(container)}")
    if result is None:
        return
    try:
        command = serving_command(result.stdout)
    except ValueError as exc:
        reader.out.not_read.append(f"{node.alias}: docker top {container}: {exc}")
        return
    reader.out.live_commands[node.alias] = command
    reader.out.logs.append(Line(f"{node.alias}:docker top {container}", 1, command))
    reader.out.read.append(f"{node.alias}: docker top {container} (the live vllm serve command)")


def _scrape(nodes: LaneNodes, out: Gathered, n: int) -> bool:
    """One /metrics scrape of the head's API, redacted, kept in OUT; False (and why, in not_read) when it failed."""
    url = metrics_url(nodes.params.api)
    started = time.monotonic()
    try:
        answer = request_json("GET", url, timeout_s=10.0)
        if answer.status != 200:
            raise MetricsUnavailable(answer.refused or f"{url} answered HTTP {answer.status}")
        text = redact(answer.text)
        parse_metrics(text)
    except (LanebookError, MetricsUnavailable) as exc:
        nodes.executor.record_local(f"GET {url}", exit_code=1, duration_s=time.monotonic() - started)
        out.not_read.append(f"local: GET {url} (scrape {n}): {exc}")
        return False
    nodes.executor.record_local(f"GET {url}", duration_s=time.monotonic() - started)
    out.metrics.append(Scrape(f"local:GET {url} (scrape {n})", text))
    out.read.append(f"local: GET {url} (scrape {n}, {len(text.splitlines())} lines)")
    return True


def _read_node(nodes: LaneNodes, node: Node, container: str) -> Gathered:
    """Everything read on one node, in a record of its own (nodes are read side by side, merged in the lane's order)."""
    out = Gathered(dry_run=nodes.executor.dry_run)
    reader = _Reader(nodes, out)
    _container_log(reader, node, container)
    _live_command(reader, node, container)
    reader.lines(node, ENGINE_CPU.format(container=q(container)), out.logs, label=ENGINE_CPU_LABEL)
    reader.lines(node, FREE, out.logs)
    reader.lines(node, SERVICES, out.logs)
    _kernel(reader, node)
    reader.lines(node, LINKS, out.logs)
    reader.lines(node, GIDS, out.logs, label="RoCE GID tables")
    reader.lines(node, _hf_links(nodes), out.logs, label="HF cache symlinks")
    reader.lines(node, _weights_tree(nodes), out.logs, label="weights index against shards")
    return out


def _merge(into: Gathered, part: Gathered) -> None:
    into.logs += part.logs
    into.kernel += part.kernel
    into.live_commands |= part.live_commands
    into.read += part.read
    into.not_read += part.not_read


def gather(
    nodes: LaneNodes, interval_s: float = SCRAPE_INTERVAL_S, sleep: Callable[[float], None] = time.sleep
) -> Gathered:
    """Read everything the doctor looks at on every node of the lane (see the module docstring). Read-only.

    The nodes are read side by side (each over its own connection) between the two /metrics scrapes, so the interval
    the rates need is spent reading; a dry run records the commands node by node, in the lane's order."""
    out = Gathered(dry_run=nodes.executor.dry_run)
    container = container_name(nodes)
    if nodes.executor.dry_run:
        for node in nodes:
            _merge(out, _read_node(nodes, node, container))
        nodes.executor.record_local(f"GET {metrics_url(nodes.params.api)} twice, {interval_s:g} s apart")
    else:
        first = time.monotonic()
        scraped = _scrape(nodes, out, 1)
        with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
            parts = list(pool.map(lambda node: _read_node(nodes, node, container), nodes))
        for part in parts:
            _merge(out, part)
        if scraped:
            sleep(max(0.0, interval_s - (time.monotonic() - first)))
            _scrape(nodes, out, 2)
    out.not_read.append(
        "launcher output: the recipe's launcher keeps none on the nodes (the launch run's record holds it)"
    )
    return out


def print_gathered(gathered: Gathered) -> None:
    """What was read, and what was not with why (never silently left out)."""
    from rich.console import Console
    from rich.markup import escape

    console = Console(soft_wrap=True, highlight=False)
    for item in gathered.read:
        console.print(f"read: {escape(item)}")
    for item in gathered.not_read:
        console.print(f"[yellow]not read[/yellow]: {escape(item)}")


def gathered_markdown(gathered: Gathered) -> str:
    """What was read and what was not, with why, as Markdown for a runbook's page."""
    read = [f"- read: {item}" for item in gathered.read]
    not_read = [f"- **not read**: {item}" for item in gathered.not_read]
    return "\n".join(read + not_read) or "nothing gathered"


# --- runbook steps (each takes the runbook: it records and checks) -----------------------------------------


def gather_step(rb: "Runbook") -> Gathered:
    """Read the lane (read-only) and show what was read and what was not, with why."""
    gathered = gather(rb.nodes)
    rb.show(markdown=gathered_markdown(gathered))
    rb.record(read=gathered.read, not_read=gathered.not_read)
    rb.expect(
        bool(gathered.read) or gathered.dry_run,
        what="something was read from the lane",
        detail=f"{len(gathered.read)} read",
    )
    return gathered


def findings_step(rb: "Runbook", gathered: Gathered) -> Diagnosis:
    """The diagnosis of what was read: the findings table and evidence lines shown, the findings recorded as figures;
    the check holds when no finding is confirmed (suspected ones and harmless notes are shown, not failed)."""
    from lanebook.verify.doctor_report import diagnosis_markdown

    diagnosis = gathered.diagnosis()
    if not gathered.dry_run:
        rb.show(markdown=diagnosis_markdown(diagnosis))
    rb.record(
        findings=[f.to_json() for f in diagnosis.findings],
        notes=[n.id for n in diagnosis.notes],
        confirmed=diagnosis.ids(CONFIRMED),
        healthy=None if gathered.dry_run else diagnosis.healthy,
    )
    confirmed = ", ".join(f"{f.id} {f.title}" for f in diagnosis.confirmed)
    counted = Counter(f.confidence for f in diagnosis.findings)
    others = ", ".join(f"{n} {confidence}" for confidence, n in counted.items()) or "healthy"
    rb.expect(not diagnosis.confirmed, what="no confirmed finding", detail=confirmed or others)
    return diagnosis
