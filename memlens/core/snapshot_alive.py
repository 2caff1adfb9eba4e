"""Which allocations of a snapshot's trace are alive after event N (memory_viz's "click any
moment"): each allocation is a span of events, found once by sorting the trace by address,
so any moment is one vectorised comparison over the spans, never a replay of the trace."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ALLOC, FREE = 1, -1  # an event's kind; anything else (segments, free_requested...) is 0
BLOCK = -1  # `source` of an allocation known only from the end state's blocks: -1 - block


@dataclass(frozen=True)
class AliveSet:
    """The allocations alive after `index` events (0: before the first event)."""

    index: int
    count: int
    largest: np.ndarray  # ids into the AllocationSpans, largest first, at most `limit`


@dataclass(frozen=True)
class AllocationSpans:
    """Every allocation a trace shows or implies, alive while start <= N < end, N being
    the number of events applied. `source` is the trace event that tells its stack (its
    alloc, or the free of one made before the window), or BLOCK - i for end block i.
    `before`: made before the recorded window (a trace is a ring buffer)."""

    start: np.ndarray
    end: np.ndarray
    size: np.ndarray
    source: np.ndarray
    before: np.ndarray

    def __len__(self) -> int:
        return len(self.size)

    def alive_at(self, index: int, limit: int) -> AliveSet:
        alive = np.flatnonzero((self.start <= index) & (index < self.end))
        if len(alive) > limit:  # the largest `limit` first, so the sort below stays small
            alive_sizes = self.size[alive]
            alive = alive[np.argpartition(-alive_sizes, limit - 1)[:limit]]
            count = len(alive_sizes)
        else:
            count = len(alive)
        # Largest first; among equal sizes the oldest first.
        order = np.lexsort((alive, self.start[alive], -self.size[alive]))
        return AliveSet(index=index, count=count, largest=alive[order])


def pair_allocations(kinds: np.ndarray, addrs: np.ndarray, sizes: np.ndarray,
                     end_addrs: np.ndarray, end_sizes: np.ndarray) -> AllocationSpans:
    """Spans from a trace's events (kind ALLOC/FREE/0, address, size, in trace order) and
    the blocks alive at its end (`end_addrs`, `end_sizes`).

    Per address, in trace order: an alloc lives until the next event at its address (its
    free, or an alloc over it), or past the end. A free that follows no alloc frees memory
    made before the window: alive from event 0. A block alive at the end whose address has
    no alloc still open is also from before the window. These are the rules the allocated
    curve's arithmetic (end state less the trace's net bytes) implies."""
    n = len(kinds)
    events = np.flatnonzero(kinds != 0)
    order = np.lexsort((events, addrs[events]))  # by address, then trace order
    ev = events[order]
    ev_kind, ev_addr = kinds[ev], addrs[ev]
    same_next = np.zeros(len(ev), dtype=bool)
    same_next[:-1] = ev_addr[1:] == ev_addr[:-1]
    prev_alloc = np.zeros(len(ev), dtype=bool)
    prev_alloc[1:] = same_next[:-1] & (ev_kind[:-1] == ALLOC)
    closing = np.full(len(ev), n + 1, dtype=np.int64)  # never closed: alive past the end
    closing[:-1] = np.where(same_next[:-1], ev[1:] + 1, n + 1)

    is_alloc = ev_kind == ALLOC
    orphan_free = (ev_kind == FREE) & ~prev_alloc
    open_addrs = ev_addr[is_alloc & (closing == n + 1)]
    from_blocks = np.flatnonzero(~np.isin(end_addrs, open_addrs))

    allocs, frees = ev[is_alloc], ev[orphan_free]
    return AllocationSpans(
        start=np.concatenate([allocs + 1, np.zeros(len(frees) + len(from_blocks),
                                                   dtype=np.int64)]),
        end=np.concatenate([closing[is_alloc], frees + 1,
                            np.full(len(from_blocks), n + 1, dtype=np.int64)]),
        size=np.concatenate([sizes[allocs], sizes[frees],
                             end_sizes[from_blocks]]).astype(np.int64),
        source=np.concatenate([allocs, frees, BLOCK - from_blocks]).astype(np.int64),
        before=np.concatenate([np.zeros(len(allocs), dtype=bool),
                               np.ones(len(frees) + len(from_blocks), dtype=bool)]),
    )
