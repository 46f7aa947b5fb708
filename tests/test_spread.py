"""The spread across items (seed 004 Result 1, "Induction strength is very different from one token to the next"):
analysis.spread."""

from __future__ import annotations

import numpy as np
import pytest

from depthlab.analysis.spread import coefficient_of_variation, spread


def test_the_coefficient_of_variation_is_the_sd_over_the_mean() -> None:
    values = np.array([22.0, 24.0, 26.0])  # sd 2 (ddof 1), mean 24
    assert coefficient_of_variation(values) == pytest.approx(2 / 24)
    assert coefficient_of_variation(np.full(5, 3.0)) == 0
    assert np.isnan(coefficient_of_variation(np.array([-1.0, 1.0])))


def test_the_bootstrap_interval_holds_the_estimate_and_narrows_with_more_items() -> None:
    rng = np.random.default_rng(0)
    few, many = spread(rng.normal(24, 0.9, 32)), spread(rng.normal(24, 0.9, 1024))
    for s in (few, many):
        assert s["cv_low"] <= s["cv"] <= s["cv_high"]
    assert many["cv_high"] - many["cv_low"] < (few["cv_high"] - few["cv_low"]) / 3
    assert many["cv_low"] < 0.9 / 24 < many["cv_high"]  # the population's CV inside the interval
    assert spread(rng.normal(5.3, 1.7, 512))["cv_low"] > many["cv_high"]  # a spread 8x as large is told apart


def test_the_between_item_spread_takes_the_sampling_noise_out() -> None:
    rng = np.random.default_rng(1)
    noise_only = 24 + rng.normal(0, 0.5, 4096)  # every item the same but for noise of standard error 0.5
    assert spread(noise_only, se=np.full(4096, 0.5), resamples=10)["between_sd"] < 0.05
    real = 24 + rng.normal(0, 2.0, 4096) + rng.normal(0, 0.5, 4096)
    assert spread(real, se=np.full(4096, 0.5), resamples=10)["between_sd"] == pytest.approx(2.0, rel=0.05)


def test_one_item_is_refused() -> None:
    with pytest.raises(ValueError, match="at least two items"):
        spread(np.array([1.0]))
