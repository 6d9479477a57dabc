"""The link: ib_write_bw's output parsed and judged as pure functions of text (healthy, degraded, the GB10 failure
above 64 KiB, MiB/s reports), the lane's link: block validated, a dry run that only records; and one twin measured
healthy, then with one rail degraded: a finding naming the rail and its fix, in measure_link and `lanebook check`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from lanebook.base.errors import LaneError
from lanebook.lane.params import lane_with, load_lane
from lanebook.nodes.ssh import LaneNodes
from lanebook.verify import link
from lanebook.verify.link import (
    PR_108,
    PerftestResult,
    PortState,
    RailFigures,
    RailRecord,
    judge_bus_bandwidth,
    judge_hca,
    judge_rail,
    link_report,
    measure_link,
    parse_all_reduce_perf,
    parse_ib_write_bw,
)

LINE = "-" * 87


def perftest_text(average: str, *, unit: str = "Gb/sec", size: int = 65536, device: str = "rocep1s0f0") -> str:
    """An ib_write_bw client's output in perftest's format with the given figures (written here, not pasted)."""
    return "\n".join(
        [
            " WARNING: BW peak won't be measured in this run.",
            LINE,
            "                    RDMA_Write BW Test",
            f" Dual-port       : OFF\t\tDevice         : {device}",
            " Number of qps   : 1\t\tTransport type : IB",
            " Connection type : RC\t\tUsing SRQ      : OFF",
            " TX depth        : 128",
            " CQ Moderation   : 1",
            " Mtu             : 4096[B]",
            " Link type       : Ethernet",
            " GID index       : 3",
            " Data ex. method : Ethernet",
            LINE,
            " local address: LID 0000 QPN 0x0a11 PSN 0x1b2c3d RKey 0x00a0b0 VAddr 0x007f0000001000",
            " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:00:00:01",
            " remote address: LID 0000 QPN 0x0b22 PSN 0x4e5f60 RKey 0x00c0d0 VAddr 0x007f0000002000",
            " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:00:00:02",
            LINE,
            f" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]",
            f" {size:<7d}    510000           0.00               {average}  \t\t     0.176000",
            LINE,
        ]
    )


GB10_FAILURE = "\n".join(
    [
        LINE,
        "                    RDMA_Write BW Test",
        " Number of qps   : 1\t\tTransport type : IB",
        LINE,
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]",
        " Completion with error at client",
        " Failed status 10: wr_id 0 syndrom 0x9d",
        " scnt=128, ccnt=0",
        " Failed to complete run_iter_bw function successfully",
    ]
)

UP = PortState("ACTIVE", "LINK_UP", "enp1s0f0np0", 9000, "UP")


def rail(text: str, *, head: PortState = UP, worker: PortState = UP) -> RailFigures:
    return RailFigures("worker", "rocep1s0f0", head, worker, parse_ib_write_bw(text))


# --- pure: parsing and judging ---------------------------------------------------------------------------------------


def test_a_healthy_rail_parses_into_its_figures_and_has_no_finding():
    parsed = parse_ib_write_bw(perftest_text("94.12"))
    assert parsed == PerftestResult(
        device="rocep1s0f0",
        qps=1,
        connection="RC",
        roce_mtu=4096,
        link_type="Ethernet",
        message_bytes=65536,
        iterations=510000,
        bw_peak_gbps=0.0,
        bw_average_gbps=94.12,
        msg_rate_mpps=0.176,
    )
    assert judge_rail(rail(perftest_text("94.12"))) == []


def test_a_degraded_rail_is_a_finding_naming_the_rail_the_boot_fault_and_the_power_cycle():
    [finding] = judge_rail(rail(perftest_text("13.23")), lane="anemll-0731")
    assert (finding.id, finding.severity, finding.rail, finding.worker) == ("L01", "error", "rocep1s0f0", "worker")
    assert "13.23 Gb/s" in finding.cause and "boot/hot-plug fault" in finding.cause
    assert "power-cycle" in finding.fix and "a relaunch does not help" in finding.fix
    assert "lanebook check --lane anemll-0731" in finding.fix and PR_108 in finding.source
    [low] = judge_rail(rail(perftest_text("31.00")))  # degraded, outside the boot fault's band
    assert low.id == "L01" and "boot/hot-plug" not in low.cause
    [suspect] = judge_rail(rail(perftest_text("71.50")))
    assert (suspect.id, suspect.severity) == ("L02", "warning")


def test_mib_per_second_reports_are_read_as_gbps():
    parsed = parse_ib_write_bw(perftest_text("11250.00", unit="MB/sec"))
    assert parsed.bw_average_gbps == pytest.approx(11250 * 1048576 * 8 / 1e9, rel=1e-4)


def test_the_gb10_failure_above_64_kib_is_the_instruments_not_the_links():
    parsed = parse_ib_write_bw(GB10_FAILURE)
    assert not parsed.measured and parsed.error.startswith("Completion with error at client")
    figures = link.rail_figures(RailRecord("worker", "rocep1s0f0", client=GB10_FAILURE, message_bytes=131072))
    [finding] = judge_rail(figures)
    assert (finding.id, finding.severity) == ("L05", "warning")
    assert "64 KiB" in finding.cause and "-s 65536" in finding.fix and "perftest/issues/394" in finding.source
    at_64k = link.rail_figures(RailRecord("worker", "rocep1s0f0", client="bash: ib_write_bw: command not found"))
    [missing] = judge_rail(at_64k)
    assert (missing.id, missing.severity) == ("L05", "error") and "apt-get install -y perftest" in missing.fix


def test_a_rail_down_or_an_mtu_off_is_named():
    down = PortState("DOWN", "DISABLED", "enp1s0f0np0", 9000, "DOWN")
    assert [f.id for f in judge_rail(rail(perftest_text("94.1"), worker=down))] == ["L04"]
    small = PortState("ACTIVE", "LINK_UP", "enp1s0f0np0", 1500, "UP")
    [differs] = judge_rail(rail(perftest_text("94.1"), worker=small))
    assert (differs.id, differs.severity) == ("L03", "error") and "D05" in differs.cause
    [both] = judge_rail(rail(perftest_text("94.1"), head=small, worker=small))
    assert (both.id, both.severity) == ("L03", "warning") and "mtu 9000" in both.fix


def test_nccl_ib_hca_naming_one_half_of_the_port_and_the_bus_bandwidth_bands():
    rails = ["rocep1s0f0", "roceP2p1s0f0"]
    [half] = judge_hca("rocep1s0f0", rails)
    assert half.id == "L06" and "roceP2p1s0f0" in half.fix and "issues/102" in half.source
    assert judge_hca("rocep1s0f0,roceP2p1s0f0", rails) == [] and judge_hca("^mlx5_0", rails) == []
    assert judge_bus_bandwidth(21.6) == []
    assert [(f.id, f.severity) for f in judge_bus_bandwidth(12.0)] == [("L07", "warning")]
    assert [(f.id, f.severity) for f in judge_bus_bandwidth(3.04)] == [("L07", "error")]
    table = "\n".join(
        [
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time",
            "     1048576        262144     float     sum      -1    120.5    8.70    8.70       0    119.9",
            "  1073741824     268435456     float     sum      -1  49800.1   21.56   21.56       0  49700.2",
            "# Avg bus bandwidth    : 15.1302",
        ]
    )
    assert parse_all_reduce_perf(table) == 21.56
    assert parse_all_reduce_perf("# Avg bus bandwidth    : 3.04") == 3.04


def test_the_report_is_a_pure_function_of_its_records_and_says_what_was_not_measured():
    params = load_lane("twin")
    records = [
        RailRecord("worker", "rocep1s0f0", client=perftest_text("94.4")),
        RailRecord("worker", "roceP2p1s0f0", client=perftest_text("13.2", device="roceP2p1s0f0")),
    ]
    first = link_report(params, records, measured_at="2026-12-07T00:00:00Z").to_json()
    assert first == link_report(params, records, measured_at="2026-12-07T00:00:00Z").to_json()
    assert first["ok"] is False and first["figures"] == "twin"
    assert [r["gbps"] for r in first["rails"]] == [94.4, 13.2]
    assert [(f["id"], f["rail"]) for f in first["findings"]] == [("L01", "roceP2p1s0f0")]
    assert first["nccl"]["measured"] is False and "all_reduce_perf" in first["nccl"]["note"]
    assert all(t["source"].startswith("https://") for t in first["thresholds"])
    json.dumps(first)


def test_the_link_block_is_validated_and_unknown_keys_are_refused(tmp_path):
    params = load_lane("twin")
    assert params.rails == ["rocep1s0f0", "roceP2p1s0f0"]
    from_env = lane_with(params, link={}, env={"NCCL_IB_HCA": "=rocep1s0f1:1,roceP2p1s0f1:1"})
    assert from_env.rails == ["rocep1s0f1", "roceP2p1s0f1"]
    text = Path(params.file).read_text()
    for block, says in (
        ("link:\n  rails: [rocep1s0f0]\n  message_size: 4096\n", "unknown key 'link.message_size'"),
        ("link:\n  rails: [rocep1s0f0]\n  message_bytes: 131072\n", "perftest/issues/394"),
        ("link:\n  rails: ['rocep1s0f0; reboot']\n", "RDMA device name"),
    ):
        lane = tmp_path / "lane.yaml"
        lane.write_text(text[: text.index("\nlink:") + 1] + block + text[text.index("\nrollback:") + 1 :])
        with pytest.raises(LaneError, match=re.escape(says)):
            load_lane(lane)


def test_a_dry_run_records_quoted_commands_and_measures_nothing():
    params = load_lane("anemll-0731")  # a real lane: a dry run must open no connection to it
    params = lane_with(params, link={"rails": ["rocep1s0f1", "roceP2p1s0f1"]})
    with LaneNodes(params, dry_run=True) as nodes:
        report = measure_link(nodes, params)
        sent = nodes.executor.commands()
    assert report.dry_run and not report.ok and report.not_measured == "not observed (dry run)"
    assert all(r.gbps is None and r.ib_write_bw is None for r in report.rails) and report.findings == []
    client = [c for c in sent if c.startswith("head: ib_write_bw ")]
    assert client[0] == (
        "head: ib_write_bw -d rocep1s0f1 -x 3 -c RC -s 65536 -q 1 -F --report_gbits -D 3 -p 18515 10.0.0.2 2>&1"
    )
    assert any(c.startswith("worker: log=$(mktemp") and "ib_write_bw -d roceP2p1s0f1" in c for c in sent)
    assert "head: docker run --rm --entrypoint sh ghcr.io/anemll/dspark-vllm-gx10:0.1.1 -c " in sent[0]
    assert report.nccl_note == "not observed (dry run)"
    with pytest.raises(ValueError, match="RC writes fail on GB10"):
        measure_link(LaneNodes(params, dry_run=True), params, message_bytes=131072)


# --- on the twin ---------------------------------------------------------------------------------------------------


@pytest.mark.twin
def test_the_twin_measures_healthy_then_names_the_degraded_rail_in_measure_link_and_check(twin):
    from lanebook.twin import control
    from lanebook.twin.standins.machine import NodeMachine

    params = load_lane("twin")
    with LaneNodes(params) as nodes:
        healthy = measure_link(nodes, params)
    assert healthy.ok and [r.rail for r in healthy.rails] == ["rocep1s0f0", "roceP2p1s0f0"]
    assert all(92 <= r.gbps <= 97 and r.head.mtu == r.worker_end.mtu == 9000 for r in healthy.rails)
    worker = NodeMachine(control.layout().node("worker"))
    worker.degrade_rail(control.DEGRADED_RAIL, control.DEGRADED_RAIL_GBPS)  # what the fault does
    try:
        with LaneNodes(params) as nodes:
            degraded = measure_link(nodes, params)
        [finding] = degraded.findings
        assert not degraded.ok and (finding.id, finding.rail, finding.worker) == ("L01", "roceP2p1s0f0", "worker")
        assert "power-cycle" in finding.fix
        done = subprocess.run(
            [str(Path(sys.executable).parent / "lanebook"), "check", "--lane", "twin", "--json"],
            capture_output=True,
            text=True,
            env=os.environ,
            timeout=120,
        )
        assert done.returncode == 1, done.stderr
        items = {i["item"]: i for i in json.loads(done.stdout)["items"]}
        rail_item = items["RoCE rail roceP2p1s0f0"]
        assert rail_item["ok"] is False and rail_item["blocking"] and "power-cycle" in rail_item["fix"]
        assert items["RoCE rail rocep1s0f0"]["ok"] is True
        nccl = items["NCCL bus bandwidth"]
        assert nccl["ok"] is None and nccl["seen"].startswith("not measured: the lane's image ghcr.io/anemll/")
        assert nccl["seen"].endswith("carries no all_reduce_perf")
    finally:
        worker.rdma_file.unlink(missing_ok=True)
