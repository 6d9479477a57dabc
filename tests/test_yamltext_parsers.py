"""libyaml's parser and ruamel's own read lanebook's YAML the same: every YAML file the repository holds (lanes,
fleets, workloads, the case base, the twin's recipe checkouts) and the recipe's own files where ../shared is present
give equal data through yamltext.load (libyaml first, ruamel's parser for what it refuses) and through ruamel's
parser alone; text libyaml refuses but YAML 1.2 allows reads as ruamel reads it."""

from __future__ import annotations

from pathlib import Path

import pytest
from lanebook.base import yamltext
from lanebook.base.paths import REPO
from ruamel.yaml import YAML

FIXTURES = REPO.parent / "shared" / "fixtures"


def _pure(text: str):
    return YAML(typ="safe", pure=True).load(text)


def _yaml_files(root: Path) -> list[Path]:
    skipped = {".venv", ".tools", ".git", "node_modules", "_build", "outputs", ".twin"}
    return sorted(
        p for p in root.rglob("*") if p.suffix in (".yaml", ".yml") and not skipped & set(p.relative_to(root).parts)
    )


def test_the_c_parser_is_installed():
    assert yamltext._C_PARSER is not None, "ruamel.yaml.clib is in requirements.txt: `make setup` installs it"


def test_every_yaml_file_of_the_repository_reads_the_same_through_either_parser():
    files = _yaml_files(REPO)
    assert len(files) > 40
    differ = [str(p.relative_to(REPO)) for p in files if yamltext.load(p.read_text()) != _pure(p.read_text())]
    assert differ == []


def test_the_recipes_own_yaml_reads_the_same_through_either_parser():
    if not FIXTURES.is_dir():
        pytest.skip(f"{FIXTURES} is absent: the recipe's own files are read only where ../shared is present")
    files = _yaml_files(FIXTURES)
    differ = [str(p) for p in files if yamltext.load(p.read_text()) != _pure(p.read_text())]
    assert files and differ == []


@pytest.mark.parametrize(
    "text",
    [
        "providers:\n  lane: {api: https://x/v1, key: a:b}\n",  # a colon inside a plain value in a flow mapping
        "nodes: [{host: 'h', port: 2222}, {url: http://127.0.0.2:8888/v1}]\n",
        "a: 1\n",
        "",
        "~\n",
    ],
)
def test_text_libyaml_refuses_or_reads_gives_what_ruamels_parser_gives(text):
    assert yamltext.load(text) == _pure(text)
