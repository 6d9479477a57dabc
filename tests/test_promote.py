"""`lanebook promote` (lanebook.runs.promote): the main job as one chain of recorded runs, stopping at the first runbook
that does not pass, and `--resume` continuing at that runbook without repeating the ones that passed.

Where a resume starts is a pure function of the records (plan_resume). The end-to-end tests run small notebooks of
their own in place of the six runbooks: each emits the verdict a file tells it to, so a test can fail a stage,
"fix" it and resume; the shipped runbooks run in their own tests and in `make demo`.
"""

import hashlib
import json

import nbformat
import pytest
from helpers.lanebook_runs import stand_in_notebook, use_runbooks, verdict_cell
from lanebook.base import paths
from lanebook.base.errors import LanebookError
from lanebook.lane.params import lane_path, load_lane
from lanebook.runs import promote
from lanebook.runs.audit import read_runs
from lanebook.runs.promote import MAIN_JOB, lane_digest, plan_resume

DIGEST = {"file": "f1", "weights": "w1", "gates": "g1", "rest": "r1"}


def record(runbook, verdict, run_id, promotion_id="p1", lane="twin", digest=DIGEST, dry_run=False):
    return {
        "run_id": run_id,
        "runbook": runbook,
        "lane": lane,
        "verdict": verdict,
        "dry_run": dry_run,
        "promotion_id": promotion_id,
        "lane_digest": digest,
    }


def failed_at(stage, promotion_id="p1", **kw):
    names = MAIN_JOB[: MAIN_JOB.index(stage) + 1]
    return [record(n, "fail" if n == stage else "pass", f"{promotion_id}-{n}", promotion_id, **kw) for n in names]


def test_a_resume_starts_at_the_runbook_that_failed_and_links_to_the_last_run():
    plan = plan_resume(failed_at("gates"), "twin", DIGEST)
    assert (plan.promotion_id, plan.runbooks, plan.previous_run_id) == ("p1", ("gates", "speed"), "p1-gates")
    assert plan.reason == "resuming promotion p1 at gates"


def test_a_resume_takes_the_latest_promotion_and_the_latest_run_of_each_runbook():
    runs = (
        failed_at("weights", "p0")
        + failed_at("launch")
        + [record("launch", "pass", "p1-launch-2"), record("warmup", "error", "p1-warmup")]
    )
    plan = plan_resume(runs, "twin", DIGEST)
    assert (plan.runbooks, plan.previous_run_id) == (("warmup", "gates", "speed"), "p1-warmup")


def test_a_lane_edit_starts_again_at_the_first_runbook_the_edited_part_feeds():
    runs = failed_at("speed")
    plan = plan_resume(runs, "twin", {**DIGEST, "file": "f2", "rest": "r2"})
    assert plan.runbooks == ("env", "launch", "warmup", "gates", "speed")
    assert plan.reason == "resuming promotion p1 at env: the lane's env and launch settings changed since it ran"
    assert plan_resume(runs, "twin", {**DIGEST, "file": "f2", "gates": "g2"}).runbooks == ("gates", "speed")
    assert plan_resume(runs, "twin", {**DIGEST, "file": "f2", "weights": "w2", "gates": "g2"}).runbooks == MAIN_JOB
    assert plan_resume(runs, "twin", {**DIGEST, "file": "f2"}).runbooks == (
        "speed",
    )  # a comment edited: nothing is stale
    assert plan_resume(failed_at("gates"), "twin", {**DIGEST, "gates": "g2"}).runbooks == ("gates", "speed")


def test_nothing_to_resume_is_one_clear_error():
    with pytest.raises(
        LanebookError,
        match=r"^--resume: no earlier promotion of lane twin is recorded; run `lanebook promote --lane twin` first$",
    ):
        plan_resume(failed_at("gates", lane="anemll-0731"), "twin", DIGEST)
    with pytest.raises(LanebookError, match="no earlier dry-run promotion"):
        plan_resume(failed_at("gates"), "twin", DIGEST, dry_run=True)  # a dry promotion never resumes a real one
    passed = [record(n, "pass", n) for n in MAIN_JOB]
    with pytest.raises(LanebookError, match="already passed every runbook; start a new one without --resume"):
        plan_resume(passed, "twin", DIGEST)


def test_the_lane_digest_keeps_the_parts_runbooks_stand_on_apart(tmp_path):
    from lanebook.lane.params import lane_with

    params = load_lane("twin")
    commented = tmp_path / "twin.yaml"
    commented.write_text(lane_path("twin").read_text() + "# a comment changes the file, no part\n")
    base = lane_digest(params)
    assert base["file"] == hashlib.sha256(lane_path("twin").read_bytes()).hexdigest()  # the bytes it was loaded from
    assert lane_digest(load_lane(commented)) == {**base, "file": lane_digest(load_lane(commented))["file"]} != base
    hermes = lane_with(params, hermes={**params.hermes.model_dump(), "context_length": 100_000})
    assert promote.changed_parts(base, lane_digest(hermes)) == ["gates"]
    assert promote.changed_parts(base, lane_digest(lane_with(params, env={"MAX_NUM_SEQS": 4}))) == ["rest"]


def lane_without_rollback(tmp_path):
    """The twin lane file without its rollback lane: these promotions run stand-in notebooks and touch no node."""
    lane = tmp_path / "lane.yaml"
    text = lane_path("twin").read_text().replace("rollback: twin-1m6", "rollback: null")
    lane.write_text(text.replace("then: rollback", "then: page"))  # a watch cannot fall back to no lane
    assert "rollback: null" in lane.read_text()
    return lane


@pytest.fixture
def stages(tmp_path, monkeypatch):
    """Six small notebooks standing in for the main job; set(name=verdict) decides what each emits next."""
    folder = tmp_path / "runbooks"
    folder.mkdir()
    verdicts = tmp_path / "verdicts.json"
    verdicts.write_text(json.dumps({name: "pass" for name in MAIN_JOB}))
    for name in MAIN_JOB:
        # the runbooks that lint take the operator's allowance, as env and launch do, and show what they were given
        lints = name in promote.LINTING
        emit = f"import json\nverdict = json.load(open({str(verdicts)!r}))[{name!r}]\n" + verdict_cell(
            f"{{'stage': {name!r}" + (", 'allowed': allow_runtime_and_weights}" if lints else "}"),
            f"{{'step': '2 check', 'fix': 'run `{name}` again'}} if verdict == 'fail' else None",
        )
        parameters = 'lane = "twin"\ndry_run = False' + ("\nallow_runtime_and_weights = False" if lints else "")
        nbformat.write(stand_in_notebook(emit, parameters=parameters), folder / f"{name}.ipynb")
    use_runbooks(monkeypatch, folder, tmp_path / "outputs")

    def set_verdicts(**changes):
        verdicts.write_text(json.dumps({**json.loads(verdicts.read_text()), **changes}))

    return set_verdicts


def test_a_promotion_stops_at_the_first_runbook_not_passed_and_resumes_there(stages, tmp_path):
    lane = lane_without_rollback(tmp_path)
    stages(gates="fail")
    first = promote.promote(load_lane(lane))
    assert [r["runbook"] for r in first.records] == ["weights", "env", "launch", "warmup", "gates"] and not first.ok
    assert first.summary(str(lane)) == (
        f"promotion {first.plan.promotion_id} stopped at gates: fail at step '2 check' — "
        f"run `gates` again; when it is fixed: lanebook promote --lane {lane} --resume"
    )
    stages(gates="pass")
    resumed = promote.promote(load_lane(lane), resume=True)
    assert resumed.ok and [r["runbook"] for r in resumed.records] == ["gates", "speed"]
    chain = read_runs()
    assert len({r["promotion_id"] for r in chain}) == 1 and len(chain) == 7
    assert [r["previous_run_id"] for r in chain] == [None] + [
        r["run_id"] for r in chain[:-1]
    ]  # one chain across the resume
    assert chain[-1]["figures"] == {"stage": "speed"}
    with pytest.raises(LanebookError, match="already passed every runbook"):
        promote.promote(load_lane(lane), resume=True)


def test_a_resume_after_the_lane_file_was_fixed_renders_it_again(stages, tmp_path):
    lane = lane_without_rollback(tmp_path)
    stages(launch="fail")
    promote.promote(load_lane(lane))
    lane.write_text(lane.read_text().replace("GPU_MEMORY_UTILIZATION: 0.85", "GPU_MEMORY_UTILIZATION: 0.86"))
    stages(launch="pass")
    resumed = promote.promote(load_lane(lane), resume=True)
    assert [r["runbook"] for r in resumed.records] == ["env", "launch", "warmup", "gates", "speed"]
    assert resumed.plan.reason.endswith("at env: the lane's env and launch settings changed since it ran")


def test_a_real_lane_needs_yes_or_dry_run_before_anything_runs(stages):
    with pytest.raises(LanebookError, match=r"^promote changes the lane anemll-0731: add --yes"):
        promote.promote(load_lane("anemll-0731"))
    assert read_runs() == []


def test_a_lane_changing_image_and_weights_at_once_is_refused_unless_the_operator_allows_it(stages, tmp_path):
    """Seed 000: do not change runtime and weights the same weekend. The twin lane changes only the weights against
    twin-1m6; given another image too, promote refuses before anything runs, naming the flag; allowed, it goes on and
    the runbooks that lint are told (a dry run: nothing is fingerprinted or observed)."""
    lane = tmp_path / "lane.yaml"
    old_image = "DSPARK_VLLM_IMAGE: ghcr.io/anemll/dspark-vllm-gx10:0.1.1"
    lane.write_text(lane_path("twin").read_text().replace(old_image, old_image[:-1] + "2"))
    assert promote.one_change_refusal(load_lane("twin"), allowed=False) is None
    with pytest.raises(LanebookError) as refused:
        promote.promote(load_lane(lane), dry_run=True)
    assert str(refused.value) == (
        "lane twin changes both the runtime image (ghcr.io/anemll/dspark-vllm-gx10:0.1.1 → "
        "ghcr.io/anemll/dspark-vllm-gx10:0.1.2) and the weights (deepseek-ai/DeepSeek-V4-Flash → "
        "deepseek-ai/DeepSeek-V4-Flash-0731) against its rollback lane twin-1m6: seed 000 says do not change runtime "
        "and weights the same weekend (lint S07); promote one change first, or add --allow-runtime-and-weights to go "
        "ahead knowingly"
    )
    assert read_runs() == []
    allowed = promote.promote(load_lane(lane), dry_run=True, allow_runtime_and_weights=True)
    assert allowed.ok and {r["runbook"]: r["figures"].get("allowed") for r in allowed.records} == {
        "weights": None,
        "env": True,
        "launch": True,
        "warmup": None,
        "gates": None,
        "speed": None,
    }


def test_a_missing_runbook_is_named_before_anything_runs(stages, monkeypatch, tmp_path):
    (paths.RUNBOOKS_DIR / "warmup.ipynb").unlink()
    with pytest.raises(LanebookError, match=r"^the main job is incomplete: runbook\(s\) warmup not written yet$"):
        promote.promote(load_lane("twin"))


def test_a_new_promotion_keeps_the_rollback_lanes_fingerprint_where_rollback_finds_it():
    """Taken on the twin's nodes before anything changes: the rollback lane's checkout and weights on every node."""
    from lanebook.ops.rollback import FINGERPRINT_FIGURE, recorded_fingerprint

    kept = promote.rollback_reference(load_lane("twin"))[FINGERPRINT_FIGURE]
    assert kept["lane"] == "twin-1m6" and kept["observed"] and set(kept["nodes"]) == {"head", "worker"}
    assert all(tree["exists"] for node in kept["nodes"].values() for tree in node.values())
    first_record = {"run_id": "a1", "runbook": "weights", "lane": "twin", "figures": {}, FINGERPRINT_FIGURE: kept}
    assert recorded_fingerprint([first_record], "twin-1m6") == (first_record, kept)
    assert promote.rollback_reference(load_lane("patch3-c12")) == {}  # the end of the chain has none


def test_a_dry_run_prints_each_runbooks_commands_the_seeds_cp_line_among_them(tmp_path):
    """`lanebook promote --lane anemll-0731 --dry-run` with only loopback up: the new lane's checkout is made as seed
    000 makes it, and no connection is opened."""
    from helpers.lanebook_runs import offline

    done = offline(tmp_path, "promote --lane anemll-0731 --dry-run", timeout=600)
    lines = [line.strip() for line in done.stdout.splitlines()]
    assert any(line.endswith("; cp -a ~/ds4-f-mia-anemll-1m6 ~/ds4-f-mia-anemll-0731") for line in lines), done.stdout
    assert lines.count("commands it would send (none were sent):") == len(MAIN_JOB)


def test_a_dry_run_of_the_four_spark_lane_prints_the_fan_out_rsync_to_every_worker(tmp_path):
    """`lanebook promote --lane anemll-0731-tp4 --dry-run` with only loopback up: the weights go from the head once to
    each of the three workers' RoCE IPs, and no connection is opened."""
    from helpers.lanebook_runs import offline

    done = offline(tmp_path, "promote --lane anemll-0731-tp4 --dry-run", timeout=600)
    lines = [line.strip() for line in done.stdout.splitlines()]
    hub = "models--deepseek-ai--DeepSeek-V4-Flash-0731/"
    sent = [line for line in lines if line.startswith("head: rsync ") and hub in line]
    assert [line.split()[-1].split(":")[0] for line in sent] == ["milo@10.0.0.2", "milo@10.0.0.3", "milo@10.0.0.4"]
    assert lines.count("commands it would send (none were sent):") == len(MAIN_JOB)
