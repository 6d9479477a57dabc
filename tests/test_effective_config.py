"""lanebook.recipe.effective.config: the effective configuration, the line that wins for each value and the dead
lines."""

from __future__ import annotations

from helpers.recipe_fixtures import COMPOSE, EXAMPLE, checkout, fixture_text, line_of, replace_once
from lanebook.recipe.effective.checkout import CheckoutFiles
from lanebook.recipe.effective.config import Effective


def test_a_compose_default_derives_from_another_variable(tmp_path):
    text = replace_once(fixture_text(EXAMPLE), "TP_SOCKET_IFNAME=enp1s0f1np1\n", "")
    eff = Effective(CheckoutFiles.read(checkout(tmp_path, env=text)))
    setting = eff.setting("TP_SOCKET_IFNAME")
    assert (setting.value, setting.where.line) == ("enpXsYfZnpN", line_of(text, "NCCL_SOCKET_IFNAME=enpXsYfZnpN"))
    unset = eff.setting("MAX_NUM_SEQS")
    assert (unset.value, unset.from_env) == ("6", True)
    plain = Effective(CheckoutFiles.read(checkout(tmp_path / "b", env="X=1\n")))
    default = plain.setting("MAX_MODEL_LEN")
    assert (default.value, default.from_env, default.where.file) == (
        "1048576",
        False,
        f"{tmp_path / 'b'}/checkout/{COMPOSE}",
    )
    assert default.where.line == line_of(fixture_text(COMPOSE), "--max-model-len")


def test_a_key_set_twice_leaves_the_first_line_dead(tmp_path):
    eff = Effective(CheckoutFiles.read(checkout(tmp_path, env="MAX_NUM_SEQS=4\nX=1\nMAX_NUM_SEQS=6\n")))
    [dead] = eff.dead_lines
    assert (dead.key, dead.value, dead.where.line, dead.winner.value, dead.reason) == (
        "MAX_NUM_SEQS",
        "4",
        1,
        "6",
        "line 3 sets MAX_NUM_SEQS again",
    )
