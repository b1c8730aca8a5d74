"""The paired bootstrap over test items and seeds behind the report's headline, on synthetic outcomes
whose true difference is known.
"""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.statistics import MDE_FACTOR, paired_bootstrap_items_and_seeds


def seed_runs(n: int, seeds, seed_effect: dict[int, float], base_seed: int) -> dict[int, np.ndarray]:
    """Per seed: an item difficulty shared by every run, plus the seed's effect, plus run noise."""
    difficulty = np.random.default_rng(0).normal(0.5, 0.2, size=n)
    return {
        s: difficulty
        + seed_effect.get(s, 0.0)
        + np.random.default_rng([base_seed, s]).normal(0, 0.05, size=n)
        for s in seeds
    }


def test_planted_shift_is_covered_and_zero_is_excluded():
    baseline = seed_runs(3000, [0, 1, 2], {}, base_seed=1)
    method = {
        s: v + 0.1 + np.random.default_rng(10 + s).normal(0, 0.1, size=v.size) for s, v in baseline.items()
    }
    result = paired_bootstrap_items_and_seeds(method, baseline, n_resamples=2000, seed=0)
    assert result["ci_low"] < 0.1 < result["ci_high"]
    assert result["ci_low"] > 0 and result["p_value"] < 0.01
    assert result["difference"] == pytest.approx(0.1, abs=0.01)
    assert result["mde"] == MDE_FACTOR * result["se"] and 0 < result["mde"] < 0.1
    assert result["paired_seeds"] == [0, 1, 2] and result["n_items"] == 3000
    reverse = paired_bootstrap_items_and_seeds(baseline, method, n_resamples=2000, seed=0)
    assert reverse["difference"] == pytest.approx(-result["difference"])
    assert reverse["ci_high"] == pytest.approx(-result["ci_low"])


def test_binary_hits_with_a_planted_shift_of_one_tenth():
    # baseline hits with p = 0.5; the method also hits on exactly 10% of the items the baseline missed...
    # chosen so that the method is exactly 0.1 above the baseline on every seed
    n = 2000
    baseline, method = {}, {}
    for s in range(3):
        rng = np.random.default_rng(20 + s)
        hits = (rng.random(n) < 0.5).astype(float)
        shifted = hits.copy()
        shifted[rng.choice(np.flatnonzero(hits == 0), size=n // 10, replace=False)] = 1.0
        baseline[s], method[s] = hits, shifted
    result = paired_bootstrap_items_and_seeds(method, baseline, n_resamples=2000)
    assert result["difference"] == pytest.approx(0.1)
    assert 0 < result["ci_low"] < 0.1 < result["ci_high"]
    # per seed and item the difference is 0/1 with p = 0.1 (variance 0.09), independent across seeds.
    # Items: the mean over 3 seeds has variance 0.09 / 3 per item. Seeds: drawing 3 of 3 with replacement
    # adds the spread of the seed means (each carries its own item noise, 0.09 / n), times (3 - 1) / 3 / 3.
    # Total variance 0.09 / (3 n) * (1 + 2 / 3): the two-level bootstrap counts item noise a little twice,
    # which errs on the wide side.
    assert result["se"] == pytest.approx(np.sqrt(0.09 / (3 * n) * 5 / 3), rel=0.15)


def test_no_true_difference_contains_zero_with_a_positive_mde():
    # two methods drawn from the same distribution (independent runs on the same items)
    rng = np.random.default_rng(30)
    n = 2000
    method = {0: (rng.random(n) < 0.5).astype(float)}
    baseline = {0: (rng.random(n) < 0.5).astype(float)}
    result = paired_bootstrap_items_and_seeds(method, baseline, n_resamples=2000)
    assert result["ci_low"] < 0 < result["ci_high"]
    # independent 0/1 outcomes with p = 1/2: the per-item difference has variance 1/2
    assert result["se"] == pytest.approx(np.sqrt(0.5 / n), rel=0.1)
    assert result["mde"] == pytest.approx(MDE_FACTOR * np.sqrt(0.5 / n), rel=0.1) and result["mde"] > 0


def test_identical_outcomes_have_a_zero_difference_and_no_spread():
    # the very same per-item outcomes (e.g. two variants that trained the same model): every replicate
    # difference is 0, so the interval is [0, 0] and the standard error (hence the MDE) is 0
    hits = {0: np.random.default_rng(31).integers(0, 2, size=500).astype(float)}
    result = paired_bootstrap_items_and_seeds(hits, hits, n_resamples=500)
    assert result["difference"] == 0.0 and result["ci_low"] == 0.0 == result["ci_high"]
    assert result["se"] == 0.0 and result["mde"] == 0.0 and result["p_value"] == 1.0


def test_seed_resampling_widens_the_interval_when_seeds_disagree():
    baseline = seed_runs(2000, [0, 1, 2], {}, base_seed=2)
    agreeing = seed_runs(2000, [0, 1, 2], {}, base_seed=3)
    disagreeing = seed_runs(2000, [0, 1, 2], {0: 0.15, 1: -0.15}, base_seed=3)
    calm = paired_bootstrap_items_and_seeds(agreeing, baseline, n_resamples=1000)
    noisy = paired_bootstrap_items_and_seeds(disagreeing, baseline, n_resamples=1000)
    assert calm["difference"] == pytest.approx(noisy["difference"])  # the seed effects cancel in the mean
    assert noisy["se"] > 10 * calm["se"]
    assert noisy["ci_low"] < 0 < noisy["ci_high"]


def test_seeds_pair_a_shared_seed_effect_away():
    # a seed effect both methods share (a "lucky" seed) cancels when their runs are paired by seed, but
    # not when they ran different seeds
    effect = {0: 0.2, 1: -0.2, 2: 0.0, 10: 0.2, 11: -0.2, 12: 0.0}
    baseline = seed_runs(1000, [0, 1, 2], effect, base_seed=4)
    method_same_seeds = seed_runs(1000, [0, 1, 2], effect, base_seed=5)
    method_other_seeds = {s + 10: v for s, v in method_same_seeds.items()}
    paired = paired_bootstrap_items_and_seeds(method_same_seeds, baseline, n_resamples=1000)
    unpaired = paired_bootstrap_items_and_seeds(method_other_seeds, baseline, n_resamples=1000)
    assert paired["paired_seeds"] == [0, 1, 2] and unpaired["paired_seeds"] == []
    assert unpaired["method_seeds"] == [10, 11, 12] and unpaired["baseline_seeds"] == [0, 1, 2]
    assert paired["difference"] == pytest.approx(unpaired["difference"])
    assert unpaired["se"] > 10 * paired["se"]


def test_partly_paired_seeds_and_determinism():
    baseline = seed_runs(500, [0, 1], {}, base_seed=6)
    method = seed_runs(500, [0, 1, 2], {}, base_seed=7)
    first = paired_bootstrap_items_and_seeds(method, baseline, n_resamples=300, seed=3)
    assert first == paired_bootstrap_items_and_seeds(method, baseline, n_resamples=300, seed=3)
    assert first["paired_seeds"] == [0, 1] and first["method_seeds"] == [0, 1, 2]
    expected = np.mean([v.mean() for v in method.values()]) - np.mean([v.mean() for v in baseline.values()])
    assert first["difference"] == pytest.approx(expected)


def test_guards():
    ones = {0: np.ones(4)}
    with pytest.raises(ValueError, match="same test items"):
        paired_bootstrap_items_and_seeds(ones, {0: np.ones(5)})
    with pytest.raises(ValueError, match="axis 0"):
        paired_bootstrap_items_and_seeds({0: np.ones((2, 4))}, ones)
    with pytest.raises(ValueError, match="at least one seed"):
        paired_bootstrap_items_and_seeds({}, ones)
    with pytest.raises(ValueError, match="NaN"):
        paired_bootstrap_items_and_seeds({0: np.array([1.0, np.nan, 0.0, 1.0])}, ones)
    with pytest.raises(ValueError, match="n_resamples"):
        paired_bootstrap_items_and_seeds(ones, ones, n_resamples=1)
