"""How many blocks a lesson runs: more interleaved rounds until its time claims are decided,
or a time budget is spent.

A lesson with a claimed time figure keeps adding rounds (one block an arm) after its base
steps until every such figure's interval excludes 1 or the claimed size, or until the
arms' measured step time reaches the budget (or an arm reaches `max_blocks`). Looking after
every round and stopping at the first interval that excludes 1 would call a 0% effect
significant far more often than 5%: intervals are looked at only as the sample count grows
by half (8, 12, 18, 27, ... blocks an arm), at INTERIM_CONFIDENCE; the figure reported is
the usual 95% interval of all the blocks run, widened to the run's own noise
(lessons.timing).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from memlens.core.lessons.catalog import Claim
from memlens.core.lessons.timing import time_effect
from memlens.core.lessons.verdict import MIN_TIME_BLOCKS

INTERIM_CONFIDENCE = 0.99
LOOK_GROWTH = 1.5


@dataclass(frozen=True)
class Budget:
    """What one lesson may spend on rounds beyond its base steps."""

    step_s: float  # seconds of measured step time, both arms together
    max_blocks: int  # blocks an arm, at most


# quick: time for the rounds the noise gauge needs (MIN_TIME_BLOCKS) of a 1 s bf16 step
# on a CPU that emulates it
QUICK_BUDGET = Budget(step_s=15.0, max_blocks=40)
# blocks of one step (the arms take turns step by step): a cap in steps as well
FULL_BUDGET = Budget(step_s=60.0, max_blocks=240)


def decided(off: Sequence[float], on: Sequence[float], claim: Claim | None) -> bool:
    """Whether more blocks could not change what this figure says about its claim: the
    interim interval (widened to the run's own noise, lessons.timing) excludes 1, or
    excludes the claimed size. `off`, `on`: the arms' samples paired by round."""
    if min(len(off), len(on)) < MIN_TIME_BLOCKS:
        return False
    ci = time_effect(off, on, confidence=INTERIM_CONFIDENCE)
    if not math.isfinite(ci.ratio):
        return True  # nothing to measure (no eval steps, say): more blocks will not help
    if ci.noise is None:
        return False
    if ci.low > 1.0 or ci.high < 1.0:
        return True
    if claim is not None and claim.change is not None:
        return not ci.low <= 1.0 + claim.change <= ci.high
    return False


class AdaptiveBlocks:
    """Asked after each round: run another? `figures`: (off samples, on samples, claim)
    for each claimed time figure; `spent_s`: the arms' measured step time so far;
    `blocks`: the blocks each arm has run."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self._next_look = MIN_TIME_BLOCKS
        self.looks = 0  # intervals looked at (for tests and the report)

    def another_round(self, figures: list[tuple[Sequence[float], Sequence[float],
                                                 Claim | None]],
                      spent_s: float, blocks: int) -> bool:
        if spent_s >= self.budget.step_s or blocks >= self.budget.max_blocks:
            return False
        n = min((min(len(off), len(on)) for off, on, _ in figures), default=0)
        if n < self._next_look:
            return True
        while self._next_look <= n:
            self._next_look = max(self._next_look + 1, math.ceil(self._next_look * LOOK_GROWTH))
        self.looks += 1
        return not all(decided(off, on, claim) for off, on, claim in figures)
