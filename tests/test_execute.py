"""Headless runs (lanebook.runs.execute): papermill executes a runbook notebook and the run leaves a record whose
verdict says what was established: pass, fail (a check failed), error, or dry-run (nothing observed).

However a run ends it leaves one record: a dead kernel, Ctrl-C, SIGTERM, SIGKILL (finalized by the next reader),
a crash. Secrets never become parameters, and planted ones reach no notebook, record or book page.

The notebooks here are small ones written by the tests into a runbooks dir of their own; the shipped
runbooks run end to end in test_runbooks.py. Records go to a temporary outputs dir (LANEBOOK_OUTPUTS).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from helpers.lanebook_runs import stand_in_notebook
from helpers.waits import eventually
from lanebook.base import paths
from lanebook.base.errors import LanebookError
from lanebook.base.files import sha256_file
from lanebook.lane.params import LanePolicy, lane_with, load_lane
from lanebook.runs import execute
from lanebook.runs.audit import read_runs
from lanebook.steps.runbook import VERDICT_MIME

HEADER = 'from lanebook.steps.runbook import Runbook\nrb = Runbook("status", lane, dry_run=dry_run)'


def notebook(*cells: str) -> nbformat.NotebookNode:
    return stand_in_notebook(*cells, parameters='lane = "twin"\ndry_run = False\nthreshold = 1')


@pytest.fixture
def runbooks(tmp_path, monkeypatch):
    """A runbooks dir of this test's own; write(name, *cells) adds a notebook to it."""
    folder = tmp_path / "runbooks"
    folder.mkdir()
    monkeypatch.setattr(execute, "RUNBOOKS_DIR", folder)
    monkeypatch.setattr(paths, "RUNBOOKS_DIR", folder)  # where `lanebook run` starts the runbook's kernel from
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(tmp_path / "outputs"))

    def write(name, *cells):
        nbformat.write(notebook(*cells), folder / f"{name}.ipynb")

    return write


def test_a_clean_dry_run_is_recorded_as_dry_run_never_pass(runbooks):
    runbooks(
        "status",
        HEADER,
        'rb.expect(threshold == 2, what="parameters valid", local=True)',
        'rb.nodes.head.run("free -m")\nrb.expect(True, what="enough free memory")',
        "rb.finish()",
    )
    record = execute.run_runbook("status", load_lane("anemll-0731"), {"threshold": 2}, dry_run=True)
    assert (record["verdict"], record["failed_step"], record["dry_run"], record["twin"]) == (
        "dry-run",
        None,
        True,
        False,
    )
    assert record["commands"] == ["head: free -m"] and record["params"] == {"threshold": 2}
    (stored,) = read_runs()
    assert stored["verdict"] == "dry-run" and stored["sha256"] == sha256_file(execute.outputs_dir() / stored["output"])
    assert stored["output"].startswith("anemll-0731/") and stored["output"].endswith(
        f"-status-{stored['run_id']}.ipynb"
    )


def test_a_local_check_fails_a_dry_run(runbooks):
    runbooks(
        "status",
        HEADER,
        'with rb.step("prerequisites"):\n    rb.expect(threshold == 2, what="parameters valid", local=True)',
        "rb.finish()",
    )
    record = execute.run_runbook("status", load_lane("anemll-0731"), {"threshold": 3}, dry_run=True)
    assert (record["verdict"], record["failed_step"]) == ("fail", "prerequisites")


def test_a_failed_run_keeps_its_figures_and_says_what_to_do_next(runbooks):
    runbooks(
        "status",
        HEADER,
        'rb.record(free_gib=99.0)\nwith rb.step("2 memory", fix="run `stop`, then `launch`"):\n'
        '    rb.expect(threshold == 2, what="enough free memory", local=True)',
        "rb.finish()",
    )
    record = execute.run_runbook("status", load_lane("anemll-0731"), {"threshold": 3}, dry_run=True)
    assert (record["verdict"], record["failed_step"], record["fix"]) == (
        "fail",
        "2 memory",
        "run `stop`, then `launch`",
    )
    assert record["figures"] == {"free_gib": 99.0} and read_runs()[0]["figures"] == {"free_gib": 99.0}


def test_an_exception_is_an_error_naming_its_cell(runbooks):
    runbooks("status", HEADER, 'raise ValueError("the library broke")', "rb.finish()")
    record = execute.run_runbook("status", load_lane("anemll-0731"), {}, dry_run=True)
    assert (record["verdict"], record["failed_step"]) == (
        "error",
        "cell 4: ValueError",
    )  # papermill's injected-parameters cell ran second


def test_a_notebook_that_emits_no_verdict_is_an_error(runbooks):
    runbooks("status", HEADER, "x = 1")
    record = execute.run_runbook("status", load_lane("anemll-0731"), {}, dry_run=True)
    assert (record["verdict"], record["failed_step"]) == ("error", "no verdict: the notebook ended without rb.finish()")


def test_a_dry_run_record_never_says_pass_whatever_the_notebook_emits(runbooks):
    """The record's rule does not rely on the notebook: one emitting pass in a dry run is still recorded dry-run."""
    emit = (
        f"from IPython.display import display\ndisplay({{{VERDICT_MIME!r}: {{'verdict': 'pass', 'checks': [], "
        "'figures': {}, 'commands': []}}, raw=True)"
    )
    runbooks("status", emit)
    assert execute.run_runbook("status", load_lane("anemll-0731"), {}, dry_run=True)["verdict"] == "dry-run"


def test_record_verdict():
    assert execute.record_verdict("pass", dry_run=False) == "pass"
    assert execute.record_verdict("pass", dry_run=True) == "dry-run"
    assert execute.record_verdict("dry-run", dry_run=True) == "dry-run"
    assert execute.record_verdict("fail", dry_run=True) == "fail"
    assert execute.record_verdict(None, dry_run=False) == "error"


def test_read_verdict_takes_the_last_emitted(tmp_path):
    nb = notebook()
    first = {"verdict": "fail", "checks": [], "figures": {}}
    last = {"verdict": "pass", "checks": [], "figures": {"a": 1}}
    nb.cells[0].outputs = [nbformat.v4.new_output("display_data", data={VERDICT_MIME: first})]
    nb.cells.append(
        nbformat.v4.new_code_cell(
            "", outputs=[nbformat.v4.new_output("display_data", data={VERDICT_MIME: json.dumps(last)})]
        )
    )
    path = tmp_path / "out.ipynb"
    nbformat.write(nb, path)
    assert execute.read_verdict(path) == last
    path.write_text("")
    assert execute.read_verdict(path) is None  # an empty (half-written) output has no verdict


def test_parameters_are_yaml_scalars():
    assert execute.parse_params(["n=1", "ok=true", "name=a b", "empty=", "ratio=0.85", "s='1'"]) == {
        "n": 1,
        "ok": True,
        "name": "a b",
        "empty": "",
        "ratio": 0.85,
        "s": "1",
    }
    for bad in ("novalue", "1x=2", "k=[1"):
        with pytest.raises(LanebookError):
            execute.parse_params([bad])


def test_refusals_leave_no_record(runbooks):
    runbooks("stop", HEADER, "rb.finish()")
    with pytest.raises(LanebookError, match=r"unknown parameter\(s\) for stop: bogus \(accepted: threshold\)"):
        execute.run_runbook("stop", load_lane("twin"), {"bogus": 1})
    with pytest.raises(LanebookError, match="^'stop' changes the lane anemll-0731: add --yes"):
        execute.run_runbook("stop", load_lane("anemll-0731"), {})
    with pytest.raises(LanebookError, match=r"runbook 'gates' is not written yet"):
        execute.run_runbook("gates", load_lane("twin"), {})
    with pytest.raises(LanebookError, match="unknown runbook 'nosuch'"):
        execute.run_runbook("nosuch", load_lane("twin"), {})
    in_memory = "^lane twin was built in memory: a runbook runs a lane loaded from its file$"
    with pytest.raises(LanebookError, match=in_memory):
        execute.run_runbook("stop", lane_with(load_lane("twin")), {})  # its kernel would have no file to load
    assert read_runs() == []


def test_the_lanes_policy_not_its_twin_label_decides_whether_a_change_needs_yes():
    """policy.confirm_changes decides: a twin-labelled lane that asks for it is refused, a lane that does not is
    let through; --yes and --dry-run always are."""
    strict_twin = lane_with(load_lane("twin"), policy=LanePolicy())
    with pytest.raises(LanebookError, match="^launch changes the lane twin: add --yes to confirm, or --dry-run"):
        execute.refuse_unconfirmed("launch", strict_twin, dry_run=False, yes=False)
    execute.refuse_unconfirmed("launch", strict_twin, dry_run=False, yes=True)
    execute.refuse_unconfirmed("launch", strict_twin, dry_run=True, yes=False)
    lenient_real = lane_with(load_lane("anemll-0731"), policy=LanePolicy(confirm_changes=False))
    execute.refuse_unconfirmed("launch", lenient_real, dry_run=False, yes=False)
    execute.refuse_unconfirmed("launch", load_lane("twin"), dry_run=False, yes=False)


def test_a_process_that_runs_runbooks_does_not_import_jsonschemas_format_checks():
    """rfc3987_syntax builds an Earley parser when imported (over a second of every run), isoduration brings arrow:
    format checks nbformat never makes. A fresh process importing lanebook.runs.execute, then jsonschema, goes
    without."""
    code = (
        "import sys, lanebook.runs.execute, jsonschema\n"
        "print([sys.modules[name] for name in lanebook.runs.execute.JSONSCHEMA_FORMAT_PACKAGES if sys.modules[name]],"
        " sorted({'iri', 'duration', 'date-time'} & set(jsonschema.FormatChecker.checkers)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[] []"
    alone = "import jsonschema; print('duration' in jsonschema.FormatChecker.checkers)"
    unblocked = subprocess.run([sys.executable, "-c", alone], capture_output=True, text=True, check=True)
    assert unblocked.stdout.strip() == "True"  # installed: what lanebook.runs.execute spares its process


def test_the_venv_leaves_out_rfc3987_syntax():
    """tools/venv-overrides.txt: every process of the venv that reads a notebook (papermill, jupyter-book, a pytest
    worker) would otherwise build its 38 parsers as jsonschema is imported, for a format check nothing makes."""
    found = "import importlib.util; print(importlib.util.find_spec('rfc3987_syntax'))"
    done = subprocess.run([sys.executable, "-c", found], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "None"


def test_run_ids_stay_text_when_given_back_as_a_parameter(tmp_path, monkeypatch):
    """`-p restore=RUN_ID` is read as YAML: an id must never read as a number (12345678, 1234e567)."""
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(tmp_path))
    for _ in range(300):
        run_id, _ = execute._new_output("twin", "env")
        assert execute.parse_params([f"restore={run_id}"]) == {"restore": run_id}


def test_only_a_twin_lane_is_launched_on_demand_and_never_in_a_dry_run():
    from lanebook.lane.plugins import launch_lane_if_down
    from lanebook.steps.runbook import Runbook

    for name in ("anemll-0731", "twin"):
        rb = Runbook("speed", name, dry_run=True)
        launch_lane_if_down(rb)
        assert rb.commands() == [] and rb.checks == [] and rb.figures == {}  # nothing asked, run or recorded


def test_a_parameter_that_names_or_holds_a_secret_is_refused_naming_the_env_var(runbooks):
    runbooks("status", HEADER, "rb.finish()")
    refusals = {
        ("hf_token", "x"): "HF_TOKEN",
        ("ssh_key", "/home/op/.ssh/id_ed25519"): "SSH_KEY",
        ("threshold", "hf_" + "a" * 24): "HF_TOKEN",
        ("threshold", "https://op:hunter2@mirror.example/"): "THRESHOLD",
    }
    for (key, value), env_name in refusals.items():
        with pytest.raises(LanebookError) as refused:
            execute.run_runbook("status", load_lane("anemll-0731"), {key: value}, dry_run=True)
        assert str(refused.value) == (
            f"-p {key}: secrets are never runbook parameters (they would be stored in the executed "
            f"notebook); set {env_name} in the environment instead, where the runbook reads it"
        )
    assert (
        read_runs() == [] and not (execute.outputs_dir() / "anemll-0731").exists()
    )  # nothing claimed, nothing recorded


def _outputs_of(nb, code):
    """The text outputs of the cell whose source ends with CODE."""
    return next([o.get("text") for o in c.outputs] for c in nb.cells if c.source.endswith(code))


def test_a_killed_kernel_leaves_an_error_record_and_the_notebook_as_far_as_it_got(runbooks):
    runbooks(
        "status",
        HEADER,
        'print("step 1 done")',
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
        "rb.finish()",
    )
    record = execute.run_runbook("status", load_lane("anemll-0731"), {}, dry_run=True)
    assert record["verdict"] == "error" and record["failed_step"].startswith("the kernel died")
    (stored,) = read_runs()
    assert {k: stored[k] for k in ("run_id", "verdict", "failed_step")} == {
        k: record[k] for k in ("run_id", "verdict", "failed_step")
    }
    nb = nbformat.read(execute.outputs_dir() / stored["output"], as_version=4)
    assert _outputs_of(nb, 'print("step 1 done")') == ["step 1 done\n"]
    assert nb.cells[-1].source.startswith("**This run did not finish: the notebook's kernel died.**")
    assert stored["sha256"] == sha256_file(execute.outputs_dir() / stored["output"])
    assert not list((execute.outputs_dir() / ".pending").iterdir())


def test_a_crash_or_a_refusal_mid_run_is_recorded_then_raised(runbooks, monkeypatch):
    runbooks("status", HEADER, "rb.finish()")

    def broken(notebook, output, parameters, kernel, echo):
        raise RuntimeError("the runner broke")

    monkeypatch.setattr(execute, "execute_notebook", broken)
    with pytest.raises(RuntimeError, match="the runner broke"):
        execute.run_runbook("status", load_lane("anemll-0731"), {}, dry_run=True)
    (stored,) = read_runs()
    assert (stored["verdict"], stored["failed_step"]) == ("error", "crash: RuntimeError: the runner broke")
    assert stored["duration_s"] >= 0 and not list((execute.outputs_dir() / ".pending").iterdir())

    def refused(notebook, output, parameters, kernel, echo):
        raise LanebookError("lane anemll-0731 is busy")

    monkeypatch.setattr(execute, "execute_notebook", refused)
    with pytest.raises(LanebookError, match="busy"):
        execute.run_runbook("status", load_lane("anemll-0731"), {}, dry_run=True)
    assert read_runs()[-1]["failed_step"] == "stopped: lane anemll-0731 is busy"


# `lanebook run` as a user runs it (the CLI's main), with this test's runbooks dir.
CLI_WITH_RUNBOOKS = """
import sys
from pathlib import Path
from lanebook.runs import execute
from lanebook.base import paths
execute.RUNBOOKS_DIR = paths.RUNBOOKS_DIR = Path(sys.argv.pop(1))
from lanebook.cli import main
sys.argv[0] = "lanebook"
main()
"""
SLOW_STEP = (
    'with rb.step("2 slow"):\n    open(os.environ["KERNEL_PID_FILE"], "w").write(str(os.getpid()))\n    time.sleep(600)'
)


def _step_running(output_dir, title):
    """Whether the run's notebook, as papermill last saved it, shows the cell of step TITLE running."""
    for path in output_dir.glob("*.ipynb"):
        try:
            nb = json.loads(path.read_text())
        except ValueError:
            continue
        return any(
            title in "".join(c["source"]) and c["metadata"].get("papermill", {}).get("status") == "running"
            for c in nb["cells"]
        )
    return False


def _gone(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _sigint_as_at_a_terminal() -> None:
    """A run started from a terminal takes Ctrl-C; one started under a non-interactive shell's `&` (as a CI job
    may be) inherits SIGINT ignored, and Python keeps an inherited ignore. Give the run a terminal's SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def stopped_runs(tmp_path_factory):
    """Three `lanebook run`s stopped in their slow step, at once: Ctrl-C (SIGINT to the process group, as a terminal
    sends it), SIGTERM and SIGKILL to the lanebook process. Returns {signal: (exit code, stdout, stderr, outputs dir,
    kernel pid)}."""
    base = tmp_path_factory.mktemp("stopped")
    folder = base / "runbooks"
    folder.mkdir()
    nbformat.write(
        notebook(HEADER, 'import os, time\nprint("step 1 done")', SLOW_STEP, "rb.finish()"), folder / "status.ipynb"
    )
    runs = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        outputs = base / sig.name
        env = {**os.environ, "LANEBOOK_OUTPUTS": str(outputs), "KERNEL_PID_FILE": str(base / f"{sig.name}.kernel")}
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                CLI_WITH_RUNBOOKS,
                str(folder),
                "run",
                "status",
                "--lane",
                "anemll-0731",
                "--dry-run",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=_sigint_as_at_a_terminal,
        )
        runs[sig] = (proc, outputs)
    try:
        deadline = time.monotonic() + 300
        for sig, (proc, outputs) in runs.items():
            while not (_step_running(outputs / "anemll-0731", "2 slow") and (base / f"{sig.name}.kernel").exists()):
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
                time.sleep(0.1)
        os.killpg(runs[signal.SIGINT][0].pid, signal.SIGINT)
        runs[signal.SIGTERM][0].send_signal(signal.SIGTERM)
        runs[signal.SIGKILL][0].kill()
        done = {}
        for sig, (proc, outputs) in runs.items():
            out, err = proc.communicate(timeout=120)
            done[sig] = (proc.returncode, out, err, outputs, int((base / f"{sig.name}.kernel").read_text()))
        yield done
    finally:
        for proc, _ in runs.values():
            if proc.poll() is None:
                proc.kill()
        for sig in runs:
            kernel = base / f"{sig.name}.kernel"
            if kernel.exists() and not _gone(int(kernel.read_text())):
                os.kill(int(kernel.read_text()), signal.SIGKILL)


def _partial_notebook_of(record, outputs):
    nb = nbformat.read(outputs / record["output"], as_version=4)
    assert record["sha256"] == sha256_file(outputs / record["output"])
    assert _outputs_of(nb, 'print("step 1 done")') == ["step 1 done\n"]
    slow = next(c for c in nb.cells if "2 slow" in c.source)  # stopped inside it: no output, or the kernel's interrupt
    assert all(o.get("ename") == "KeyboardInterrupt" for o in slow.outputs), slow.outputs
    never = next(c for c in nb.cells if c.source == "rb.finish()")
    assert (never.execution_count, never.metadata.papermill.status) == (None, "pending")
    return nb


@pytest.mark.parametrize("name, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_mid_step_is_recorded_as_error_with_its_partial_notebook(stopped_runs, monkeypatch, name, code):
    returncode, out, err, outputs, kernel = stopped_runs[signal.Signals[name]]
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(outputs))
    (record,) = read_runs()
    why = "interrupted: SIGINT (Ctrl-C)" if name == "SIGINT" else "interrupted: SIGTERM"
    assert (returncode, record["verdict"], record["failed_step"]) == (code, "error", why)
    assert err.splitlines()[-1] == (
        f"lanebook: {name}: run {record['run_id']} stopped and recorded as error ({why}): {outputs / record['output']}"
    )
    nb = _partial_notebook_of(record, outputs)
    assert nb.cells[-1].source.startswith(f"**This run did not finish: {why}.**")
    assert not list((outputs / ".pending").iterdir())
    assert eventually(lambda: _gone(kernel), 30, poll_s=0.1)  # papermill shuts its kernel down


def test_a_sigkilled_run_is_recorded_as_killed_by_the_next_reader(stopped_runs, monkeypatch):
    returncode, out, err, outputs, kernel = stopped_runs[signal.SIGKILL]
    assert returncode == -signal.SIGKILL and (outputs / ".pending").is_dir() and not (outputs / "runs.jsonl").exists()
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(outputs))
    (record,) = read_runs()
    assert record["verdict"] == "error" and record["failed_step"].startswith("killed: its process (pid ")
    assert record["pid"] != kernel and read_runs() == [record]  # the lanebook process's pid; finalized once
    nb = _partial_notebook_of(record, outputs)
    assert nb.cells[-1].source.startswith("**This run did not finish: killed: its process")
    assert eventually(lambda: _gone(kernel), 30, poll_s=0.1)  # the kernel sees its parent gone and exits


# Planted secrets, each where a runbook would print it: in its environment (echoed), in a log on the twin head (read
# over SSH), in a figure, in a rendered Markdown output and in an exception's message.
HF = "hf_" + "Pl4ntedHfT0kenAbcdefghijk"
API_KEY = "sk-" + "pl4nted-ApiKey-0123456789ab"
BEARER = "Pl4ntedBearer.eyJzdWIiOiJvcCJ9.sig"
KEY_BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQPl4ntedKeyBody"
PRIVATE_KEY = (
    f"-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_BODY}\nQyNTUxOQAAACBPl4ntedSecondLine\n"
    "-----END OPENSSH PRIVATE KEY-----"
)
URL_PASSWORD = "Pl4nted-url-pw"
ODD = "Pl4nted odd-shaped!"  # no known shape: caught only because MIRROR_PASSWORD names a secret
PLANTED = (HF, API_KEY, BEARER, KEY_BODY, "QyNTUxOQAAACBPl4ntedSecondLine", URL_PASSWORD, ODD)
ECHO = (
    'import os\nfor name in ("HF_TOKEN", "OPENAI_API_KEY", "LANE_NOTE", "MIRROR_URL", "DEPLOY_SSH_KEY", '
    '"MIRROR_PASSWORD"):\n'
    '    print(f"echo {name}:", os.environ[name])'
)
TWIN_LOG = 'log = rb.nodes.head.run("cat ~/planted-vllm.log")\nprint("twin head log:", log.stdout)'
SHOWN = 'from IPython.display import Markdown, display\ndisplay(Markdown("mirror: " + os.environ["MIRROR_URL"]))'
FAILING = (
    'with rb.step("3 upload"):\n    rb.record(header=os.environ["LANE_NOTE"], mirror=os.environ["MIRROR_URL"])\n'
    '    raise RuntimeError("upload failed: " + os.environ["MIRROR_URL"] + " " + os.environ["HF_TOKEN"])'
)


def test_planted_secrets_reach_no_notebook_record_or_book_page(runbooks, twin, monkeypatch, tmp_path):
    from lanebook.site import book

    environment = {
        "HF_TOKEN": HF,
        "OPENAI_API_KEY": API_KEY,
        "LANE_NOTE": f"Authorization: Bearer {BEARER}",
        "MIRROR_URL": f"https://operator:{URL_PASSWORD}@mirror.example/models",
        "DEPLOY_SSH_KEY": PRIVATE_KEY,
        "MIRROR_PASSWORD": ODD,
    }
    for name, value in environment.items():
        monkeypatch.setenv(name, value)  # the kernel inherits lanebook's environment
    head_home = Path(next(n["home"] for n in twin["nodes"] if n["alias"] == "head"))
    log = head_home / "planted-vllm.log"
    log.write_text(
        f"INFO planted startup line HF_TOKEN={HF} key={API_KEY}\n{PRIVATE_KEY}\n"
        f"INFO pulling https://operator:{URL_PASSWORD}@mirror.example/ with Bearer {BEARER}\n"
    )
    try:
        runbooks("status", HEADER, ECHO, TWIN_LOG, SHOWN, FAILING, "rb.finish()")
        record = execute.run_runbook("status", load_lane("twin"), {})
    finally:
        log.unlink()
    assert (record["verdict"], record["failed_step"]) == ("error", "cell 7: RuntimeError")  # a bug, not a failed check
    notebook_text = Path(record["output"]).read_text()
    index_text = (execute.outputs_dir() / "runs.jsonl").read_text()
    stage = tmp_path / "stage"
    stage.mkdir()
    book.stage_book(stage)
    pages = {p: p.read_text(errors="ignore") for p in stage.rglob("*") if p.is_file()}
    assert any(Path(record["output"]).stem in str(p) for p in pages)  # the run's own audit page is staged
    for secret in PLANTED:
        assert secret not in notebook_text and secret not in index_text, secret
        assert not [p for p, text in pages.items() if secret in text], secret
    # What was printed is there, redacted: the echo ran, the twin's log was read, the figures were recorded.
    nb = nbformat.read(record["output"], as_version=4)
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "echo HF_TOKEN: [REDACTED]\n" in printed and "echo MIRROR_PASSWORD: [REDACTED]\n" in printed
    assert "echo DEPLOY_SSH_KEY: [REDACTED]\n" in printed
    assert "twin head log: INFO planted startup line HF_TOKEN=[REDACTED] key=[REDACTED]\n[REDACTED]\n" in printed
    assert record["figures"] == {
        "header": "Authorization: Bearer [REDACTED]",
        "mirror": "https://operator:[REDACTED]@mirror.example/models",
    }
    assert "upload failed: https://operator:[REDACTED]@mirror.example/models [REDACTED]" in notebook_text


def test_a_nested_run_is_one_row_linking_its_record():
    summary = {
        "runbook": "gates",
        "lane": "twin-1m6",
        "verdict": "fail",
        "failed_step": "3 exact smoke",
        "run_id": "c0ffee00",
    }
    row = execute.nested_row(summary, "../twin-1m6/x.ipynb")
    assert row.splitlines()[0] == "| runbook | lane | verdict | failed step | record |"
    assert row.splitlines()[2].startswith("| gates | twin-1m6 | ") and row.endswith(
        "| 3 exact smoke | [c0ffee00](../twin-1m6/x.ipynb) |"
    )
