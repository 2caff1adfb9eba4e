"""What the plots draw for one run: its history's rows as plot channels, kept as bins.

No Qt here. The GUI timer calls `pull()`; only rows added since the last pull are read from
the history (a bounded chunk at a time, briefly under its lock), turned into what the plots
show (stacked layers, lines) and reduced into per-bin peaks at every power-of-two bin size
(app.series.bin_pyramid). A draw takes those bins plus less than a level-0 bin of rows, so it costs
the same at any run length; a zoomed-in view reads its few thousand rows straight from the
history. The window keeps no full-resolution second copy of a run: the history has it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from memlens.app.series.bin_pyramid import (
    BASE,
    BinPyramid,
    Growing,
    channels_of,
    level_of,
    moment_of,
)
from memlens.app.series.decimate import bin_size
from memlens.core.history import PHASES_PER_STEP, ColumnTable, RunHistory
from memlens.core.records import MEMORY_CATEGORIES, PHASES

PHASE_MS_COLUMNS: tuple[str, ...] = tuple(f"{p}_ms" for p in PHASES)
PULL_ROWS = 65_536  # rows read from the history at a time: a loaded run is read in pieces
# The process's own memory, read once a step (memory.csv's rss_bytes, heap_bytes), in order.
PROCESS_LINES: tuple[str, ...] = ("rss", "heap")
# The step table's line channels, in order (see RunSeries._step_lines).
STEP_LINES: tuple[str, ...] = ("loss", "grad_norm", "peak_bytes", "whole_step")

Channels = Callable[[np.ndarray], np.ndarray]  # history rows (m, columns) -> (channels, m)
# How a group's bins are kept: each channel's maximum (areas whose bins need only their
# top), minimum and maximum (lines), or the whole stack of the bin's highest and lowest
# moment by the last channel (stacked layers: the layers of one moment each).
MAX, MIN_MAX, MOMENTS = "max", "min_max", "moments"


class PlottedTable:
    """One history table seen through groups of plot channels.

    A group is (number of channels, how its bins are kept: MAX, MIN_MAX or MOMENTS,
    function of rows). A stacked chart's per-bin maxima would stack the tops of different
    moments (a transient category's peak on another category's), so its layers are kept
    as MOMENTS.
    """

    def __init__(self, table: ColumnTable, x_column: str,
                 groups: dict[str, tuple[int, str, Channels]]) -> None:
        self.table = table
        self.x_column = x_column
        self._x = table.index[x_column]
        self.groups: dict[str, tuple[int, str, Channels]] = {}
        self.pyramids: dict[str, BinPyramid] = {}
        self.starts = Growing(1, np.float64)  # x of the first row of every level-0 bin
        self.n = 0
        # a stacked group's bins keep only these channels (set_kept), and where each of the
        # group's channels is read from among them (-1: zero)
        self._kept: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.last_x = math.nan
        for name, group in groups.items():
            self.add_group(name, group)

    def add_group(self, name: str, group: tuple[int, str, Channels]) -> None:
        """Start keeping a group; rows already pulled are read back from the history."""
        channels, kind, values = group
        self.groups[name] = group
        pyramid = self.pyramids[name] = BinPyramid(channels, kind == MIN_MAX,
                                                   moments=kind == MOMENTS)
        for start in range(0, self.n, PULL_ROWS):
            pyramid.append(values(self.table.rows(start, min(start + PULL_ROWS, self.n))))

    def set_kept(self, name: str, kept: list[int]) -> None:
        """A stacked group (cumulative layers: a channel whose own rows are all zero equals
        the one below it) keeps in its bins only the channels `kept`, in order, the last of
        them its top: the others are read from the nearest kept one below (or are zero).
        `kept` only grows, before the rows that made it grow are binned: a channel kept from
        now on had no bytes of its own in the rows binned so far, so its bins are made from
        those of the channel below it, never by reading the history again."""
        channels = self.groups[name][0]
        old = self._kept.get(name)
        old_source = np.arange(channels) if old is None else old[1]
        source = np.full(channels, -1)
        for j, c in enumerate(kept):
            source[c:] = j
        self._kept[name] = (np.asarray(kept), source)
        self.pyramids[name].select(old_source[kept])

    def _binned(self, name: str, values: np.ndarray) -> np.ndarray:
        kept = self._kept.get(name)
        return values if kept is None else values[kept[0]]

    def _unbinned(self, name: str, binned: np.ndarray | None) -> np.ndarray | None:
        """A group's bins (kept channels) as all of its channels."""
        kept = self._kept.get(name)
        return binned if kept is None or binned is None else channels_of(binned, kept[1])

    # --- pulling ----------------------------------------------------------------------------
    def pull(self, on_rows: Callable[[np.ndarray], None] | None = None) -> int:
        """Take the rows added since the last pull; `on_rows` sees each chunk first."""
        taken = 0
        while True:
            rows = self.table.rows(self.n, self.n + PULL_ROWS, live=True)
            if not len(rows):
                return taken
            if on_rows is not None:
                on_rows(rows)
            x = rows[:, self._x]
            self.starts.append(x[(-self.n) % BASE :: BASE][None, :])
            for name, (_c, _lines, values) in self.groups.items():
                self.pyramids[name].append(self._binned(name, values(rows)))
            self.n += len(rows)
            self.last_x = float(x[-1])
            taken += len(rows)
            if len(rows) < PULL_ROWS:  # all there was: the next frame takes what comes
                return taken

    # --- reading ----------------------------------------------------------------------------
    def index(self, x: float, side: str = "left") -> int:
        """np.searchsorted over the pulled rows' x, through the bin starts and one bin."""
        starts = self.starts.view[0]
        b = int(np.searchsorted(starts, x, side))
        if b == 0:
            return 0
        lo = (b - 1) * BASE
        hi = min(b * BASE, self.n) if b < len(starts) else self.n
        return lo + int(np.searchsorted(self.table.column(self.x_column, lo, hi), x, side))

    def visible(self, x0: float, x1: float) -> slice:
        """Rows whose x lies in [x0, x1], plus one neighbour each side (app.series.decimate)."""
        i0 = max(self.index(x0, "left") - 1, 0)
        i1 = min(self.index(x1, "right") + 1, self.n)
        return slice(i0, max(i1, i0))

    def rows(self, group: str, i0: int, i1: int) -> tuple[np.ndarray, np.ndarray]:
        """Full-resolution (x, channels) of rows [i0, i1), read from the history."""
        rows = self.table.rows(i0, min(i1, self.n))
        return rows[:, self._x], self.groups[group][2](rows).astype(np.float32)

    def decimate(self, group: str, sl: slice, max_points: int
                 ) -> tuple[np.ndarray, np.ndarray]:
        """Rows `sl` in at most `max_points // 2` bins: one point a bin (its maximum) for
        MAX, two for MIN_MAX lines (minimum then maximum, pyqtgraph's "peak" mode), and
        for MOMENTS one point a bin of 2 * channels values: the highest moment's channels,
        then the lowest's. Short slices come back whole (MOMENTS: each row as both)."""
        channels, kind, _values = self.groups[group]
        lines = kind == MIN_MAX
        i0, i1 = sl.start, min(sl.stop, self.n)
        bins = max(max_points // 2, 1)
        if i1 - i0 <= (max_points if lines else bins):
            x, v = self.rows(group, i0, i1)
            return (x, np.concatenate([v, v])) if kind == MOMENTS else (x, v)
        k = bin_size(i1 - i0, bins)
        b0, b1 = i0 // k, i1 // k
        if k < BASE:  # few rows: reduce them here
            x, v = self.rows(group, b0 * k, i1)
            full = (b1 - b0) * k
            block = v[:, :full].reshape(channels, b1 - b0, k)
            hi, lo = _reduce(block, kind)
            xs = x[:full:k]
            tail = _peaks(v[:, full:], kind)
            tail_x = x[full] if full < len(x) else None
        else:
            pyramid = self.pyramids[group]
            level = level_of(k)
            hi, lo = pyramid.peaks(level, b0, b1) if b1 > b0 else _empty(pyramid.channels,
                                                                          kind)
            hi, lo = self._unbinned(group, hi), self._unbinned(group, lo)
            per = k // BASE
            xs = self.starts.view[0][b0 * per : b1 * per : per]
            tail, tail_x = self._tail(group, b1 * k, i1)
        if tail is not None:  # the last, unfinished bin
            hi = np.concatenate([hi, tail[0][:, None]], axis=1)
            if lo is not None:
                lo = np.concatenate([lo, tail[1][:, None]], axis=1)
            xs = np.append(xs, tail_x)
        if lo is None:
            return xs, hi
        if kind == MOMENTS:
            return xs, np.concatenate([hi, lo])
        out = np.empty((channels, 2 * hi.shape[1]), dtype=hi.dtype)
        out[:, 0::2] = lo
        out[:, 1::2] = hi
        return np.repeat(xs, 2), out

    def _tail(self, group: str, t0: int, t1: int):
        """Peaks of rows [t0, t1) (t0 a multiple of BASE): from whole level-0 bins, then
        the fewer than BASE rows after them."""
        if t0 >= t1:
            return None, None
        _c, kind, _v = self.groups[group]
        c0, c1 = t0 // BASE, t1 // BASE
        parts = []
        if c1 > c0:
            hi, lo = self.pyramids[group].peaks(0, c0, c1)
            parts.append(_peaks_of(self._unbinned(group, hi), self._unbinned(group, lo), kind))
        if c1 * BASE < t1:
            parts.append(_peaks(self.rows(group, c1 * BASE, t1)[1], kind))
        his = np.stack([p[0] for p in parts], axis=-1)
        los = np.stack([p[1] for p in parts], axis=-1) if kind != MAX else None
        return _reduce(his, kind, los), self.starts.view[0][c0]

    @property
    def nbytes(self) -> int:
        return self.starts.nbytes + sum(p.nbytes for p in self.pyramids.values())


def _reduce(hi: np.ndarray, kind: str, lo: np.ndarray | None = None):
    """(high, low or None) of `hi` (and `lo`, where apart) over their last axis: each
    channel's max and min, or (MOMENTS) the highest and the lowest moment's columns."""
    lo = hi if lo is None else lo
    if kind == MOMENTS:
        return moment_of(hi, larger=True), moment_of(lo, larger=False)
    return np.fmax.reduce(hi, axis=-1), (np.fmin.reduce(lo, axis=-1) if kind == MIN_MAX
                                         else None)


def _peaks(v: np.ndarray, kind: str):
    """_reduce over the rows of `v` (channels, m), or None without rows."""
    return _reduce(v, kind) if v.shape[1] else None


def _peaks_of(hi: np.ndarray, lo: np.ndarray | None, kind: str):
    return _reduce(hi, kind, lo)


def _empty(channels: int, kind: str):
    e = np.empty((channels, 0), dtype=np.float32)
    return e, (None if kind == MAX else e)


class RunSeries:
    """What the plots draw for one run (live or loaded), kept in step with its history.

    `samples` groups: "layers" (cumulative category bytes, the last the total), "total"
    (that total as a line), once a run reports CUDA allocator figures, "allocator"
    (allocated, reserved), and once it reports the process's own memory, "process"
    (PROCESS_LINES: NaN at the samples that did not read it). `steps` groups: "phases"
    (cumulative phase ms, the last the whole step) and "lines" (STEP_LINES). The full-array
    properties below read the whole history: for tests and one-off questions, not for a
    frame.
    """

    def __init__(self, history: RunHistory) -> None:
        self.history = history
        s_idx, t_idx = history.samples.index, history.steps.index
        self._cat_cols = [s_idx[c] for c in MEMORY_CATEGORIES]
        self._alloc_cols = [s_idx["allocated"], s_idx["reserved"]]
        self._process_cols = [s_idx[c] for c in PROCESS_LINES]
        self._carried_col = s_idx["carried"]
        self._phase_cols = [t_idx[c] for c in PHASE_MS_COLUMNS]
        self._line_cols = [t_idx[c] for c in STEP_LINES[:3]]
        self._x_col = t_idx["step"]
        n_cat, n_phase = len(MEMORY_CATEGORIES), len(PHASES)
        self._memo: tuple[np.ndarray | None, np.ndarray | None] = (None, None)
        self.samples = PlottedTable(history.samples, "x", {
            "layers": (n_cat, MOMENTS, self._layers),
            "total": (1, MIN_MAX, lambda rows: self._layers(rows)[-1:]),
        })
        self.steps = PlottedTable(history.steps, "step", {
            "phases": (n_phase, MAX, self._phases),
            "lines": (len(STEP_LINES), MIN_MAX, self._step_lines),
        })
        self._eval_col = t_idx["eval_loss"]
        # The steps with an evaluation loss (a validation run's): (step, eval loss), few
        self.evals = Growing(2, np.float64)
        self.has_reserved = False
        self.has_process = False  # some sample read the process's RSS or heap
        self.has_carried = False  # some sample carries its saved-for-backward figures
        self.peak = 0.0  # highest per-step peak so far
        self.last_total = math.nan  # the newest sample's total bytes
        # The categories some sample had bytes in: the layers' bins keep only those (a run
        # has 5 or 6 of the 10; 10 layers were two thirds of a long run's plot data)
        self._categories: list[int] = []

    def _layers(self, rows: np.ndarray) -> np.ndarray:
        # Two groups of a table read the same stacked sums of one chunk: made once.
        if rows is not self._memo[0]:
            self._memo = (rows, np.cumsum(rows[:, self._cat_cols], axis=1).T)
        return self._memo[1]

    def _phases(self, rows: np.ndarray) -> np.ndarray:
        if rows is not self._memo[0]:
            ms = np.nan_to_num(rows[:, self._phase_cols], copy=False)
            self._memo = (rows, np.cumsum(ms, axis=1).T)
        return self._memo[1]

    def _step_lines(self, rows: np.ndarray) -> np.ndarray:
        out = np.empty((len(STEP_LINES), len(rows)))
        out[:3] = rows[:, self._line_cols].T
        out[3] = self._phases(rows)[-1]
        # An inf loss (a failed step) would flatten everything else on its axis.
        out[~np.isfinite(out)] = np.nan
        return out

    def _allocator(self, rows: np.ndarray) -> np.ndarray:
        return rows[:, self._alloc_cols].T

    def _process(self, rows: np.ndarray) -> np.ndarray:
        return rows[:, self._process_cols].T

    def _carried(self, rows: np.ndarray) -> np.ndarray:
        return (rows[:, self._carried_col] == 1)[None, :].astype(np.float32)

    # --- pulling ------------------------------------------------------------------------
    def pull(self) -> tuple[int, int]:
        """Take rows added since the last pull. Returns (new samples, new steps)."""
        new_samples = self.samples.pull(self._on_sample_rows)
        new_steps = self.steps.pull(self._on_step_rows)
        self._memo = (None, None)
        return new_samples, new_steps

    def _on_sample_rows(self, rows: np.ndarray) -> None:
        self.last_total = float(np.sum(rows[-1, self._cat_cols]))
        seen = np.flatnonzero((rows[:, self._cat_cols] != 0).any(axis=0))  # NaN: seen
        if len(seen) and not set(seen.tolist()) <= set(self._categories):
            self._categories = sorted(set(self._categories) | set(seen.tolist()))
            self.samples.set_kept("layers", self._categories)
        if not self.has_reserved and np.isfinite(rows[:, self._alloc_cols[1]]).any():
            self.has_reserved = True  # a CUDA run: keep allocated and reserved from now on
            self.samples.add_group("allocator", (2, MIN_MAX, self._allocator))
        if not self.has_process and np.isfinite(rows[:, self._process_cols]).any():
            self.has_process = True
            self.samples.add_group("process", (len(PROCESS_LINES), MIN_MAX, self._process))
        if not self.has_carried and (rows[:, self._carried_col] == 1).any():
            self.has_carried = True  # a watch's steps without detail (core.watch.detail)
            self.samples.add_group("carried", (1, MAX, self._carried))

    def _on_step_rows(self, rows: np.ndarray) -> None:
        evals = rows[:, self._eval_col]
        found = np.isfinite(evals)
        if found.any():
            self.evals.append(np.vstack((rows[found, self._x_col], evals[found])))
        peaks = rows[:, self._line_cols[2]]
        peaks = peaks[np.isfinite(peaks)]
        if len(peaks):
            self.peak = max(self.peak, float(peaks.max()))

    # --- reading ------------------------------------------------------------------------
    @property
    def sample_count(self) -> int:
        return self.samples.n

    @property
    def step_count(self) -> int:
        return self.steps.n

    @property
    def last_step(self) -> int:
        return int(self.steps.last_x) if self.step_count else -1

    @property
    def x_end(self) -> float:
        """The right end of the data on the step axis."""
        ends = [-1.0]
        if self.step_count:
            ends.append(self.steps.last_x + 1.0)
        if self.sample_count:
            ends.append(self.samples.last_x)
        return max(ends)

    def eval_points(self, x0: float, x1: float) -> tuple[np.ndarray, np.ndarray]:
        """(steps, evaluation losses) of the steps between x0 and x1 that have one."""
        steps, values = self.evals.view
        i0, i1 = np.searchsorted(steps, x0, "left"), np.searchsorted(steps, x1, "right")
        return steps[i0:i1], values[i0:i1]

    def step_row(self, step: int) -> int | None:
        """Index of `step` in the steps table, or None when that step has no record."""
        i = self.steps.index(step)
        if i >= self.step_count:
            return None
        return i if self.history.steps.column("step", i, i + 1)[0] == step else None

    def step_value(self, i: int, column: str) -> float:
        return float(self.history.steps.column(column, i, i + 1)[0])

    def step_record_at(self, x: float | None) -> tuple[int, dict[str, float]] | None:
        """The step under x on the axis (the newest when x is None) and its recorded values
        by column name, or None when that step has no record."""
        if not self.step_count:
            return None
        step = self.last_step if x is None else int(np.floor(x))
        i = self.step_row(step)
        if i is None:
            return None
        steps = self.history.steps
        row = steps.rows(i, i + 1)[0]
        return step, {name: float(row[j]) for name, j in steps.index.items()}

    def sample_row_at(self, x: float) -> int | None:
        """The last sample at or before x on the step axis."""
        i = self.samples.index(x, "right") - 1
        return i if i >= 0 else None

    def sample_row_in_step(self, x: float) -> int | None:
        """The sample the hover read-out shows at x: the last one at or before x within
        the step under x (floor(x)), else that step's first, so every plot reads the same
        step; None when that step has no sample yet."""
        step = int(np.floor(x))
        i = self.sample_row_at(x)
        if i is not None and self._sample_step(i) == step:
            return i
        first = self.samples.index(float(step), "left")
        if first < self.sample_count and self._sample_step(first) == step:
            return first
        return None

    def peak_sample_of_step(self, step: int) -> int | None:
        """The sample row of `step` whose total is highest (the first such), or None when
        the step has no sample."""
        i0 = self.samples.index(float(step), "left")
        i1 = self.samples.index(float(step + 1), "left")
        if i1 <= i0:
            return None
        _x, totals = self.samples.rows("total", i0, i1)
        return i0 + int(np.argmax(totals[0]))

    def _sample_step(self, i: int) -> int:
        return int(self.history.samples.column("step", i, i + 1)[0])

    def process_at(self, i: int) -> dict[str, float]:
        """The process's RSS and heap as last read at or before sample row i, by
        PROCESS_LINES name (those never read there left out)."""
        if not self.has_process:
            return {}
        # read at most every HEAP_EVERY_S (a short step's many rows apart): look back in
        # windows twice as long each time, never reading a row twice
        out: dict[str, float] = {}
        end, span = i + 1, 2 * PHASES_PER_STEP
        while end > 0 and len(out) < len(PROCESS_LINES):
            start = max(0, end - span)
            _x, rows = self.samples.rows("process", start, end)
            for name, values in zip(PROCESS_LINES, rows, strict=True):
                read = values[np.isfinite(values)]
                if len(read) and name not in out:
                    out[name] = float(read[-1])
            end, span = start, span * 2
        return out

    def carried_spans(self, x0: float, x1: float, max_points: int
                      ) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) on the step axis of what the carried samples between x0 and x1
        stand for, adjacent ones merged: the whole step of each carried sample, or where
        the view holds more samples than `max_points`, each bin that holds one."""
        if not self.has_carried:
            return np.empty(0), np.empty(0)
        sl = self.samples.visible(x0, x1)
        xs, flags = self.samples.decimate("carried", sl, max_points)
        marked = flags[0] > 0
        if len(xs) == sl.stop - sl.start:  # every sample: its step
            starts = np.floor(xs[marked])
            ends = starts + 1.0
        else:  # bins, each from its first sample to the next bin's
            after = np.append(xs[1:], max(self.x_end, float(xs[-1]) + 1.0))
            starts, ends = xs[marked], after[marked]
        if not len(starts):
            return starts, ends
        breaks = np.flatnonzero(starts[1:] > ends[:-1]) + 1  # a gap: a new span
        return starts[np.r_[0, breaks]], ends[np.r_[breaks - 1, len(ends) - 1]]

    def total_at(self, i: int) -> float:
        """Total bytes of sample row i."""
        return float(self.samples.rows("total", i, i + 1)[1][0, 0])

    def loss_at(self, i: int) -> float:
        return float(self.steps.rows("lines", i, i + 1)[1][0, 0])

    def whole_step_at(self, i: int) -> float:
        """Milliseconds of step row i, all phases."""
        return float(self.steps.rows("phases", i, i + 1)[1][-1, 0])

    # --- whole arrays (a full read of the history) -----------------------------------------
    @property
    def sample_x(self) -> np.ndarray:
        return self.history.samples.column("x", 0, self.sample_count)

    @property
    def memory_layers(self) -> np.ndarray:
        """Cumulative bytes per category, shape (categories, samples); the last is the total."""
        return self.samples.rows("layers", 0, self.sample_count)[1]

    @property
    def total(self) -> np.ndarray:
        return self.memory_layers[-1]




    @property
    def loss_rows(self) -> np.ndarray:
        """Loss and grad norm, shape (2, steps); NaN where not finite."""
        return self.steps.rows("lines", 0, self.step_count)[1][:2]


    @property
    def nbytes(self) -> int:
        return self.samples.nbytes + self.steps.nbytes + self.evals.nbytes
