"""vLLM's prefix cache in miniature: prompt blocks keyed by chained hashes, kept in an LRU.

A request whose prompt starts with blocks already cached skips prefilling them. The recipe's
A -> B -> A protocol (seed 000: a prompt, an unrelated one, the first again) found no eviction: the
third request hits A's blocks again (fact T13 in lanebook.twin.facts). Fault prefix-evict makes an
unrelated prompt drop everything, the failure that protocol was looking for.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence as Seq

from lanebook.twin.tokens import stable_hash


def block_hashes(prompt_pieces: Seq[str], block_size: int) -> tuple[int, ...]:
    """Chained hashes of the prompt's full blocks, as vLLM's prefix cache keys them."""
    hashes, parent = [], "root"
    for start in range(0, len(prompt_pieces) - block_size + 1, block_size):
        parent = str(stable_hash(parent, *prompt_pieces[start : start + block_size]))
        hashes.append(int(parent))
    return tuple(hashes)


class PrefixCache:
    """Block-hashed prompt prefixes in an LRU; fault prefix-evict drops everything on an unrelated prompt."""

    def __init__(self, capacity_blocks: int, evict_unrelated: bool = False):
        self.capacity_blocks = max(1, capacity_blocks)
        self.evict_unrelated = evict_unrelated
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def lookup_and_insert(self, hashes: Seq[int]) -> int:
        """Leading blocks already cached; then the prompt's blocks become the most recent."""
        hit = 0
        for h in hashes:
            if h not in self._blocks:
                break
            hit += 1
        if hashes and hit == 0 and self.evict_unrelated:
            self._blocks.clear()
        for h in hashes:
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)
        return hit
