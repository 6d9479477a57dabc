"""lanebook.recipe.upgrade_plan: the diff with exact small inputs, and the plan between the recipe's July 31 and
August 22 checkouts (the shared fixtures, copied into a temporary folder; skipped, saying so, where they are absent)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from helpers.recipe_fixtures import SHARED, need
from lanebook.base.errors import LanebookError
from lanebook.lane.params import load_lane
from lanebook.recipe.effective.checkout import CheckoutFiles
from lanebook.recipe.effective.launcher_env import worker_exports, worker_words
from lanebook.recipe.upgrade_plan import (
    BLOCKED,
    CHANGES,
    SAME,
    Difference,
    ExampleMoved,
    RankServe,
    ServerSide,
    UpgradePlan,
    example_moved,
    plan_checkouts,
    plan_text,
    read_plan,
    recorded_plans,
    serve_flags,
    server_differences,
    verdict_of,
    write_plan,
)

FIXTURES = SHARED / "fixtures"
SPEC = '{"method":"dspark","num_speculative_tokens":5}'


def side(argv, env, worker_env=None, image="img:1", mounts=None) -> ServerSide:
    return ServerSide(
        RankServe(tuple(argv), env),
        RankServe(tuple([*argv, "--headless"]), worker_env if worker_env is not None else env),
        image,
        mounts or {},
    )


def test_the_diff_of_two_small_sides_lists_exactly_what_differs_per_rank():
    old = side(
        ["serve", "m", "--gpu-memory-utilization", "0.85", "--speculative-config", SPEC, "--enable-x"],
        {"A": "1", "B": "2"},
        worker_env={"A": "1", "B": "3"},
        mounts={"/opt/p": "./p"},
    )
    new = side(
        ["serve", "m", "--gpu-memory-utilization", "0.835", "--speculative-config", SPEC.replace("5", "4"), "--rev=9"],
        {"A": "1", "C": ""},
        worker_env={"A": "1", "B": "3", "C": ""},
        image="img:1@sha256:ab",
    )
    assert server_differences(old, new) == [
        Difference("flag", "--gpu-memory-utilization", "0.85", "0.835", "both"),
        Difference("flag", "--enable-x", "", None, "both"),
        Difference("flag", "--rev", None, "9", "both"),
        Difference("speculative", "num_speculative_tokens", "5", "4", "both"),
        Difference("environment", "B", "2", None, "head"),
        Difference("environment", "C", None, "", "both"),
        Difference("digest", "digest", None, "sha256:ab", "both"),
        Difference("mount", "/opt/p", "./p", None, "both"),
    ]
    assert server_differences(old, old) == []


def test_flags_keep_the_model_and_leave_the_speculative_config_to_its_parser():
    argv = ["serve", "org/m", "--a", "1", "--switch", "--b=x y", "--speculative-config", SPEC]
    assert serve_flags(argv) == {"model": "org/m", "--a": "1", "--switch": "", "--b": "x y"}


def test_an_example_line_that_moved_is_listed_only_where_the_kept_env_file_sets_another_value():
    moved = example_moved(
        {"IMAGE": "img:1", "SAME": "a", "UNSET": "x"},
        {"IMAGE": ("img:1@sha256:ab", "ex:3"), "SAME": ("a", "ex:4"), "UNSET": ("y", "ex:5"), "NEW": ("n", "ex:6")},
        {"IMAGE": "img:1", "SAME": "a", "NEW": "lane"},
    )
    assert moved == [
        ExampleMoved("IMAGE", "img:1", "img:1@sha256:ab", "img:1", "ex:3"),
        ExampleMoved("NEW", None, "n", "lane", "ex:6"),
    ]


def test_the_verdict_is_blocked_before_changes_before_same():
    one = [Difference("flag", "--x", "1", "2")]
    assert verdict_of([], []) == SAME
    assert verdict_of([], one) == CHANGES
    assert verdict_of(["no"], one) == verdict_of(["no"], []) == BLOCKED


# --- the fixtures: July 31 → August 22 -------------------------------------------------------------------


def copy_checkout(target: Path, *folders: str) -> Path:
    target.mkdir()
    for folder in folders:
        for path in sorted(need(FIXTURES / folder).iterdir()):
            if path.name != "vllm-metrics-sample.txt":
                shutil.copy(path, target / path.name)
    return target


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def checkouts(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("upgrade")
    july = copy_checkout(root / "july31", "miaai-recipe-0731")
    august = copy_checkout(root / "august22", "miaai-recipe", "miaai-recipe-scripts")
    return july, august


@pytest.fixture(scope="module")
def params():
    return load_lane("anemll-0731")


@pytest.fixture(scope="module")
def upgrade(checkouts, params) -> UpgradePlan:
    july, august = checkouts
    before = digest(july), digest(august)
    plan = plan_checkouts(params, july, august)
    assert (digest(july), digest(august)) == before  # the operator's checkouts are never written
    return plan


def test_the_worker_gets_what_each_launcher_passes_it(checkouts):
    july, august = (CheckoutFiles.read(d) for d in checkouts)
    assert "GPU_MEMORY_UTILIZATION" not in worker_words(july)
    assert worker_words(august)["GPU_MEMORY_UTILIZATION"] == "$GPU_MEMORY_UTILIZATION"
    values = {"WORKER_HOST": "10.0.0.2", "NCCL_SOCKET_IFNAME": "bond0", "GPU_MEMORY_UTILIZATION": "0.85"}
    exports = worker_exports(august, values)
    assert exports["NODE_RANK"] == "1" and exports["HEADLESS"] == "1"
    assert exports["VLLM_HOST_IP"] == "10.0.0.2"  # WORKER_VLLM_HOST_IP defaults to WORKER_HOST
    assert exports["NCCL_SOCKET_IFNAME"] == "bond0" and exports["GPU_MEMORY_UTILIZATION"] == "0.85"
    assert exports["DSPARK_REVISION"] == ""  # the launcher's pin comes from its override, not these variables


def test_the_memory_key_moves_and_render_keeps_the_lane_at_085(upgrade):
    (memory,) = [v for v in upgrade.lane_values if v.key == "GPU_MEMORY_UTILIZATION"]
    assert memory.lane == "0.85" and memory.status == "ignored"
    assert memory.after_pull.startswith("0.835 (the launcher exports GPU_MEMORY_UTILIZATION from ")
    assert "GPU_MEMORY_UTILIZATION_TEXT" in memory.detail
    assert memory.render == "GPU_MEMORY_UTILIZATION_TEXT=0.85"
    assert upgrade.render_writes == {"GPU_MEMORY_UTILIZATION_TEXT": "0.85"}
    assert "+GPU_MEMORY_UTILIZATION_TEXT=0.85" in upgrade.render_diff
    # After render nothing about memory differs: the server keeps the lane's 0.85.
    assert not [d for d in upgrade.differences if d.name in ("--gpu-memory-utilization", "GPU_MEMORY_UTILIZATION")]


def test_the_revision_pin_and_the_other_differences_of_command_and_environment(upgrade):
    found = {(d.kind, d.name): d for d in upgrade.differences}
    pin = "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
    assert found[("flag", "--revision")] == Difference("flag", "--revision", None, pin, "both")
    assert found[("environment", "DSPARK_REVISION")].new == pin
    assert found[("flag", "--default-chat-template-kwargs")].old == '{"thinking":false}'
    assert ("image", "image") not in found and ("digest", "digest") not in found  # the lane's env file keeps its tag
    moved = {m.key: m for m in upgrade.example_moved}  # ... and the plan says the recipe now pins it by digest
    image = moved["DSPARK_VLLM_IMAGE"]
    assert (image.kept, image.old_example) == ("ghcr.io/anemll/dspark-vllm-gx10:0.1.1",) * 2
    assert image.new_example.startswith("ghcr.io/anemll/dspark-vllm-gx10:0.1.1@sha256:")
    assert image.source.startswith("env.dspark.example:") and "DSPARK_VLLM_IMAGE: kept " in plan_text(upgrade)
    assert found[("mount", "/opt/dspark-patches")].new == "./patches"
    kinds = {(n.kind, n.name) for n in upgrade.new_defaults}
    assert ("revision pin", "DSPARK_REVISION") in kinds and ("API key", "DSPARK_API_KEYS") in kinds
    assert ("hotfix toggle", "DSPARK_SKIP_HOTFIX") in kinds
    assert all(":" in n.source and not n.source.startswith("/") for n in upgrade.new_defaults)
    assert upgrade.verdict == CHANGES and upgrade.exit_code == 0 and not upgrade.blockers
    assert {n.id for n in upgrade.lint_new} == {"S05"}  # the dead DSPARK_MODEL and GPU_MEMORY_UTILIZATION lines
    text = plan_text(upgrade)
    assert "GPU_MEMORY_UTILIZATION (ignored): lane 0.85; runs 0.835" in text
    assert text.splitlines()[-1] == f"verdict: changes ({len(upgrade.differences)} differences)"


def test_the_same_checkout_on_both_sides_is_the_same_lane(checkouts, params):
    july, _ = checkouts
    plan = plan_checkouts(params, july, july)
    assert plan.verdict == SAME and plan.differences == plan.lane_values == plan.lint_new == []
    assert plan_text(plan).splitlines()[-1] == "verdict: same lane"


def test_a_new_checkout_compose_refuses_is_blocked(checkouts, params, tmp_path):
    july, august = checkouts
    broken = shutil.copytree(august, tmp_path / "broken")
    compose = broken / "docker-compose.dspark.yml"
    compose.chmod(0o644)
    compose.write_text(compose.read_text().replace("HF_HOME: /cache/huggingface", "HF_HOME: ${HF_NEW:?set HF_NEW}", 1))
    plan = plan_checkouts(params, july, broken)
    assert plan.verdict == BLOCKED and plan.exit_code == 1
    assert "required variable HF_NEW is missing a value" in plan.blockers[0]


def test_bad_input_is_one_clear_error(checkouts, params, tmp_path):
    july, _ = checkouts
    with pytest.raises(LanebookError, match="checkout directory not found"):
        plan_checkouts(params, july, tmp_path / "nosuch")
    with pytest.raises(LanebookError, match="no docker-compose.dspark.yml in"):
        plan_checkouts(params, tmp_path, july)


def test_the_record_round_trips_and_is_found_by_name(upgrade, tmp_path, monkeypatch):
    monkeypatch.setenv("LANEBOOK_OUTPUTS", str(tmp_path / "outputs"))
    path = write_plan(upgrade)
    assert path.parent == tmp_path / "outputs" / "anemll-0731" and path.name.endswith(
        f"-upgrade-{upgrade.plan_id}.json"
    )
    assert read_plan(path) == upgrade
    assert recorded_plans() == [(path, upgrade)]
    assert not (tmp_path / "outputs" / "runs.jsonl").exists()  # a plan observes no lane: no run index line
    other = write_plan(UpgradePlan.from_json({**upgrade.to_json(), "plan_id": ""}))
    assert other != path and len(recorded_plans()) == 2
    with pytest.raises(LanebookError, match="not an upgrade plan record"):
        UpgradePlan.from_json(json.loads('{"kind": "run"}'))
    assert upgrade.figures_label == "real lane"  # the lane's label, as every page shows it


def test_a_plan_recorded_with_a_twin_flag_reads_as_its_label(upgrade):
    """Plans recorded before `figures_label` said `twin: true/false`; they read back with the same label."""
    doc = {k: v for k, v in upgrade.to_json().items() if k != "figures_label"}
    assert UpgradePlan.from_json({**doc, "twin": True}).figures_label == "twin"
    assert UpgradePlan.from_json({**doc, "twin": False}).figures_label == "real lane"
