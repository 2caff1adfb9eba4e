"""Reading a lesson's metric from one run's records, the same way for both arms."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from memlens.core.history import RunHistory
from memlens.core.lessons.catalog import Metric
from memlens.core.records import SAMPLE_PHASE_CODE

# Steps at the start of each arm left out of time figures: the first steps allocate
# optimizer state and warm caches, a cost a long training run pays once.
WARMUP_STEPS = 2


@dataclass
class Reading:
    """One arm's figure: `value` (exact bytes or a count; for a time, in ms, the median of
    its samples) and a time's samples (one a block)."""

    value: float | None
    samples: list[float] = field(default_factory=list)
    # a time's samples by round (the arm's block number): the two arms' k-th blocks ran
    # side by side, one turn apart
    rounds: dict[int, float] = field(default_factory=dict)
    # a step peak that is the largest phase-boundary total (light mode on a CPU): a lower
    # bound of the true peak, no figure to judge a claim by
    bound: bool = False


def read_metric(history: RunHistory, metric: Metric, block: int = 1) -> Reading:
    """`block`: the steps an arm ran at a turn; a time's samples are one per block."""
    if metric.source == "errors":
        return Reading(float(sum(1 for e in history.events() if e.kind == "error")))
    if metric.source == "data":
        return Reading(data_bytes(history))
    steps = history.steps.column("step")
    if metric.source == "allocs":
        return Reading(_reduce(phase_peaks(history, metric.phase, steps), metric.reduce))
    if metric.source == "step":
        values = history.steps.column(metric.column)
        if metric.kind == "time":
            return _time_reading(history, metric, steps, values, block)
        value = _reduce(values, metric.reduce)
        if metric.less_data and value is not None:
            data = data_bytes(history)
            value = None if data is None else value - data
        bound = metric.column == "peak_bytes" and not bool(
            np.all(history.steps.column("peak_is_exact") == 1))
        return Reading(value, bound=bound)
    rows = history.samples.rows()
    idx = history.samples.index
    at = rows[:, idx["phase"]] == SAMPLE_PHASE_CODE[metric.phase]
    # Completed steps only: a step that failed stops before some of its samples.
    done = np.isin(rows[:, idx["step"]], steps)
    # "a+b": the sum of two categories (what autograd saved: activations and AMP's copies)
    values = sum(rows[at & done, idx[c]] for c in metric.column.split("+"))
    if metric.reduce in ("growth", "median_growth"):
        return Reading(_growth(rows[at & done, idx["step"]], values,
                               median=metric.reduce == "median_growth"))
    return Reading(_reduce(values, metric.reduce))


def phase_peaks(history: RunHistory, phase: str, steps: np.ndarray) -> np.ndarray:
    """The largest live total inside `phase` of each completed step in `steps`, replayed
    from precise mode's alloc/free events (in the order the recorder saw them, storages
    made before the run registered as allocations at its start): the allocator's own peak
    there, kernel scratch included. Empty where the run has no such events (light mode)."""
    table = history.allocs
    if not len(table):
        return np.empty(0)
    rows = table.rows()
    idx = table.index
    signed = np.where(rows[:, idx["action"]] == 0, 1.0, -1.0) * rows[:, idx["bytes"]]
    live = np.cumsum(signed)
    before = np.concatenate(([0.0], live[:-1]))  # live just before each event
    inside = rows[:, idx["phase"]] == SAMPLE_PHASE_CODE[phase]
    peaks = []
    for step in steps:
        at = np.flatnonzero(inside & (rows[:, idx["step"]] == step))
        if at.size:  # what was live as the phase began, and at each of its events
            peaks.append(max(before[at[0]], live[at].max()))
    return np.array(peaks, dtype=float)


def _growth(steps: np.ndarray, values: np.ndarray, median: bool = False) -> float | None:
    """Bytes a step: the mean (or median) change from one completed step to the next, over
    pairs of consecutive completed steps only. A run whose steps failed in between (lstm without
    detach: only the steps where its state is reset complete) has no such pair, and no
    figure: the steps between two survivors were never measured."""
    keep = np.isfinite(values)
    steps, values = steps[keep], values[keep]
    if steps.size < 2:
        return None
    last = np.append(steps[1:] != steps[:-1], True)  # a step's last (gan: one an optimizer)
    steps, values = steps[last], values[last]
    pairs = np.diff(steps) == 1
    if not pairs.any():
        return None
    changes = np.diff(values)[pairs]
    return float(np.median(changes) if median else changes.mean())


def _reduce(values: np.ndarray, how: str) -> float | None:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return None
    if how == "max":
        return float(values.max())
    return float(values[-1])


def _time_reading(history: RunHistory, metric: Metric, steps: np.ndarray,
                  values: np.ndarray, block: int) -> Reading:
    """The median of each block's steps is one sample, by block number: the other arm's
    block of the same number ran next to it (lessons.timing pairs them)."""
    keep = (steps >= WARMUP_STEPS) & np.isfinite(values)
    if metric.column == "eval_ms":  # only the steps that ran an eval phase
        keep &= np.isfinite(history.steps.column("eval_loss"))
    values, blocks = values[keep], steps[keep] // max(block, 1)
    if metric.per_sample:
        values = values / batch_size(history)
    rounds = {int(b): float(np.median(values[blocks == b])) for b in np.unique(blocks)}
    samples = list(rounds.values())
    return Reading(float(np.median(samples)) if samples else None, samples, rounds)


def data_bytes(history: RunHistory) -> float | None:
    """The bytes of the data set the run holds (each storage once), None where the run did
    not say (a run folder from before memlens wrote it)."""
    value = history.meta.get("environment", {}).get("sizes", {}).get("data_bytes")
    return float(value) if isinstance(value, int | float) else None


def batch_size(history: RunHistory) -> int:
    return int(history.meta["environment"]["sizes"]["batch_size"])
