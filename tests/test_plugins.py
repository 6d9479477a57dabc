"""The product reaches the twin only through lanebook.plugins: no product module imports lanebook.twin (only the
composition roots cli.py and demo.py may), and what the twin adds (a lane launched when found down, its API known
for a twin's) is found through the registry the `lanebook.plugins` entry point fills.
"""
import ast
from pathlib import Path

import lanebook
from lanebook import plugins

PACKAGE = Path(lanebook.__file__).parent
COMPOSITION_ROOTS = {"cli.py", "demo.py"}
TWIN = "lanebook.twin"


def imported(path: Path, package_dir: Path = PACKAGE) -> list[tuple[int, str]]:
    """(line, module) for every module (or name in one) the file imports, anywhere in it, relative imports resolved
    from the package it is in (under package_dir, the lanebook package)."""
    package = ".".join(path.parent.relative_to(package_dir.parent).parts)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[:len(base) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found += [(node.lineno, module)] + [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def product_modules() -> list[Path]:
    inside = {path: path.relative_to(PACKAGE) for path in sorted(PACKAGE.rglob("*.py"))}
    return [path for path, rel in inside.items() if rel.parts[0] != "twin" and rel.as_posix() not in COMPOSITION_ROOTS]


def test_the_resolver_sees_every_way_of_importing_the_twin(tmp_path):
    fake = tmp_path / "lanebook"
    (fake / "speed").mkdir(parents=True)
    probe = fake / "speed" / "probe.py"
    probe.write_text("def f():\n    from ..twin import control\nfrom .. import twin\nimport lanebook.twin.server\n"
                     "from lanebook.twin.plugin import register\nfrom . import client\n")
    hits = [(line, module) for line, module in imported(probe, fake) if module == TWIN or module.startswith(TWIN + ".")]
    assert sorted(hits) == [(2, "lanebook.twin"), (2, "lanebook.twin.control"), (3, "lanebook.twin"),
                            (4, "lanebook.twin.server"), (5, "lanebook.twin.plugin"),
                            (5, "lanebook.twin.plugin.register")]


def test_no_product_module_imports_the_twin():
    modules = product_modules()
    assert PACKAGE / "execute.py" in modules and PACKAGE / "speed" / "client.py" in modules
    assert PACKAGE / "cli.py" not in modules and not any("twin" in p.relative_to(PACKAGE).parts for p in modules)
    offenders = [f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}" for path in modules
                 for line, module in imported(path) if module == TWIN or module.startswith(TWIN + ".")]
    assert offenders == [], "the product reaches the twin only through lanebook.plugins:\n" + "\n".join(offenders)


def test_the_twin_plugs_its_launcher_and_api_probe_into_the_registry():
    registry = plugins.load_registry()
    assert "twin" in registry.plugins
    twin_plugin = [f"{TWIN}.plugin"]
    assert [f.__module__ for f in registry.launchers] == [f.__module__ for f in registry.twin_probes] == twin_plugin
    assert plugins.serves_twin("http://127.0.0.1:9/v1") is False  # nothing listens on the discard port: no twin there
