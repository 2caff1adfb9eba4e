"""Cut a long series down to what the plot can show: the visible slice, then per-pixel peaks.

Plots hand pyqtgraph only these few thousand points, so a frame costs the same with a
hundred steps in the history as with a million.
"""

from __future__ import annotations

import numpy as np


def visible_slice(x: np.ndarray, x0: float, x1: float) -> slice:
    """Rows whose x lies in [x0, x1], plus one neighbour each side so lines reach the edges."""
    i0 = max(int(np.searchsorted(x, x0, side="left")) - 1, 0)
    i1 = min(int(np.searchsorted(x, x1, side="right")) + 1, len(x))
    return slice(i0, i1)


def _bins(n: int, bins: int) -> int:
    return max(1, -(-n // max(bins, 1)))


def envelope(x: np.ndarray, ys: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-bin maximum of each row of `ys` (shape (layers, n)): for stacked areas.

    The maximum keeps every peak visible, and since stacked layers are cumulative it keeps
    their order, so areas never cross.
    """
    n = len(x)
    if n <= max_points:
        return x, ys
    k = _bins(n, max_points)
    full = (n // k) * k
    head = np.fmax.reduce(ys[:, :full].reshape(len(ys), -1, k), axis=2)
    xs = x[:full:k]
    if full < n:
        tail = np.fmax.reduce(ys[:, full:], axis=1)[:, None]
        head = np.concatenate([head, tail], axis=1)
        xs = np.concatenate([xs, x[full:full + 1]])
    return xs, head


def min_max(x: np.ndarray, y: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-bin minimum and maximum of a line, in time order: pyqtgraph's 'peak' mode."""
    n = len(x)
    if n <= max_points:
        return x, y
    k = _bins(n, max(max_points // 2, 1))
    full = (n // k) * k
    blocks = y[:full].reshape(-1, k)
    lo = np.fmin.reduce(blocks, axis=1)
    hi = np.fmax.reduce(blocks, axis=1)
    xs = x[:full:k]
    if full < n:
        lo = np.append(lo, np.fmin.reduce(y[full:]))
        hi = np.append(hi, np.fmax.reduce(y[full:]))
        xs = np.append(xs, x[full])
    out_y = np.empty(2 * len(lo), dtype=y.dtype)
    out_y[0::2] = lo
    out_y[1::2] = hi
    return np.repeat(xs, 2), out_y
