"""What the ranks tab draws for one rank, as plain numpy: total and peak, stacked categories."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memlens.app.series.decimate import envelope, min_max
from memlens.core.history import RunHistory
from memlens.core.records import MEMORY_CATEGORIES

MAX_POINTS = 4000  # a line's points: about two per pixel of a wide plot


@dataclass(frozen=True)
class RankLines:
    """In bytes. `x` places each phase sample on the step axis (the reader's spread x);
    `peak_x` each step's peak at step + 0.5, as the timeline's memory plot draws it;
    `layers[i]` is the sum of the first i + 1 categories (the stack's edges)."""

    x: np.ndarray
    total: np.ndarray
    peak_x: np.ndarray
    peak: np.ndarray
    layers: np.ndarray


def rank_lines(history: RunHistory, max_points: int = MAX_POINTS) -> RankLines:
    """A rank's lines, cut to at most about `max_points` points each: per-bin peaks, so
    every peak stays on the plot (app.series.decimate)."""
    samples, steps = history.samples, history.steps
    x = samples.column("x")
    categories = (np.vstack([samples.column(c) for c in MEMORY_CATEGORIES]) if len(samples)
                  else np.empty((len(MEMORY_CATEGORIES), 0)))
    layers = np.cumsum(categories, axis=0)
    total = samples.column("total")
    if len(x) > max_points:
        _, layers = envelope(x, layers, max_points)
        x, total = envelope(x, total[None, :], max_points)
        total = total[0]
    peak_x, peak = min_max(steps.column("step") + 0.5, steps.column("peak_bytes"), max_points)
    return RankLines(x=x, total=total, peak_x=peak_x, peak=peak, layers=layers)
