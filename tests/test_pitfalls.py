"""The pitfall registry: seed 000's seventeen pitfalls in order, each checked by lint or met by a named runbook."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from helpers.recipe_fixtures import SEED_000, need
from lanebook.recipe.pitfalls import (
    PITFALLS,
    for_runbook,
    markdown_table,
    pitfall,
    schedule_problems,
    troubleshooting_markdown,
)

RUNBOOKS = {"weights", "env", "launch", "warmup", "gates", "speed", "diagnose", "rollback", "status", "stop"}
STATIC = {"P01", "P02", "P03", "P06", "P07", "P08", "P09", "P10", "P14"} | {f"S0{n}" for n in range(1, 10)}
# A token the seed's numbered pitfall and our entry share: proves order and that each entry is that pitfall.
SHARED_TOKEN = [
    "VLLM_USE_BREAKABLE_CUDAGRAPH",
    "16384",
    "8216",
    "docker system prune -af",
    "Dual-WAN",
    "Snapshot-only",
    "0.80",
    "VLLM_HOST_IP",
    "no-key-required",
    '"false"',
    "8–15",
    "warmup",
    "legacy",
    "K=7",
    "128k",
    "orphaned",
    "94",
]


def seed_pitfalls() -> list[str]:
    text = need(SEED_000).read_text()
    section = text[text.index("\nPitfalls\n") : text.index("\nAttribution\n")]
    return [m.group(2) for m in re.finditer(r"^(\d+)\. (.+)$", section, flags=re.M)]


def test_ids_are_the_seed_pitfalls_in_order_then_own_checks():
    ids = [p.id for p in PITFALLS]
    assert ids[:17] == [f"P{n:02d}" for n in range(1, 18)]
    assert all(i.startswith("S") for i in ids[17:]) and len(set(ids)) == len(ids)


def test_each_entry_is_the_seed_pitfall_of_its_number():
    seed = seed_pitfalls()
    assert len(seed) == 17
    for number, (line, token) in enumerate(zip(seed, SHARED_TOKEN), start=1):
        entry = pitfall(f"P{number:02d}")
        assert token.lower() in line.lower(), (number, token, line)
        assert token.lower() in f"{entry.title} {entry.text} {entry.fix}".lower(), (entry.id, token)


def test_static_pitfalls_have_checks_and_the_rest_name_runbooks():
    assert {p.id for p in PITFALLS if p.check} == STATIC
    for p in PITFALLS:
        assert p.severity in ("error", "warning") and p.title and p.text and p.fix
        assert ("lint" in p.where.split(", ")) == (p.check is not None), p.id
        assert set(p.runbooks) <= RUNBOOKS, p.id
        if p.check is None:
            assert p.runbooks, f"{p.id} is not checkable from files, so a runbook must meet it"


def test_runbook_tables_come_from_the_registry():
    launch = for_runbook("launch")
    assert {"P07", "P08", "P11", "P13", "S04", "S06"} <= {p.id for p in launch}
    assert [p.id for p in for_runbook("warmup")] == ["P12", "P15"]
    table = markdown_table(launch)
    assert table.startswith("| Symptom | Cause | Fix |\n|---|---|---|\n") and table.count("\n") == len(launch) + 2
    p11 = pitfall("P11")
    assert f"| **P11** Cold start takes 8–15 minutes | {p11.text} | {p11.fix} |\n" in table
    assert markdown_table([replace(p11, fix="a | b")]).endswith("| a \\| b |\n")  # a | in a fix stays in its cell
    section = troubleshooting_markdown("launch")
    assert section.startswith("## Troubleshooting\n") and section.endswith(table.rstrip("\n"))
    assert troubleshooting_markdown("no-such-runbook").endswith("No registered pitfall is met in `no-such-runbook`.")


def test_seed_schedule_is_valid():
    assert schedule_problems([[1, 1, 5], [2, 4, 4], [5, 6, 3]], max_num_seqs=6, k=5, block_size=5) == []


@pytest.mark.parametrize(
    "schedule,seqs,k,expected",
    [
        ([[1, 1, 5], [3, 4, 4], [5, 6, 3]], 6, 5, "leaves batch sizes 2–2 uncovered"),
        ([[1, 2, 5], [2, 4, 4], [5, 6, 3]], 6, 5, "overlaps"),
        ([[1, 1, 5], [2, 4, 4], [5, 5, 3]], 6, 5, "end at batch size 5 but MAX_NUM_SEQS is 6"),
        ([[1, 1, 5], [2, 4, 4], [5, 12, 3]], 6, 5, "end at batch size 12 but MAX_NUM_SEQS is 6"),
        ([[1, 1, 5], [2, 4, 4], [5, 6, 3]], 6, 4, "K=5 is above num_speculative_tokens 4"),
        ([[1, 1, 7], [2, 6, 3]], 6, 7, "K=7 is above the drafter block size 5"),
        ([[1, 1, 5], [2, 6, 0]], 6, 5, "K must be at least 1"),
        ([[2, 1, 5]], None, 5, "starts after it ends"),
        ([[1, 6]], 6, 5, "integers"),
        ([], 6, 5, "non-empty"),
        ("[[1,6,5]]", 6, 5, "integers"),
    ],
)
def test_invalid_schedules(schedule, seqs, k, expected):
    problems = schedule_problems(schedule, max_num_seqs=seqs, k=k, block_size=5)
    assert any(expected in p for p in problems), problems


def test_the_lane_value_check_is_an_error_that_names_the_profile_key():
    entry = pitfall("S04")
    assert entry.severity == "error" and "GPU_MEMORY_UTILIZATION_TEXT" in entry.text and "env render" in entry.fix
    assert pitfall("S05").severity == "warning"  # raised to an error by the check when the dead value differs
    assert "GPU_MEMORY_UTILIZATION_TEXT=0.85" in pitfall("P07").fix


def test_every_pitfall_names_where_it_comes_from():
    assert pitfall("P07").origin == "seed 000 (the recipe), pitfall 7"
    assert all(p.origin == f"seed 000 (the recipe), pitfall {n}" for n, p in enumerate(PITFALLS[:17], start=1))
    assert all(p.seed and (p.seed.startswith("seed 000") or p.seed.startswith("no seed:")) for p in PITFALLS[17:])
