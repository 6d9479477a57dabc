"""`lanebook lint`: each file-checkable pitfall planted one at a time into copies of the recipe's real files, and
the lane compared with what its checkout runs.

The good configuration is the seed's: the fixture compose with the lane's patch and an env file built
from params/anemll-0731.yaml. It must lint clean; each plant must raise exactly its id, on its line.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers.recipe_fixtures import (
    COMPOSE,
    EXAMPLE,
    FIXTURES,
    REPO,
    checkout,
    fixture_text,
    line_of,
    need,
    replace_once,
)
from lanebook.base.errors import LanebookError
from lanebook.lane.params import lane_names, load_lane
from lanebook.recipe import lint as lint_module
from lanebook.recipe.effective.checkout import REFERENCE
from lanebook.recipe.lint import lint_env_and_compose, lint_lane_on_reference, lint_what_lane_runs
from lanebook.recipe.render import render_checkout

ENV = ".env.dspark"


# The real lanes serve on the head's LAN address with no key, as the seeds' lanes do: S09 says so (a warning), which
# the tests of other findings leave aside (kept).
OPEN = "S09"


def kept(report) -> list:
    """A report's findings but S09's (the seeds' keyless LAN lanes carry it), which its own tests check."""
    return [f for f in report.findings if f.id != OPEN]


@pytest.fixture
def good(tmp_path) -> Path:
    """The seed's good configuration in a tmp checkout."""
    directory = checkout(tmp_path)
    render_checkout(load_lane("anemll-0731"), directory)
    return directory


def plant(path: Path, old: str, new: str) -> int:
    """Replace OLD by NEW once in PATH; the line number NEW ends up on."""
    text = replace_once(path.read_text(), old, new)
    path.write_text(text)
    return line_of(text, new.strip().splitlines()[0]) if new.strip() else 0


def lint(directory: Path, **kw):
    return lint_env_and_compose(directory / ENV, directory / COMPOSE, **kw)


def only(report, pitfall_id: str) -> list[tuple[str, int]]:
    """The (file name, line) of each finding, after checking every finding has PITFALL_ID."""
    assert {f.id for f in kept(report)} == {pitfall_id}, [(f.id, f.message) for f in kept(report)]
    return [(Path(f.file).name, f.line) for f in kept(report)]


def test_seed_configuration_lints_clean(good):
    report = lint(good)
    assert kept(report) == [] and report.ok


def test_fixture_example_as_is_runs_the_profile_key():
    """The recipe's example sets no GPU_MEMORY_UTILIZATION: its launcher exports 0.835 from the profile key, which at
    1M is a P07 warning on that line (not the compose default 0.80)."""
    report = lint_env_and_compose(need(FIXTURES / EXAMPLE), need(FIXTURES / COMPOSE))
    [finding] = kept(report)
    assert (finding.id, finding.severity, finding.line) == (
        "P07",
        "warning",
        line_of(fixture_text(EXAMPLE), "GPU_MEMORY_UTILIZATION_TEXT="),
    )
    assert (
        "resolves to 0.835 (the launcher exports GPU_MEMORY_UTILIZATION from GPU_MEMORY_UTILIZATION_TEXT)"
        in finding.message
    )
    assert report.ok and [(Path(i.file).name, i.source) for i in report.linted] == [
        (EXAMPLE, "given file"),
        (COMPOSE, "given file"),
    ]


@pytest.fixture
def recipe(tmp_path) -> Path:
    """A copy of the recipe's checkout (compose and example) with the seed's lane rendered into it."""
    directory = checkout(tmp_path, example=True)
    assert render_checkout(load_lane("anemll-0731"), directory).unresolved == []
    return directory


def test_seed_configuration_rendered_into_the_recipe_checkout_lints_clean(recipe):
    report = lint_what_lane_runs(load_lane("anemll-0731"), recipe)
    assert kept(report) == [] and report.ok
    assert [(Path(i.file).name, i.source) for i in report.linted] == [
        ("anemll-0731.yaml", "lane file"),
        (".env.dspark", "local checkout"),
        (COMPOSE, "local checkout"),
    ]
    assert lint(recipe).findings == []


def overridden(recipe: Path) -> Path:
    """The recipe checkout as an older render left it: the lane's 0.85 on a GPU_MEMORY_UTILIZATION line the
    launcher overwrites from GPU_MEMORY_UTILIZATION_TEXT=0.835."""
    plant(recipe / ENV, "GPU_MEMORY_UTILIZATION_TEXT=0.85", "GPU_MEMORY_UTILIZATION_TEXT=0.835")
    (recipe / ENV).write_text((recipe / ENV).read_text() + "GPU_MEMORY_UTILIZATION=0.85\n")
    return recipe


def test_a_checkout_whose_profile_key_overrides_the_lane_fails_naming_both_values(recipe):
    directory = overridden(recipe)
    env_text = (directory / ENV).read_text()
    report = lint_what_lane_runs(load_lane("anemll-0731"), directory)
    assert not report.ok
    by_id = {f.id: f for f in kept(report)}
    assert set(by_id) == {"S04", "S05", "P07"}
    lane_error = by_id["S04"]
    assert (lane_error.severity, lane_error.file, lane_error.line) == (
        "error",
        str(directory / ENV),
        line_of(env_text, "GPU_MEMORY_UTILIZATION_TEXT="),
    )
    assert lane_error.message.startswith(
        "GPU_MEMORY_UTILIZATION: the lane says 0.85, but the checkout runs 0.835 "
        "(the launcher exports GPU_MEMORY_UTILIZATION from GPU_MEMORY_UTILIZATION_TEXT)"
    )
    assert lane_error.message.endswith("`lanebook env render` writes GPU_MEMORY_UTILIZATION_TEXT=0.85")
    dead = by_id["S05"]
    assert (dead.severity, dead.line) == ("error", len(env_text.splitlines()))
    assert f"({directory / ENV}:{line_of(env_text, 'GPU_MEMORY_UTILIZATION_TEXT=')})" in dead.message


def test_the_cli_fails_there_too_with_checkout_or_env_and_compose(recipe):
    directory = overridden(recipe)
    for args in (
        ["--checkout", str(directory)],
        ["--env", str(directory / ENV), "--compose", str(directory / COMPOSE)],
    ):
        proc = run_cli("--lane", "anemll-0731", *args, "--json")
        assert proc.returncode == 1, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["ok"] is False and [f["id"] for f in doc["findings"] if f["severity"] == "error"] == ["S04", "S05"]
        assert "the lane says 0.85, but the checkout runs 0.835" in doc["findings"][1]["message"]
    human = run_cli("--env", str(directory / ENV), "--compose", str(directory / COMPOSE))  # no lane: the dead line
    assert human.returncode == 1 and "S05 error" in human.stdout and "so the server runs 0.835" in human.stdout


def test_a_checkout_without_an_env_file_is_linted_as_render_would_leave_it(tmp_path):
    directory = checkout(tmp_path, example=True)
    report = lint_what_lane_runs(load_lane("anemll-0731"), directory)
    [finding] = kept(report)
    assert (finding.id, finding.severity, finding.line) == ("S04", "error", 0)
    assert f"copies {EXAMPLE} and writes the lane's values" in finding.message
    assert [Path(i.file).name for i in report.linted] == ["anemll-0731.yaml", EXAMPLE, COMPOSE]


def test_what_render_cannot_fix_says_so(recipe):
    plant(recipe / COMPOSE, "--max-num-seqs ${MAX_NUM_SEQS:-6}", "--max-num-seqs 4")
    report = lint_what_lane_runs(load_lane("anemll-0731"), recipe)
    messages = {f.id: f.message for f in kept(report)}
    assert messages["S04"] == (
        "MAX_NUM_SEQS: the lane says 6, but the checkout runs 4, decided on this line; "
        "`lanebook env render` cannot change this: edit the line that wins"
    )


@pytest.mark.parametrize(
    "old,new,pitfall_id",
    [
        ("VLLM_USE_BREAKABLE_CUDAGRAPH=0", "VLLM_USE_BREAKABLE_CUDAGRAPH=1", "P01"),
        ("MAX_NUM_BATCHED_TOKENS=8192", "MAX_NUM_BATCHED_TOKENS=16384", "P02"),
        ("MAX_NUM_BATCHED_TOKENS=8192", "MAX_NUM_BATCHED_TOKENS=8216", "P03"),
        ("GPU_MEMORY_UTILIZATION=0.85", "GPU_MEMORY_UTILIZATION=0.80", "P07"),
        ("VLLM_HOST_IP=10.0.0.1", "VLLM_HOST_IP=127.0.0.1", "P08"),
        ("GLOO_SOCKET_IFNAME=bond0", "GLOO_SOCKET_IFNAME=lo", "P08"),
        ("WORKER_VLLM_HOST_IP=10.0.0.2", "WORKER_VLLM_HOST_IP=10.0.0.1", "P08"),
        ("HF_HUB_OFFLINE=1", 'HF_HUB_OFFLINE=1\nDEFAULT_CHAT_TEMPLATE_KWARGS=\'{"thinking":"false"}\'', "P10"),
        ("MTP_NUM_TOKENS=5", "MTP_NUM_TOKENS=7", "P14"),
    ],
)
def test_env_plants(good, old, new, pitfall_id):
    line = plant(good / ENV, old, new)
    if "\n" in new:
        line += 1
    assert only(lint(good), pitfall_id) == [(ENV, line)]


def test_env_without_breakable_names_the_env_file(good):
    plant(good / ENV, "VLLM_USE_BREAKABLE_CUDAGRAPH=0\n", "")
    [finding] = lint(good).findings
    assert (finding.id, Path(finding.file).name, finding.line) == ("P01", ENV, 0)
    assert "does not set VLLM_USE_BREAKABLE_CUDAGRAPH=0" in finding.message


def test_env_without_memory_setting_names_the_compose_default(good):
    plant(good / ENV, "GPU_MEMORY_UTILIZATION=0.85\n", "")
    compose_text = (good / COMPOSE).read_text()
    assert only(lint(good), "P07") == [(COMPOSE, line_of(compose_text, "--gpu-memory-utilization"))]


@pytest.mark.parametrize(
    "old,new,pitfall_id",
    [
        ("--max-num-batched-tokens ${MAX_NUM_BATCHED_TOKENS:-8192}", "--max-num-batched-tokens 16384", "P02"),
        (
            "- ${HF_CACHE:-${HOME}/.cache/huggingface}:/cache/huggingface",
            (
                "- /home/milo/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731/"
                "snapshots/9e165c30:/models/flash"
            ),
            "P06",
        ),
        ("--gpu-memory-utilization ${GPU_MEMORY_UTILIZATION:-0.80}", "--gpu-memory-utilization 0.80", "P07"),
        ('TP_SOCKET_IFNAME: "${TP_SOCKET_IFNAME:-${NCCL_SOCKET_IFNAME}}"', 'TP_SOCKET_IFNAME: "lo"', "P08"),
        (
            "off) DEFAULT_CHAT_TEMPLATE_KWARGS='{\"thinking\":false}'",
            'off) DEFAULT_CHAT_TEMPLATE_KWARGS=\'{"thinking":"false"}\'',
            "P10",
        ),
        ('\\"num_speculative_tokens\\":$${MTP_NUM_TOKENS:-5}', '\\"num_speculative_tokens\\":7', "P14"),
        ("[[1,1,5],[2,4,4],[5,6,3]]", "[[1,1,5],[3,4,4],[5,6,3]]", "S01"),
        ("[[1,1,5],[2,4,4],[5,6,3]]", "[[1,1,5],[2,4,4],[5,5,3]]", "S01"),
        ("[[1,1,5],[2,4,4],[5,6,3]]", "[[1,1,6],[2,4,4],[5,6,3]]", "S01"),
        ("[[1,1,5],[2,4,4],[5,6,3]]", "[[1,2,5],[2,4,4],[5,6,3]]", "S01"),
        ('[5,6,3]]}";', '[5,6,3]]";', "S02"),
    ],
)
def test_compose_plants(good, old, new, pitfall_id):
    line = plant(good / COMPOSE, old, new)
    assert only(lint(good), pitfall_id) == [(COMPOSE, line)]


def test_compose_without_breakable_injection(good):
    """P01's second half: the env file is right but compose never passes the key into the container."""
    plant(good / COMPOSE, '      VLLM_USE_BREAKABLE_CUDAGRAPH: "${VLLM_USE_BREAKABLE_CUDAGRAPH:-0}"\n', "")
    assert only(lint(good), "P01") == [(COMPOSE, line_of((good / COMPOSE).read_text(), "    environment:"))]


def test_schedule_above_num_speculative_tokens(good):
    plant(good / ENV, "MTP_NUM_TOKENS=5", "MTP_NUM_TOKENS=4")
    [finding] = lint(good).findings
    assert finding.id == "S01" and "K=5 is above num_speculative_tokens 4" in finding.message
    assert finding.line == line_of((good / COMPOSE).read_text(), "SPECULATIVE_CONFIG=")


def test_unreadable_env_line_is_a_warning(good, monkeypatch):
    line = plant(good / ENV, "HF_HUB_OFFLINE=1", "HF_HUB_OFFLINE=1\nthis is not an assignment")
    # Docker Compose v2 refuses such an env file outright, naming the line: so does lint when it can ask Compose.
    with pytest.raises(LanebookError, match=rf"\.env\.dspark: line {line + 1}: key cannot contain a space"):
        lint(good)
    monkeypatch.setenv("LANEBOOK_COMPOSE", "none")  # lanebook's own reader: the line is a warning
    report = lint(good)
    assert only(report, "S03") == [(ENV, line + 1)] and report.ok


def test_hermes_config_plants(good, tmp_path):
    hermes = tmp_path / "config.yaml"
    hermes.write_text(
        "providers:\n  spark-ds4:\n    api: http://127.0.0.2:8888/v1\n    api_key: none\n"
        '    extra_body:\n      chat_template_kwargs:\n        thinking: "false"\n'
    )
    report = lint(good, hermes_config=hermes)
    assert [(f.id, f.line) for f in kept(report)] == [("P09", 4), ("P10", 7)]
    hermes.write_text(
        "providers:\n  spark-ds4:\n    api_key: no-key-required\n"
        "    extra_body: {chat_template_kwargs: {thinking: false}}\n"
    )
    assert lint(good, hermes_config=hermes).findings == []


@pytest.mark.parametrize("name", lane_names())
def test_shipped_lanes_lint_clean(name):
    params = load_lane(name)
    report = lint_lane_on_reference(params)
    assert [f for f in report.findings if f.id != OPEN] == [], [(f.id, f.message) for f in report.findings]
    open_keyless = params.env.get("VLLM_HOST") == "0.0.0.0" and not params.keyed
    assert [(f.id, f.severity) for f in report.findings if f.id == OPEN] == [(OPEN, "warning")] * open_keyless


def test_a_keyed_lane_whose_hermes_block_is_keyless_and_a_keyless_lane_on_every_address(tmp_path):
    """P09 on a keyed lane: a Hermes block with no key (no key_env, api_key no-key-required) is an error; S09: the
    API on 0.0.0.0 with no key is a warning, gone once the lane names a key."""
    text = (REPO / "params" / "anemll-0731.yaml").read_text()
    path = tmp_path / "lane.yaml"
    path.write_text(text)
    assert {(f.id, f.line) for f in lint_lane_on_reference(load_lane(path), path).findings} == {
        (OPEN, line_of(text, "  VLLM_HOST: 0.0.0.0"))
    }
    keyed = text + "auth:\n  DSPARK_API_KEYS: {key_file: ~/.config/lanebook/anemll-0731.keys}\n"
    path.write_text(keyed)
    findings = lint_lane_on_reference(load_lane(path), path).findings
    assert [(f.id, f.severity, f.line) for f in findings] == [("P09", "error", line_of(keyed, "  api_key: no-key-req"))]
    assert "serves with an API key" in findings[0].message
    path.write_text(keyed.replace("  api_key: no-key-required", "  key_env: SPARK_DS4_API_KEY"))
    assert lint_lane_on_reference(load_lane(path), path).findings == []
    path.write_text(keyed.replace("  api_key: no-key-required\n", ""))
    findings = lint_lane_on_reference(load_lane(path), path).findings
    assert [f.id for f in findings] == ["P09"] and "hermes.key_env" in findings[0].message


def lane_copy(tmp_path: Path, old: str, new: str) -> tuple[Path, int]:
    path = tmp_path / "lane.yaml"
    text = replace_once((REPO / "params" / "anemll-0731.yaml").read_text(), old, new)
    path.write_text(text)
    return path, line_of(text, new.strip().splitlines()[0])


@pytest.mark.parametrize(
    "old,new,pitfall_id",
    [
        ("api_key: no-key-required", "api_key: none", "P09"),
        ("chat_template_kwargs: {thinking: false}", 'chat_template_kwargs: {thinking: "false"}', "P10"),
        ("GPU_MEMORY_UTILIZATION: 0.85", "GPU_MEMORY_UTILIZATION: 0.80", "P07"),
        ("VLLM_HOST_IP: 10.0.0.1 ", "VLLM_HOST_IP: 127.0.0.1 ", "P08"),
        ("MAX_NUM_BATCHED_TOKENS: 8192", "MAX_NUM_BATCHED_TOKENS: 8216", "P03"),
        ("MTP_NUM_TOKENS: 5", "MTP_NUM_TOKENS: 7", "P14"),
        ("schedule: [[1, 1, 5], [2, 4, 4], [5, 6, 3]]", "schedule: [[1, 1, 5], [2, 4, 4], [5, 7, 3]]", "S01"),
    ],
)
def test_lane_plants_name_the_lane_file_line(tmp_path, old, new, pitfall_id):
    path, line = lane_copy(tmp_path, old, new)
    findings = [f for f in kept(lint_lane_on_reference(load_lane(path), path)) if f.id != OPEN]
    assert {f.id for f in findings} == {pitfall_id}, [(f.id, f.message) for f in findings]
    assert {(f.file, f.line) for f in findings} == {(str(path), line)}


def test_a_lane_that_changes_image_and_weights_at_once_fails_lint_with_s07(tmp_path):
    """Seed 000: do not change runtime and weights the same weekend. anemll-0731 changes only the weights against
    anemll-1m6; a copy that also takes another image is an S07 error on its rollback: line, and, allowed by the
    operator, a warning; through the CLI too (exit 1)."""
    path, _ = lane_copy(
        tmp_path,
        "DSPARK_VLLM_IMAGE: ghcr.io/anemll/dspark-vllm-gx10:0.1.1",
        "DSPARK_VLLM_IMAGE: ghcr.io/anemll/dspark-vllm-gx10:0.1.2",
    )
    rollback_line = line_of(path.read_text(), "rollback: anemll-1m6")
    [finding] = kept(lint_lane_on_reference(load_lane(path), path))
    assert (finding.id, finding.severity, finding.file, finding.line) == ("S07", "error", str(path), rollback_line)
    assert finding.message.startswith(
        "lane anemll-0731 changes both the runtime image (ghcr.io/anemll/dspark-vllm-gx10:0.1.1 → "
        "ghcr.io/anemll/dspark-vllm-gx10:0.1.2) and the weights (deepseek-ai/DeepSeek-V4-Flash → "
        "deepseek-ai/DeepSeek-V4-Flash-0731) against its rollback lane anemll-1m6"
    )
    assert "--allow-runtime-and-weights" in finding.message
    [allowed] = kept(lint_lane_on_reference(load_lane(path), path, allow_runtime_and_weights=True))
    assert (allowed.id, allowed.severity) == ("S07", "warning")
    cli = run_cli("--lane", str(path), "--dry-run", "--json")
    assert cli.returncode == 1 and [f["id"] for f in json.loads(cli.stdout)["findings"]] == ["S07", OPEN]


def tp4_copy(tmp_path: Path, *changes: tuple[str, str]) -> Path:
    """params/anemll-0731-tp4.yaml with each (old, new) replaced once, in TMP_PATH."""
    path = tmp_path / "tp4.yaml"
    text = (REPO / "params" / "anemll-0731-tp4.yaml").read_text()
    for old, new in changes:
        text = replace_once(text, old, new)
    path.write_text(text)
    return path


def test_the_four_spark_lane_lints_clean_on_the_four_node_reference_and_says_what_it_cannot_check():
    report = lint_what_lane_runs(load_lane("anemll-0731-tp4"), dry_run=True)
    assert kept(report) == [], [(f.id, f.message) for f in kept(report)]
    assert [item.source for item in report.linted][1:] == ["reference checkout, four-node shape"] * 2
    assert "./start-tp4.sh, ./status-tp4.sh, ./stop-tp4.sh) are in no reference" in report.note


@pytest.mark.parametrize(
    "old,new,says",
    [
        (
            "NNODES: 4 ",
            "NNODES: 3 ",
            "NNODES=3, but the lane has four nodes (the head and three workers): set NNODES=4",
        ),
        ("TP_SIZE: 4", "TP_SIZE: 2", "TP_SIZE=2, but the lane has four nodes"),
        (
            "WORKER_IPS: 10.0.0.2 10.0.0.3 10.0.0.4",
            "WORKER_IPS: 10.0.0.3 10.0.0.2 10.0.0.4",
            "WORKER_IPS='10.0.0.3 10.0.0.2 10.0.0.4' does not list the workers' RoCE IPs in rank order (worker "
            "10.0.0.2, worker2 10.0.0.3, worker3 10.0.0.4): set WORKER_IPS='10.0.0.2 10.0.0.3 10.0.0.4'",
        ),
        (
            "WORKER_HOSTS: 10.0.0.2 10.0.0.3 10.0.0.4",
            "WORKER_HOSTS: 10.0.0.2 10.0.0.3",
            "WORKER_HOSTS='10.0.0.2 10.0.0.3'",
        ),
        (
            "start: ./start-tp4.sh",
            "start: ./start-deepseek-v4-flash-dspark.sh",
            "launcher.start is the recipe's start-deepseek-v4-flash-dspark.sh, which knows only WORKER_HOST: a "
            "four-node lane launched by it would start a TP2 pair and leave two Sparks idle",
        ),
        ("stop: ./stop-tp4.sh", "stop: ./stop-deepseek-v4-flash-dspark.sh", "launcher.stop is the recipe's"),
    ],
)
def test_a_four_node_lane_whose_tp_keys_disagree_with_its_nodes_fails_lint_with_s08_on_its_line(
    tmp_path, old, new, says
):
    path = tp4_copy(tmp_path, (old, new))
    findings = kept(lint_lane_on_reference(load_lane(path), path))
    [finding] = [f for f in findings if f.id == "S08"]
    assert (finding.severity, finding.line) == ("error", line_of(path.read_text(), new.strip()))
    assert says in finding.message
    # the four-node compose passes what the key says: a wrong NNODES or TP_SIZE also runs a group of that size
    assert {f.id for f in findings} == ({"S04", "S08"} if old.startswith(("NNODES", "TP_SIZE")) else {"S08"})


def test_a_four_node_lane_without_a_key_is_told_what_to_set(tmp_path):
    path = tp4_copy(
        tmp_path,
        ("  WORKER_IPS: 10.0.0.2 10.0.0.3 10.0.0.4     # ranks 1..3: each worker's RoCE IP (its VLLM_HOST_IP)\n", ""),
    )
    [finding] = kept(lint_lane_on_reference(load_lane(path), path))
    assert (finding.id, finding.line) == ("S08", path.read_text().splitlines().index("env:") + 1)
    assert finding.message == (
        "WORKER_IPS is not set, but the lane has four nodes (the head and three workers): "
        "set WORKER_IPS='10.0.0.2 10.0.0.3 10.0.0.4'"
    )


def test_a_pair_carrying_the_four_node_keys_is_checked_the_same_way(tmp_path):
    keys = "  NNODES: 2\n  TP_SIZE: 2\n  WORKER_HOSTS: milo@10.0.0.2\n  WORKER_IPS: 10.0.0.2\n"
    path, _ = lane_copy(tmp_path, "  NCCL_SOCKET_IFNAME: bond0\n", "  NCCL_SOCKET_IFNAME: bond0\n" + keys)
    assert kept(lint_lane_on_reference(load_lane(path), path)) == []
    path, line = lane_copy(tmp_path, "  NCCL_SOCKET_IFNAME: bond0\n", "  NCCL_SOCKET_IFNAME: bond0\n  NNODES: 4\n")
    everything = kept(lint_lane_on_reference(load_lane(path), path))
    findings = [f for f in everything if f.id == "S08"]
    assert [f.line for f in findings] == [line + 1, path.read_text().splitlines().index("env:") + 1]
    assert findings[0].message == "NNODES=4, but the lane has two nodes (the head and one worker): set NNODES=2"
    assert "TP_SIZE is not set" in findings[1].message
    runs = [f.message.split(", decided")[0] for f in everything if f.id == "S04"]
    assert runs == [  # TP_SIZE unset: the four-node compose's ${TP_SIZE} is empty, so the next word is taken
        "--tensor-parallel-size: the lane says 2, but the checkout runs --pipeline-parallel-size",
        "--nnodes: the lane says 2, but the checkout runs 4",
    ]


def test_a_four_node_lane_on_the_recipes_two_node_checkout_is_an_s04_error_naming_the_literal(tmp_path):
    """The recipe's compose writes --tensor-parallel-size 2 and --nnodes 2: what runs is a TP2 pair, whatever the
    env file says, and render cannot change it."""
    directory = checkout(tmp_path, example=True)
    params = load_lane("anemll-0731-tp4")
    render_checkout(params, directory)
    report = lint_what_lane_runs(params, directory)
    found = {f.message.split(":", 1)[0]: f for f in kept(report) if f.id == "S04"}
    assert set(found) == {"--tensor-parallel-size", "--nnodes"}, [(f.id, f.message) for f in kept(report)]
    tp = found["--tensor-parallel-size"]
    assert (tp.file, tp.line) == (str(directory / COMPOSE), line_of(fixture_text(COMPOSE), "--tensor-parallel-size 2"))
    assert tp.message.startswith("--tensor-parallel-size: the lane says 4, but the checkout runs 2, decided on this")
    assert tp.message.endswith(
        "`lanebook env render` cannot change this: the compose command writes --tensor-parallel-size 2 literally "
        "(the recipe's two-node shape); a lane of 4 nodes runs a checkout whose compose reads --tensor-parallel-size "
        "${TP_SIZE}"
    )
    assert "--nnodes ${NNODES}" in found["--nnodes"].message


def test_a_rollback_lane_that_cannot_be_read_is_said_not_hidden(tmp_path):
    path, line = lane_copy(tmp_path, "rollback: anemll-1m6", "rollback: no-such-lane")
    [finding] = kept(lint_lane_on_reference(load_lane(path), path))
    assert (finding.id, finding.severity, finding.line) == ("S07", "warning", line)
    assert "unknown lane 'no-such-lane'" in finding.message


def test_lane_compose_findings_name_the_reference_line(tmp_path, monkeypatch):
    """A compose problem under --lane is reported on the reference's own line, even after the patch inserted one,
    and a value render cannot make the lane's is an S04 error there."""
    template = (REFERENCE / COMPOSE).read_text()
    older = replace_once(template, '      VLLM_USE_BREAKABLE_CUDAGRAPH: "${VLLM_USE_BREAKABLE_CUDAGRAPH:-0}"\n', "")
    older = replace_once(
        older, "--gpu-memory-utilization ${GPU_MEMORY_UTILIZATION:-0.80}", "--gpu-memory-utilization 0.80"
    )
    fake = tmp_path / "reference"
    fake.mkdir()
    (fake / COMPOSE).write_text(older)
    (fake / EXAMPLE).write_text((REFERENCE / EXAMPLE).read_text())
    monkeypatch.setattr(lint_module, "REFERENCE", fake)
    report = lint_lane_on_reference(load_lane("anemll-0731"))
    line = line_of(older, "--gpu-memory-utilization")
    assert [(f.id, f.file, f.line) for f in kept(report)] == [
        ("P07", str(fake / COMPOSE), line),
        ("S04", str(fake / COMPOSE), line),
    ]
    assert kept(report)[1].message.startswith("GPU_MEMORY_UTILIZATION: the lane says 0.85, but the checkout runs 0.80")
    path, _ = lane_copy(tmp_path, "compose_environment: [VLLM_USE_BREAKABLE_CUDAGRAPH]", "compose_environment: []")
    report = lint_lane_on_reference(load_lane(path), path)
    assert ("P01", str(fake / COMPOSE), line_of(older, "    environment:")) in [
        (f.id, f.file, f.line) for f in kept(report)
    ]


def test_a_lane_whose_head_refuses_the_connection_lints_the_lane_file_and_says_so(tmp_path):
    """Nothing listens on 127.0.0.1 port 1: the connection is refused, and lint falls back to the reference."""
    path, _ = lane_copy(tmp_path, "host: 192.168.1.11, user: milo,", "host: 127.0.0.1, port: 1, user: milo,")
    proc = run_cli("--lane", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["note"].startswith("the head's checkout could not be read: head (milo@127.0.0.1:1) unreachable")
    assert [(Path(i["file"]).name, i["source"]) for i in doc["linted"]] == [
        ("lane.yaml", "lane file"),
        (COMPOSE, "reference checkout"),
        (EXAMPLE, "reference checkout"),
    ]


def test_the_twin_lane_lints_the_twin_heads_checkout_over_ssh(twin):
    report = lint_what_lane_runs(load_lane("twin"))
    assert report.note == "" and kept(report) == [], [(f.id, f.message) for f in kept(report)]
    assert [(i.file, i.source) for i in report.linted[1:]] == [
        ("head:~/ds4-f-mia-anemll-0731/.env.dspark", "head over ssh"),
        (f"head:~/ds4-f-mia-anemll-0731/{COMPOSE}", "head over ssh"),
        ("head:~/ds4-f-mia-anemll-0731/start-deepseek-v4-flash-dspark.sh", "head over ssh"),
        ("head:~/ds4-f-mia-anemll-0731/scripts/lane-env.sh", "head over ssh"),
    ]  # the start script sources it


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(REPO / ".venv" / "bin" / "lanebook"), "lint", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_exit_codes_and_json_shape(good):
    clean = run_cli("--lane", "anemll-0731", "--dry-run", "--json")  # a dry run opens no connection
    assert clean.returncode == 0, clean.stderr
    assert json.loads(clean.stdout) == {
        "ok": True,
        "findings": [
            {
                "id": OPEN,
                "severity": "warning",
                "message": "vllm serve listens on all addresses (--host 0.0.0.0) with no API key: anyone on the "
                "network can use the lane",
                "file": str(REPO / "params" / "anemll-0731.yaml"),
                "line": line_of((REPO / "params" / "anemll-0731.yaml").read_text(), "  VLLM_HOST: 0.0.0.0"),
            }
        ],
        "linted": [
            {"file": str(REPO / "params" / "anemll-0731.yaml"), "source": "lane file"},
            {"file": str(REFERENCE / COMPOSE), "source": "reference checkout"},
            {"file": str(REFERENCE / EXAMPLE), "source": "reference checkout"},
        ],
        "note": "dry run: no connection opened; linted the lane file against lanebook's reference checkout instead",
    }

    plant(good / ENV, "MAX_NUM_BATCHED_TOKENS=8192", "MAX_NUM_BATCHED_TOKENS=16384")
    failing = run_cli("--env", str(good / ENV), "--compose", str(good / COMPOSE), "--json")
    assert failing.returncode == 1
    doc = json.loads(failing.stdout)
    assert doc["ok"] is False
    [finding] = doc["findings"]
    assert set(finding) == {"id", "severity", "message", "file", "line"}
    assert (finding["id"], finding["severity"], finding["file"]) == ("P02", "error", str(good / ENV))

    human = run_cli("--env", str(good / ENV), "--compose", str(good / COMPOSE))
    assert human.returncode == 1 and f"P02 error {good / ENV}:" in human.stdout
    assert f"linted: {good / ENV} (given file)" in human.stdout
    assert run_cli("--checkout", str(good)).returncode == 1  # the same files, named by their directory


@pytest.mark.parametrize(
    "args,message",
    [
        ([], "give --lane LANE, --checkout DIR, or both --env FILE and --compose FILE"),
        (["--env", "x"], "give both --env FILE and --compose FILE"),
        (["--lane", "anemll-0731", "--env", "x"], "give both --env FILE and --compose FILE"),
        (["--checkout", "d", "--env", "x", "--compose", "y"], "not both"),
        (["--lane", "no-such-lane"], "unknown lane"),
        (["--env", "/nonexistent/.env.dspark", "--compose", "/nonexistent/c.yml"], "env file not found"),
        (["--lane", "anemll-0731", "--checkout", "/nonexistent"], "checkout directory not found"),
    ],
)
def test_cli_bad_usage_is_one_line_exit_2(args, message):
    proc = run_cli(*args)
    assert proc.returncode == 2 and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_errors_summary_names_each_error_or_what_was_linted():
    linted = [lint_module.Linted("docker-compose.dspark.yml", "head over ssh")]
    warning = lint_module.Finding("P15", "warning", "a warning is no error", ".env.dspark", 3)
    errors = [
        lint_module.Finding("P01", "error", "breakable graphs", ".env.dspark", 1),
        lint_module.Finding("P07", "error", "0.80 at 1M", ".env.dspark", 2),
        warning,
    ]
    assert lint_module.LintReport(errors, linted).errors_summary() == "P01 breakable graphs; P07 0.80 at 1M"
    assert (
        lint_module.LintReport([warning], linted).errors_summary() == "linted docker-compose.dspark.yml (head over ssh)"
    )
