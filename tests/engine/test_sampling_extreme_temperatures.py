"""The host sampler at the edges of the temperature range the CLI and matrices accept."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from specfleet.engine.config import ConfigError
from specfleet.engine.sampling import HostSampler, SamplerConfig


@pytest.mark.parametrize("temperature", [1e-320, 5e-324, 1e-300])
def test_a_tiny_temperature_samples_among_the_maxima_without_nan(temperature):
    # logits / 1e-320 overflowed to inf, and inf - inf made every probability nan: the
    # sampler then picked the last token id whatever the logits said.
    row = [1.0, 5.0, 2.0, -3.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow or invalid-value warning on stderr
        for config in (SamplerConfig(temperature=temperature, seed=0),
                       SamplerConfig(temperature=temperature, seed=0, top_k=2),
                       SamplerConfig(temperature=temperature, seed=0, top_p=0.5)):
            sampler = HostSampler(config)
            assert {sampler.sample(row, []) for _ in range(20)} == {1}


def test_a_tiny_temperature_splits_tied_maxima():
    sampler = HostSampler(SamplerConfig(temperature=1e-320, seed=3))
    draws = [sampler.sample([0.0, 4.0, 4.0, 1.0], []) for _ in range(200)]
    assert set(draws) == {1, 2}


def test_the_highest_accepted_temperature_spreads_but_keeps_the_order():
    sampler = HostSampler(SamplerConfig(temperature=10.0, seed=1))
    row = np.log(np.array([0.7, 0.2, 0.1]))
    counts = np.bincount([sampler.sample(row, []) for _ in range(3000)], minlength=3)
    expected = np.exp(row / 10.0) / np.exp(row / 10.0).sum()
    assert np.allclose(counts / counts.sum(), expected, atol=0.03)


@pytest.mark.parametrize("temperature", [math.nan, math.inf, -math.inf])
def test_validate_refuses_a_temperature_that_is_not_a_finite_number(temperature):
    # nan passed `temperature < 0` and then sampled from nan probabilities.
    with pytest.raises(ConfigError, match="temp must be a finite number >= 0"):
        SamplerConfig(temperature=temperature).validate()
