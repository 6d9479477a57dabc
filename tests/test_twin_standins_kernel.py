"""The twin's dmesg, journalctl -k, ip link and rdma link: what they print is the node's state, in the real tools'
formats, and the doctor's patterns read it (ip -o link's MTU line, journalctl's kernel lines); what the node does not
keep (a boot before the first) is refused as journald refuses it."""

import json
import re

from helpers.node_helpers import local_node
from lanebook.recipe.symptoms import IP_LINK
from lanebook.twin.standins.machine import BOOT_MESSAGES


def test_dmesg_prints_this_boots_ring_buffer_and_a_kernel_message_added_later(tmp_path):
    node = local_node(tmp_path)
    node.machine.kernel_message("NVRM: GPU0 nvAssertFailed: Out of memory [NV_ERR_NO_MEMORY]")
    done = node.run("dmesg")
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and len(lines) == len(BOOT_MESSAGES) + 1
    assert re.fullmatch(r"\[ +0\.000000\] Booting Linux on physical CPU .*", lines[0])
    assert lines[-1].endswith("] NVRM: GPU0 nvAssertFailed: Out of memory [NV_ERR_NO_MEMORY]")


def test_journalctl_has_this_boot_and_the_previous_one_only_after_a_reboot(tmp_path):
    node = local_node(tmp_path)
    now = node.run("journalctl -k -b 0 --no-pager")
    assert now.returncode == 0 and re.match(r"\w{3} \d\d \d\d:\d\d:\d\d spark-\S+ kernel: Booting Linux", now.stdout)
    before = node.run("journalctl -k -b -1 --no-pager")
    assert before.returncode == 1 and "No such boot ID in journal" in before.stderr and before.stdout == ""
    node.machine.kernel_message("watchdog: BUG: soft lockup - CPU#3 stuck for 22s! [python3:4242]")
    node.machine.boot()
    after = node.run("journalctl -k -b -1 --no-pager")
    assert after.returncode == 0 and "soft lockup - CPU#3" in after.stdout.splitlines()[-1]
    assert "soft lockup" not in node.run("journalctl -k --no-pager").stdout
    assert node.run("journalctl -u docker").returncode == 1  # only the kernel's messages are kept


def test_ip_o_link_lists_the_links_with_their_mtu_as_iproute2_does(tmp_path):
    node = local_node(tmp_path)
    lines = node.run("ip -o link").stdout.splitlines()
    assert lines[0].startswith("1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN")
    mtus = {m["ifname"]: int(m["mtu"]) for m in (re.search(IP_LINK.regex, line) for line in lines) if m}
    assert mtus == {"lo": 65536, "enP7s7": 1500, "enp1s0f0np0": 9000, "bond0": 9000, "enP2p1s0f0np0": 9000}
    assert all("\\    link/" in line for line in lines)
    two_line = node.run("ip link show dev bond0").stdout.splitlines()
    assert len(two_line) == 2 and two_line[0].startswith("4: bond0: ") and two_line[1].startswith("    link/ether ")
    missing = node.run("ip link show nope0")
    assert missing.returncode == 1 and 'Device "nope0" does not exist.' in missing.stderr
    assert node.run("ip addr").returncode == 1


def test_rdma_and_ip_json_answer_as_iproute2_does(tmp_path):
    node = local_node(tmp_path)
    [port] = json.loads(node.run("rdma -j link show roceP2p1s0f0/1").stdout)
    assert (port["ifname"], port["state"], port["netdev"]) == ("roceP2p1s0f0", "ACTIVE", "enP2p1s0f0np0")
    assert node.run("rdma link").stdout.splitlines()[0] == (
        "link rocep1s0f0/1 state ACTIVE physical_state LINK_UP netdev enp1s0f0np0"
    )
    assert node.run("rdma link show mlx5_9/1").stderr.strip() == "Wrong device name"
    [entry] = json.loads(node.run("ip -j link show dev enP2p1s0f0np0").stdout)
    assert (entry["mtu"], entry["operstate"]) == (9000, "UP")
