"""Reading a lesson's metric from one run's records, the same way for both arms."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from core.history import RunHistory
from core.lessons.catalog import Metric
from core.records import PHASE_CODE

# Steps at the start of each arm left out of time figures: the first steps allocate
# optimizer state and warm caches, a cost a long training run pays once.
WARMUP_STEPS = 2


@dataclass
class Reading:
    """One arm's figure: `value` (exact bytes or a count; a time's median, in ms) and the
    time samples behind a median."""

    value: float | None
    samples: list[float] = field(default_factory=list)


def read_metric(history: RunHistory, metric: Metric) -> Reading:
    if metric.source == "errors":
        return Reading(float(sum(1 for e in history.events() if e.kind == "error")))
    steps = history.steps.column("step")
    if metric.source == "step":
        values = history.steps.column(metric.column)
        if metric.kind == "time":
            return _time_reading(history, metric, steps, values)
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
                  values: np.ndarray) -> Reading:
    keep = steps >= WARMUP_STEPS
    if metric.column == "eval_ms":  # only the steps that ran an eval phase
        keep &= np.isfinite(history.steps.column("eval_loss"))
    samples = values[keep]
    if metric.per_sample:
        samples = samples / batch_size(history)
    samples = [float(v) for v in samples if math.isfinite(v)]
    return Reading(float(np.median(samples)) if samples else None, samples)


def batch_size(history: RunHistory) -> int:
    return int(history.meta["environment"]["sizes"]["batch_size"])
