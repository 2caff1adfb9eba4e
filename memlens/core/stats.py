"""Time effects with their noise: the ratio of two medians and its bootstrap interval.

Step times on a shared machine are noisy and skewed (one slow step from another process is
common), so an effect is the ratio of medians, after / before, and its 95% interval comes
from a percentile bootstrap that resamples each side independently. An effect is called
significant only when the interval excludes 1. Memory figures are exact and never go
through here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
N_BOOT = 2000
MIN_SAMPLES = 3  # fewer on either side: no interval, never significant


@dataclass(frozen=True)
class RatioCI:
    """after / before as a ratio of medians, with a bootstrap interval."""

    ratio: float
    low: float
    high: float
    n_before: int
    n_after: int
    confidence: float = CONFIDENCE

    @property
    def significant(self) -> bool:
        return self.n_before >= MIN_SAMPLES and self.n_after >= MIN_SAMPLES and (
            self.low > 1.0 or self.high < 1.0)

    @property
    def half_width_pct(self) -> float:
        """The interval's larger distance from the ratio, in percent (for "±X%")."""
        if not np.isfinite(self.low) or not np.isfinite(self.high):
            return float("inf")
        return 100.0 * max(self.ratio - self.low, self.high - self.ratio)

    def describe(self, what: str = "step time") -> str:
        """`step time +12% (95% CI +8% to +15%)`, or `step time within noise (±6%)`."""
        if not np.isfinite(self.ratio):
            return f"{what}: not measured"
        if self.n_before < MIN_SAMPLES or self.n_after < MIN_SAMPLES:
            return (f"{what} {_pct(self.ratio)} over {self.n_before} and {self.n_after} "
                    "steps: too few to tell from noise")
        if not self.significant:
            return f"{what} within noise (±{self.half_width_pct:.0f}%)"
        return (f"{what} {_pct(self.ratio)} ({self.confidence:.0%} CI {_pct(self.low)} "
                f"to {_pct(self.high)})")

    def as_dict(self) -> dict:
        return {"ratio": _finite(self.ratio), "ci_low": _finite(self.low),
                "ci_high": _finite(self.high), "confidence": self.confidence,
                "n_before": self.n_before, "n_after": self.n_after,
                "significant": self.significant}


def ratio_of_medians(before: Sequence[float], after: Sequence[float], *,
                     confidence: float = CONFIDENCE, n_boot: int = N_BOOT,
                     seed: int = 0) -> RatioCI:
    """Median(after) / median(before) with a percentile-bootstrap interval.

    Non-finite values are dropped. The bootstrap is seeded, so the same inputs always give
    the same interval.
    """
    b = _clean(before)
    a = _clean(after)
    if b.size == 0 or a.size == 0 or np.median(b) <= 0:
        return RatioCI(float("nan"), float("nan"), float("nan"), int(b.size), int(a.size),
                       confidence)
    ratio = float(np.median(a) / np.median(b))
    if b.size < MIN_SAMPLES or a.size < MIN_SAMPLES:
        return RatioCI(ratio, float("-inf"), float("inf"), int(b.size), int(a.size), confidence)
    rng = np.random.default_rng(seed)
    mb = np.median(b[rng.integers(0, b.size, size=(n_boot, b.size))], axis=1)
    ma = np.median(a[rng.integers(0, a.size, size=(n_boot, a.size))], axis=1)
    ok = mb > 0
    boots = ma[ok] / mb[ok]
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(boots, [tail, 1.0 - tail])
    return RatioCI(ratio, float(low), float(high), int(b.size), int(a.size), confidence)


def median_pair_ratio(before: Sequence[float], after: Sequence[float], *,
                      confidence: float = CONFIDENCE, n_boot: int = N_BOOT,
                      seed: int = 0) -> RatioCI:
    """The median of after[i] / before[i] over pairs measured side by side (two processes
    run one after the other, say), with a percentile-bootstrap interval over the pairs.

    Each pair's ratio cancels what both of its sides share (the machine's speed at that
    moment); the interval reflects how much pairs disagree, which a bootstrap over the steps
    of a few processes would not (a process's steps share its memory layout, its page-fault
    regime). Pairs with a non-finite or non-positive side are dropped."""
    pairs = [(b, a) for b, a in zip(before, after, strict=True)
             if np.isfinite(b) and np.isfinite(a) and b > 0 and a > 0]
    n = len(pairs)
    if n == 0:
        return RatioCI(float("nan"), float("nan"), float("nan"), 0, 0, confidence)
    r = np.array([a / b for b, a in pairs])
    ratio = float(np.median(r))
    if n < MIN_SAMPLES:
        return RatioCI(ratio, float("-inf"), float("inf"), n, n, confidence)
    rng = np.random.default_rng(seed)
    boots = np.median(r[rng.integers(0, n, size=(n_boot, n))], axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(boots, [tail, 1.0 - tail])
    return RatioCI(ratio, float(low), float(high), n, n, confidence)


def _clean(values: Sequence[float]) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).ravel()
    return arr[np.isfinite(arr)]


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _pct(ratio: float) -> str:
    return f"{(ratio - 1.0) * 100.0:+.0f}%"
