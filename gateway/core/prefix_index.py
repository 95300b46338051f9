"""Which endpoints are likely to hold which prompt prefix: one replica's approximate index.

Pure: no I/O, no clock (`now` is passed in). The router (live) and the offline gateway model
keep one each; replicas never share it, and learn each other's traffic from responses.

Method
- Holders: `masks[h]`, a bitmask over endpoint slots, for every block hash h of a chain
  (`prefix_chain.py`) routed to them. A lookup walks the request's chain once, ANDing the
  masks of the candidates still matching, and stops at the first block none holds: the depth
  at which each endpoint drops out is its match. No per-endpoint work per block. The slots of
  a mask are kept by its value (`_slots_of`): a slot is never given to another endpoint, and
  the same few sets of holders (all that hold a shared system prompt, the one or two holding
  a conversation) come back request after request.
- Recency: each endpoint keeps its entries in touch order (`Holder.touched`, hash -> the
  endpoint's write position and the time when last routed there). An entry is alive while
  `writes - position <= kappa * capacity` and `now - time <= ttl_s`: the endpoint's cache
  turns over as it writes tokens. A parent block is touched whenever its children are, so the
  oldest entries are at the head; a sweep pops expired heads, so lookups never test age.
- Writes: this replica's own routing (`routed`: uncached prompt + output tokens) plus what the
  engine reports beyond it (`scraped`: `prefix_cache_queries_total - hits_total`, the prefill
  the engine computed for everyone, all replicas included). Capacity: the engine's
  `kv_capacity_tokens`, else `capacity_tokens`.
- Bounds: at most `entries_per_endpoint` entries per endpoint (oldest dropped first) and
  `max_entries` hashes overall (a new endpoint's entries are refused past it).
- Calibration from each response's `cached_tokens` (`calibrate`): a predicted hit that missed
  shows the endpoint's cache is smaller than assumed, so its `kappa` shrinks and the sweep drops
  its oldest entries; an unpredicted hit grows `kappa` and the matched blocks are (re)touched.
  `precision` is an EWMA of min(1, actual / predicted) that discounts the endpoint's
  predictions (an engine with caching off falls to 0).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from gateway.core.prefix_chain import PrefixChain

KAPPA_MIN, KAPPA_MAX = 0.1, 1.0
PRECISION_WEIGHT = 0.1  # of each new response in the precision EWMA
SLOTS_MEMO_SIZE = 4096  # masks whose slots are kept; past it the memo starts again


@dataclass(frozen=True, slots=True)
class IndexParams:
    capacity_tokens: int = 200_000  # an endpoint's cache, when its engine does not report one
    kappa: float = 0.8  # the share of capacity a cached block survives, to start with
    ttl_s: float = 600.0  # hosted prompt caches forget in minutes whatever the traffic
    entries_per_endpoint: int = 4096
    max_entries: int = 1 << 18


@dataclass(slots=True)
class Holder:
    slot: int
    capacity: float
    kappa: float
    writes: float = 0.0
    scraped: float | None = None  # the engine's last computed-prefill counter
    local_since_scrape: float = 0.0
    precision: float = 1.0
    touched: OrderedDict[int, tuple[float, float]] = field(default_factory=OrderedDict)


class PrefixIndex:
    def __init__(self, params: IndexParams | None = None) -> None:
        self.params = params or IndexParams()
        self.masks: dict[int, int] = {}
        self.holders: dict[str, Holder] = {}
        self._ids: list[str] = []  # slot -> endpoint id
        self._precision: list[float] = []  # slot -> its holder's precision, for lookups
        self._slots: dict[int, tuple[int, ...]] = {}  # mask -> its slots, lowest first

    def holder(self, endpoint_id: str) -> Holder:
        found = self.holders.get(endpoint_id)
        if found is None:
            p = self.params
            found = Holder(len(self._ids), float(p.capacity_tokens), p.kappa)
            self.holders[endpoint_id] = found
            self._ids.append(endpoint_id)
            self._precision.append(found.precision)
        return found

    def match(self, chain: PrefixChain) -> dict[str, int]:
        """Matched depth (blocks) per endpoint holding at least the chain's first block."""
        ids, depths, slots_of = self._ids, {}, self._slots.get
        for bits, depth in self._walk(chain.hashes):
            for slot in slots_of(bits) or self._slots_of(bits):
                depths[ids[slot]] = depth
        return depths

    def cached(self, chain: PrefixChain, prompt_tokens: int) -> dict[str, float]:
        """Tokens of a `prompt_tokens` prompt predicted cached, per endpoint holding at least
        the chain's first block: its matched share of the prompt times its precision."""
        ids, precision, found = self._ids, self._precision, {}
        ends = chain.ends
        scale = prompt_tokens / ends[-1] if ends else 0.0
        slots_of = self._slots.get
        for bits, depth in self._walk(chain.hashes):
            tokens = ends[depth - 1] * scale
            for slot in slots_of(bits) or self._slots_of(bits):
                found[ids[slot]] = precision[slot] * tokens
        return found

    def _slots_of(self, mask: int) -> tuple[int, ...]:
        """The slots set in a mask, lowest first, kept for the next lookup of the same mask."""
        if len(self._slots) >= SLOTS_MEMO_SIZE:
            self._slots.clear()
        slots, bits = [], mask
        while bits:
            low = bits & -bits
            slots.append(low.bit_length() - 1)
            bits ^= low
        found = self._slots[mask] = tuple(slots)
        return found

    def _walk(self, hashes: tuple[int, ...]) -> list[tuple[int, int]]:
        """(endpoint bits, depth) where endpoints drop out: one walk down the chain, ANDing
        holder masks, stopping at the first block none of them holds."""
        masks = self.masks
        current = masks.get(hashes[0], 0) if hashes else 0
        if not current:
            return []
        found = []
        for depth in range(1, len(hashes)):
            held = masks.get(hashes[depth], 0) & current
            if held != current:
                found.append((current ^ held, depth))
                current = held
                if not held:
                    return found
        found.append((current, len(hashes)))
        return found

    def routed(
        self, endpoint_id: str, chain: PrefixChain, written_tokens: float, now: float
    ) -> None:
        """The request went to the endpoint: it will hold the whole chain; it writes tokens."""
        holder = self.holder(endpoint_id)
        holder.writes += written_tokens
        holder.local_since_scrape += written_tokens
        self._touch(holder, chain.hashes, now)
        self._sweep(holder, now)

    def scraped(
        self, endpoint_id: str, computed_total: float | None, capacity: int | None, now: float
    ) -> None:
        """The engine's prefill counter (all replicas' traffic) and KV capacity, if known."""
        holder = self.holder(endpoint_id)
        if capacity:
            holder.capacity = float(capacity)
        if computed_total is None:
            return
        if holder.scraped is not None and computed_total >= holder.scraped:
            others = computed_total - holder.scraped - holder.local_since_scrape
            holder.writes += max(0.0, others)
        holder.scraped, holder.local_since_scrape = computed_total, 0.0
        self._sweep(holder, now)

    def calibrate(
        self,
        endpoint_id: str,
        chain: PrefixChain,
        predicted: float,
        actual: int,
        prompt: int,
        now: float,
    ) -> None:
        """Correct the endpoint's entries by what its engine reported cached."""
        holder = self.holder(endpoint_id)
        if predicted > 0:
            ratio = min(1.0, actual / predicted)
            holder.precision += PRECISION_WEIGHT * (ratio - holder.precision)
            self._precision[holder.slot] = holder.precision
        if actual < 0.8 * predicted:  # the cache kept less than assumed
            holder.kappa = max(KAPPA_MIN, holder.kappa * 0.8)
            self._sweep(holder, now)
        elif actual > predicted:
            holder.kappa = min(KAPPA_MAX, holder.kappa * 1.05)
            depth = _depth_of(chain, actual, prompt)
            self._touch(holder, chain.hashes[:depth], now)

    def forget(self, endpoint_id: str) -> None:
        """Drop everything known of an endpoint (its engine restarted or left the config)."""
        holder = self.holders.get(endpoint_id)
        if holder is None:
            return
        while holder.touched:
            self._drop(holder, holder.touched.popitem()[0])

    def entries(self, endpoint_id: str) -> int:
        holder = self.holders.get(endpoint_id)
        return len(holder.touched) if holder else 0

    def memory_bytes(self) -> int:
        """About what the index holds: a dict slot and a small int or tuple per entry."""
        per_entry = 100  # measured: sys.getsizeof over dict/OrderedDict slots and values
        return per_entry * (len(self.masks) + sum(len(h.touched) for h in self.holders.values()))

    def _touch(self, holder: Holder, hashes: tuple[int, ...], now: float) -> None:
        touched, masks, bit = holder.touched, self.masks, 1 << holder.slot
        stamp = (holder.writes, now)
        for block_hash in hashes:
            if block_hash in touched:
                touched.move_to_end(block_hash)
            elif len(masks) >= self.params.max_entries and block_hash not in masks:
                return
            else:
                masks[block_hash] = masks.get(block_hash, 0) | bit
            touched[block_hash] = stamp

    def _sweep(self, holder: Holder, now: float) -> None:
        touched = holder.touched
        oldest_write = holder.writes - holder.kappa * holder.capacity
        oldest_time = now - self.params.ttl_s
        cap = self.params.entries_per_endpoint
        while touched:
            block_hash, (position, at) = next(iter(touched.items()))
            if len(touched) <= cap and position >= oldest_write and at >= oldest_time:
                return
            del touched[block_hash]
            self._drop(holder, block_hash)

    def _drop(self, holder: Holder, block_hash: int) -> None:
        left = self.masks.get(block_hash, 0) & ~(1 << holder.slot)
        if left:
            self.masks[block_hash] = left
        else:
            self.masks.pop(block_hash, None)


def _depth_of(chain: PrefixChain, cached_tokens: int, prompt: int) -> int:
    """Blocks of the chain wholly inside the first `cached_tokens` of a `prompt`-token prompt."""
    if prompt <= 0 or not chain.ends:
        return 0
    limit = cached_tokens / prompt * chain.ends[-1]
    depth = 0
    for end in chain.ends:
        if end > limit:
            break
        depth += 1
    return depth
