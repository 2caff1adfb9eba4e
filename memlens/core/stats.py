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
    # The machine's own noise where it was gauged (see with_machine_noise): the ratio that
    # splits of the same run at other steps reach (their 95th percentile), and how many
    # splits gauged it. An effect inside it is within noise whatever its interval says.
    noise: float | None = None
    n_noise: int = 0
    # The same ratio over the later steps of the same setting (None: none yet): a change
    # lasts while its setting does, a load burst does not.
    later: float | None = None

    @property
    def beyond_noise(self) -> bool:
        """The interval excludes 1 and the ratio is larger than the machine's noise."""
        if self.noise is not None and abs(np.log(self.ratio)) <= abs(np.log(self.noise)):
            return False
        return self.n_before >= MIN_SAMPLES and self.n_after >= MIN_SAMPLES and (
            self.low > 1.0 or self.high < 1.0)

    @property
    def lasts(self) -> bool:
        """The later steps show the change too (at least half of it, the same way), or
        there are none yet to ask."""
        if self.later is None or not np.isfinite(self.later) or self.later <= 0:
            return True
        first, later = np.log(self.ratio), np.log(self.later)
        return bool(np.sign(first) == np.sign(later) and abs(later) > 0.5 * abs(first))

    @property
    def significant(self) -> bool:
        return self.beyond_noise and self.lasts

    @property
    def half_width_pct(self) -> float:
        """The interval's larger distance from the ratio, in percent (for "±X%"), or the
        machine's noise where that is wider."""
        if not np.isfinite(self.low) or not np.isfinite(self.high):
            return float("inf")
        width = 100.0 * max(self.ratio - self.low, self.high - self.ratio)
        if self.noise is not None:
            width = max(width, 100.0 * (self.noise - 1.0))
        return width

    def with_machine_noise(self, placebo: Sequence[float], later: float | None = None
                           ) -> RatioCI:
        """This effect with the machine's noise gauged by `placebo`: the same statistic at
        other splits of the same run, where nothing changed; and `later`, the ratio the
        same setting's later steps show. Steps next to each other share the machine's load
        (a burst from another process slows ten steps in a row), which a bootstrap of
        single steps cannot see. A change is called only when it is larger than 95% of what
        the run's own unchanged splits show (with fewer than 19 splits, larger than all of
        them) and, where later steps exist, they show it too."""
        p = _clean(placebo)
        p = p[p > 0]
        noise = None
        if p.size:
            excess = np.exp(np.abs(np.log(p)))  # a slowdown and a speed-up alike, as >= 1
            noise = float(np.quantile(excess, CONFIDENCE) if p.size >= 19 else excess.max())
        return RatioCI(self.ratio, self.low, self.high, self.n_before, self.n_after,
                       self.confidence, noise, int(p.size), later)

    def describe(self, what: str = "step time") -> str:
        """`step time +12% (95% CI +8% to +15%)`, or `step time within noise (±6%)`."""
        if not np.isfinite(self.ratio):
            return f"{what}: not measured"
        if self.n_before < MIN_SAMPLES or self.n_after < MIN_SAMPLES:
            return (f"{what} {_pct(self.ratio)} over {self.n_before} and {self.n_after} "
                    "steps: too few to tell from noise")
        if self.beyond_noise and not self.lasts:
            return (f"{what} {_pct(self.ratio)} at first, {_pct(self.later)} in the steps "
                    "after: the machine's load, not the change (within noise)")
        if not self.significant:
            return f"{what} within noise (±{self.half_width_pct:.0f}%)"
        return (f"{what} {_pct(self.ratio)} ({self.confidence:.0%} CI {_pct(self.low)} "
                f"to {_pct(self.high)})")

    def as_dict(self) -> dict:
        out = {"ratio": _finite(self.ratio), "ci_low": _finite(self.low),
               "ci_high": _finite(self.high), "confidence": self.confidence,
               "n_before": self.n_before, "n_after": self.n_after,
               "significant": self.significant}
        if self.noise is not None:
            out["machine_noise"] = _finite(self.noise)
            out["noise_splits"] = self.n_noise
        if self.later is not None:
            out["later_ratio"] = _finite(self.later)
        return out


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


def median_interval(values: Sequence[float], *, confidence: float = CONFIDENCE,
                    n_boot: int = N_BOOT, seed: int = 0) -> tuple[float, float, float]:
    """(median, low, high): one side's median with the same seeded percentile bootstrap
    as ratio_of_medians; an infinite interval under MIN_SAMPLES values, NaN for none."""
    v = _clean(values)
    if v.size == 0:
        return float("nan"), float("nan"), float("nan")
    median = float(np.median(v))
    if v.size < MIN_SAMPLES:
        return median, float("-inf"), float("inf")
    rng = np.random.default_rng(seed)
    boots = np.median(v[rng.integers(0, v.size, size=(n_boot, v.size))], axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(boots, [tail, 1.0 - tail])
    return median, float(low), float(high)


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
