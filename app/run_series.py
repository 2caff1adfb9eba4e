"""The plot-ready columns of one run, pulled from its RunHistory a few new rows at a time.

No Qt here. The GUI timer calls `pull()`; only rows added since the last pull are copied out
of the history (under its lock, briefly) and turned into stacked layers, so the cost of a
pull follows the step rate, not the length of the run.
"""

from __future__ import annotations

import numpy as np

from core.history import RunHistory
from core.records import MEMORY_CATEGORIES, PHASES

PHASE_MS_COLUMNS: tuple[str, ...] = tuple(f"{p}_ms" for p in PHASES)


class GrowingColumns:
    """Column-major arrays (rows = fields) that grow by doubling; views stay cheap to slice."""

    def __init__(self, fields: int, dtype: type = np.float64, capacity: int = 1024) -> None:
        self._data = np.empty((fields, capacity), dtype=dtype)
        self.n = 0

    def append(self, block: np.ndarray) -> None:
        """`block` has shape (fields, k)."""
        k = block.shape[1]
        if self.n + k > self._data.shape[1]:
            cap = self._data.shape[1]
            while cap < self.n + k:
                cap *= 2
            grown = np.empty((self._data.shape[0], cap), dtype=self._data.dtype)
            grown[:, : self.n] = self._data[:, : self.n]
            self._data = grown
        self._data[:, self.n : self.n + k] = block
        self.n += k

    @property
    def view(self) -> np.ndarray:
        return self._data[:, : self.n]

    @property
    def nbytes(self) -> int:
        return self._data.nbytes


class RunSeries:
    """What the plots draw for one run (live or loaded), kept in step with its history."""

    def __init__(self, history: RunHistory) -> None:
        self.history = history
        s_idx, t_idx = history.samples.index, history.steps.index
        self._cat_cols = [s_idx[c] for c in MEMORY_CATEGORIES]
        self._alloc_cols = [s_idx["allocated"], s_idx["reserved"]]
        self._x_col = s_idx["x"]
        self._phase_cols = [t_idx[c] for c in PHASE_MS_COLUMNS]
        self._step_cols = [t_idx[c] for c in ("loss", "grad_norm", "peak_bytes", "step_ms")]
        self._step_col = t_idx["step"]
        # Samples: x on the step axis, then cumulative category bytes (the stacked layers,
        # last = total), then CUDA allocated and reserved.
        self._sample_x = GrowingColumns(1, np.float64, 4096)
        self._sample_y = GrowingColumns(len(MEMORY_CATEGORIES) + 2, np.float32, 4096)
        # Steps: step number, then cumulative phase ms, loss, grad norm, peak, step ms.
        self._step_x = GrowingColumns(1, np.float64)
        self._step_y = GrowingColumns(len(PHASES) + 4, np.float32)
        self.has_reserved = False
        self.peak = 0.0  # highest per-step peak so far

    # --- pulling ------------------------------------------------------------------------
    def pull(self) -> tuple[int, int]:
        """Copy rows added since the last pull. Returns (new samples, new steps)."""
        new_samples = self.history.samples.rows(self._sample_x.n)
        if len(new_samples):
            self._sample_x.append(new_samples[:, self._x_col][None, :])
            layers = np.cumsum(new_samples[:, self._cat_cols], axis=1)
            alloc = new_samples[:, self._alloc_cols]
            self._sample_y.append(np.concatenate([layers, alloc], axis=1).T)
            if not self.has_reserved and np.isfinite(alloc[:, 1]).any():
                self.has_reserved = True
        new_steps = self.history.steps.rows(self._step_x.n)
        if len(new_steps):
            self._step_x.append(new_steps[:, self._step_col][None, :])
            phases = np.cumsum(np.nan_to_num(new_steps[:, self._phase_cols]), axis=1)
            rest = new_steps[:, self._step_cols]
            # An inf loss (a failed step) would flatten everything else on its axis.
            rest[~np.isfinite(rest)] = np.nan
            peaks = rest[:, 2]
            if np.isfinite(peaks).any():
                self.peak = max(self.peak, float(np.nanmax(peaks)))
            self._step_y.append(np.concatenate([phases, rest], axis=1).T)
        return len(new_samples), len(new_steps)

    # --- reading ------------------------------------------------------------------------
    @property
    def sample_count(self) -> int:
        return self._sample_x.n

    @property
    def step_count(self) -> int:
        return self._step_x.n

    @property
    def sample_x(self) -> np.ndarray:
        return self._sample_x.view[0]

    @property
    def memory_layers(self) -> np.ndarray:
        """Cumulative bytes per category, shape (categories, samples); the last is the total."""
        return self._sample_y.view[: len(MEMORY_CATEGORIES)]

    @property
    def total(self) -> np.ndarray:
        return self._sample_y.view[len(MEMORY_CATEGORIES) - 1]

    @property
    def allocated(self) -> np.ndarray:
        return self._sample_y.view[len(MEMORY_CATEGORIES)]

    @property
    def reserved(self) -> np.ndarray:
        return self._sample_y.view[len(MEMORY_CATEGORIES) + 1]

    @property
    def allocator_rows(self) -> np.ndarray:
        """CUDA allocated and reserved bytes, shape (2, samples); NaN on CPU."""
        return self._sample_y.view[len(MEMORY_CATEGORIES) : len(MEMORY_CATEGORIES) + 2]

    @property
    def loss_rows(self) -> np.ndarray:
        """Loss and grad norm, shape (2, steps); NaN where not finite."""
        return self._step_y.view[len(PHASES) : len(PHASES) + 2]

    @property
    def step_x(self) -> np.ndarray:
        return self._step_x.view[0]

    @property
    def time_layers(self) -> np.ndarray:
        """Cumulative phase milliseconds, shape (phases, steps)."""
        return self._step_y.view[: len(PHASES)]

    def step_column(self, name: str) -> np.ndarray:
        offset = ("loss", "grad_norm", "peak_bytes", "step_ms").index(name)
        return self._step_y.view[len(PHASES) + offset]

    @property
    def last_step(self) -> int:
        return int(self.step_x[-1]) if self.step_count else -1

    @property
    def x_end(self) -> float:
        """The right end of the data on the step axis."""
        ends = [-1.0]
        if self.step_count:
            ends.append(float(self.step_x[-1]) + 1.0)
        if self.sample_count:
            ends.append(float(self.sample_x[-1]))
        return max(ends)

    def step_row(self, step: int) -> int | None:
        """Index of `step` in the steps table, or None when that step has no record."""
        xs = self.step_x
        i = int(np.searchsorted(xs, step))
        return i if i < len(xs) and xs[i] == step else None

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
        i = int(np.searchsorted(self.sample_x, x, side="right")) - 1
        return i if i >= 0 else None

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in (self._sample_x, self._sample_y, self._step_x, self._step_y))
