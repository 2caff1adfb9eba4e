"""Per-bin peaks of a growing series at every power-of-two bin size, kept as rows arrive.

A plot of a long run needs, per pixel, the highest (and for lines the lowest) value among
the rows that pixel covers. Level 0 keeps that for bins of BASE rows, level j for bins of
BASE * 2**j rows, each level made from pairs of the one below: together about 2/BASE of
the values, where a full-resolution copy would be all of them. Bins are aligned to absolute
row numbers, so a bin, once complete, never changes (a run only appends); rows that do not
yet fill a level-0 bin wait in a small carry. Levels above 0 are made when they are read:
a frame reads one level per plot, and climbing every level at every append (each one a few
numpy calls for a bin or two) cost the GUI thread more than the reads. No Qt here.
"""

from __future__ import annotations

import numpy as np

BASE = 16  # rows per level-0 bin


class Growing:
    """Columns of a (channels, n) array that grows by a quarter: the arrays here are a few
    percent of a run, so a copy now and then is cheap and the unused end stays small."""

    def __init__(self, channels: int, dtype) -> None:
        self._data = np.empty((channels, 64), dtype=dtype)
        self.n = 0

    def append(self, block: np.ndarray) -> None:
        k = block.shape[1]
        if self.n + k > self._data.shape[1]:
            cap = max(self.n + k, self._data.shape[1] + self._data.shape[1] // 4 + 64)
            grown = np.empty((self._data.shape[0], cap), dtype=self._data.dtype)
            grown[:, : self.n] = self._data[:, : self.n]
            self._data = grown
        self._data[:, self.n : self.n + k] = block
        self.n += k

    @property
    def view(self) -> np.ndarray:
        return self._data[:, : self.n]

    def select(self, rows: np.ndarray) -> None:
        """Keep channels `rows` of the old ones, in that order (-1: a channel of zeros)."""
        self._data = channels_of(self._data, rows)

    @property
    def nbytes(self) -> int:
        return self._data.nbytes


def channels_of(a: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Channels (first axis) `rows` of `a`, in that order, -1 a channel of zeros: a copy."""
    out = a[np.maximum(rows, 0)]
    out[rows < 0] = 0
    return out


def moment_of(block: np.ndarray, larger: bool) -> np.ndarray:
    """The column of `block` (channels, ..., m) whose last channel is largest (or
    smallest), along its last axis: one moment's values of every channel, never a mix of
    moments (a stacked chart's layers must be one moment's, see run_series)."""
    key = block[-1]
    key = np.where(np.isnan(key), -np.inf if larger else np.inf, key)
    idx = (np.argmax if larger else np.argmin)(key, axis=-1)[..., None]
    idx = np.broadcast_to(idx[None], (block.shape[0], *idx.shape))
    return np.take_along_axis(block, idx, axis=-1)[..., 0]


def _moment_pairs(a: np.ndarray, larger: bool) -> np.ndarray:
    left, right = a[:, 0::2], a[:, 1::2]
    pick = right[-1] > left[-1] if larger else right[-1] < left[-1]
    return np.where(pick[None, :], right, left)


class BinPyramid:
    """Maxima (and minima when `with_min`) of `channels` rows of values, per bin, at bin
    sizes BASE * 2**level. `append` takes new rows (shape (channels, m)) in order. With
    `moments`, a bin keeps instead the whole column of its highest and its lowest moment
    (by the last channel): the stacked layers of one moment each."""

    def __init__(self, channels: int, with_min: bool, dtype=np.float32,
                 moments: bool = False) -> None:
        self.channels, self.dtype = channels, dtype
        self.with_min, self.moments = with_min or moments, moments
        self.hi: list[Growing] = []
        self.lo: list[Growing] = []
        self._carry = np.empty((channels, 0), dtype=dtype)
        self.rows = 0

    def append(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=self.dtype).reshape(self.channels, -1)
        self.rows += values.shape[1]
        carry = np.concatenate([self._carry, values], axis=1) if self._carry.shape[1] else values
        full = carry.shape[1] // BASE
        self._carry = carry[:, full * BASE :].copy()
        if not full:
            return
        block = carry[:, : full * BASE].reshape(self.channels, full, BASE)
        self._level(0)
        if self.moments:
            self.hi[0].append(moment_of(block, larger=True))
            self.lo[0].append(moment_of(block, larger=False))
            return
        self.hi[0].append(np.fmax.reduce(block, axis=2))
        if self.with_min:
            self.lo[0].append(np.fmin.reduce(block, axis=2))

    def complete(self, level: int | None = None) -> None:
        """Bring levels 1..`level` (all that can have a bin, by default) up to level 0: each
        gets the bins made of pairs of the level below's that completed since."""
        if level is None:
            level = max(self.bins(0).bit_length() - 1, 0)
        for lv in range(1, level + 1):
            below, done = self._level(lv - 1).n, self._level(lv).n
            if below // 2 <= done:
                continue
            start, stop = 2 * done, 2 * (below // 2)
            if self.moments:
                self.hi[lv].append(_moment_pairs(self.hi[lv - 1].view[:, start:stop], True))
                self.lo[lv].append(_moment_pairs(self.lo[lv - 1].view[:, start:stop], False))
                continue
            self.hi[lv].append(_pairs(np.fmax, self.hi[lv - 1].view[:, start:stop]))
            if self.with_min:
                self.lo[lv].append(_pairs(np.fmin, self.lo[lv - 1].view[:, start:stop]))

    def select(self, rows: np.ndarray) -> None:
        """Keep channels `rows` of the old ones in every bin, in that order (-1: zeros)."""
        for g in (*self.hi, *self.lo):
            g.select(rows)
        self._carry, self.channels = channels_of(self._carry, rows), len(rows)

    def _level(self, level: int) -> Growing:
        while level >= len(self.hi):
            self.hi.append(Growing(self.channels, self.dtype))
            if self.with_min:
                self.lo.append(Growing(self.channels, self.dtype))
        return self.hi[level]

    def bins(self, level: int) -> int:
        """Complete bins at `level`."""
        if level == 0:
            return self.hi[0].n if self.hi else 0
        self.complete(level)
        return self.hi[level].n

    def peaks(self, level: int, b0: int, b1: int) -> tuple[np.ndarray, np.ndarray | None]:
        """(max, min or None) of complete bins [b0, b1) at `level`."""
        self.complete(level)
        hi = self._level(level).view[:, b0:b1]
        return hi, (self.lo[level].view[:, b0:b1] if self.with_min else None)

    @property
    def nbytes(self) -> int:
        return sum(g.nbytes for g in (*self.hi, *self.lo)) + self._carry.nbytes


def _pairs(ufunc, a: np.ndarray) -> np.ndarray:
    return ufunc(a[:, 0::2], a[:, 1::2])


def level_of(k: int) -> int:
    """The pyramid level whose bins are k rows long (k a power of two, at least BASE)."""
    return (k // BASE).bit_length() - 1
