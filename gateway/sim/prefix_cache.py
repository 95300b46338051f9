"""vLLM-style automatic prefix caching over the engine model's KV blocks: the hashed blocks.

Method (vLLM V1 `KVCacheManager`, simplified to counts; `docs/design/prefix_caching.md`):
- A request carries the hashes of its full blocks, chained (block i's hash covers block i-1's
  hash and its own tokens), so equal hashes mean equal prefixes. `prompt_blocks.py` computes
  them from text; the model never hashes.
- A block whose KV is computed is *stored* under its hash. A stored block is referenced by
  every running sequence that uses it (`refs`), so two requests with a common prefix hold its
  blocks once. A sequence whose block turns out to be stored already (another sequence computed
  the same tokens meanwhile) drops its own copy and references the stored one.
- A stored block nobody references stays cached in `lru`, oldest first, until an allocation
  needs an empty block and no never-used or unhashed one is left; only then is the LRU head
  evicted (forgotten). A sequence's blocks are released tail first, so its last block is the
  first of them to go, as vLLM's `FreeKVCacheBlockQueue` does. (vLLM takes the free queue's head
  even when an unhashed free block sits behind it; this model uses unhashed blocks first.)
- Admission looks up the longest run of stored blocks from the first one (`match`) and
  `acquire`s it: those tokens are not computed again.

The engine model owns the pool's free count (empty blocks plus the cached ones in `lru`); the
methods here return how many blocks they took from it or gave back.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixCache:
    def __init__(self) -> None:
        self.refs: dict[int, int] = {}  # stored block hash -> running sequences using it
        self.lru: OrderedDict[int, None] = OrderedDict()  # stored, unreferenced; oldest first

    def match(self, hashes: Sequence[int], limit: int) -> tuple[int, int]:
        """(stored blocks, of which referenced) in the longest stored run of hashes[:limit]."""
        hits = referenced = 0
        refs = self.refs
        for block_hash in hashes[:limit]:
            count = refs.get(block_hash)
            if count is None:
                break
            hits += 1
            referenced += count > 0
        return hits, referenced

    def acquire(self, hashes: Sequence[int], limit: int) -> tuple[int, int]:
        """Reference the longest stored run of hashes[:limit]: (blocks, taken from free ones)."""
        hits = taken = 0
        refs, lru = self.refs, self.lru
        for block_hash in hashes[:limit]:
            count = refs.get(block_hash)
            if count is None:
                break
            if count == 0:
                del lru[block_hash]
                taken += 1
            refs[block_hash] = count + 1
            hits += 1
        return hits, taken

    def store(self, block_hash: int) -> int:
        """A sequence's own block is computed: keep it under its hash; returns blocks freed."""
        count = self.refs.get(block_hash)
        if count is None:
            self.refs[block_hash] = 1
            return 0
        # A stored copy exists: reference it and give the sequence's own block back. A cached
        # copy leaves the free pool as the own block joins it, which frees nothing in total.
        self.refs[block_hash] = count + 1
        if count == 0:
            del self.lru[block_hash]
            return 0
        return 1

    def release(self, hashes: Sequence[int]) -> int:
        """Drop one reference to each of hashes, tail first; returns blocks that became free."""
        freed = 0
        refs, lru = self.refs, self.lru
        for block_hash in reversed(hashes):
            count = refs[block_hash] - 1
            refs[block_hash] = count
            if count == 0:
                lru[block_hash] = None
                freed += 1
        return freed

    def evict(self, blocks: int) -> None:
        """Forget the `blocks` least recently used cached blocks (their KV is overwritten)."""
        for _ in range(blocks):
            block_hash, _ = self.lru.popitem(last=False)
            del self.refs[block_hash]
