"""The command line (lanebook.cli): exit codes (0 pass or a clean dry run, 1 a failed verdict, 2 bad usage in
one line), what `run` prints, and `audit` showing dry runs apart from passes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from lanebook.base.files import sha256_file
from lanebook.cli import run_exit_code
from lanebook.runs.audit import append_run

LANEBOOK = Path(sys.executable).parent / "lanebook"


def lanebook(*args, outputs=None, timeout=300):
    env = {**os.environ, **({"LANEBOOK_OUTPUTS": str(outputs)} if outputs else {})}
    return subprocess.run([str(LANEBOOK), *args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture
def outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(tmp_path / "outputs"))
    return tmp_path / "outputs"


def test_run_exit_codes():
    assert run_exit_code("pass", dry_run=False) == 0
    assert run_exit_code("dry-run", dry_run=True) == 0
    for verdict in ("fail", "error"):
        assert run_exit_code(verdict, dry_run=False) == run_exit_code(verdict, dry_run=True) == 1
    assert run_exit_code("dry-run", dry_run=False) == 1  # a run asked to act that only recorded is no pass
    assert run_exit_code("pass", dry_run=True) == 1


def test_a_clean_dry_run_exits_0_and_prints_what_it_would_send(outputs):
    run = lanebook("run", "launch", "--lane", "anemll-0731", "--dry-run", outputs=outputs)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert Path(lines[0]).is_file() and Path(lines[0]).parent == outputs / "anemll-0731"
    assert lines[1] == "commands the run would send (none were sent):"
    assert any("./start-deepseek-v4-flash-dspark.sh" in line for line in lines)
    assert lines[-1] == "verdict: dry-run"
    (record,) = [json.loads(line) for line in (outputs / "runs.jsonl").read_text().splitlines()]
    assert record["verdict"] == "dry-run" and record["dry_run"] is True


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "launch", "--lane", "nosuch"], "unknown lane 'nosuch'"),
        (["run", "launch", "--lane", "twin", "-p", "x"], "bad parameter 'x': use -p KEY=VALUE"),
        (["lint"], "give --lane LANE, --checkout DIR, or both --env FILE and --compose FILE"),
        (["lint", "--lane", "twin", "--env", "a"], "give both --env FILE and --compose FILE"),
        (
            ["speed", "--api", "http://127.0.0.1:9/v1", "--model", "m", "--concurrency", "0"],
            "--concurrency must be positive integers",
        ),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(outputs, args, message):
    out = lanebook(*args, outputs=outputs)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert out.stderr.startswith("lanebook: ") and len(out.stderr.strip().splitlines()) == 1
    assert not (outputs / "runs.jsonl").exists()


def _recorded(outputs, run_id, verdict, runbook="launch", **fields):
    path = outputs / "twin" / f"20261201T000000Z-{runbook}-{run_id}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")
    append_run(
        {
            "run_id": run_id,
            "runbook": runbook,
            "lane": "twin",
            "twin": True,
            "dry_run": verdict == "dry-run",
            "started_at": "2026-12-01T00:00:00+00:00",
            "finished_at": "2026-12-01T00:00:01+00:00",
            "verdict": verdict,
            "failed_step": None,
            "output": str(path.relative_to(outputs)),
            "sha256": sha256_file(path),
            "params": {},
            "git_commit": None,
            "figures": {},
            **fields,
        }
    )
    return path


def test_audit_lists_dry_runs_apart_from_passes(outputs):
    _recorded(outputs, "dddd0001", "pass")
    gone = _recorded(outputs, "dddd0002", "dry-run")
    shown = lanebook("audit", outputs=outputs)
    assert shown.returncode == 0 and "- dry-run" in shown.stdout and "+ pass" in shown.stdout
    assert "2 runs: 1 pass, 1 dry-run (observed nothing, not counted as passes)" in shown.stdout
    listed = json.loads(lanebook("audit", "--json", "--lane", "twin", outputs=outputs).stdout)
    assert [r["verdict"] for r in listed] == ["pass", "dry-run"]
    assert lanebook("audit", "verify", outputs=outputs).returncode == 0
    gone.unlink()
    verify = lanebook("audit", "verify", outputs=outputs)
    assert verify.returncode == 1 and "missing twin/" in verify.stdout


def test_audit_filters_by_runbook_and_lane_and_verify_names_every_changed_or_missing_output(outputs):
    kept = _recorded(
        outputs, "hhhh0001", "pass", promotion_id="7c1e0d9a4b2f", duration_s=125.0, figures={"state": "up"}
    )
    changed = _recorded(outputs, "hhhh0002", "pass", runbook="status", promotion_id="7c1e0d9a4b2f")
    gone = _recorded(outputs, "hhhh0003", "fail", runbook="status")
    listed = json.loads(lanebook("audit", "--json", "--runbook", "status", outputs=outputs).stdout)
    assert [r["run_id"] for r in listed] == ["hhhh0002", "hhhh0003"]
    shown = lanebook("audit", "--lane", "twin", "--runbook", "launch", outputs=outputs)
    assert shown.returncode == 0 and "hhhh0001" in shown.stdout and "hhhh0002" not in shown.stdout
    for part in ("2 min 05 s", "state=up", "7c1e0d9a4b2f"):
        assert part in shown.stdout, part
    changed.write_text('{"edited": true}')
    gone.unlink()
    verify = lanebook("audit", "verify", outputs=outputs)
    assert verify.returncode == 1
    assert verify.stdout.splitlines() == [
        "changed twin/20261201T000000Z-status-hhhh0002.ipynb",
        "missing twin/20261201T000000Z-status-hhhh0003.ipynb",
        "1/3 outputs verified",
    ]
    assert kept.exists()


def test_twin_status_json_has_the_promised_keys(tmp_path):
    env_dir = {"LANEBOOK_TWIN_DIR": str(tmp_path / "no-twin")}
    out = subprocess.run(
        [str(LANEBOOK), "twin", "status", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env_dir},
    )
    status = json.loads(out.stdout)
    assert out.returncode == 0 and status["running"] is False
    assert {"running", "ssh_config", "nodes", "api", "faults"} <= set(status)
    assert [n["alias"] for n in status["nodes"]] == ["head", "worker"]


def test_promote_on_a_real_lane_without_yes_or_dry_run_is_one_line_and_exit_2(outputs):
    done = lanebook("promote", "--lane", "anemll-0731", outputs=outputs)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("lanebook: ") and not (outputs / "runs.jsonl").exists()


def test_doctor_reads_files_and_exits_1_only_on_a_confirmed_finding(tmp_path):
    ready = "(APIServer pid=1) INFO 08-15 10:12:00 [on.py:62] Application startup complete."
    shm = "(EngineCore pid=2) INFO 08-15 11:00:00 [shm_broadcast.py:466] No available shared memory broadcast block "
    shm += (
        "found in 60 seconds. This typically happens when some processes are hanging or doing some time-consuming work"
    )
    healthy, suspect, sick = tmp_path / "healthy.log", tmp_path / "suspect.log", tmp_path / "sick.log"
    healthy.write_text(ready + "\n")
    suspect.write_text(f"{ready}\n{shm}\n")
    sick.write_text("(APIServer pid=1) INFO 08-15 10:03:00 [env.py:1] Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1\n")
    assert lanebook("doctor", "--logs", str(healthy)).returncode == 0
    seen = lanebook("doctor", "--logs", str(suspect), "--json")
    assert seen.returncode == 0, seen.stderr
    assert {f["id"]: f["confidence"] for f in json.loads(seen.stdout)["findings"]} == {
        "P12": "suspected",
        "D01": "suspected",
    }
    confirmed = lanebook("doctor", "--logs", str(sick))
    assert confirmed.returncode == 1 and "P01 confirmed" in confirmed.stdout and f"{sick}:1:" in confirmed.stdout
    missing = lanebook("doctor", "--logs", str(tmp_path / "none.log"))
    assert missing.returncode == 2 and missing.stderr.strip().startswith("lanebook: no such file")
    assert "Exit 0 when no finding is confirmed" in lanebook("doctor", "--help").stdout


def test_upgrade_plans_two_checkouts_records_with_record_and_says_bad_input_in_one_line(outputs, tmp_path):
    from helpers.recipe_fixtures import SHARED, need

    july = tmp_path / "july31"
    july.mkdir()
    for path in need(SHARED / "fixtures" / "miaai-recipe-0731").iterdir():
        (july / path.name).write_bytes(path.read_bytes())
    same = lanebook(
        "upgrade", "--lane", "anemll-0731", "--from", str(july), "--to", str(july), "--record", outputs=outputs
    )
    assert same.returncode == 0, same.stderr
    assert same.stdout.splitlines()[-2:] == ["verdict: same lane", f"recorded: {next(outputs.rglob('*-upgrade-*'))}"]
    (recorded,) = (outputs / "anemll-0731").glob("*-upgrade-*.json")
    assert same.stderr.strip() == "" and same.stdout.count(f"recorded: {recorded}") == 1
    assert json.loads(recorded.read_text())["verdict"] == "same lane" and not (outputs / "runs.jsonl").exists()
    as_json = lanebook("upgrade", "--lane", "anemll-0731", "--from", str(july), "--to", str(july), "--json")
    assert json.loads(as_json.stdout)["kind"] == "upgrade-plan"
    bad = lanebook("upgrade", "--lane", "anemll-0731", "--from", str(july), "--to", str(tmp_path / "nosuch"))
    assert (
        bad.returncode == 2 and bad.stderr.strip() == f"lanebook: checkout directory not found: {tmp_path / 'nosuch'}"
    )


def test_version_names_the_installed_package():
    import tomllib

    done = lanebook("--version")
    version = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]["version"]
    assert (done.returncode, done.stdout, done.stderr) == (0, f"lanebook {version}\n", "")
