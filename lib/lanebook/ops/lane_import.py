"""`lanebook lane import` on the operator's head: the checkout read over SSH (read-only), the Compose project and live
`vllm serve` command where the lane is serving, then the lane file written and proven
(lanebook.recipe.lane_from_checkout).

Nothing on the head is changed: the checkout's files are read in one command, the HF cache is listed, and where a
container of the recipe's service runs, its name and `docker top` are read. A live command that says something the
written lane does not is listed, never hidden.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from lanebook.base.errors import LanebookError, LaneError
from lanebook.base.paths import PARAMS_DIR
from lanebook.lane.params import NodeParams, check_name, check_path, lane_path
from lanebook.lane.plugins import registry, resolve_ssh_config, serves_twin
from lanebook.nodes.ssh import Executor, Node, NodeError
from lanebook.ops.logs import KV_CACHE_LINES, kv_cache_tokens, live_command, scan_log
from lanebook.recipe.effective.checkout import ENV_NAME, CheckoutFiles
from lanebook.recipe.effective.mismatches import live_mismatches
from lanebook.recipe.lane_from_checkout import Head, import_lane, lane_findings, local_checkout, round_trip, write_new

SERVICE_CONTAINER_RE = re.compile(r"^(?P<project>[A-Za-z0-9][A-Za-z0-9._-]*)-vllm-dspark-1$")


@dataclass(frozen=True)
class Serving:
    """The lane's server found running on the head: its container, Compose project and live command line."""

    container: str
    project: str
    command: str
    kv_tokens: Optional[tuple[int, str]] = None  # the startup log's KV cache size, and the line that says it


# How far a later boot's KV cache size may fall from the one observed at import and still pass the gate: the seeds'
# band (2.2M-2.5M around 0.85's ~2.35M) is about this wide.
KV_BAND_TOLERANCE = 0.06


def head_node(head: Head) -> Node:
    """A node for the head alone, reached as ssh would (its ssh config, keys and known hosts)."""
    params = NodeParams(
        alias=head.destination if head.ssh_config else "head",
        role="head",
        host=head.host,
        port=head.port or 22,
        user=head.user,
        roce_ip=head.host,
    )
    return Node(params, Executor(), resolve_ssh_config(head.ssh_config))


def serving_on(node: Node) -> Optional[Serving]:
    """The recipe's server container running on the node (exactly one), or None."""
    names = node.run("docker ps --format '{{.Names}}'", check=False, timeout=30).stdout.split()
    found = [m for name in names if (m := SERVICE_CONTAINER_RE.match(name))]
    if len(found) != 1:
        return None
    container = found[0].group(0)
    lines = scan_log(node, container, ["KV cache size"])["KV cache size"]
    kv = next(((n, line) for line in KV_CACHE_LINES if (n := kv_cache_tokens(lines, line)) is not None), None)
    return Serving(container, found[0].group("project"), live_command(node, container), kv)


def kv_band(serving: Serving) -> Optional[tuple[tuple[int, int], str, str]]:
    """The gate's KV cache band around what the serving lane's startup log says, the line, and where it was read."""
    if serving.kv_tokens is None:
        return None
    tokens, line = serving.kv_tokens
    low, high = round(tokens * (1 - KV_BAND_TOLERANCE)), round(tokens * (1 + KV_BAND_TOLERANCE))
    return (low, high), line, f"{serving.container}'s startup log: {tokens:,} tokens, ±{KV_BAND_TOLERANCE:.0%}"


def is_environment(head: Optional[Head], api: str) -> bool:
    """Whether the lane is a plugin environment's (its figures labelled so): reached through a plugin's named ssh
    config, or its API known to a plugin as one."""
    return bool(head and head.ssh_config in registry().ssh_configs) or serves_twin(api)


@dataclass
class ImportReport:
    lane_file: Path
    byte_for_byte: bool
    unexpressed: list
    mismatches: list[str]
    live: list[str]
    notes: list[str]
    serving: Optional[Serving]

    def to_json(self) -> dict:
        return {
            "lane_file": str(self.lane_file),
            "byte_for_byte": self.byte_for_byte,
            "unexpressed": [u.to_json() for u in self.unexpressed],
            "mismatches": self.mismatches,
            "serving": None if self.serving is None else self.serving.container,
            "live_mismatches": self.live,
            "notes": self.notes,
        }


def import_checkout(
    name: str,
    checkout: str,
    *,
    head: Optional[str] = None,
    ssh_config: Optional[str] = None,
    out: Optional[Path] = None,
    rollback: Optional[str] = None,
) -> ImportReport:
    """Import the lane NAME from a local checkout directory, or from CHECKOUT on HEAD over SSH; write it to OUT (default
    params/NAME.yaml, never overwritten) and prove it by the round trip."""
    try:
        check_name(name)
    except ValueError as exc:
        raise LanebookError(f"lane name: {exc}") from None
    if ssh_config and not head:
        raise LanebookError("--ssh-config goes with --head (a local checkout is read from disk)")
    if rollback:
        lane_path(rollback)
    target = Path(out) if out else PARAMS_DIR / f"{name}.yaml"
    if target.exists():
        raise LaneError(f"{target} exists: lanebook never overwrites a lane file (give --out FILE to write elsewhere)")
    where, node, serving = None, None, None
    if head:
        try:
            check_path(checkout)
        except ValueError as exc:
            raise LanebookError(f"--checkout {exc}") from None
        where = Head.parse(head, ssh_config=ssh_config)
        node = head_node(where)
    try:
        if node is not None:
            files = CheckoutFiles.fetch(node, checkout)
            if files.env is None:
                raise LanebookError(
                    f"no {ENV_NAME} in {where.destination}:{checkout}: import reads the env file it runs"
                )
            path = checkout
            serving = serving_on(node)
        else:
            files, path = local_checkout(Path(checkout))
        project = (serving.project, f"the running container {serving.container}") if serving else None
        band = kv_band(serving) if serving else None
        options = dict(checkout=path, head=where, rollback=rollback, node=node, project=project, kv_band=band)
        imported = import_lane(name, files, **options)
        if is_environment(where, str(imported.params.api)):
            imported = import_lane(name, files, twin=True, **options)
    except NodeError as exc:
        raise LanebookError(f"cannot read the head's checkout: {exc}") from None
    finally:
        if node is not None:
            node.close()
    write_new(target, imported.text)
    changed = round_trip(target, files)
    live = [str(m) for m in live_mismatches(imported.params, serving.command)] if serving else []
    return ImportReport(
        target,
        not changed,
        imported.unexpressed + changed,
        lane_findings(target, files),
        live,
        imported.notes,
        serving,
    )


def print_report(report: ImportReport, *, as_json: bool = False) -> None:
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
        return
    print(f"wrote {report.lane_file}")
    changed = sum("render writes" in u.reason for u in report.unexpressed)
    print(
        "round trip: rendering it into a copy of the checkout changes no byte of .env.dspark or the compose file"
        if report.byte_for_byte
        else f"round trip: rendering it into a copy of the checkout changes {changed} line(s), listed below"
    )
    if report.unexpressed:
        print("lines the lane file does not say as written:")
        for item in report.unexpressed:
            print(f"  {item}")
    if report.serving:
        print(
            f"serving: {report.serving.container}; the live command "
            + ("carries every value the lane sets" if not report.live else "differs from the lane:")
        )
        for line in report.live:
            print(f"  live: {line}")
    for note in report.notes:
        print(f"note: {note}")
    for finding in report.mismatches:
        print(f"mismatch: {finding}")
