"""The RoCE link between the head and each worker, measured rail by rail and judged against public figures.

A rail is an RDMA device of the lane's `link:` block (or of env NCCL_IB_HCA), named alike on every node (a DGX
Spark's QSFP port shows as two PCIe x4 halves, rocep1s0fN and roceP2p1s0fN). Per worker and rail, `measure_link`
reads with a Spark's iproute2 `rdma -j link show DEV/1` (port state, netdev) and `ip -j link show dev NETDEV` (MTU,
operstate) on both ends, then runs perftest's `ib_write_bw`, RC writes of at most 64 KiB (larger fail on GB10),
server on the worker, client on the head to its `roce_ip`; all through the Executor (a dry run only records).
NCCL's bus bandwidth is measured only where the image names an `all_reduce_perf`; else the report says so.
Figures and findings are pure functions of the `RailRecord`s I/O fills (parse_*, judge_*, link_report). A
degraded rail is a finding with its documented recovery, never a relaunch.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Optional

from lanebook.base.checks import FAIL, NOT_OBSERVED, NOT_OBSERVED_DRY_RUN, PASS, ExpectedResult
from lanebook.lane.params import LINK_MAX_MESSAGE_BYTES, LaneParams
from lanebook.nodes.ssh import LaneNodes, Node, NodeError, q

if TYPE_CHECKING:
    from lanebook.steps.runbook import Runbook

# --- the public figures the judging uses, each with its source --------------------------------------------------

PR_108 = "https://github.com/NVIDIA/dgx-spark-playbooks/pull/108"
UNSLOTH_10280 = "https://github.com/unslothai/unsloth/pull/10280"
ISSUE_102 = "https://github.com/NVIDIA/dgx-spark-playbooks/issues/102"
PR_103 = "https://github.com/NVIDIA/dgx-spark-playbooks/pull/103"
PERFTEST_394 = "https://github.com/linux-rdma/perftest/issues/394"

HEALTHY_GBPS = (92.0, 97.0)  # per logical interface with ib_write_bw (PR 108: 92.57 and 97.28)
FAULT_BAND_GBPS = (8.0, 25.0)  # the boot/hot-plug fault at 200 Gb/s negotiated (PR 108: 12.86 TCP, 13.23 RDMA)
DEGRADED_BELOW_GBPS = 40.0  # unsloth's `status --benchmark` flags ib_write_bw under 40 Gb/s against ~90
BUSBW_HEALTHY_GBS = 21.6  # unsloth's `spark doctor`: all-reduce bus bandwidth healthy at ~21.6 GB/s
BUSBW_SUSPECT_BELOW_GBS = 15.0
BUSBW_DEGRADED_BELOW_GBS = 8.0
ONE_HALF_BUSBW_GBS, BOTH_HALVES_BUSBW_GBS = 3.0, 23.74  # issue 102 / PR 103: one half named vs both, MTU 9000
EXPECTED_MTU_SOURCE = PR_103  # "CX-7 interfaces default to 1500": MTU 9000 on every RoCE port

THRESHOLDS = (
    {
        "figure": "ib_write_bw average per rail",
        "healthy": f"{HEALTHY_GBPS[0]:g}-{HEALTHY_GBPS[1]:g} Gb/s",
        "suspect": f"under {HEALTHY_GBPS[0]:g} Gb/s",
        "degraded": f"under {DEGRADED_BELOW_GBPS:g} Gb/s (the CX7 boot fault: {FAULT_BAND_GBPS[0]:g}-"
        f"{FAULT_BAND_GBPS[1]:g} Gb/s)",
        "source": f"{PR_108} ; {UNSLOTH_10280}",
    },
    {
        "figure": "NCCL all-reduce bus bandwidth",
        "healthy": f"~{BUSBW_HEALTHY_GBS:g} GB/s",
        "suspect": f"under {BUSBW_SUSPECT_BELOW_GBS:g} GB/s",
        "degraded": f"under {BUSBW_DEGRADED_BELOW_GBS:g} GB/s",
        "source": UNSLOTH_10280,
    },
    {
        "figure": "NCCL_IB_HCA",
        "healthy": f"both halves of the QSFP port named (~{BOTH_HALVES_BUSBW_GBS:g} GB/s)",
        "suspect": f"one half named (~{ONE_HALF_BUSBW_GBS:g} GB/s)",
        "degraded": "",
        "source": f"{ISSUE_102} ; {PR_103}",
    },
    {"figure": "MTU", "healthy": "9000 on both ends", "suspect": "anything else", "degraded": "", "source": PR_103},
    {
        "figure": "ib_write_bw message size",
        "healthy": f"at most {LINK_MAX_MESSAGE_BYTES} bytes",
        "suspect": "",
        "degraded": "RC writes above 64 KiB fail on GB10 (an instrument failure, not the link's)",
        "source": PERFTEST_394,
    },
)

NCCL_TOOL = "all_reduce_perf"  # nccl-tests' all-reduce benchmark, looked up in the lane's image
ERROR, SUSPECT = "error", "warning"  # a finding's severity: an error stops a promotion, a warning does not
POWER_CYCLE_FIX = (
    "power-cycle the node at the rail's far end (off at the wall, then on: the documented recovery of the ConnectX-7 "
    "boot/hot-plug fault), then measure again with `lanebook check --lane {lane}`; a relaunch does not help"
)


@dataclass(frozen=True)
class Finding:
    """One thing the link showed that is wrong: its id (L01..L07), severity, where, the cause, the fix, the figure
    seen, the threshold it crossed and that threshold's public source."""

    id: str
    severity: str
    cause: str
    fix: str
    threshold: str
    source: str
    worker: Optional[str] = None
    rail: Optional[str] = None
    figure: Optional[str] = None

    def to_json(self) -> dict:
        return asdict(self)


# --- parsing what the tools print (pure) ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PerftestResult:
    """What one ib_write_bw run printed: its header's facts and its results row, or the error it ended with."""

    device: Optional[str] = None
    qps: Optional[int] = None
    connection: Optional[str] = None
    roce_mtu: Optional[int] = None  # the `Mtu : N[B]` line: the RoCE path MTU, 4096 with a 9000-byte netdev
    link_type: Optional[str] = None
    message_bytes: Optional[int] = None
    iterations: Optional[int] = None
    bw_peak_gbps: Optional[float] = None
    bw_average_gbps: Optional[float] = None
    msg_rate_mpps: Optional[float] = None
    error: Optional[str] = None

    @property
    def measured(self) -> bool:
        return self.bw_average_gbps is not None and self.error is None


_HEADER = {
    "device": re.compile(r"Device\s*:\s*(\S+)"),
    "qps": re.compile(r"Number of qps\s*:\s*(\d+)"),
    "connection": re.compile(r"Connection type\s*:\s*(\w+)"),
    "roce_mtu": re.compile(r"^\s*Mtu\s*:\s*(\d+)\s*\[B\]", re.M),
    "link_type": re.compile(r"Link type\s*:\s*(\w+)"),
}
_TABLE = re.compile(r"#bytes\s+#iterations\s+BW peak\[(?P<unit>[^\]]+)\]\s+BW average\[[^\]]+\]\s+MsgRate\[Mpps\]")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s*$", re.M)
_ERRORS = (
    re.compile(r"Completion with error at (?:client|server)[^\n]*(?:\n[^\n]*Failed status[^\n]*)?"),
    re.compile(r"Couldn't connect to [^\n]+"),
    re.compile(r"IB device \S+ not found|No IB devices found|Couldn't get context for the device"),
    re.compile(r"[^\n]*ib_write_bw: (?:command )?not found|command not found: ib_write_bw"),
    re.compile(r"Unable to init the socket connection|Failed to complete run_iter_bw[^\n]*"),
)


def _gbps(value: float, unit: str) -> float:
    """A bandwidth in perftest's unit as Gb/s: Gb/sec as is; MB/sec and MiB/sec are 2^20 bytes a second."""
    return value if unit.lower().startswith("gb") else value * 1048576 * 8 / 1e9


def parse_ib_write_bw(text: str) -> PerftestResult:
    """ib_write_bw's output (either end, `--report_gbits` or not) as a PerftestResult; the first error line it shows,
    if any, and "no results table" when the table never came."""
    facts: dict[str, Any] = {}
    for key, pattern in _HEADER.items():
        match = pattern.search(text)
        if match:
            facts[key] = int(match.group(1)) if key in ("qps", "roce_mtu") else match.group(1)
    table = _TABLE.search(text)
    row = _ROW.search(text, table.end()) if table else None
    if row:
        size, iterations, peak, average, rate = row.groups()
        unit = table.group("unit")
        facts.update(
            message_bytes=int(size),
            iterations=int(iterations),
            bw_peak_gbps=round(_gbps(float(peak), unit), 4),
            bw_average_gbps=round(_gbps(float(average), unit), 4),
            msg_rate_mpps=float(rate),
        )
    for pattern in _ERRORS:
        match = pattern.search(text)
        if match:
            facts["error"] = " ".join(match.group(0).split())
            break
    else:
        if not row:
            tail = [line.strip() for line in text.strip().splitlines() if line.strip()][-1:]
            facts["error"] = "no results table" + (f": {tail[0]}" if tail else " (no output)")
    return PerftestResult(**facts)


@dataclass(frozen=True)
class PortState:
    """One end of a rail: the RDMA port's state and physical state, its netdev, the netdev's MTU and operstate."""

    state: Optional[str] = None
    physical_state: Optional[str] = None
    netdev: Optional[str] = None
    mtu: Optional[int] = None
    operstate: Optional[str] = None
    error: Optional[str] = None

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE" and self.operstate in ("UP", "UNKNOWN", None)


def parse_rdma_link(text: str) -> dict:
    """`rdma -j link show DEV/PORT` as {state, physical_state, netdev}; {"error": ...} when it is not that JSON."""
    try:
        entries = json.loads(text)
        entry = entries[0] if isinstance(entries, list) else entries
        return {key: entry.get(key) for key in ("state", "physical_state", "netdev")}
    except (ValueError, IndexError, AttributeError, TypeError):
        return {"error": " ".join(text.split())[-200:] or "no answer"}


def parse_ip_link(text: str) -> dict:
    """`ip -j link show dev NAME` as {mtu, operstate}; {"error": ...} when it is not that JSON."""
    try:
        entries = json.loads(text)
        entry = entries[0] if isinstance(entries, list) else entries
        return {"mtu": int(entry["mtu"]), "operstate": entry.get("operstate")}
    except (ValueError, IndexError, KeyError, AttributeError, TypeError):
        return {"error": " ".join(text.split())[-200:] or "no answer"}


def port_state(rdma_text: Optional[str], ip_text: Optional[str]) -> PortState:
    """One end's PortState from what `rdma` and `ip` printed there (None: not asked, e.g. a dry run)."""
    if rdma_text is None:
        return PortState()
    found = parse_rdma_link(rdma_text)
    if "error" in found:
        return PortState(error=f"rdma link: {found['error']}")
    netdev = found.get("netdev")
    link = parse_ip_link(ip_text) if ip_text is not None else {}
    return PortState(
        state=found.get("state"),
        physical_state=found.get("physical_state"),
        netdev=netdev,
        mtu=link.get("mtu"),
        operstate=link.get("operstate"),
        error=f"ip link: {link['error']}" if "error" in link else None,
    )


_AVG_BUSBW = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(\d+(?:\.\d+)?)")
_COLL_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\w+\s+\w+\s+-?\d+\s+(?:[\d.]+\s+){2}([\d.]+)\s+\S+", re.M)


def parse_all_reduce_perf(text: str) -> Optional[float]:
    """nccl-tests' bus bandwidth in GB/s: the largest size's out-of-place busbw where the table has rows, else its
    `# Avg bus bandwidth` line; None when neither is there."""
    rows = [(int(m.group(1)), float(m.group(3))) for m in _COLL_ROW.finditer(text)]
    if rows:
        return max(rows)[1]
    match = _AVG_BUSBW.search(text)
    return float(match.group(1)) if match else None


# --- judging (pure) ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RailRecord:
    """What the nodes printed for one rail between the head and one worker: the raw material of its figures."""

    worker: str
    rail: str
    head_rdma: Optional[str] = None
    head_ip: Optional[str] = None
    worker_rdma: Optional[str] = None
    worker_ip: Optional[str] = None
    client: Optional[str] = None  # ib_write_bw on the head (stdout and stderr)
    server: Optional[str] = None  # ib_write_bw on the worker
    message_bytes: int = LINK_MAX_MESSAGE_BYTES
    not_measured: Optional[str] = None  # why no bandwidth was measured (a dry run, a node not reached, ...)


@dataclass(frozen=True)
class RailFigures:
    """One rail's figures: both ends' state, the bandwidth ib_write_bw measured, or why it was not measured."""

    worker: str
    rail: str
    head: PortState
    worker_end: PortState
    ib_write_bw: Optional[PerftestResult]
    not_measured: Optional[str] = None

    @property
    def gbps(self) -> Optional[float]:
        return self.ib_write_bw.bw_average_gbps if self.ib_write_bw and self.ib_write_bw.measured else None

    def to_json(self) -> dict:
        bw = self.ib_write_bw
        return {
            "worker": self.worker,
            "rail": self.rail,
            "head": asdict(self.head),
            "worker_end": asdict(self.worker_end),
            "ib_write_bw": None
            if bw is None
            else {key: value for key, value in asdict(bw).items() if key != "device"} | {"measured": bw.measured},
            "gbps": self.gbps,
            "not_measured": self.not_measured,
        }


def rail_figures(record: RailRecord) -> RailFigures:
    bw = None if record.client is None else parse_ib_write_bw(record.client)
    if bw is not None and bw.error and record.message_bytes > LINK_MAX_MESSAGE_BYTES:
        bw = PerftestResult(**{**asdict(bw), "message_bytes": record.message_bytes})
    return RailFigures(
        record.worker,
        record.rail,
        port_state(record.head_rdma, record.head_ip),
        port_state(record.worker_rdma, record.worker_ip),
        bw,
        record.not_measured,
    )


def judge_rail(rail: RailFigures, *, expected_mtu: int = 9000, lane: str = "LANE") -> list[Finding]:
    """The findings of one rail: a rail down, a failed measurement, a degraded or suspect bandwidth, an MTU off."""
    where = {"worker": rail.worker, "rail": rail.rail}
    findings: list[Finding] = []
    for end, state in (("head", rail.head), (rail.worker, rail.worker_end)):
        if state.state is not None and not state.active:
            findings.append(
                Finding(
                    "L04",
                    ERROR,
                    f"rail {rail.rail} is not up on {end}: port {state.state} ({state.physical_state}), netdev "
                    f"{state.netdev} {state.operstate}",
                    f"on {end}: check the QSFP cable, `sudo ip link set {state.netdev} up`, then `rdma link show "
                    f"{rail.rail}/1` must say ACTIVE; if the port stays down, " + POWER_CYCLE_FIX.format(lane=lane),
                    "port ACTIVE, netdev UP",
                    PR_108,
                    figure=f"{state.state}/{state.operstate}",
                    **where,
                )
            )
    mtus = {end: s.mtu for end, s in (("head", rail.head), (rail.worker, rail.worker_end)) if s.mtu is not None}
    if len(set(mtus.values())) > 1:
        findings.append(
            Finding(
                "L03",
                ERROR,
                f"rail {rail.rail}'s MTU differs between the ends ({', '.join(f'{e} {m}' for e, m in mtus.items())}): "
                "NCCL fails at init or times out (D05)",
                f"set MTU {expected_mtu} on {rail.head.netdev or 'the netdev'} on both nodes "
                f"(`sudo ip link set DEV mtu {expected_mtu}`), persist it in netplan, launch again",
                f"MTU {expected_mtu} on both ends",
                EXPECTED_MTU_SOURCE,
                figure=" / ".join(map(str, mtus.values())),
                **where,
            )
        )
    elif mtus and next(iter(mtus.values())) != expected_mtu:
        findings.append(
            Finding(
                "L03",
                SUSPECT,
                f"rail {rail.rail} runs at MTU {next(iter(mtus.values()))}, not {expected_mtu} (CX-7 interfaces "
                "default to 1500; NCCL reached ~3 GB/s bus bandwidth without the MTU and HCA settings)",
                f"`sudo ip link set {rail.head.netdev or 'DEV'} mtu {expected_mtu}` on both nodes, persisted in "
                "netplan",
                f"MTU {expected_mtu}",
                EXPECTED_MTU_SOURCE,
                figure=str(next(iter(mtus.values()))),
                **where,
            )
        )
    bw = rail.ib_write_bw
    if bw is None:
        return findings
    if bw.error:
        too_big = (bw.message_bytes or 0) > LINK_MAX_MESSAGE_BYTES
        findings.append(
            Finding(
                "L05",
                SUSPECT if too_big else ERROR,
                (
                    f"ib_write_bw's RC writes of {bw.message_bytes} bytes failed ({bw.error}): on GB10 RC writes above "
                    "64 KiB fail in perftest while NCCL runs fine, so this says nothing of the link"
                    if too_big
                    else f"ib_write_bw did not measure rail {rail.rail}: {bw.error}"
                ),
                (
                    f"measure with messages of at most {LINK_MAX_MESSAGE_BYTES} bytes (`-s {LINK_MAX_MESSAGE_BYTES}`)"
                    if too_big
                    else "install perftest on both nodes (`sudo apt-get install -y perftest`), check the device name "
                    f"(`rdma link show`: set link.rails in the lane file) and that the worker's port {rail.rail} "
                    "answers; then `lanebook check` again"
                ),
                f"RC writes of at most {LINK_MAX_MESSAGE_BYTES} bytes",
                PERFTEST_394,
                figure=bw.error,
                **where,
            )
        )
        return findings
    gbps = bw.bw_average_gbps or 0.0
    figure = f"{gbps:.2f} Gb/s"
    if gbps < DEGRADED_BELOW_GBPS:
        in_band = FAULT_BAND_GBPS[0] <= gbps <= FAULT_BAND_GBPS[1]
        findings.append(
            Finding(
                "L01",
                ERROR,
                f"rail {rail.rail} to {rail.worker} carries {figure} with ib_write_bw, healthy is "
                f"{HEALTHY_GBPS[0]:g}-{HEALTHY_GBPS[1]:g}"
                + (
                    f": the ConnectX-7 boot/hot-plug fault ({FAULT_BAND_GBPS[0]:g}-{FAULT_BAND_GBPS[1]:g} Gb/s while "
                    "the link negotiates 200 Gb/s and PCIe Gen5 x4, counters clean)"
                    if in_band
                    else " (degraded: under the 40 Gb/s the DGX Spark doctors flag)"
                ),
                POWER_CYCLE_FIX.format(lane=lane),
                f"under {DEGRADED_BELOW_GBPS:g} Gb/s is degraded (healthy {HEALTHY_GBPS[0]:g}-{HEALTHY_GBPS[1]:g})",
                f"{PR_108} ; {UNSLOTH_10280}",
                figure=figure,
                **where,
            )
        )
    elif gbps < HEALTHY_GBPS[0]:
        findings.append(
            Finding(
                "L02",
                SUSPECT,
                f"rail {rail.rail} to {rail.worker} carries {figure}, under the healthy {HEALTHY_GBPS[0]:g}-"
                f"{HEALTHY_GBPS[1]:g} Gb/s (not yet the degraded band)",
                "measure again when the pair is idle (`lanebook check`); if it stays low, "
                + POWER_CYCLE_FIX.format(lane=lane),
                f"under {HEALTHY_GBPS[0]:g} Gb/s is suspect",
                PR_108,
                figure=figure,
                **where,
            )
        )
    return findings


def _halves(device: str) -> Optional[tuple[str, str]]:
    """A DGX Spark QSFP port's two halves for one of them: rocep1s0fN <-> roceP2p1s0fN; None for other names."""
    match = re.fullmatch(r"roce(?:p1|P2p1)s0f(\d+)", device)
    return (f"rocep1s0f{match.group(1)}", f"roceP2p1s0f{match.group(1)}") if match else None


def judge_hca(nccl_ib_hca: Optional[str], rails: list[str]) -> list[Finding]:
    """env NCCL_IB_HCA naming one half of a QSFP port while the lane's rails hold both: NCCL then runs over half the
    port (~3 GB/s bus bandwidth against ~23.74 with both named)."""
    if not nccl_ib_hca or nccl_ib_hca.strip().startswith("^"):
        return []
    named = {part.split(":")[0].strip() for part in nccl_ib_hca.lstrip("=").split(",") if part.strip()}
    findings = []
    for device in sorted(named):
        halves = _halves(device)
        if not halves:
            continue
        other = halves[1] if device == halves[0] else halves[0]
        if other not in named and other in rails:
            findings.append(
                Finding(
                    "L06",
                    SUSPECT,
                    f"NCCL_IB_HCA names {device} but not {other}, the other half of the same QSFP port: NCCL then "
                    f"runs over half the port (~{ONE_HALF_BUSBW_GBS:g} GB/s bus bandwidth against "
                    f"~{BOTH_HALVES_BUSBW_GBS:g} with both)",
                    f"name both halves in the lane's env: NCCL_IB_HCA: {device},{other} (with MTU 9000), then `env` "
                    "and `launch`",
                    "both halves of the port named",
                    f"{ISSUE_102} ; {PR_103}",
                    rail=device,
                    figure=nccl_ib_hca,
                )
            )
    return findings


def judge_bus_bandwidth(gbs: Optional[float], *, lane: str = "LANE") -> list[Finding]:
    """NCCL all-reduce bus bandwidth against unsloth's doctor: under 8 GB/s degraded, under 15 suspect."""
    if gbs is None or gbs >= BUSBW_SUSPECT_BELOW_GBS:
        return []
    degraded = gbs < BUSBW_DEGRADED_BELOW_GBS
    return [
        Finding(
            "L07",
            ERROR if degraded else SUSPECT,
            f"NCCL all-reduce bus bandwidth {gbs:.2f} GB/s, healthy ~{BUSBW_HEALTHY_GBS:g}"
            + (" (degraded)" if degraded else " (suspect)"),
            "check every rail's ib_write_bw above and NCCL_IB_HCA (both halves); if the rails are healthy, "
            + POWER_CYCLE_FIX.format(lane=lane),
            f"under {BUSBW_DEGRADED_BELOW_GBS:g} GB/s degraded, under {BUSBW_SUSPECT_BELOW_GBS:g} suspect",
            UNSLOTH_10280,
            figure=f"{gbs:.2f} GB/s",
        )
    ]


@dataclass
class LinkReport:
    """The link's figures for one lane: each worker's rails, NCCL's bus bandwidth where measured, the findings, and
    the raw records they were computed from. `ok`: something was measured and no finding is an error."""

    lane: str
    figures_label: str
    measured_at: str
    dry_run: bool
    rails: list[RailFigures]
    findings: list[Finding]
    bus_bandwidth_gbs: Optional[float] = None
    nccl_note: str = ""
    not_measured: Optional[str] = None  # why nothing was measured at all (no rails named, a dry run)
    records: list[RailRecord] = field(default_factory=list)

    @property
    def measured(self) -> bool:
        return any(r.gbps is not None for r in self.rails)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def ok(self) -> bool:
        return self.measured and not self.errors

    def to_json(self) -> dict:
        return {
            "lane": self.lane,
            "figures": self.figures_label,
            "measured_at": self.measured_at,
            "dry_run": self.dry_run,
            "ok": self.ok,
            "measured": self.measured,
            "not_measured": self.not_measured,
            "rails": [r.to_json() for r in self.rails],
            "nccl": {
                "bus_bandwidth_gbs": self.bus_bandwidth_gbs,
                "measured": self.bus_bandwidth_gbs is not None,
                "note": self.nccl_note,
            },
            "findings": [f.to_json() for f in self.findings],
            "thresholds": list(THRESHOLDS),
        }


def link_report(
    params: LaneParams,
    records: list[RailRecord],
    *,
    measured_at: str,
    dry_run: bool = False,
    nccl_output: Optional[str] = None,
    nccl_note: Optional[str] = None,
    not_measured: Optional[str] = None,
) -> LinkReport:
    """The LinkReport of these records (pure): each rail's figures and findings, NCCL_IB_HCA's, NCCL's."""
    rails = [rail_figures(r) for r in records]
    findings = [f for rail in rails for f in judge_rail(rail, expected_mtu=params.link.mtu, lane=params.name)]
    findings += judge_hca(str(params.env.get("NCCL_IB_HCA", "")) or None, params.rails)
    busbw = parse_all_reduce_perf(nccl_output) if nccl_output else None
    findings += judge_bus_bandwidth(busbw, lane=params.name)
    return LinkReport(
        params.name,
        params.figures_label,
        measured_at,
        dry_run,
        rails,
        findings,
        bus_bandwidth_gbs=busbw,
        nccl_note=nccl_note if nccl_note is not None else "" if busbw is not None else f"no {NCCL_TOOL} output",
        not_measured=not_measured,
        records=list(records),
    )


# --- I/O: the commands, through the lane's Executor ----------------------------------------------------------------


def perftest_args(params: LaneParams, rail: str, *, message_bytes: Optional[int] = None, duration_s=None) -> str:
    """ib_write_bw's options for one rail, quoted: RC writes, -F, --report_gbits, -D seconds."""
    link = params.link
    size = link.message_bytes if message_bytes is None else message_bytes
    gid = f" -x {q(link.gid_index)}" if link.gid_index is not None else ""
    return (
        f"-d {q(rail)}{gid} -c RC -s {q(size)} -q {q(link.qps)} -F --report_gbits "
        f"-D {q(duration_s or link.duration_s)} -p {q(link.port)}"
    )


def server_command(params: LaneParams, rail: str, **kwargs) -> str:
    """On the worker: ib_write_bw's server in the background (bounded by `timeout`, output to a temporary file),
    then wait until it listens; prints `PID LOGFILE`, or fails with what the server printed."""
    port, bound = params.link.port, params.link.duration_s + 60
    return (
        "log=$(mktemp /tmp/lanebook-ib_write_bw.XXXXXX) || exit 1; "
        f'nohup timeout {q(bound)} ib_write_bw {perftest_args(params, rail, **kwargs)} >"$log" 2>&1 </dev/null & '
        "pid=$!; i=0; "
        f"until ss -Htln {q(f'sport = :{port}')} | grep -q .; do "
        'kill -0 "$pid" 2>/dev/null || break; i=$((i+1)); [ "$i" -ge 150 ] && break; /bin/sleep 0.1; done; '
        f'if ss -Htln {q(f"sport = :{port}")} | grep -q .; then echo "$pid $log"; '
        'else cat "$log"; rm -f "$log"; kill "$pid" 2>/dev/null; exit 1; fi'
    )


def client_command(params: LaneParams, rail: str, server: str, **kwargs) -> str:
    return f"ib_write_bw {perftest_args(params, rail, **kwargs)} {q(server)} 2>&1"


def _read(node: Node, command: str, *, timeout: float = 30, dry_stdout: str = "") -> Optional[str]:
    """A read-only command's output (stdout, else stderr); None in a dry run; the error's text when it failed."""
    try:
        result = node.run(command, check=False, timeout=timeout, dry_stdout=dry_stdout)
    except NodeError as exc:
        return str(exc)
    if result.dry_run:
        return None
    return result.stdout if result.stdout.strip() else result.stderr


def _end(node: Node, rail: str) -> tuple[Optional[str], Optional[str]]:
    rdma = _read(node, f"rdma -j link show {q(rail + '/1')} 2>&1")
    if rdma is None:
        node.run("ip -j link show dev NETDEV", check=False)  # recorded only: a dry run learns no netdev
        return None, None
    netdev = parse_rdma_link(rdma).get("netdev")
    ip = _read(node, f"ip -j link show dev {q(netdev)} 2>&1") if netdev else None
    return rdma, ip


def _bandwidth(head: Node, worker: Node, params: LaneParams, rail: str, **kwargs) -> tuple[Optional[str], str]:
    """(client output or None in a dry run, server output) of one ib_write_bw run over RAIL."""
    try:
        serving = worker.run(server_command(params, rail, **kwargs), check=False, timeout=30, dry_stdout="PID LOGFILE")
    except NodeError as exc:
        return f"ib_write_bw server on {worker.alias}: {exc}", ""
    parts = serving.stdout.split()
    if not serving.dry_run and (serving.exit_code != 0 or len(parts) != 2 or not parts[0].isdigit()):
        text = (serving.stdout + serving.stderr).strip()
        return f"ib_write_bw server on {worker.alias} did not start: {text[-300:] or f'exit {serving.exit_code}'}", ""
    pid, log = parts if len(parts) == 2 else ("PID", "LOGFILE")
    bound = (kwargs.get("duration_s") or params.link.duration_s) + 60
    try:
        client = head.run(client_command(params, rail, worker.roce_ip, **kwargs), check=False, timeout=bound)
        client_text = None if client.dry_run else client.stdout + client.stderr
    except NodeError as exc:
        client_text = f"ib_write_bw on {head.alias}: {exc}"
    server_text = _read(worker, f"kill {q(pid)} 2>/dev/null; cat {q(log)}; rm -f {q(log)}") or ""
    return client_text, server_text


def measure_link(
    nodes: LaneNodes,
    params: LaneParams,
    *,
    workers: Optional[list[str]] = None,
    rails: Optional[list[str]] = None,
    duration_s: Optional[int] = None,
    message_bytes: Optional[int] = None,
    clock=time.time,
) -> LinkReport:
    """Measure every rail between the head and each worker (or `workers`, `rails`): state and MTU on both ends,
    ib_write_bw's bandwidth; NCCL's bus bandwidth where the image carries all_reduce_perf. Read-only apart from the
    load of the measurement itself (seconds per rail); a dry run records the commands and measures nothing."""
    measured_at = datetime.fromtimestamp(clock(), timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    dry = nodes.executor.dry_run
    names = rails if rails is not None else params.rails
    if message_bytes is not None and message_bytes > LINK_MAX_MESSAGE_BYTES:
        raise ValueError(f"message_bytes {message_bytes} is above {LINK_MAX_MESSAGE_BYTES}: RC writes fail on GB10")
    note = nccl_note(nodes, params)
    if not names:
        why = "not measured: the lane names no rails (link.rails in the lane file, or env NCCL_IB_HCA)"
        return link_report(params, [], measured_at=measured_at, dry_run=dry, nccl_note=note, not_measured=why)
    head = nodes.head
    chosen = [w for w in nodes.workers if workers is None or w.alias in workers]
    records = []
    size = message_bytes or params.link.message_bytes
    options = {"message_bytes": message_bytes, "duration_s": duration_s}
    for worker in chosen:
        for rail in names:
            head_rdma, head_ip = _end(head, rail)
            worker_rdma, worker_ip = _end(worker, rail)
            client, server = _bandwidth(head, worker, params, rail, **options)
            records.append(
                RailRecord(
                    worker.alias,
                    rail,
                    head_rdma,
                    head_ip,
                    worker_rdma,
                    worker_ip,
                    client,
                    server,
                    message_bytes=size,
                    not_measured=NOT_OBSERVED_DRY_RUN if dry else None,
                )
            )
    return link_report(
        params,
        records,
        measured_at=measured_at,
        dry_run=dry,
        nccl_note=note,
        not_measured=NOT_OBSERVED_DRY_RUN if dry else None,
    )


def nccl_not_measured(params: LaneParams, carried: Optional[str] = None) -> str:
    """Why NCCL's bus bandwidth is not in the report: the image carries no all_reduce_perf (CARRIED: where it does)."""
    image = params.env.get("DSPARK_VLLM_IMAGE")
    if carried is None:
        return f"not measured: the lane's image {image or '(none named)'} carries no {NCCL_TOOL}"
    return (
        f"not measured: the image carries {carried}, but a two-node run needs one rank per node under MPI, which "
        "lanebook does not start; judge its output with parse_all_reduce_perf"
    )


def image_tool_command(image: str, tool: str) -> str:
    """On the head: where TOOL is inside IMAGE (a one-off container, no GPU), or nothing."""
    return f"docker run --rm --entrypoint sh {q(image)} -c {q(f'command -v {q(tool)} || true')} 2>&1"


def nccl_note(nodes: LaneNodes, params: LaneParams) -> str:
    """The hook for NCCL's bus bandwidth: whether the lane's image carries all_reduce_perf (link.all_reduce_perf or
    on the image's PATH), asked on the head; what the report says about it."""
    image = params.env.get("DSPARK_VLLM_IMAGE")
    if not image:
        return nccl_not_measured(params)
    found = _read(nodes.head, image_tool_command(str(image), params.link.all_reduce_perf or NCCL_TOOL), timeout=120)
    if found is None:
        return NOT_OBSERVED_DRY_RUN
    path = found.strip().splitlines()[-1] if found.strip() else ""
    return nccl_not_measured(params, path if path.startswith("/") else None)


# --- the report shown: check items, a runbook step -----------------------------------------------------------------


def rail_line(rail: RailFigures, label: str) -> str:
    """What was seen on one rail, in one line; its bandwidth labelled (LaneParams.figures_label)."""
    parts = []
    if rail.gbps is not None:
        bw = rail.ib_write_bw
        parts.append(
            f"{rail.gbps:.2f} Gb/s ib_write_bw, {label} figure ({bw.message_bytes} B RC writes, {bw.qps or 1} QP)"
        )
    elif rail.ib_write_bw is not None and rail.ib_write_bw.error:
        parts.append(f"not measured: {rail.ib_write_bw.error}")
    elif rail.not_measured:
        parts.append(rail.not_measured)
    for end, state in (("head", rail.head), (rail.worker, rail.worker_end)):
        if state.error:
            parts.append(f"{end}: {state.error}")
        elif state.state is not None:
            parts.append(f"{end} {state.netdev} {state.state} MTU {state.mtu}")
    return "; ".join(parts)


def outcome(report: LinkReport, rail: RailFigures) -> tuple[Optional[bool], list[Finding]]:
    """A rail's outcome: True healthy, False an error finding, None not measured (a dry run); its findings."""
    found = [f for f in report.findings if f.rail == rail.rail and f.worker == rail.worker]
    if any(f.severity == ERROR for f in found):
        return False, found
    return (None if rail.gbps is None else True), found


def _told(findings: list[Finding]) -> str:
    return "".join(f" | {f.id} {f.cause} — fix: {f.fix} (source: {f.source})" for f in findings)


def link_step(rb: "Runbook", *, skip_because: Optional[str] = None, **options) -> Optional[LinkReport]:
    """The link measured as a runbook step: each rail an expected result (a degraded rail fails, naming its fix; a
    suspect one warns), the report recorded as the run's `link` figure; unless `skip_because` says why not."""
    what = "every RoCE rail carries its healthy bandwidth"
    if skip_because is not None:
        rb.skip(what, skip_because)
        return None
    report = measure_link(rb.nodes, rb.params, **options)
    rb.record(link=report.to_json())
    results = []
    for rail in report.rails:
        ok, found = outcome(report, rail)
        warned = ok is True and bool(found)
        results.append(
            ExpectedResult(
                rb.current_step,
                f"rail {rail.rail} to {rail.worker} carries {HEALTHY_GBPS[0]:g}-{HEALTHY_GBPS[1]:g} Gb/s",
                NOT_OBSERVED if ok is None else FAIL if (ok is False or warned) else PASS,
                rail_line(rail, report.figures_label) + _told(found),
                fail_open=warned,
            )
        )
    for f in report.findings:
        if f.worker is None:
            results.append(
                ExpectedResult(rb.current_step, f.threshold, FAIL, f.cause + _told([f]), fail_open=f.severity != ERROR)
            )
    if not results:
        rb.skip(what, report.not_measured or "no rail measured")
        return report
    rb.expect(results)
    return report
