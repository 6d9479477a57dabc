"""The twin's recipe remote (lanebook.twin.remote): two deterministic commits, clones that are the same bytes, and a
July-31 shape that carries the facts of the recipe's own July-31 files (read from the shared fixtures, never
copied)."""

import re
import shutil

from lanebook.recipe.effective.checkout import CheckoutFiles
from lanebook.recipe.effective.launcher_env import launcher_overrides
from lanebook.recipe.envfile import parse_env_text
from lanebook.twin.remote import AUG22, JUL31, clone_at, lay_out_remote
from recipe_fixtures import SHARED, need

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
    assert again == shas and list(shas) == [JUL31, AUG22]
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
