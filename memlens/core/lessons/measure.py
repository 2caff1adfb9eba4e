"""Reading a lesson's metric from one run's records, the same way for both arms."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from memlens.core.history import RunHistory
from memlens.core.lessons.catalog import Metric
from memlens.core.records import PHASE_CODE

# Steps at the start of each arm left out of time figures: the first steps allocate
# optimizer state and warm caches, a cost a long training run pays once.
WARMUP_STEPS = 2


@dataclass
class Reading:
    """One arm's figure: `value` (exact bytes or a count; for a time, in ms, the median of
    its samples) and a time's samples (one a block)."""

    value: float | None
    samples: list[float] = field(default_factory=list)


def read_metric(history: RunHistory, metric: Metric, block: int = 1) -> Reading:
    """`block`: the steps an arm ran at a turn; a time's samples are one per block."""
    if metric.source == "errors":
        return Reading(float(sum(1 for e in history.events() if e.kind == "error")))
    steps = history.steps.column("step")
    if metric.source == "step":
        values = history.steps.column(metric.column)
        if metric.kind == "time":
            return _time_reading(history, metric, steps, values, block)
        return Reading(_reduce(values, metric.reduce))
    rows = history.samples.rows()
    idx = history.samples.index
    at = rows[:, idx["phase"]] == PHASE_CODE[metric.phase]
    # Completed steps only: a step that failed stops before some of its samples.
    done = np.isin(rows[:, idx["step"]], steps)
    values = rows[at & done, idx[metric.column]]
    return Reading(_reduce(values, metric.reduce))


def _reduce(values: np.ndarray, how: str) -> float | None:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return None
    if how == "max":
        return float(values.max())
    if how == "growth":
        if values.size < 2:
            return None
        return float(values[-1] - values[0]) / (values.size - 1)
    return float(values[-1])


def _time_reading(history: RunHistory, metric: Metric, steps: np.ndarray,
                  values: np.ndarray, block: int) -> Reading:
    """The median of each block's steps is one sample. Steps of one block ran back to back
    under the same moment's load, so they are not independent draws: on a busy shared
    machine, resampling steps gave intervals that excluded 1 for an arm against itself."""
    keep = (steps >= WARMUP_STEPS) & np.isfinite(values)
    if metric.column == "eval_ms":  # only the steps that ran an eval phase
        keep &= np.isfinite(history.steps.column("eval_loss"))
    values, blocks = values[keep], steps[keep] // max(block, 1)
    if metric.per_sample:
        values = values / batch_size(history)
    samples = [float(np.median(values[blocks == b])) for b in np.unique(blocks)]
    return Reading(float(np.median(samples)) if samples else None, samples)


def batch_size(history: RunHistory) -> int:
    return int(history.meta["environment"]["sizes"]["batch_size"])
