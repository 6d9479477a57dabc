"""The suspected tier (lanebook.verify.doctor_suspect): TF-IDF retrieval over the registry's own words, with number
checks against each symptom's band; every suspicion shows the words and figures that matched."""

from __future__ import annotations

from lanebook.verify.doctor import SUSPECTED, diagnose, read_lines
from lanebook.verify.doctor_suspect import suspect


def post(text: str):
    return read_lines("post.md", text)


def test_a_post_in_words_and_a_table_is_ranked_to_its_class_with_what_matched():
    text = (
        "Since the last image, breakable CUDA graphs auto-enable on our pair and decode throughput drops as the output "
        "grows.\n\n| max_tokens | breakable on | breakable off |\n|---|---|---|\n| 400 | 31 | 40 |\n| 800 | 19 | 39 |\n"
    )
    (top, *_) = suspect(post(text))
    assert top.id == "P01" and any("breakable" in w for w in top.why)
    found = diagnose(post(text))
    assert found.ids() == ["P01"] and found.findings[0].confidence == SUSPECTED and found.findings[0].matched


def test_a_stated_acceptance_under_its_band_counts_and_one_in_the_band_takes_the_class_out():
    low = suspect(post("The drafter's speculative acceptance sat at a quarter where the drafter should give 60 %."))
    d04 = next(r for r in low if r.id == "D04")
    assert any(w.startswith("acceptance") and "under" in w for w in d04.why)
    healthy = suspect(post("Our drafter is fine: mean acceptance length is 3.9 and acceptance is 78 % on code."))
    assert "D04" not in [r.id for r in healthy]


def test_a_locked_memory_limit_in_words_points_at_memlock():
    ranked = suspect(post("NCCL cannot register memory with ibv_reg_mr; ulimit -l shows 64 in the container."))
    assert ranked[0].id == "D17" and any("locked-memory limit: 64" in w for w in ranked[0].why)


def test_words_no_class_shares_rank_nothing():
    assert suspect(post("We bought two boxes and the fans are quiet when idle, which we like.")) == []
