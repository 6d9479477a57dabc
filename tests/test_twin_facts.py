"""The registry of facts the twin reproduces: every entry proven by tests that exist, every figure in its band."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
from lanebook.twin import facts

REPO = Path(__file__).resolve().parents[1]
FIGURES = [(entry.id, figure) for entry in facts.FACTS for figure in entry.figures]


def test_the_registry_holds_t01_to_t15_once_each_in_order():
    assert [entry.id for entry in facts.FACTS] == [f"T{n:02d}" for n in range(1, 16)]
    assert facts.fact("T04") is facts.FACTS[3]
    with pytest.raises(KeyError):
        facts.fact("T16")


def test_collected_names_are_functions_and_test_class_methods(tmp_path):
    (tmp_path / "test_x.py").write_text(
        "def test_a(): pass\ndef helper(): pass\nclass TestB:\n    def test_c(self): pass\n"
    )
    assert collected_names(tmp_path / "test_x.py") == {"test_a", "TestB::test_c"}


def collected_names(path: Path) -> set[str]:
    """The tests pytest collects from a file, by name: test functions and the test methods of Test classes."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            names |= {
                f"{node.name}::{item.name}"
                for item in node.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test")
            }
    return names


@pytest.mark.parametrize("entry", facts.FACTS, ids=lambda e: e.id)
def test_every_fact_names_tests_that_exist(entry):
    assert entry.tests, f"{entry.id} names no test"
    for node_id in entry.tests:
        path, _, name = node_id.partition("::")
        assert (REPO / path).is_file(), f"{entry.id}: no test file {path}"
        assert name in collected_names(REPO / path), f"{entry.id}: {path} has no test {name}"


@pytest.mark.parametrize("fact_id, figure", FIGURES, ids=[f"{i}-{f.label}" for i, f in FIGURES])
def test_every_measured_figure_agrees_with_the_seed(fact_id, figure):
    value = figure.measure()
    assert figure.agrees(value), f"{fact_id} {figure.label}: twin {value} outside [{figure.low}, {figure.high}]"
    assert figure.measure() == value  # deterministic: the page shows the same figure every build


def test_figure_bands():
    printed = facts.as_printed("x", 7.16, 2, lambda: 7.155)
    assert (printed.seed, printed.tolerance, printed.agrees(7.1549), printed.agrees(7.164)) == (
        "7.16",
        "as printed",
        False,
        True,
    )
    near = facts.around("y", 82.8, 0.03, lambda: 0.0)
    assert (near.seed, near.tolerance) == ("82.8", "±3 %")
    assert near.low == pytest.approx(80.316) and near.high == pytest.approx(85.284)
    above = facts.within("z", "better", 1.03, math.inf, lambda: 2.0, "at least 3 % higher", 3)
    assert above.agrees(1e9) and not above.agrees(1.02) and above.format(1.0512) == "1.051"


def test_render_page_of_a_small_registry_is_exact():
    entry = facts.Fact(
        "T99",
        "recipe, seed 000",
        "A | B.",
        "Twin does it.",
        ("tests/test_x.py::test_y",),
        (facts.as_printed("KV (GiB)", 7.16, 2, lambda: 7.16), facts.within("rate", "47-70", 47, 70, lambda: 80.04)),
    )
    plain = facts.Fact("T98", "canary write-up, seed 003", "No figure.", "Shown.", ("a::b", "c::d"))
    page = facts.render_page([entry, plain], conformance_section=False)
    assert page.startswith("# Facts the twin reproduces\n\n")
    assert "twin figures, never a real lane's" in page
    assert "**The real-vllm-cpu lane** (`params/real-vllm-cpu.yaml`)" in page  # where the real vLLM serves instead
    anchor = '<span class="lanebook-anchor" id="{0}">{0}</span>'.format  # each id a link target
    assert page.splitlines()[-4:] == [
        "| id | fact | published figure | twin figure (measured) | how the twin reproduces it | proving tests |",
        "|---|---|---|---|---|---|",
        f"| {anchor('T99')} | A \\| B. *(recipe, seed 000)* | KV (GiB): 7.16 (as printed)<br>rate: 47-70 (inside the "
        "band) | KV (GiB): 7.16<br>rate: 80.0 (outside) | Twin does it. | `tests/test_x.py::test_y` |",
        f"| {anchor('T98')} | No figure. *(canary write-up, seed 003)* | - | - | Shown. | `a::b`<br>`c::d` |",
    ]


def test_the_page_has_a_row_per_fact_with_its_measured_figures():
    rows = [line for line in facts.render_page().splitlines() if line.startswith('| <span class="lanebook-anchor"')]
    assert [row.split(" | ")[0] for row in rows] == [
        f'| <span class="lanebook-anchor" id="T{n:02d}">T{n:02d}</span>' for n in range(1, 16)
    ]
    assert "GPU KV cache size at 0.85 (tokens): 2,493,464" in rows[1]
    assert "(outside)" not in "\n".join(rows)
