"""The lane matrix, from the lane files under params/: one column per lane, one row per setting, and every value
that differs from the current recipe's lane highlighted (a row with any difference is also marked in words).

The table is HTML (a Markdown table cannot mark a cell); `matrix` is the pure part, tested with exact values.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from lanebook.lane.params import LaneParams

MISSING = "—"


@dataclass(frozen=True)
class Row:
    key: str
    values: tuple[str, ...]
    code: bool = True  # show the key as code (an env-file or launcher key)

    def differs(self, column: int, reference: int) -> bool:
        return self.values[column] != self.values[reference]

    @property
    def varies(self) -> bool:
        return len(set(self.values)) > 1


def _nodes(params: LaneParams) -> str:
    """One line a node, in rank order (the head is rank 0, the workers 1..N-1 as the lane file lists them)."""
    ranked = [params.head, *params.workers]
    return "\n".join(
        f"rank {rank}: {n.alias} {n.host}" + (f":{n.port}" if n.port != 22 else "") + f" (RoCE {n.roce_ip})"
        for rank, n in enumerate(ranked)
    )


def _group(params: LaneParams) -> str:
    workers = len(params.workers)
    return f"TP{len(params.nodes)}: the head and {workers} worker{'s' if workers > 1 else ''}"


def _keys(params: LaneParams) -> str:
    """Where a keyed lane's API keys come from (the lane file names it; never a key), or none."""
    if params.auth is None:
        return "none (keyless)"
    return f"{params.auth.variable} from {params.auth.source.shown}"


def matrix(lanes: list[LaneParams]) -> list[Row]:
    """Every env-file key any lane sets (in first-seen order), then the lane-level settings."""
    keys: list[str] = []
    for lane in lanes:
        keys += [k for k in lane.env if k not in keys]
    rows = [Row(k, tuple(str(lane.env.get(k, MISSING)) for lane in lanes)) for k in keys]
    rows += [
        Row("speculative schedule", tuple(lane.speculative.schedule_json() or "fixed K" for lane in lanes), False),
        Row("KV cache dtype", tuple(lane.kv_cache_dtype or MISSING for lane in lanes), False),
        Row("checkout", tuple(lane.checkout for lane in lanes), False),
        Row("launcher PROJECT_NAME", tuple(str(lane.launcher.env["PROJECT_NAME"]) for lane in lanes), False),
        Row("API", tuple(lane.api for lane in lanes), False),
        Row("API keys", tuple(_keys(lane) for lane in lanes), False),
        Row("tensor-parallel group", tuple(_group(lane) for lane in lanes), False),
        Row("nodes", tuple(_nodes(lane) for lane in lanes), False),
        Row("gates: exact smoke", tuple(lane.gates.exact_smoke for lane in lanes), False),
        Row("rollback to", tuple(lane.rollback or MISSING for lane in lanes), False),
        Row("source", tuple(lane.source for lane in lanes), False),
    ]
    return rows


def rollback_chain(lanes: list[LaneParams], start: str) -> list[str]:
    by_name = {lane.name: lane for lane in lanes}
    chain, name = [], start
    while name and name in by_name and name not in chain:
        chain.append(name)
        name = by_name[name].rollback
    return chain


def matrix_html(lanes: list[LaneParams], reference: int) -> str:
    def e(text: str) -> str:
        return html.escape(text).replace("\n", "<br>")

    head = "".join(
        f"<th>{e(lane.name)}"
        + (' <span class="lanebook-badge lanebook-badge-twin">TWIN</span>' if lane.twin else "")
        + ("<br><small>(reference)</small>" if i == reference else "")
        + "</th>"
        for i, lane in enumerate(lanes)
    )
    body = []
    for row in matrix(lanes):
        key = f"<code>{e(row.key)}</code>" if row.code else e(row.key)
        mark = ' <span class="lanebook-badge lanebook-badge-differs">DIFFERS</span>' if row.varies else ""
        cells = "".join(
            f'<td class="lanebook-differs">{e(v)}</td>' if row.differs(i, reference) else f"<td>{e(v)}</td>"
            for i, v in enumerate(row.values)
        )
        varies = ' class="lanebook-varies"' if row.varies else ""
        body.append(f"<tr{varies}><th>{key}{mark}</th>{cells}</tr>")
    return (
        '<div class="lanebook-wide"><table class="table lanebook-matrix">\n<thead><tr><th>setting</th>'
        + head
        + "</tr></thead>\n<tbody>\n"
        + "\n".join(body)
        + "\n</tbody></table></div>\n"
    )


def lanes_page(lanes: list[LaneParams], reference: str) -> str:
    """The page; reference: the lane the others are compared with (the current recipe's)."""
    index = next(i for i, lane in enumerate(lanes) if lane.name == reference)
    chains = [
        rollback_chain(lanes, lane.name) for lane in lanes if lane.name not in {other.rollback for other in lanes}
    ]
    chain_lines = "".join(f"- {' → '.join(chain)}\n" for chain in chains if len(chain) > 1)
    return (
        "# Lane matrix\n\nEvery value comes from the lane files under `params/` (the same files that render the env\n"
        "file, patch the compose file, drive the twin and set the gates). A variant is a copy with one line "
        "changed.\n\n"
        f"Highlighted: a value that differs from **{reference}** (the current recipe); a row marked DIFFERS has at "
        "least one.\n\n"
        + (
            f"**Rollback chains:**\n\n{chain_lines}\nKeep the rollback lane boring: do not delete it because a canary "
            "passed.\n\n"
            if chain_lines
            else ""
        )
        + matrix_html(lanes, index)
        + "\n"
        + "\n".join(f"- **{lane.name}**: {lane.description}" for lane in lanes)
        + "\n"
    )
