"""A run's wall time on the step axis: where its elapsed seconds reach round values.

No Qt here. The plots keep their x in steps; View > X axis > Wall time only moves the
bottom axis's ticks to the steps where the run's time since its start crosses round values.
A step's record holds the time it ended (steps.csv's time_s), so step k's end sits at
x = k + 1 and the clock between two ends is interpolated; the first step starts its own
duration (step_ms) before its end. Nothing is extrapolated past the newest step.
"""

from __future__ import annotations

import math

import numpy as np

from memlens.app.series.run_series import RunSeries

# Tick spacings in seconds: 1, 2, 5 x 10^k below ten seconds, then spacings a clock reads
# as round (half a minute, 5 minutes, an hour) rather than 50 s or 100 s (0:50, 1:40).
SPACINGS: tuple[float, ...] = (
    *(m * 10.0**k for k in range(-3, 1) for m in (1, 2, 5)),
    10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 10800, 21600, 43200,
    *(m * 86400 * 10**k for k in range(3) for m in (1, 2, 5)),
)
READ_WHOLE = 4096  # visible steps read at once; past that, each tick is found by bisection


class WallClock:
    """The clock of one run (`series`, swapped when the window shows another run)."""

    def __init__(self, series: RunSeries | None = None) -> None:
        self.series = series

    @property
    def count(self) -> int:
        return self.series.step_count if self.series is not None else 0

    def _time(self, i: int) -> float:
        return self.series.step_value(i, "time_s")

    def _knot(self, i: int) -> tuple[float, float]:
        """Knot i on the axis: (x, seconds); knot 0 the first step's start, knot i >= 1
        the end of step row i - 1."""
        if i == 0:
            start = self._time(0) - self.series.step_value(0, "step_ms") / 1e3
            return self.series.step_value(0, "step"), max(start, 0.0)
        return self.series.step_value(i - 1, "step") + 1.0, self._time(i - 1)

    def span(self) -> tuple[float, float] | None:
        """(first x, last x) the clock covers, or None before the first step."""
        n = self.count
        return (self._knot(0)[0], self._knot(n)[0]) if n else None

    def time_at(self, x: float) -> float:
        """Seconds since the run started at x (clamped to the steps recorded)."""
        n = self.count
        if not n:
            return math.nan
        # knots 1..n sit at step + 1: those at or left of x are the steps <= x - 1
        k = min(max(self.series.steps.index(x - 1.0, "right"), 0), n)
        if k >= n:
            return self._knot(n)[1]
        (xa, ta), (xb, tb) = self._knot(k), self._knot(k + 1)
        if x <= xa or xb <= xa:
            return ta
        return ta + (tb - ta) * (x - xa) / (xb - xa)

    def x_at(self, seconds: np.ndarray, near: tuple[float, float]) -> np.ndarray:
        """Where on the axis the run's clock reads each of `seconds` (sorted, inside the
        clock's range); `near`: an x range that holds them all (the rows read)."""
        n = self.count
        steps = self.series.steps
        i0 = max(steps.index(near[0] - 1.0, "left") - 1, 0)
        i1 = min(steps.index(near[1] - 1.0, "right") + 1, n)
        if i1 - i0 <= READ_WHOLE:
            times = self.series.history.steps.column("time_s", i0, i1)
            where = np.searchsorted(times, seconds, "left") + i0
        else:
            where = np.array([self._bisect(t, i0, i1) for t in seconds], dtype=np.int64)
        out = np.empty(len(seconds))
        for j, (t, k) in enumerate(zip(seconds, where, strict=True)):
            # the first knot at or past t is knot k + 1 (the end of row k); k == 0: the
            # first step's own start
            (xa, ta), (xb, tb) = self._knot(int(k)), self._knot(min(int(k) + 1, n))
            out[j] = xb if tb <= ta else xa + (xb - xa) * (t - ta) / (tb - ta)
        return out

    def _bisect(self, t: float, lo: int, hi: int) -> int:
        while lo < hi:
            mid = (lo + hi) // 2
            if self._time(mid) < t:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def ticks(self, x0: float, x1: float, pixels: float, min_gap_px: float
              ) -> tuple[list[float], list[float], float]:
        """Round times in view and where they fall: (x of each, seconds of each, spacing).
        The spacing is the finest that puts at most one tick per `min_gap_px` over the
        clock's part of the view; a tick closer than that to the one before it (a slow
        step holds several) is left out."""
        covered = self.span()
        if covered is None or pixels <= 0 or x1 <= x0:
            return [], [], 0.0
        lo, hi = max(x0, covered[0]), min(x1, covered[1])
        if hi <= lo:
            return [], [], 0.0
        t0, t1 = self.time_at(lo), self.time_at(hi)
        if not (math.isfinite(t0) and math.isfinite(t1)) or t1 <= t0:
            return [], [], 0.0
        most = max(int(pixels * (hi - lo) / (x1 - x0) / min_gap_px), 1)
        spacing = next((s for s in SPACINGS
                        if math.floor(t1 / s) - math.ceil(t0 / s) + 1 <= most), SPACINGS[-1])
        first, last = math.ceil(t0 / spacing - 1e-9), math.floor(t1 / spacing + 1e-9)
        seconds = np.arange(first, last + 1) * spacing
        if not len(seconds):
            return [], [], spacing
        xs = self.x_at(seconds, (lo, hi))
        per_px = (x1 - x0) / pixels
        kept_x, kept_t = [], []
        for x, t in zip(xs.tolist(), seconds.tolist(), strict=True):
            if kept_x and (x - kept_x[-1]) / per_px < min_gap_px:
                continue
            kept_x.append(x)
            kept_t.append(round(t, 9))
        return kept_x, kept_t, spacing

    def next_after(self, seconds: float, spacing: float) -> float:
        """The next round time past `seconds` at `spacing`: new steps change the ticks in
        view only once the run's clock reaches it."""
        return (math.floor(seconds / spacing + 1e-9) + 1) * spacing
