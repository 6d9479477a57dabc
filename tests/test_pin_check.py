"""tools/pin_check.py: every pinned set resolves from wheels alone on each promised machine, and a pin with no
build on one of them fails naming it. Asks the package indexes for metadata (nothing is downloaded whole)."""

import importlib.util
import os
import sys
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "pin_check.py"
UV = REPO / ".tools" / "uv" / "bin" / "uv"
spec = importlib.util.spec_from_file_location("pin_check", TOOL)
pin_check = importlib.util.module_from_spec(spec)
sys.modules["pin_check"] = pin_check  # dataclasses look their module up by name
spec.loader.exec_module(pin_check)

pytestmark = pytest.mark.skipif(not UV.exists(), reason=f"uv is not installed at {UV} (make setup)")


def _reach() -> tuple[str, ...]:
    """What uv runs under to reach the package indexes: a parallel suite's workers each have a network namespace with
    loopback only, so uv enters the controller's (conftest names its pid), which reaches them as the machine does."""
    controller = os.environ.get("LANEBOOK_SUITE_CONTROLLER")
    if not controller or os.readlink("/proc/self/ns/net") == os.readlink(f"/proc/{controller}/ns/net"):
        return ()
    return ("nsenter", f"--net=/proc/{controller}/ns/net", "--")


@pytest.fixture(autouse=True)
def reach_the_index(monkeypatch):
    here = pin_check.Resolver.here.__func__
    monkeypatch.setattr(pin_check.Resolver, "here", classmethod(lambda cls, uv, wrap=(): here(cls, uv, _reach())))


def _index_or_skip(outcomes):
    """Skip, saying so, where the public index does not answer (only an index a file names itself may not)."""
    silent = [o for o in outcomes if o.status == "unchecked" and o.pinned.name != "torch-cpu"]
    if silent:
        pytest.skip(f"no package index answers from here: {silent[0].detail}")


def test_every_pinned_set_resolves_for_linux_x86_64_and_aarch64_on_every_promised_python():
    outcomes = pin_check.check(str(UV))
    _index_or_skip(outcomes)
    assert {o.target for o in outcomes} == set(pin_check.TARGETS)
    assert {o.target.python for o in outcomes} == {"3.11.2", "3.12.3", "3.13.5"}
    assert {o.pinned.name for o in outcomes} >= {".venv", "hermes", "airflow", "uv", "vllm-cpu", "torch-cpu"}
    failed = [o.line() for o in outcomes if o.status == "fail"]
    assert not failed, "\n".join(failed)
    # Only an index the file names itself may go unanswered (PyTorch's CPU index, from this closed network): said.
    unchecked = [o for o in outcomes if o.status == "unchecked"]
    assert {o.pinned.name for o in unchecked} <= {"torch-cpu"}
    if unchecked:
        warnings.warn("pins not checked: " + "; ".join(o.line() for o in unchecked), stacklevel=1)


def _repo_with(tmp_path: Path, requirements: str) -> tuple[Path, "pin_check.PinnedSet"]:
    (tmp_path / "requirements.txt").write_text(requirements)
    return tmp_path, pin_check.PinnedSet("planted", "requirements.txt", deps=False)


def test_a_pin_with_no_build_for_one_architecture_fails_there_naming_the_package(tmp_path):
    repo, planted = _repo_with(tmp_path, "intel-openmp==2024.2.1\n")  # Intel's runtime: x86-64 wheels only
    targets = [t for t in pin_check.TARGETS if t.python == "3.12.3"]
    outcomes = {o.target.platform.split("-")[0]: o for o in pin_check.check(str(UV), [planted], targets, repo=repo)}
    _index_or_skip(list(outcomes.values()))
    assert outcomes["x86_64"].status == "ok"
    assert outcomes["aarch64"].status == "fail"
    assert outcomes["aarch64"].detail.startswith("intel-openmp==2024.2.1: ")
    assert "FAIL" in outcomes["aarch64"].line() and "ubuntu-24.04 aarch64" in outcomes["aarch64"].line()


def test_a_pin_that_wants_a_newer_python_fails_on_the_older_one(tmp_path):
    repo, planted = _repo_with(tmp_path, "soupsieve==4.1.3\n")  # requires Python >= 3.11.5: not Debian 12's 3.11.2
    targets = [t for t in pin_check.TARGETS if t.platform.startswith("x86_64")]
    outcomes = {o.target.python: o for o in pin_check.check(str(UV), [planted], targets, repo=repo)}
    _index_or_skip(list(outcomes.values()))
    assert outcomes["3.11.2"].status == "fail"
    assert outcomes["3.11.2"].detail == "soupsieve==4.1.3: not for this Python"
    assert outcomes["3.12.3"].status == outcomes["3.13.5"].status == "ok"


def test_the_command_exits_1_and_prints_a_line_per_failure(tmp_path, monkeypatch, capsys):
    repo, planted = _repo_with(tmp_path, "intel-cmplr-lib-ur==2024.2.1\n")
    monkeypatch.setattr(pin_check, "REPO", repo)
    monkeypatch.setattr(pin_check, "SETS", (planted,))
    code = pin_check.main(["--uv", str(UV), "--target", "debian-13 aarch64", "--target", "debian-13 x86_64"])
    out = capsys.readouterr().out
    if "\nskip planted" in "\n" + out:
        pytest.skip("no package index answers from here")
    assert code == 1
    assert "FAIL planted" in out and "intel-cmplr-lib-ur==2024.2.1" in out
    assert out.splitlines()[-1] == "1 of 2 resolved or not reachable; 1 failed"
