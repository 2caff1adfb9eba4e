"""A lesson's time figure, judged only where the machine could resolve it.

The arms take turns step by step (ABBA), so the k-th step of each arm ran in the same round,
a step apart: the change is the median of those pairs' ratios on/off, with a bootstrap
interval over the pairs (memlens.core.stats.median_pair_ratio). A pair cancels the load the
two steps shared; it cannot cancel what the load did to one arm and not the other, nor say
whether a burst between them made the pair disagree. The run's own unchanged splits can:
the same statistic between an arm's own steps (a round or two apart, where nothing changed)
shows how far the machine alone moves it. The interval is widened to at least that far each
side of the change, so a change the machine alone could make is "within noise".

A busy machine also changes what is measured: an arm on more compute threads than there are
free cores waits, at every parallel kernel, for a thread the scheduler put aside (on two
busy cores a gan step took 460 ms on 2 threads, 22 ms on 1), and the arm with more kernels
waits more. No split of the run tells that from a real effect: such a lesson gets no time
verdict, with the reason, and a report that starts on a busy machine runs its arms on the
compute threads there are free cores for (at least 1).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memlens.core.stats import CONFIDENCE, median_pair_ratio

# A/A splits: an arm's step against its own step LAGS rounds later, in disjoint pairs.
LAGS = (1, 2, 3, 4)
MIN_SPLIT_PAIRS = 3  # fewer pairs in a split: it says nothing


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load_average() -> float | None:
    """The machine's 1-minute load average (None where the OS has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def free_threads(default: int, load: float | None, n_cores: int) -> int:
    """The compute threads an arm should run on so that none waits for a core: torch's
    default, or fewer where other work holds cores (at least 1)."""
    if load is None:
        return default
    return max(1, min(default, int(n_cores - load + 0.5)))


@dataclass(frozen=True)
class Machine:
    """What the machine was doing while a lesson ran: its cores, the arms' compute threads,
    the 1-minute load average as the lesson began and ended (the arms' own threads in it)."""

    cores: int
    threads: int
    load_start: float | None
    load_end: float | None

    @property
    def load(self) -> float | None:
        loads = [v for v in (self.load_start, self.load_end) if v is not None]
        return max(loads) if loads else None

    @property
    def oversubscribed(self) -> bool:
        """An arm ran on more than one compute thread while other work left it fewer free
        cores than threads: its parallel kernels waited for threads put aside."""
        load = self.load
        if load is None or self.threads <= 1:
            return False
        others = max(0.0, load - self.threads)  # one arm runs at a time, on `threads`
        return others + self.threads > self.cores + 0.5

    def text(self) -> str:
        load = "n/a" if self.load is None else f"{self.load:.1f}"
        return (f"load {load} on {self.cores} cores, {self.threads} compute "
                f"thread{'s' if self.threads != 1 else ''} an arm")

    def as_dict(self) -> dict:
        return {"cores": self.cores, "threads": self.threads,
                "load_average": {"start": self.load_start, "end": self.load_end}}


@dataclass(frozen=True)
class TimeEffect:
    """on / off for steps paired by round, its interval widened to the machine's own noise
    (`noise`: the largest ratio the run's unchanged splits showed, >= 1; None: too few
    steps to gauge it, and no verdict). `reason`: why it is within noise, where the machine
    is the reason."""

    ratio: float
    low: float
    high: float
    pairs: int
    noise: float | None
    splits: int
    reason: str = ""
    confidence: float = CONFIDENCE

    @property
    def significant(self) -> bool:
        return self.noise is not None and not self.reason and (self.low > 1.0
                                                               or self.high < 1.0)

    def as_dict(self) -> dict:
        def finite(x):
            return float(x) if x is not None and math.isfinite(x) else None

        return {"ratio": finite(self.ratio), "ci_low": finite(self.low),
                "ci_high": finite(self.high), "pairs": self.pairs,
                "machine_noise": finite(self.noise), "noise_splits": self.splits,
                "significant": self.significant}


def paired(off: dict[int, float], on: dict[int, float]) -> tuple[list[float], list[float]]:
    """The two arms' samples of the rounds both completed, in round order."""
    rounds = sorted(set(off) & set(on))
    return [off[k] for k in rounds], [on[k] for k in rounds]


def split_ratios(samples: Sequence[float]) -> list[float]:
    """The A/A statistic at the run's unchanged splits: for each lag and offset, the median
    ratio of an arm's step to its own step `lag` rounds later, over disjoint pairs."""
    x = np.asarray(samples, dtype=float)
    out = []
    for lag in LAGS:
        for offset in (0, lag):
            first = np.array([i for i in range(offset, len(x) - lag)
                              if ((i - offset) // lag) % 2 == 0], dtype=int)
            if first.size >= MIN_SPLIT_PAIRS:
                out.append(median_pair_ratio(x[first], x[first + lag]).ratio)
    return [r for r in out if math.isfinite(r) and r > 0]


def time_effect(off: Sequence[float], on: Sequence[float], machine: Machine | None = None,
                confidence: float = CONFIDENCE) -> TimeEffect:
    """The change on/off of steps paired by round (`off[k]`, `on[k]`: round k), its interval
    widened to the run's own noise, and why a busy machine gives no verdict."""
    ci = median_pair_ratio(off, on, confidence=confidence)
    splits = split_ratios(off) + split_ratios(on)
    noise = math.exp(max(abs(math.log(r)) for r in splits)) if splits else None
    ratio, low, high = ci.ratio, ci.low, ci.high
    if noise is not None and math.isfinite(ratio):
        low, high = min(low, ratio / noise), max(high, ratio * noise)
    reason = ""
    if machine is not None and machine.oversubscribed:
        reason = (f"the machine was busy: {machine.text()}; a thread waiting for a core "
                  "stalls every parallel kernel, the more the more kernels an arm runs, so "
                  "the change is the load's as much as the setting's")
    elif (noise is not None and math.isfinite(ratio) and (ci.low > 1.0 or ci.high < 1.0)
          and not (low > 1.0 or high < 1.0)):
        busy = f"the machine was busy ({machine.text()}): " if machine is not None and \
            machine.load is not None and machine.load > machine.cores else ""
        reason = (f"{busy}unchanged splits of one arm differed by up to "
                  f"{(noise - 1.0) * 100:.0f}%, as much as the change")
    return TimeEffect(ratio, low, high, ci.n_before, noise, len(splits), reason, confidence)
