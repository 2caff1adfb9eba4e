"""Cut a long series down to what the plot can show: the visible slice, then per-bin peaks.

Plots hand pyqtgraph only a few thousand points, so a frame costs about the same with a
hundred steps in the history as with a million. Bins are a power of two long and aligned to
absolute row numbers, so a bin, once full, never changes: PeakDecimator keeps finished bins
between frames and reduces only the rows that arrived since (a run only ever appends).
"""

from __future__ import annotations

import numpy as np


def visible_slice(x: np.ndarray, x0: float, x1: float) -> slice:
    """Rows whose x lies in [x0, x1], plus one neighbour each side so lines reach the edges."""
    i0 = max(int(np.searchsorted(x, x0, side="left")) - 1, 0)
    i1 = min(int(np.searchsorted(x, x1, side="right")) + 1, len(x))
    return slice(i0, i1)


def bin_size(n: int, bins: int) -> int:
    """The smallest power of two that cuts n rows into at most `bins` bins."""
    k = 1
    while -(-n // k) > max(bins, 1):
        k *= 2
    return k


class PeakDecimator:
    """Per-bin peaks of one or more rows of values (shape (layers, n)) against x.

    mode "envelope": the maximum of each bin, for stacked areas (the maximum keeps every peak
    and, since stacked layers are cumulative, keeps their order: areas never cross);
    mode "minmax": minimum then maximum of each bin, for lines (pyqtgraph's "peak" mode).
    """

    def __init__(self, mode: str = "envelope") -> None:
        if mode not in ("envelope", "minmax"):
            raise ValueError(mode)
        self.mode = mode
        self.reset()

    def reset(self) -> None:
        self._k = 0
        self._hi = self._lo = None  # finished bins 0.._done-1, shape (layers, capacity)
        self._done = 0

    def _extend(self, ys: np.ndarray, upto: int) -> None:
        """Reduce bins [_done, upto) and keep them."""
        k, start = self._k, self._done
        if upto <= start:
            return
        block = ys[:, start * k : upto * k].reshape(len(ys), upto - start, k)
        hi = np.fmax.reduce(block, axis=2)
        lo = np.fmin.reduce(block, axis=2) if self.mode == "minmax" else None
        if self._hi is None or self._hi.shape[0] != len(ys) or upto > self._hi.shape[1]:
            cap = max(upto, 2 * (self._hi.shape[1] if self._hi is not None else 0), 64)
            grown = np.empty((len(ys), cap), dtype=ys.dtype)
            if self._hi is not None and self._hi.shape[0] == len(ys):
                grown[:, :start] = self._hi[:, :start]
            self._hi = grown
            if self.mode == "minmax":
                grown_lo = np.empty_like(grown)
                if self._lo is not None and self._lo.shape[0] == len(ys):
                    grown_lo[:, :start] = self._lo[:, :start]
                self._lo = grown_lo
        self._hi[:, start:upto] = hi
        if lo is not None:
            self._lo[:, start:upto] = lo
        self._done = upto

    def __call__(self, x: np.ndarray, ys: np.ndarray, sl: slice, max_points: int
                 ) -> tuple[np.ndarray, np.ndarray]:
        """Decimate rows `sl` of (x, ys) into at most `max_points // 2` bins: two points a
        bin for lines (min and max), one for areas, whose every edge costs paint time."""
        i0, i1 = sl.start, sl.stop
        bins = max(max_points // 2, 1)
        if i1 - i0 <= (max_points if self.mode == "minmax" else bins):
            return x[i0:i1], ys[:, i0:i1]
        k = bin_size(i1 - i0, bins)
        if k != self._k:
            self.reset()
            self._k = k
        b0, b1 = i0 // k, i1 // k
        self._extend(ys, b1)
        hi = self._hi[:, b0:b1]
        xs = x[b0 * k : b1 * k : k]
        lo = self._lo[:, b0:b1] if self.mode == "minmax" else None
        if b1 * k < i1:  # the last, unfinished bin: reduced now, not kept
            tail = ys[:, b1 * k : i1]
            hi = np.concatenate([hi, np.fmax.reduce(tail, axis=1)[:, None]], axis=1)
            if lo is not None:
                lo = np.concatenate([lo, np.fmin.reduce(tail, axis=1)[:, None]], axis=1)
            xs = np.append(xs, x[b1 * k])
        if lo is None:
            return xs, hi
        out = np.empty((len(ys), 2 * hi.shape[1]), dtype=ys.dtype)
        out[:, 0::2] = lo
        out[:, 1::2] = hi
        return np.repeat(xs, 2), out


def envelope(x: np.ndarray, ys: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-bin maximum of each row of `ys`, without a cache."""
    return PeakDecimator("envelope")(x, ys, slice(0, len(x)), max_points)


def min_max(x: np.ndarray, y: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-bin minimum and maximum of one line, in order, without a cache."""
    if len(x) <= max_points:
        return x, y
    xs, ys = PeakDecimator("minmax")(x, y[None, :], slice(0, len(x)), max_points)
    return xs, ys[0]
