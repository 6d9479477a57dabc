"""A twin node's machine: its unified memory (page cache, sticky residue), /dev/shm and systemd units.

The node's state lives in files under its root, where a DGX Spark keeps them (the layout: NodeMachine).
The memory model follows the kernel: writing 1 or 3 to drop_caches drops the page cache, and with it the
~12 GiB a stopped engine can leave held on the Spark's unified memory (seed 000 pitfall 4); 2 drops only slab
objects, which the model does not track; anything else is refused (EINVAL) and drops nothing. The knob is read
whenever memory is looked at, which is observably the same as reacting when it is written.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from lanebook.twin.kv import STICKY_UMA_DEFAULT_GIB
from lanebook.twin.standins.base import read_json, write_json

GIB = 1024**3
TOTAL_BYTES = 128 * 10**9  # DGX Spark: 128 GB unified memory shared by CPU and GPU
OS_USED_GIB = 4.5
PAGE_CACHE_GIB = 6.0  # page cache on a node that has been up a while
PAGE_CACHE_FLOOR_GIB = 0.3  # what stays cached right after a drop (files in use)
STICKY_GIB = STICKY_UMA_DEFAULT_GIB  # seed 000 pitfall 4: "free mem can stick ~10-16 Gi with no containers"
LEGACY_UNIT_GIB = 40.0  # what a running legacy serving stack holds (twin assumption)
WANTS = "multi-user.target.wants"
USER_WANTS = "default.target.wants"  # a user unit's [Install] WantedBy=default.target
HOLDS_KEY = "X-Lanebook-Twin-Holds-GiB"  # systemd ignores X- keys: the twin's note of what a unit holds
# What a healthy DGX Spark's kernel says as it boots (seconds since boot, message): the lines the doctor reads.
BOOT_MESSAGES = (
    (0.0, "Booting Linux on physical CPU 0x0000000000 [0x411fd870]"),
    (0.0, "Linux version 6.11.0-1016-nvidia (buildd@ubuntu) (aarch64-linux-gnu-gcc-13) #16-Ubuntu SMP PREEMPT_DYNAMIC"),
    (0.0, "Machine model: NVIDIA DGX Spark"),
    (4.81, "mlx5_core 0000:01:00.0: firmware version: 28.45.1020"),
    (5.02, "mlx5_core 0000:01:00.0 enp1s0f0np0: Link up"),
    (7.35, "nvidia: loading out-of-tree module taints kernel."),
    (7.61, "NVRM: loading NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build"),
    (9.12, "bond0: (slave enp1s0f0np0): Enslaving as an active interface with an up link"),
)
# The node's links as `ip link` lists them (name, mtu, kind): loopback, the management port, the RoCE port, the
# bond the lane's NCCL_SOCKET_IFNAME names and the port's second PCIe half; the RoCE link at jumbo MTU on both nodes.
LINKS = (
    ("lo", 65536, "loopback"),
    ("enP7s7", 1500, "ether"),
    ("enp1s0f0np0", 9000, "ether"),
    ("bond0", 9000, "ether"),
    ("enP2p1s0f0np0", 9000, "ether"),
)
# The node's RDMA devices as `rdma link` lists them (device, its netdev): the two PCIe x4 halves of the QSFP port
# the RoCE link uses, named as dgx-spark-playbooks issue 102 names them (NCCL_IB_HCA=rocep1s0f0,roceP2p1s0f0).
RDMA_DEVICES = (("rocep1s0f0", "enp1s0f0np0"), ("roceP2p1s0f0", "enP2p1s0f0np0"))


def legacy_unit_file(name: str, holds_gib: float) -> str:
    """The vendor unit of a legacy serving stack that holds GPU memory while it runs."""
    return "\n".join(
        [
            "[Unit]",
            f"Description=legacy vLLM serving stack ({name})",
            f"{HOLDS_KEY}={holds_gib:g}",
            "After=network-online.target docker.service",
            "",
            "[Service]",
            "ExecStart=/usr/local/bin/legacy-vllm serve",
            "Restart=always",
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )


class UnitState:
    """What systemctl reports for a unit: ActiveState and UnitFileState."""

    __slots__ = ("name", "active", "enabled", "description")

    def __init__(self, name: str, active: str, enabled: str, description: str = ""):
        self.name = name
        self.active = active  # active | inactive
        self.enabled = enabled  # enabled | disabled | masked | static | not-found
        self.description = description


class NodeMachine:
    """One node's memory and units, kept in its root. Every node session sees the first three at their real paths
    (lanebook.twin.session maps them into the root):

      dev/shm/                   the node's /dev/shm: the serving stack's shared-memory segments
      proc/sys/vm/drop_caches    the kernel's cache-drop knob; what is written there is what happens
      etc/systemd/system/        the unit directory: a masked unit is a symlink to /dev/null, an
                                 enabled one a link in multi-user.target.wants/
      usr/lib/systemd/system/    vendor unit files (the legacy serving stack's)
      run/systemd/active/        systemd's runtime state: one file per running unit
      var/memory.json            the memory model's own bookkeeping
      var/log/kmsg.json          the kernel's messages of this boot (dmesg, journalctl -k); kmsg.1.json the boot before
      var/links.json             the node's network links (ip link): names and MTUs
      var/rdma.json              its RDMA rails' state: a rail the boot left degraded (fault link-degraded)
    """

    wants = WANTS  # where `systemctl enable` links a unit: its [Install] target's .wants/
    shown_dir = "/etc/systemd/system"  # the unit directory as systemctl names it in what it prints

    def __init__(self, root: Path):
        self.root = Path(root)

    shm = property(lambda self: self.root / "dev" / "shm")
    drop_caches = property(lambda self: self.root / "proc" / "sys" / "vm" / "drop_caches")
    unit_dir = property(lambda self: self.root / "etc" / "systemd" / "system")
    vendor_unit_dir = property(lambda self: self.root / "usr" / "lib" / "systemd" / "system")
    active_dir = property(lambda self: self.root / "run" / "systemd" / "active")
    _memory_file = property(lambda self: self.root / "var" / "memory.json")
    kernel_log = property(lambda self: self.root / "var" / "log" / "kmsg.json")
    previous_kernel_log = property(lambda self: self.root / "var" / "log" / "kmsg.1.json")
    links_file = property(lambda self: self.root / "var" / "links.json")
    rdma_file = property(lambda self: self.root / "var" / "rdma.json")

    # --- kernel log and links -------------------------------------------------------------------

    def boot_kernel(self, now: float | None = None) -> None:
        """A boot's kernel log: the last boot's kept as the previous one (a persistent journal), a new one begun."""
        self.kernel_log.parent.mkdir(parents=True, exist_ok=True)
        if self.kernel_log.exists():
            self.kernel_log.replace(self.previous_kernel_log)
        booted = time.time() if now is None else now
        write_json(self.kernel_log, {"booted_at": booted, "messages": [list(m) for m in BOOT_MESSAGES]})

    def kernel_message(self, message: str, now: float | None = None) -> None:
        """The kernel logs a line now (a fault's NVRM or AER line, for example)."""
        log = read_json(self.kernel_log, None)
        if log is None:
            self.boot_kernel(now)
            log = read_json(self.kernel_log, {})
        at = (time.time() if now is None else now) - log["booted_at"]
        log["messages"].append([round(max(at, 0.0), 6), message])
        write_json(self.kernel_log, log)

    def kernel_messages(self, boot: int = 0) -> tuple[float, list[tuple[float, str]]] | None:
        """(boot time, [(seconds since boot, message)]) of this boot (0) or the one before (-1); None: not kept."""
        path = {0: self.kernel_log, -1: self.previous_kernel_log}.get(boot)
        log = read_json(path, None) if path else None
        if log is None:
            return None
        return log["booted_at"], [(float(t), str(m)) for t, m in log["messages"]]

    def links(self) -> list[tuple[str, int, str]]:
        """The node's links (name, mtu, kind): var/links.json when the twin set them, else the Spark's defaults."""
        found = read_json(self.links_file, None)
        return [tuple(link) for link in found] if found else list(LINKS)

    def rdma_devices(self) -> list[tuple[str, str]]:
        """The node's RDMA devices (device, netdev), as `rdma link` and ib_write_bw -d name them."""
        return list(RDMA_DEVICES)

    def rail_cap_gbps(self, device: str) -> float | None:
        """What a rail the boot left degraded carries (Gb/s); None for a healthy rail."""
        return read_json(self.rdma_file, {}).get("degraded", {}).get(device)

    def degrade_rail(self, device: str, gbps: float) -> None:
        """The ConnectX-7 boot/hot-plug fault on one rail: it negotiates 200 Gb/s but carries `gbps` until the node
        is power-cycled (boot)."""
        found = read_json(self.rdma_file, {})
        write_json(self.rdma_file, {**found, "degraded": {**found.get("degraded", {}), device: gbps}})

    def mac(self, name: str) -> str:
        if name == "lo":
            return "00:00:00:00:00:00"
        import hashlib

        digest = hashlib.sha256(f"{self.root.name}/{name}".encode()).digest()
        return ":".join(f"{b:02x}" for b in (0x4C, 0xBB, 0x47, *digest[:3]))

    # --- memory ---------------------------------------------------------------------------------

    def memory(self) -> dict:
        """{"cache_gib", "sticky_gib"} after whatever was written to drop_caches since the last look."""
        state = read_json(self._memory_file, {"cache_gib": PAGE_CACHE_GIB, "sticky_gib": 0.0, "drop_seen_ns": 0})
        try:
            written_ns = self.drop_caches.stat().st_mtime_ns
        except FileNotFoundError:
            written_ns = 0
        if written_ns > state.get("drop_seen_ns", 0):
            value = self.drop_caches.read_text(errors="replace").strip()
            if value in ("1", "3"):
                state.update(cache_gib=PAGE_CACHE_FLOOR_GIB, sticky_gib=0.0)
            state["drop_seen_ns"] = written_ns
            write_json(self._memory_file, state)
        return {"cache_gib": state["cache_gib"], "sticky_gib": state["sticky_gib"]}

    def hold_sticky(self, gib: float = STICKY_GIB) -> None:
        """A stopped engine leaves `gib` held until caches are dropped (fault sticky-uma)."""
        self.memory()  # a drop written before the stop applies first
        state = read_json(self._memory_file, {"cache_gib": PAGE_CACHE_GIB, "sticky_gib": 0.0, "drop_seen_ns": 0})
        state["sticky_gib"] = max(state.get("sticky_gib", 0.0), gib)
        write_json(self._memory_file, state)

    def held_gib(self) -> float:
        """Memory held outside any container: sticky residue plus running units that hold memory."""
        units = sum(self.holds_gib(name) for name in self.active_units())
        return self.memory()["sticky_gib"] + units

    # --- units ----------------------------------------------------------------------------------

    def unit_file(self, name: str) -> Path | None:
        """The unit's file: the unit directory's (a real file, or a mask link) before the vendor's."""
        for directory in (self.unit_dir, self.vendor_unit_dir):
            path = directory / name
            if path.is_symlink() or path.exists():
                return path
        return None

    def link_target(self, name: str) -> str:
        """What `systemctl enable` links the unit to: the vendor's unit file, as systemd names it."""
        return f"/usr/lib/systemd/system/{name}"

    def shown(self, path: str) -> str:
        return path

    def masked(self, name: str) -> bool:
        link = self.unit_dir / name
        return link.is_symlink() and os.readlink(link) == "/dev/null"

    def state(self, name: str) -> UnitState:
        path = self.unit_file(name)
        if self.masked(name):
            enabled = "masked"
        elif path is None:
            enabled = "not-found"
        elif (self.unit_dir / self.wants / name).is_symlink():
            enabled = "enabled"
        else:
            enabled = "disabled" if "[Install]" in path.read_text(errors="replace") else "static"
        return UnitState(name, "active" if self.is_active(name) else "inactive", enabled, self.description(name))

    def description(self, name: str) -> str:
        return self._unit_key(name, "Description") or ""

    def holds_gib(self, name: str) -> float:
        value = self._unit_key(name, HOLDS_KEY)
        try:
            return float(value) if value else 0.0
        except ValueError:
            return 0.0

    def _unit_key(self, name: str, key: str) -> str | None:
        vendor = self.vendor_unit_dir / name
        path = self.unit_dir / name if (self.unit_dir / name).is_file() and not self.masked(name) else vendor
        if not path.is_file():
            return None
        match = re.search(rf"^{re.escape(key)}=(.*)$", path.read_text(errors="replace"), re.M)
        return match.group(1).strip() if match else None

    def is_active(self, name: str) -> bool:
        return (self.active_dir / name).exists()

    def active_units(self) -> list[str]:
        return sorted(p.name for p in self.active_dir.iterdir()) if self.active_dir.is_dir() else []

    def set_active(self, name: str, active: bool) -> None:
        marker = self.active_dir / name
        if active:
            self.active_dir.mkdir(parents=True, exist_ok=True)
            marker.touch()
        else:
            marker.unlink(missing_ok=True)

    def boot(self) -> None:
        """What a reboot leaves: /dev/shm empty (a tmpfs), the page cache and the sticky residue gone, and the
        units running that are enabled (and not masked); files on disk stay as they were."""
        import shutil

        for segment in self.shm.iterdir() if self.shm.is_dir() else ():
            shutil.rmtree(segment) if segment.is_dir() and not segment.is_symlink() else segment.unlink()
        self.memory()  # a drop written before the reboot is seen, so the next write is again news
        state = read_json(self._memory_file, {"drop_seen_ns": 0})
        write_json(self._memory_file, {**state, "cache_gib": PAGE_CACHE_FLOOR_GIB, "sticky_gib": 0.0})
        for name in self.active_units():
            self.set_active(name, False)
        self.boot_kernel()
        self.rdma_file.unlink(missing_ok=True)  # the twin's reboot is a power cycle: a degraded rail recovers
        for name in self.known_units():
            if self.state(name).enabled == "enabled":
                self.set_active(name, True)
        for running in (self.root / "run" / "user" / "systemd" / "active").glob("*"):
            running.unlink()  # /run is a tmpfs: the users' managers start again empty
        for home in (self.root / "var" / "lib" / "systemd" / "linger").glob("*"):
            UserUnits.of_home(self.root, home.read_text().strip()).boot_units()  # lingering: user units start at boot

    def boot_units(self) -> None:
        for name in self.active_units():
            self.set_active(name, False)
        for name in self.known_units():
            if self.state(name).enabled == "enabled":
                self.set_active(name, True)

    def known_units(self) -> list[str]:
        names = set(self.active_units())
        for directory in (self.unit_dir, self.vendor_unit_dir):
            if directory.is_dir():
                names |= {p.name for p in directory.iterdir() if p.name.endswith((".service", ".socket", ".timer"))}
        return sorted(names)


class UserUnits(NodeMachine):
    """One user's systemd instance on a node (`systemctl --user`): its units in ~/.config/systemd/user, enabled by a
    link in default.target.wants/, its running state under the node's run/user/; started at boot only while the user
    lingers (`loginctl enable-linger`: var/lib/systemd/linger/USER, holding the user's home)."""

    wants = USER_WANTS
    shown_dir = "~/.config/systemd/user"

    def __init__(self, root: Path, home: Path):
        super().__init__(root)
        self.home = Path(home)

    @classmethod
    def of_home(cls, root: Path, home: str) -> "UserUnits":
        return cls(root, Path(home))

    unit_dir = property(lambda self: self.home / ".config" / "systemd" / "user")

    def link_target(self, name: str) -> str:
        return str(self.unit_dir / name)

    def shown(self, path: str) -> str:
        return path.replace(str(self.home), "~", 1)

    vendor_unit_dir = property(lambda self: self.root / "usr" / "lib" / "systemd" / "user")
    active_dir = property(lambda self: self.root / "run" / "user" / "systemd" / "active")


def linger_file(root: Path, user: str) -> Path:
    """Where a node keeps that USER lingers (`loginctl enable-linger`), as systemd-logind does."""
    return Path(root) / "var" / "lib" / "systemd" / "linger" / user


def init_node(
    root: Path, legacy_units: list[str], legacy_active: bool, holds_gib: float = LEGACY_UNIT_GIB
) -> NodeMachine:
    """A fresh machine at `twin up`: empty /dev/shm, cache warm, legacy units installed (running with the fault)."""
    machine = NodeMachine(root)
    for directory in (
        machine.shm,
        machine.drop_caches.parent,
        machine.unit_dir / WANTS,
        machine.vendor_unit_dir,
        machine.active_dir,
        root / "var",
    ):
        directory.mkdir(parents=True, exist_ok=True)
    machine.drop_caches.write_text("0\n")
    machine.boot_kernel()
    write_json(
        machine._memory_file,
        {"cache_gib": PAGE_CACHE_GIB, "sticky_gib": 0.0, "drop_seen_ns": machine.drop_caches.stat().st_mtime_ns},
    )
    for name in legacy_units:
        (machine.vendor_unit_dir / name).write_text(legacy_unit_file(name, holds_gib))
        if legacy_active:
            (machine.unit_dir / WANTS / name).symlink_to(f"/usr/lib/systemd/system/{name}")
            machine.set_active(name, True)
    return machine
