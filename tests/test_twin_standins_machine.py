"""The twin node's machine model (lanebook.twin.standins.machine): memory reacts to what is written to the
node's drop_caches as the kernel does, and unit state is read from the node's unit directory."""

import os
import time

from lanebook.twin.standins.machine import (
    LEGACY_UNIT_GIB,
    PAGE_CACHE_FLOOR_GIB,
    PAGE_CACHE_GIB,
    STICKY_GIB,
    NodeMachine,
    init_node,
)

UNIT = "aiden-vllm.service"


def write_knob(machine: NodeMachine, value: str) -> None:
    """As `echo VALUE > /proc/sys/vm/drop_caches` does: truncate and write; the mtime moves on."""
    before = machine.drop_caches.stat().st_mtime_ns
    machine.drop_caches.write_text(value + "\n")
    if machine.drop_caches.stat().st_mtime_ns == before:  # coarse file-system clock: make the write visible
        os.utime(machine.drop_caches, ns=(before + 1000, before + 1000))


def test_a_fresh_node_has_its_paths_and_a_warm_cache(tmp_path):
    machine = init_node(tmp_path, [UNIT], legacy_active=False)
    assert machine.shm.is_dir() and list(machine.shm.iterdir()) == []
    assert machine.drop_caches.read_text() == "0\n"
    assert machine.memory() == {"cache_gib": PAGE_CACHE_GIB, "sticky_gib": 0.0}
    assert (machine.vendor_unit_dir / UNIT).is_file() and not (machine.unit_dir / UNIT).exists()
    assert machine.state(UNIT).active == "inactive" and machine.state(UNIT).enabled == "disabled"
    assert machine.held_gib() == 0.0


def test_drop_caches_values_as_the_kernel_reads_them(tmp_path):
    machine = init_node(tmp_path, [], legacy_active=False)
    machine.hold_sticky()
    assert machine.memory() == {"cache_gib": PAGE_CACHE_GIB, "sticky_gib": STICKY_GIB}
    for refused in ("0", "4x", "three"):  # the kernel refuses these (EINVAL): nothing is dropped
        write_knob(machine, refused)
        assert machine.memory() == {"cache_gib": PAGE_CACHE_GIB, "sticky_gib": STICKY_GIB}
    write_knob(machine, "2")  # slab objects only, which the model does not track
    assert machine.memory()["sticky_gib"] == STICKY_GIB
    write_knob(machine, "3")
    assert machine.memory() == {"cache_gib": PAGE_CACHE_FLOOR_GIB, "sticky_gib": 0.0}
    machine.hold_sticky()  # a later stop holds memory again; the earlier write is not applied twice
    assert machine.memory()["sticky_gib"] == STICKY_GIB
    write_knob(machine, "1")
    assert machine.memory()["sticky_gib"] == 0.0


def test_a_drop_written_before_a_stop_applies_before_its_residue(tmp_path):
    machine = init_node(tmp_path, [], legacy_active=False)
    machine.hold_sticky()
    write_knob(machine, "3")
    time.sleep(0.01)
    machine.hold_sticky()  # the stop comes after the drop: its residue stays
    assert machine.memory()["sticky_gib"] == STICKY_GIB


def test_unit_state_is_read_from_the_unit_directory(tmp_path):
    machine = init_node(tmp_path, [UNIT], legacy_active=True)
    assert (machine.unit_dir / "multi-user.target.wants" / UNIT).is_symlink()
    assert (machine.state(UNIT).active, machine.state(UNIT).enabled) == ("active", "enabled")
    assert machine.held_gib() == LEGACY_UNIT_GIB and machine.holds_gib(UNIT) == LEGACY_UNIT_GIB
    (machine.unit_dir / UNIT).symlink_to("/dev/null")  # what `systemctl mask` leaves
    assert machine.masked(UNIT) and machine.state(UNIT).enabled == "masked"
    machine.set_active(UNIT, False)
    assert machine.state(UNIT).active == "inactive" and machine.held_gib() == 0.0
    assert machine.state("other.service").enabled == "not-found"
    assert machine.known_units() == [UNIT]


def test_a_boot_empties_shm_and_the_cache_and_starts_what_is_enabled(tmp_path):
    machine = init_node(tmp_path, [UNIT], legacy_active=True)
    (machine.vendor_unit_dir / "other.service").write_text(
        "[Unit]\nDescription=other\n[Install]\nWantedBy=multi-user.target\n"
    )
    machine.set_active("other.service", True)  # started by hand, not enabled
    (machine.shm / "psm_1").write_bytes(b"\0")
    (machine.shm / "nccl-dir").mkdir()
    machine.hold_sticky()
    kept = tmp_path / "home" / "weights.safetensors"
    kept.parent.mkdir()
    kept.write_bytes(b"w")
    machine.boot()
    assert list(machine.shm.iterdir()) == [] and kept.read_bytes() == b"w"
    assert machine.memory() == {"cache_gib": PAGE_CACHE_FLOOR_GIB, "sticky_gib": 0.0}
    assert machine.active_units() == [UNIT]  # enabled: it starts again at boot (until it is masked)
    write_knob(machine, "3")
    assert machine.memory() == {"cache_gib": PAGE_CACHE_FLOOR_GIB, "sticky_gib": 0.0}  # a drop after boot still reads
    (machine.unit_dir / UNIT).symlink_to("/dev/null")
    machine.boot()
    assert machine.active_units() == []  # masked: it stays down
