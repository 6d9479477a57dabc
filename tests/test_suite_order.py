"""The order the parallel suite hands modules out in (tests/conftest.py): the real vLLM's module first, then the
modules tests/module_seconds.txt lists, slowest first, then any other as collected."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from conftest import FIRST, MODULE_SECONDS, module_seconds, pytest_collection_modifyitems

TESTS = Path(__file__).parent


def test_every_module_the_order_lists_exists_and_has_its_seconds():
    seconds = module_seconds()
    assert seconds, f"{MODULE_SECONDS} lists no module"
    assert sorted(name for name in seconds if not (TESTS / name).is_file()) == []
    assert all(value >= 0 for value in seconds.values())


def test_the_real_server_first_then_slowest_first_then_the_unlisted_as_collected(tmp_path, monkeypatch):
    order = tmp_path / "module_seconds.txt"
    order.write_text("# seconds  module\n  30.0  tests/test_b.py\n 120.5  tests/test_c.py\n")
    monkeypatch.setattr("conftest.MODULE_SECONDS", order)
    names = ["test_a.py", "test_b.py", "test_z.py", FIRST, "test_c.py", "test_b.py"]
    items = [SimpleNamespace(path=Path("tests") / name, n=n) for n, name in enumerate(names)]
    pytest_collection_modifyitems(items)
    assert [(item.path.name, item.n) for item in items] == [
        (FIRST, 3),
        ("test_c.py", 4),
        ("test_b.py", 1),
        ("test_b.py", 5),
        ("test_a.py", 0),
        ("test_z.py", 2),
    ]
