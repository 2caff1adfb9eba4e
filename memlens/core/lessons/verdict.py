"""A claim against a measurement: confirmed, larger, smaller, not seen, contradicted, within noise.

Memory figures are exact bytes, so a difference is real or absent; a claimed size is met
when the measured change is within a factor SIZE_FACTOR of it. Time figures are medians of
noisy steps: the ratio on/off and its bootstrap interval (memlens.core.stats) decide; an interval
that includes 1 is "within noise", and a claimed size is met when the interval holds it.
"""

from __future__ import annotations

from typing import Protocol

from memlens.core.lessons.catalog import Claim


class TimeFigure(Protocol):
    """A time ratio on/off with its interval (lessons.timing.TimeEffect)."""

    ratio: float
    low: float
    high: float

    @property
    def significant(self) -> bool: ...

VERDICTS = ("confirmed", "larger", "smaller", "not seen", "contradicted", "within noise",
            "too few samples", "lower bound")
# A time figure whose arms ran fewer than MIN_TIME_BLOCKS blocks (the budget ran out): the
# change is shown as measured, with no interval, and this verdict, never "within noise".
TOO_FEW = "too few samples"
# A figure that is only a lower bound (a CPU step peak in light mode: the largest
# phase-boundary total, blind to what a kernel allocates and frees inside a phase): shown,
# never judged.
LOWER_BOUND = "lower bound"
SIZE_FACTOR = 1.5
# Exact figures closer than this (relative) are the same for a verdict: a few bytes of
# bookkeeping are not what a claim is about.
SAME = 0.01
# A time figure from fewer blocks than this on either arm gets no interval and no claim:
# a percentile bootstrap of a few pairs calls chance significant, and the run's own
# unchanged splits (lessons.timing: an arm's blocks paired a round to four apart) need
# this many to gauge the machine's noise at all.
MIN_TIME_BLOCKS = 8


def exact_verdict(off: float | None, on: float | None, claim: Claim | None,
                  floor: float = 0.0) -> str:
    """Verdict for exact figures (memory bytes, error counts); a difference of `floor` or
    less is "not seen" too (a process figure's own noise: the heap's)."""
    if claim is None or off is None or on is None:
        return ""
    diff = on - off
    scale = max(abs(off), abs(on))
    if scale == 0 or abs(diff) <= max(SAME * scale, floor):
        return "not seen"
    if (diff < 0) != (claim.direction == "lower"):
        return "contradicted"
    if claim.change is None or off == 0:
        return "confirmed"
    measured, claimed = abs(diff / off), abs(claim.change)
    if measured > claimed * SIZE_FACTOR:
        return "larger"
    if measured < claimed / SIZE_FACTOR:
        return "smaller"
    return "confirmed"


def time_verdict(ci: TimeFigure, claim: Claim | None) -> str:
    """Verdict for a time ratio on/off with its interval."""
    if claim is None or ci.ratio != ci.ratio:  # no claim, or not measured (nan)
        return ""
    if not ci.significant:
        return "within noise"
    if (ci.ratio < 1.0) != (claim.direction == "lower"):
        return "contradicted"
    if claim.change is None:
        return "confirmed"
    target = 1.0 + claim.change
    if ci.low <= target <= ci.high:
        return "confirmed"
    further = ci.high < target if claim.direction == "lower" else ci.low > target
    return "larger" if further else "smaller"
