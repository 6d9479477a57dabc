"""The prefix cache: chained block hashes in an LRU, and the recipe's A -> B -> A protocol through the engine."""

from __future__ import annotations

import pytest
from helpers.twin_engine_cases import make_seq
from lanebook.twin import prefix_cache
from lanebook.twin.engine_core import EngineConfig, EngineCore
from lanebook.twin.waves import run_virtual


@pytest.mark.parametrize("evict, third_hits", [(False, True), (True, False)])
def test_t13_a_b_a_prefix_cache(evict, third_hits):
    config = EngineConfig(block_size=16, prefix_evict=evict)
    core = EngineCore(config)
    a_text = "Unique prefix A " + "alpha beta gamma " * 40
    b_text = "Unrelated prefix B " + "delta epsilon zeta " * 40
    hits = []
    for i, text in enumerate((a_text, a_text, b_text, a_text)):
        before = core.stats.prefix_hits
        run_virtual(core, [(0.0, make_seq(i, text, 4, config))])
        hits.append(core.stats.prefix_hits - before)
    assert hits[0] == 0 and hits[1] > 0 and hits[2] == 0
    assert (hits[3] > 0) is third_hits


def test_block_hashes_chain_full_blocks_only():
    pieces = [f"t{i}" for i in range(10)]
    hashes = prefix_cache.block_hashes(pieces, 4)
    assert len(hashes) == 2  # the last two pieces fill no block
    assert prefix_cache.block_hashes(pieces[:8], 4) == hashes
    changed = prefix_cache.block_hashes(["x", *pieces[1:]], 4)
    assert changed[0] != hashes[0] and changed[1] != hashes[1]  # a block's key depends on everything before it


def test_lru_keeps_the_most_recent_blocks():
    cache = prefix_cache.PrefixCache(capacity_blocks=3)
    assert cache.lookup_and_insert([1, 2]) == 0
    assert cache.lookup_and_insert([1, 2, 3]) == 2
    assert cache.lookup_and_insert([4, 5]) == 0  # 1 and 2 are the least recent and go
    assert cache.lookup_and_insert([1]) == 0
    assert cache.lookup_and_insert([4, 5]) == 2
