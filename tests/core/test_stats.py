"""The ratio-of-medians interval: a real difference is found, no difference is within noise."""

import numpy as np

from memlens.core.stats import ratio_of_medians


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
