"""The library's layers are folders, and every import points down: a module may import its own layer and the
layers below it, never one above. The twin is a plugin beside the product: the product never imports it (only
the composition roots, cli and demo, put the two together), and the twin never imports a composition root."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[1] / "lib" / "lanebook"
# Bottom to top; ARCHITECTURE.md says what each holds.
LAYERS = ["base", "lane", "nodes", "steps", "recipe", "speed", "ops", "verify", "runs", "site"]
ROOTS = {"cli", "demo"}  # where the program is put together: may import any layer and the twin
TWIN_SEAM = "the product never imports the twin; plug it in through lanebook.lane.plugins"


def imported_modules(path: Path, lib: Path) -> list[tuple[int, str]]:
    """Every lanebook module PATH imports (at any depth: function-level and TYPE_CHECKING imports count too)."""
    tree = ast.parse(path.read_text(), str(path))
    package = ".".join(("lanebook",) + path.relative_to(lib).parent.parts)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.append((node.lineno, base))
    return [(line, name) for line, name in found if name == "lanebook" or name.startswith("lanebook.")]


def room(module: str) -> str | None:
    """The layer, 'twin' or composition root a lanebook module lives in (None: the package itself)."""
    parts = module.split(".")
    known = parts[1] if len(parts) > 1 else None
    return known if known in LAYERS or known in ROOTS or known == "twin" else None


def violations(path: Path, lib: Path = LIB) -> list[str]:
    """Imports of PATH that point up a layer, or across the product/twin seam the wrong way."""
    own = room(".".join(("lanebook",) + path.relative_to(lib).with_suffix("").parts))
    found = []
    for line, name in imported_modules(path, lib):
        other = room(name)
        if other is None or other == own or own in ROOTS:
            continue
        where = f"{path.relative_to(lib.parent)}:{line} imports {name}"
        if own == "twin":
            if other in ROOTS:
                found.append(f"{where} (the twin must not import a composition root)")
        elif other == "twin":
            found.append(f"{where} ({TWIN_SEAM})")
        elif other in ROOTS:
            found.append(f"{where} (a layer never imports a composition root)")
        elif LAYERS.index(other) > LAYERS.index(own):
            found.append(f"{where} (layer {own} is below {other})")
    return found


def test_every_module_lives_in_a_layer_folder_or_is_a_composition_root():
    loose = sorted(p.name for p in LIB.glob("*.py") if p.stem not in ROOTS | {"__init__"})
    assert loose == []
    folders = sorted(p.name for p in LIB.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert folders == sorted(LAYERS + ["twin"])


def test_no_module_imports_a_layer_above_it():
    found = [v for path in sorted(LIB.rglob("*.py")) for v in violations(path)]
    assert found == [], "\n".join(found)


@pytest.mark.parametrize(
    "source, expected",
    [
        (
            "from lanebook.runs.audit import sha\n",
            ["lanebook/speed/x.py:1 imports lanebook.runs.audit (layer speed is below runs)"],
        ),
        ("def f():\n    from ..twin import control\n", [f"lanebook/speed/x.py:2 imports lanebook.twin ({TWIN_SEAM})"]),
        (
            "from lanebook.cli import main\n",
            ["lanebook/speed/x.py:1 imports lanebook.cli (a layer never imports a composition root)"],
        ),
        (
            "from lanebook.base.errors import LanebookError\nfrom . import bands\nfrom lanebook.ops import warmup\n",
            ["lanebook/speed/x.py:3 imports lanebook.ops (layer speed is below ops)"],
        ),
    ],
)
def test_the_check_sees_upward_and_twin_imports_even_inside_a_function(tmp_path, source, expected):
    lib = tmp_path / "lanebook"
    (lib / "speed").mkdir(parents=True)
    module = lib / "speed" / "x.py"
    module.write_text(source)
    assert violations(module, lib) == expected


def test_every_module_imports():
    """A name moved between modules breaks every importer at once, including those only a runbook's kernel loads
    (ruff sees a missing module, not a missing name in one)."""
    import importlib
    import pkgutil

    import lanebook

    failed = {}
    for module in pkgutil.walk_packages(lanebook.__path__, "lanebook."):
        if not module.name.endswith(".__main__"):  # running them is their only use
            try:
                importlib.import_module(module.name)
            except ImportError as exc:
                failed[module.name] = str(exc)
    assert failed == {}
