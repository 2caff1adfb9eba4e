"""memory_timeline.json in the layout of torch.profiler.profile.export_memory_timeline.

That (deprecated) export writes `[times, sizes]`: `times` in microseconds, and for each time
a row `[0, b_1, ..., b_8]` of live bytes per profiler category, in the order of
torch.profiler._memory_profiler's _CATEGORY_TO_COLORS (PARAMETER, OPTIMIZER_STATE, INPUT,
TEMPORARY, ACTIVATION, GRADIENT, AUTOGRAD_DETAIL, then uncategorised). Its own HTML plot takes
`np.cumsum(sizes, axis=1)` and fills between columns i and i + 1, hence the leading 0.

Ours, mapped: params -> PARAMETER, optimizer -> OPTIMIZER_STATE, activations -> ACTIVATION,
grads -> GRADIENT, other -> uncategorised. INPUT, TEMPORARY and AUTOGRAD_DETAIL stay 0: our
measurement does not tell them apart (they are in `other` or `activations`).

A precise run gives one row per distinct allocation or free time, as the profiler does; a
run without precise mode gives one row per phase-boundary sample. Times are from the run's
start. Sizes are ints, rows with the same time are merged (the last state wins). Past
`max_rows` rows (a long precise run) the rows are thinned: split into equal stretches, each
keeps its highest-total row and its last row, so the peak and the end state are exact and
every row is a state that really occurred.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memlens.core.exports import _text
from memlens.core.exports._allocs import AllocationEvents, allocation_events
from memlens.core.exports.limits import DEFAULT_MAX_ROWS
from memlens.core.history import RunHistory
from memlens.core.records import MEMORY_CATEGORIES
from memlens.core.runfolder.atomic import atomic_open

# torch.profiler._memory_profiler._CATEGORY_TO_COLORS order (None, uncategorised, last).
PROFILER_CATEGORIES: tuple[str, ...] = (
    "parameter", "optimizer_state", "input", "temporary", "activation", "gradient",
    "autograd_detail", "unknown",
)
OURS_TO_PROFILER: dict[str, str] = {
    "params": "parameter", "grads": "gradient", "optimizer": "optimizer_state",
    "activations": "activation", "other": "unknown", "buffers": "unknown",
    "amp_casts": "autograd_detail", "temporaries": "temporary",
    "gathered": "parameter", "buckets": "gradient",  # FSDP's full parameters, DDP's copies
}
# Column of each of our categories in a sizes row (column 0 is the leading 0).
COLUMN = np.array([1 + PROFILER_CATEGORIES.index(OURS_TO_PROFILER[c]) for c in MEMORY_CATEGORIES])
_CHUNK = 65_536




@dataclass(frozen=True)
class TimelineRows:
    """The rows a timeline file holds: times (µs), our categories' bytes, and how many
    distinct-time rows there were before thinning (equal to len(times) when none was)."""

    times: np.ndarray
    values: list[np.ndarray]  # one int64 array per MEMORY_CATEGORIES entry
    rows_before_thinning: int

    @property
    def sizes(self) -> np.ndarray:
        """The profiler's sizes matrix: [0, one column per PROFILER_CATEGORIES entry]."""
        out = np.zeros((len(self.times), 1 + len(PROFILER_CATEGORIES)), dtype=np.int64)
        for c, v in zip(COLUMN, self.values, strict=True):
            out[:, c] += v  # two of ours may share a column (other and buffers: unknown)
        return out


def _distinct_times(times: np.ndarray) -> np.ndarray:
    """Rows whose time differs from the next row's (the state once that time is over)."""
    keep = np.ones(len(times), dtype=bool)
    keep[:-1] = times[1:] != times[:-1]
    return np.nonzero(keep)[0]


def thin(total: np.ndarray, max_rows: int) -> np.ndarray:
    """Positions of at most max_rows rows: cut into equal stretches, keep each stretch's
    (first) highest-total row and its last row. The overall peak and the final state
    survive, and every kept row is one that occurred."""
    k = len(total)
    size = max(1, -(-k // max(1, max_rows // 2)))  # rows per stretch, rounded up
    whole = k // size
    chosen = np.zeros(k, dtype=bool)
    starts = np.arange(whole, dtype=np.int64) * size
    chosen[starts + np.argmax(total[: whole * size].reshape(whole, size), axis=1)] = True
    chosen[starts + size - 1] = True
    if whole * size < k:  # a shorter last stretch
        chosen[whole * size + int(np.argmax(total[whole * size :]))] = True
        chosen[k - 1] = True
    return np.flatnonzero(chosen)


def timeline_rows(history: RunHistory, events: AllocationEvents | None = None,
                  max_rows: int | None = DEFAULT_MAX_ROWS) -> TimelineRows:
    """The timeline's rows: per allocation event time in a precise run, else per sample."""
    if events is None and len(history.allocs):
        events = allocation_events(history)
    if events is None or not len(events):
        n = len(history.samples)
        t = np.round(history.samples.column("time_s", 0, n) * 1e6).astype(np.int64)
        values = [np.nan_to_num(history.samples.column(c, 0, n)).astype(np.int64)
                  for c in MEMORY_CATEGORIES]
        keep = _distinct_times(t)
        return TimelineRows(t[keep], [v[keep] for v in values], len(keep))
    ev = events
    n = len(ev)
    rows = _distinct_times(ev.t_us)
    distinct = len(rows)
    if max_rows and distinct > max_rows:
        total = np.empty(distinct, dtype=np.int64)
        live, done = ev.baseline_bytes, 0
        for lo in range(0, n, _CHUNK):
            hi = min(n, lo + _CHUNK)
            running = live + np.cumsum(ev.signed_bytes(lo, hi))
            upto = int(np.searchsorted(rows, hi))
            total[done:upto] = running[rows[done:upto] - lo]
            live, done = int(running[-1]), upto
        rows = rows[thin(total, max_rows)]
    return TimelineRows(ev.t_us[rows], _category_totals(ev, rows), distinct)


def _category_totals(ev: AllocationEvents, rows: np.ndarray) -> list[np.ndarray]:
    """Each category's live bytes just after each of `rows` (sorted event rows).

    Every event falls in the stretch that ends at the first chosen row at or after it; one
    bincount per chunk sums each stretch's bytes by category, and a cumulative sum over
    stretches gives the totals.
    """
    n, k, ncat = len(ev), len(rows), len(MEMORY_CATEGORIES)
    # A free without its allocation (a storage from before tracking) counts from the start.
    unmatched = ev.unmatched_free
    start = np.bincount(ev.category[unmatched], weights=ev.nbytes[unmatched],
                        minlength=ncat).round().astype(np.int64)
    sums = np.zeros((k + 1, ncat), dtype=np.int64)
    chosen = np.zeros(_CHUNK + 1, dtype=np.int64)
    for lo in range(0, n, _CHUNK):
        hi = min(n, lo + _CHUNK)
        # the stretch of event i: how many chosen rows come before it
        a, b = np.searchsorted(rows, [lo, hi])
        chosen[: hi - lo + 1] = 0
        chosen[rows[a:b] - lo + 1] = 1
        stretch = a + np.cumsum(chosen[: hi - lo])
        first = int(stretch[0])
        key = (stretch - first) * ncat + ev.owner_category(lo, hi)
        width = (int(stretch[-1]) - first + 1) * ncat
        part = np.bincount(key, weights=ev.signed_bytes(lo, hi), minlength=width)
        sums[first : first + width // ncat] += np.round(part).astype(np.int64).reshape(-1, ncat)
    totals = start + np.cumsum(sums[:k], axis=0)
    return [totals[:, c].copy() for c in range(ncat)]



def write_memory_timeline(history: RunHistory, path: str | Path,
                          events: AllocationEvents | None = None,
                          max_rows: int | None = DEFAULT_MAX_ROWS) -> TimelineRows:
    """Write memory_timeline.json atomically; returns the rows it holds."""
    rows = timeline_rows(history, events, max_rows)
    times_row = _text.RowTemplate([",", _text.Int(_text.max_abs(rows.times), signed=True)])
    sizes = rows.sizes
    used = sorted(set(COLUMN.tolist()))  # the profiler's columns ours fill, in file order
    top = max((_text.max_abs(sizes[:, c]) for c in used), default=0)
    parts: list = [",\n[0"]
    for column in range(1, 1 + len(PROFILER_CATEGORIES)):
        parts += [",", _text.Int(top, signed=True)] if column in used else [",0"]
    parts.append("]")
    with atomic_open(Path(path), "wb") as fh:
        fh.write(b"[[")
        _write_rows(fh, times_row.render(rows.times))
        fh.write(b"],[")
        _write_rows(fh, _text.RowTemplate(parts).render(*(sizes[:, c] for c in used)))
        fh.write(b"\n]]\n")
    return rows


def _write_rows(fh, chunks: Iterator[bytes]) -> None:
    """Write rows that each start with a separator, dropping the very first one."""
    first = True
    for chunk in chunks:
        if first and chunk:
            chunk, first = chunk[1:], False
        fh.write(chunk)
