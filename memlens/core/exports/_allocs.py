"""Precise mode's storage events, paired up: which free ends which allocation, live bytes.

Rows come from `RunHistory.allocs` (ALLOC_COLUMNS), read in chunks into a few compact
arrays; the columns only the snapshot needs (address, step, phase, frame) are fetched for
the rows it shows. A free is paired with the allocation of the same storage id before it;
a free with no recorded allocation is a storage alive before tracking began, so it counts
from the start, as PyTorch's memory viewer counts it. Zero-byte storages are left out: they
hold no memory and have no address.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from memlens.core.history import ColumnTable, RunHistory

FREE = 1
CHUNK = 65_536  # rows per pass: small enough that temporaries stay in cache


@dataclass(frozen=True, eq=False)
class AllocationEvents:
    table: ColumnTable
    table_row: np.ndarray | None  # table row of each event (None: the same index)
    t_us: np.ndarray  # int64, microseconds from the run's start
    is_free: np.ndarray  # bool
    nbytes: np.ndarray  # int64
    category: np.ndarray  # int8 index into MEMORY_CATEGORIES, as each row recorded it
    partner: np.ndarray  # int64: a free's allocation row, an allocation's free row, or -1
    # (a free of a storage from before tracking; a storage still alive at the end)

    def __len__(self) -> int:
        return len(self.t_us)

    @cached_property
    def unmatched_free(self) -> np.ndarray:
        return self.is_free & (self.partner < 0)

    @cached_property
    def alive_at_end(self) -> np.ndarray:
        return ~self.is_free & (self.partner < 0)

    def owner_category(self, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Category of the allocation each row belongs to (a free takes its allocation's)."""
        cat = self.category[lo:hi].astype(np.int64)
        partner = self.partner[lo:hi]
        paired = self.is_free[lo:hi] & (partner >= 0)
        cat[paired] = self.category[partner[paired]]
        return cat

    def signed_bytes(self, lo: int = 0, hi: int | None = None) -> np.ndarray:
        nb = self.nbytes[lo:hi]
        return np.where(self.is_free[lo:hi], -nb, nb)

    @cached_property
    def baseline_bytes(self) -> int:
        """Bytes alive before the first row that no allocation row accounts for."""
        return int(self.nbytes[self.unmatched_free].sum())

    def peak_bytes(self) -> int:
        """The most bytes alive at once: the top of PyTorch's memory viewer's plot."""
        live = peak = self.baseline_bytes
        for lo in range(0, len(self), CHUNK):
            running = live + np.cumsum(self.signed_bytes(lo, lo + CHUNK))
            peak = max(peak, int(running.max()))
            live = int(running[-1])
        return peak

    def details(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """addr, step, phase and frame (int64) of the given events."""
        rows = np.asarray(rows, dtype=np.int64)
        where = rows if self.table_row is None else self.table_row[rows]
        got = _rows_at(self.table, where)
        idx = self.table.index
        return {c: got[:, idx[c]].astype(np.int64) for c in ("addr", "step", "phase", "frame")}


def allocation_events(history: RunHistory) -> AllocationEvents:
    """Read and pair a history's storage events (a copy; the history may keep growing)."""
    table = history.allocs
    n = len(table)
    t_us = np.empty(n, dtype=np.int64)
    is_free = np.empty(n, dtype=bool)
    storage = np.empty(n, dtype=np.int64)
    nbytes = np.empty(n, dtype=np.int64)
    category = np.empty(n, dtype=np.int8)
    masks: list[np.ndarray] = []
    out = 0
    idx = table.index
    for lo in range(0, n, CHUNK):
        hi = min(n, lo + CHUNK)
        block = table.rows(lo, hi)  # one pass over the rows, not one per column
        size = block[:, idx["bytes"]]
        keep = size > 0  # also drops NaN
        masks.append(keep)
        whole = bool(keep.all())
        m = hi - lo if whole else int(keep.sum())
        sl = slice(out, out + m)
        nbytes[sl] = size if whole else size[keep]
        for name, dest in (("t_us", t_us), ("storage", storage), ("category", category)):
            col = block[:, idx[name]]
            dest[sl] = col if whole else col[keep]
        action = block[:, idx["action"]]
        is_free[sl] = (action if whole else action[keep]) == FREE
        out += m
    table_row = None if out == n else np.nonzero(np.concatenate(masks))[0]
    t_us, is_free, storage, nbytes, category = (
        a[:out] for a in (t_us, is_free, storage, nbytes, category))
    return AllocationEvents(table, table_row, t_us, is_free, nbytes, category,
                            _pair(storage, is_free))


def _rows_at(table: ColumnTable, rows: np.ndarray) -> np.ndarray:
    """Table rows at the given (any order) indexes, reading only the stretches needed."""
    out = np.empty((len(rows), len(table.columns)), dtype=np.float64)
    if not len(rows):
        return out
    order = np.argsort(rows, kind="stable")
    sorted_rows = rows[order]
    # Read runs of nearby rows at once: one copy per run instead of one per row.
    breaks = np.nonzero(np.diff(sorted_rows) > 4096)[0] + 1
    for run in np.split(np.arange(len(rows)), breaks):
        lo, hi = int(sorted_rows[run[0]]), int(sorted_rows[run[-1]]) + 1
        block = table.rows(lo, hi)
        out[order[run]] = block[sorted_rows[run] - lo]
    return out


def _pair(storage: np.ndarray, is_free: np.ndarray) -> np.ndarray:
    """Row of each event's partner: a free's allocation, an allocation's free, or -1."""
    n = len(storage)
    partner = np.full(n, -1, dtype=np.int64)
    if not n:
        return partner
    free_rows = np.flatnonzero(is_free)
    alloc_rows = np.flatnonzero(~is_free)
    alloc_ids, free_ids = storage[alloc_rows], storage[free_rows]
    # The tracker numbers storages 0, 1, 2, ... and allocates and frees each at most once:
    # then a lookup table pairs them in O(n) without sorting.
    lo, hi = int(storage.min()), int(storage.max())
    if lo >= 0 and hi < 4 * n + 1024:
        alloc_row = np.full(hi + 1, -1, dtype=np.int64)
        alloc_row[alloc_ids] = alloc_rows
        if np.array_equal(alloc_row[alloc_ids], alloc_rows):  # no id allocated twice
            cand = alloc_row[free_ids]
            ok = (cand >= 0) & (cand < free_rows)
            partner[cand[ok]] = free_rows[ok]
            if np.array_equal(partner[cand[ok]], free_rows[ok]):  # no id freed twice
                partner[free_rows[ok]] = cand[ok]
                return partner
            partner[:] = -1
    # General case (ids reused): within each storage, in row order, a free pairs with the
    # row just before it when that row is an allocation.
    rows = np.arange(n, dtype=np.int64)
    order = np.lexsort((rows, storage))
    s, f = storage[order], is_free[order]
    hit = np.zeros(n, dtype=bool)
    hit[1:] = f[1:] & ~f[:-1] & (s[1:] == s[:-1])
    free_rows, alloc_rows = order[hit], order[np.nonzero(hit)[0] - 1]
    partner[free_rows] = alloc_rows
    partner[alloc_rows] = free_rows
    return partner


def parse_frames(text: str) -> list[dict]:
    """'file:line:function|...' (newest first) as memory-snapshot frames."""
    frames = []
    for part in text.split("|") if text else ():
        head, _, name = part.rpartition(":")
        filename, _, line = head.rpartition(":")
        if line.isdigit():
            frames.append({"filename": filename, "line": int(line), "name": name})
        else:
            frames.append({"filename": head, "line": 0, "name": name})
    return frames
