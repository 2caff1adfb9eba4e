"""Two runs side by side: memory by category at each phase, mean and peak, and the change.

The pinned-run compare table shows this for a pin against the current run; the lessons
report reads its own metrics (memlens.core.lessons). Plain numbers, no Qt.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memlens.core.history import RunHistory
from memlens.core.records import MEMORY_CATEGORIES, SAMPLE_PHASE_CODE, SAMPLE_PHASES

COMPARE_CATEGORIES = (*MEMORY_CATEGORIES, "total")
COMPARE_PHASES = SAMPLE_PHASES[1:]  # every phase edge of a step (not the run's start)


@dataclass(frozen=True)
class CompareRow:
    phase: str
    category: str
    base_mean: float | None  # the pinned run
    base_peak: float | None
    mean: float | None  # the current run
    peak: float | None

    @property
    def mean_change(self) -> float | None:
        return None if self.mean is None or self.base_mean is None else self.mean - self.base_mean

    @property
    def peak_change(self) -> float | None:
        return None if self.peak is None or self.base_peak is None else self.peak - self.base_peak


def _by_phase(history: RunHistory) -> dict[str, dict[str, tuple[float, float]]]:
    rows = history.samples.rows()
    idx = history.samples.index
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for phase in COMPARE_PHASES:
        at = rows[rows[:, idx["phase"]] == SAMPLE_PHASE_CODE[phase]]
        if len(at):
            out[phase] = {c: (float(np.mean(at[:, idx[c]])), float(np.max(at[:, idx[c]])))
                          for c in COMPARE_CATEGORIES}
    return out


def compare_runs(base: RunHistory, current: RunHistory) -> list[CompareRow]:
    """A row per phase that either run sampled and per category (and the total) that
    either run holds bytes of there."""
    a, b = _by_phase(base), _by_phase(current)
    rows = []
    for phase in COMPARE_PHASES:
        if phase not in a and phase not in b:
            continue
        for c in COMPARE_CATEGORIES:
            am, ap = a[phase][c] if phase in a else (None, None)
            bm, bp = b[phase][c] if phase in b else (None, None)
            if not any((am, ap, bm, bp)):  # a category neither run has at this phase
                continue
            rows.append(CompareRow(phase, c, am, ap, bm, bp))
    return rows
