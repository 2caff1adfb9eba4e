"""A toggle's step-time verdict on a loaded machine: a load burst from another process slows
a run of steps together, which a bootstrap of single steps takes for an effect. The fake
clock here is such a machine: lognormal jitter plus one to three bursts a run (8-25 steps,
1.5-5x slower), at random steps or starting right at the toggle."""

from __future__ import annotations

import numpy as np

from memlens.core.effects import toggle_effect
from memlens.core.history import RunHistory
from memlens.core.records import RunEvent, StepRecord

STEPS, TOGGLE, WINDOW = 120, 60, 10
SEEDS = 100


def _history(ms: np.ndarray) -> RunHistory:
    h = RunHistory()
    h.on_start({})
    for i, t in enumerate(ms):
        if i == TOGGLE:  # a toggle that changes no work
            h.on_event(RunEvent(step=i, time_s=0.0, kind="toggle", key="eval_mode",
                                old=False, new=True))
        h.add_step(StepRecord(i, 0.0, 1.0, 1.0, float(t), 0.0, 0.0, 0.0, 0.0, 0.0,
                             0, 0, None, 0, 0, 0))
    h.on_finish({})
    return h


def _clock(seed: int, effect: float = 1.0, burst_at_toggle: bool = False,
           bursts: bool = True) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = 10.0 * rng.lognormal(0.0, 0.1, STEPS)
    if bursts:
        starts = list(rng.integers(0, STEPS, rng.integers(1, 4)))
        if burst_at_toggle:
            starts.append(TOGGLE)
        for s0 in starts:
            t[s0:s0 + rng.integers(8, 26)] *= rng.uniform(1.5, 5.0)
    t[TOGGLE:] *= effect
    return t


def _verdicts(**clock) -> list:
    out = []
    for seed in range(SEEDS):
        h = _history(_clock(seed, **clock))
        (event,) = h.events()
        out.append(toggle_effect(h, event, WINDOW).time)
    return out


def _naive_calls(**clock) -> int:
    """What the steps' own before/after medians look like to a test that knows nothing of
    the machine: the window's medians differ by over 20% (the bursts are strong enough to
    fool a per-step comparison, or this test proves nothing)."""
    n = 0
    for seed in range(SEEDS):
        t = _clock(seed, **clock)
        r = np.median(t[TOGGLE:TOGGLE + WINDOW]) / np.median(t[TOGGLE - WINDOW:TOGGLE])
        n += abs(np.log(r)) > np.log(1.2)
    return n


def test_a_no_op_toggle_is_within_noise_through_load_bursts_at_random_steps():
    assert _naive_calls() >= 0.15 * SEEDS
    called = sum(t.significant for t in _verdicts())
    assert called <= 0.05 * SEEDS


def test_a_no_op_toggle_is_within_noise_when_a_burst_begins_at_the_toggle():
    assert _naive_calls(burst_at_toggle=True) >= 0.8 * SEEDS
    verdicts = _verdicts(burst_at_toggle=True)
    assert sum(t.significant for t in verdicts) <= 0.05 * SEEDS
    # what it says: the later steps of the same setting did not keep the slowdown
    said = [t.describe() for t in verdicts if t.beyond_noise and not t.lasts]
    assert said and all("the machine's load" in s for s in said)


def test_a_ninefold_slowdown_is_called_through_the_same_bursts():
    found = sum(t.significant and t.low > 1.0 for t in _verdicts(effect=9.0))
    assert found >= 0.8 * SEEDS


def test_a_thirty_percent_slowdown_is_called_on_a_quiet_machine():
    found = sum(t.significant and t.low > 1.0 for t in _verdicts(effect=1.3, bursts=False))
    assert found >= 0.8 * SEEDS
    none = sum(t.significant for t in _verdicts(effect=1.0, bursts=False))
    assert none <= 0.05 * SEEDS
