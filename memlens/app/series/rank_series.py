"""What the ranks tab draws for one rank, as plain numpy: total and peak, stacked categories."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memlens.core.history import RunHistory
from memlens.core.records import MEMORY_CATEGORIES


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


def rank_lines(history: RunHistory) -> RankLines:
    samples, steps = history.samples, history.steps
    categories = np.vstack([samples.column(c) for c in MEMORY_CATEGORIES]) if len(samples) \
        else np.empty((len(MEMORY_CATEGORIES), 0))
    return RankLines(x=samples.column("x"), total=samples.column("total"),
                     peak_x=steps.column("step") + 0.5, peak=steps.column("peak_bytes"),
                     layers=np.cumsum(categories, axis=0))
