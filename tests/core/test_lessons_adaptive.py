"""Adaptive blocks: a lesson adds interleaved rounds until its time claim is decided or its
budget is spent. The plan is driven by a seeded fake step clock (tests.core.test_lessons'
FakeStepClock: lognormal noise and an occasional 3x hiccup), step by step as the runner
drives it, and the runner is checked on the loop's phase clock replaced by that clock."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np

from memlens.core.lessons.adaptive import FULL_BUDGET, QUICK_BUDGET, AdaptiveBlocks, Budget
from memlens.core.lessons.catalog import Claim
from memlens.core.lessons.measure import WARMUP_STEPS
from memlens.core.lessons.report import change_text
from memlens.core.lessons.runner import (
    FULL_BLOCK,
    FULL_STEPS,
    QUICK_BLOCK,
    QUICK_STEPS,
    LessonRunner,
)
from memlens.core.lessons.timing import time_effect
from memlens.core.lessons.verdict import MIN_TIME_BLOCKS, time_verdict
from tests.core.test_lessons import TINY, TWENTY_FASTER, FakeStepClock, _fake_timing

AMP_FASTER = Claim("AMP is faster", "lower")
BASE_MS = 100.0  # the mlp step on a CPU without native bf16: 98.6 ms
QUICK = (QUICK_BUDGET, QUICK_STEPS, QUICK_BLOCK)
FULL = (FULL_BUDGET, FULL_STEPS, FULL_BLOCK)


def _block_medians(ms: list[float], block: int) -> list[float]:
    """As measure.py samples an arm: warm-up steps left out, one median a block."""
    ms_a, steps = np.array(ms), np.arange(len(ms))
    keep = steps >= WARMUP_STEPS
    blocks = steps[keep] // block
    return [float(np.median(ms_a[keep][blocks == b])) for b in np.unique(blocks)]


def simulate(effect: float, seed: int, plan: tuple, claim: Claim = AMP_FASTER):
    """One lesson's arms on the fake clock (the `on` arm `effect` times the `off` arm's
    step time), the base steps then rounds while the plan asks for them. Returns the
    verdict, the blocks an arm, the step seconds spent and the plan."""
    budget, base_steps, block = plan
    rate = BASE_MS / 8.0  # FakeStepClock: 4 phases of 2 ms a step at rate 1
    off_clock = FakeStepClock(rate, seed)
    on_clock = FakeStepClock(rate * effect, 10_000 + seed)
    off, on = off_clock.steps_ms(base_steps), on_clock.steps_ms(base_steps)
    adaptive = AdaptiveBlocks(budget)
    while True:
        off_s, on_s = _block_medians(off, block), _block_medians(on, block)
        spent_s = (sum(off) + sum(on)) / 1e3
        if not adaptive.another_round([(off_s, on_s, claim)], spent_s, len(off) // block):
            break
        off += off_clock.steps_ms(block)
        on += on_clock.steps_ms(block)
    enough = min(len(off_s), len(on_s)) >= MIN_TIME_BLOCKS
    verdict = time_verdict(time_effect(off_s, on_s), claim) if enough else "too few"
    return verdict, len(off_s), spent_s, adaptive


def test_a_9x_slower_amp_is_called_under_both_budgets():
    for plan in (QUICK, FULL):
        for seed in range(10):
            verdict, blocks, spent_s, _ = simulate(9.4, seed, plan)
            assert verdict == "contradicted", (plan[0], seed, blocks, spent_s)
            assert spent_s < plan[0].step_s  # decided before the budget was spent


def test_no_effect_stays_within_noise_in_most_seeded_repetitions():
    reps = 30
    for plan in (QUICK, FULL):
        verdicts = Counter(simulate(1.0, seed, plan)[0] for seed in range(reps))
        assert verdicts["within noise"] >= 0.8 * reps, (plan[0], verdicts)
        # and it ran on to the budget or the block cap: nothing decided it early
        _, blocks, spent_s, plan_used = simulate(1.0, 0, plan)
        assert spent_s >= plan[0].step_s or blocks >= plan[0].max_blocks - WARMUP_STEPS
        assert plan_used.looks >= 2


def test_a_20_percent_effect_is_found_by_the_full_report():
    reps = 20
    verdicts = Counter(simulate(0.8, seed, FULL, TWENTY_FASTER)[0] for seed in range(reps))
    assert verdicts["confirmed"] >= 0.9 * reps, verdicts


def test_intervals_are_looked_at_as_the_samples_grow_by_half():
    """Looking after every round would call a 0% effect far more often than 5%."""
    adaptive = AdaptiveBlocks(Budget(step_s=1e9, max_blocks=10_000))
    rng = np.random.default_rng(0)
    off, on, looked = [], [], []
    for n in range(1, 100):  # one block an arm a round
        off.append(float(rng.lognormal()))
        on.append(float(rng.lognormal()))
        before = adaptive.looks
        adaptive.another_round([(off, on, AMP_FASTER)], 0.0, n)
        if adaptive.looks > before:
            looked.append(n)
    assert looked[0] == MIN_TIME_BLOCKS
    assert all(b >= 1.5 * a for a, b in itertools.pairwise(looked))
    assert len(looked) >= 5


def test_the_runner_stops_a_9x_lesson_early_and_calls_it(monkeypatch):
    _fake_timing(monkeypatch, "on", 9.0)
    report = LessonRunner(["mlp"], quick=True, settings=TINY, names=("amp_bf16",)).run()
    row = next(r for r in report.rows if r.metric == "step time")
    cap = QUICK_BUDGET.max_blocks * QUICK_BLOCK
    assert row.steps["off"] == row.steps["on"] < cap
    assert row.verdict == "contradicted" and row.ci_low > 1.0 and row.change > 5


def test_the_runner_with_no_effect_runs_to_its_cap_and_reports_within_noise(monkeypatch):
    _fake_timing(monkeypatch, "on", 1.0)
    budget = Budget(step_s=1e9, max_blocks=12)
    report = LessonRunner(["mlp"], quick=True, settings=TINY, names=("amp_bf16",),
                          budget=budget).run()
    row = next(r for r in report.rows if r.metric == "step time")
    assert row.steps == {"off": 12, "on": 12}
    assert row.ci_low is not None and row.ci_low <= 1.0 <= row.ci_high


def test_a_budget_spent_before_an_interval_reports_the_change_with_too_few_samples(
        monkeypatch):
    _fake_timing(monkeypatch, "on", 9.0)
    report = LessonRunner(["mlp"], quick=True, settings=TINY, names=("amp_bf16",),
                          budget=Budget(step_s=0.0, max_blocks=40)).run()
    row = next(r for r in report.rows if r.metric == "step time")
    assert row.steps == {"off": QUICK_STEPS, "on": QUICK_STEPS}
    assert row.verdict == "too few samples" and row.change > 5
    assert change_text(row).endswith("(too few samples)")
