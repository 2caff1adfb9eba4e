"""The ratio-of-medians interval: a real difference is found, no difference is within noise."""

import numpy as np

from memlens.core.stats import median_pair_ratio, ratio_of_medians


def _noisy_steps(rng, n, base_ms, slow=1.0):
    # Step times as a loaded machine gives them: lognormal jitter plus rare long stalls.
    t = base_ms * slow * rng.lognormal(0.0, 0.15, n)
    stalls = rng.random(n) < 0.05
    t[stalls] *= rng.uniform(2.0, 5.0, stalls.sum())
    return t


def test_no_difference_is_within_noise_in_most_seeds():
    called = 0
    for seed in range(10):
        rng = np.random.default_rng(seed)
        effect = ratio_of_medians(_noisy_steps(rng, 30, 10.0), _noisy_steps(rng, 30, 10.0),
                                  seed=seed)
        called += effect.significant
        assert effect.low <= effect.ratio <= effect.high
    assert called <= 2  # a 95% interval misses 1 about once in 20


def test_a_real_twenty_percent_slowdown_is_found():
    found = 0
    for seed in range(10):
        rng = np.random.default_rng(100 + seed)
        effect = ratio_of_medians(_noisy_steps(rng, 30, 10.0),
                                  _noisy_steps(rng, 30, 10.0, slow=1.2), seed=seed)
        found += effect.significant and effect.low > 1.0
    assert found >= 8


def test_ratio_is_the_ratio_of_plain_medians():
    before, after = [4.0, 1.0, 2.0, 3.0, 100.0], [6.0, 2.0, 9.0, 8.0, 7.0]
    effect = ratio_of_medians(before, after)
    assert effect.ratio == np.median(after) / np.median(before)


def test_too_few_steps_are_never_significant_and_say_so():
    effect = ratio_of_medians([1.0, 1.0], [5.0, 5.0])
    assert not effect.significant
    assert "too few" in effect.describe()


def test_within_noise_text_names_the_width():
    rng = np.random.default_rng(3)
    steps = _noisy_steps(rng, 20, 5.0)
    effect = ratio_of_medians(steps, rng.permutation(steps))
    assert effect.ratio == 1.0 and not effect.significant
    text = effect.describe()
    assert text.startswith("step time within noise (±") and text.endswith("%)")
    assert effect.as_dict()["significant"] is False


# --- median_pair_ratio: pairs measured side by side (the watch benchmark's blocks) -----------


def test_pair_ratio_is_the_median_of_each_pairs_ratio():
    before, after = [10.0, 20.0, 40.0, 5.0], [11.0, 26.0, 40.0, 5.5]
    effect = median_pair_ratio(before, after)
    assert effect.ratio == np.median(np.array(after) / np.array(before))
    assert effect.n_before == effect.n_after == 4


def test_pairs_cancel_a_drift_both_sides_share():
    """The machine slows down and speeds up (a shared host): both sides of a pair see the
    same speed, so a real 4% cost is found where ratio_of_medians over all steps is lost."""
    found_paired = found_pooled = 0
    for seed in range(10):
        rng = np.random.default_rng(200 + seed)
        speed = rng.uniform(0.7, 1.4, 24)  # each pair's moment
        before = 10.0 * speed * rng.lognormal(0.0, 0.01, 24)
        after = 10.4 * speed * rng.lognormal(0.0, 0.01, 24)
        paired = median_pair_ratio(before, after, seed=seed)
        pooled = ratio_of_medians(before, after, seed=seed)
        assert paired.low <= 1.04 <= paired.high
        found_paired += paired.significant and paired.low > 1.0
        found_pooled += pooled.significant
    assert found_paired >= 9 and found_pooled <= 2


def test_pair_ratio_drops_broken_pairs_and_needs_three():
    effect = median_pair_ratio([1.0, float("nan"), 0.0], [1.1, 2.0, 3.0])
    assert effect.n_before == 1 and effect.ratio == 1.1 / 1.0
    assert not effect.significant  # one pair: no interval
