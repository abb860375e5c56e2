"""Samplers (spec 2.1, 2.9, 10; scenario 6.28)."""

from __future__ import annotations

import numpy as np
import pytest

from specfleet.engine.config import ConfigError
from specfleet.engine.sampling import HostSampler, SamplerConfig, apply_repetition_penalty


def test_paths_follow_the_config():
    assert SamplerConfig().batched_argmax
    assert SamplerConfig(temperature=0.7, top_k=1).batched_argmax
    assert not SamplerConfig(temperature=0.7).batched_argmax
    assert not SamplerConfig(token_bias={1: 2.0}).batched_argmax
    penalised = SamplerConfig(repetition_penalty=1.3, repetition_last_n=3)
    assert penalised.needs_history and penalised.greedy and not penalised.batched_argmax
    assert not SamplerConfig(temperature=0.7).needs_history


def test_repetition_penalty_divides_positive_and_multiplies_negative_once_per_token():
    logits = np.array([4.0, -2.0, 0.0, 3.0, 6.0])
    apply_repetition_penalty(logits, [3, 0, 1, 2, 0, 0], penalty=2.0, last_n=5)
    # token 3 is outside the last 5; 0 appears three times but is penalised once.
    assert logits.tolist() == [2.0, -4.0, 0.0, 3.0, 6.0]


def test_penalty_with_last_n_zero_does_nothing():
    logits = np.array([4.0, 1.0])
    apply_repetition_penalty(logits, [0, 1], penalty=2.0, last_n=0)
    assert logits.tolist() == [4.0, 1.0]


def test_greedy_ties_break_toward_the_lowest_id():
    assert HostSampler(SamplerConfig()).sample([1.0, 5.0, 5.0, 2.0], []) == 1


def test_penalty_can_flip_the_greedy_choice():
    sampler = HostSampler(SamplerConfig(repetition_penalty=1.3, repetition_last_n=3))
    row = [0.0, 8.0, 7.0, 0.0]
    assert sampler.sample(row, [1]) == 2  # 8 / 1.3 < 7
    assert sampler.sample(row, [1, 0, 0, 0]) == 1  # 1 fell out of the last 3


def test_token_bias_is_added():
    sampler = HostSampler(SamplerConfig(token_bias={2: 1.5}))
    assert sampler.sample([0.0, 8.0, 7.0], []) == 2


def test_seeded_sampling_is_reproducible_and_follows_the_distribution():
    config = SamplerConfig(temperature=1.0, seed=11)
    row = np.log(np.array([0.1, 0.6, 0.3]))
    first = [HostSampler(config).sample(row, []) for _ in range(1)]
    sampler = HostSampler(config)
    draws = [sampler.sample(row, []) for _ in range(4000)]
    again = HostSampler(config)
    assert draws == [again.sample(row, []) for _ in range(4000)]
    assert first[0] == draws[0]
    freq = np.bincount(draws, minlength=3) / len(draws)
    assert np.allclose(freq, [0.1, 0.6, 0.3], atol=0.03)


def test_top_k_and_top_p_filter_the_tail():
    row = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    top_k = HostSampler(SamplerConfig(temperature=1.0, top_k=2, seed=1))
    assert {top_k.sample(row, []) for _ in range(300)} == {0, 1}
    top_p = HostSampler(SamplerConfig(temperature=1.0, top_p=0.75, seed=1))
    assert {top_p.sample(row, []) for _ in range(300)} == {0, 1}
    narrow = HostSampler(SamplerConfig(temperature=1.0, top_p=0.01, seed=1))
    assert {narrow.sample(row, []) for _ in range(50)} == {0}


def test_validate_names_the_field():
    for bad, name in [
        (SamplerConfig(temperature=-1), "temp"),
        (SamplerConfig(top_k=-1), "top-k"),
        (SamplerConfig(top_p=0.0), "top-p"),
        (SamplerConfig(repetition_penalty=0.0), "repetition-penalty"),
        (SamplerConfig(repetition_last_n=-1), "repetition-last-n"),
    ]:
        with pytest.raises(ConfigError, match=name):
            bad.validate()


def test_generate_refuses_a_sampler_with_feedback_state():
    """6.28 generate_refuses_a_sampler_with_feedback_state.

    Reading: specfleet's sampler has no feedback-state modes (mirostat, adaptive-p), so
    such a sampler cannot even be configured.
    """
    with pytest.raises(TypeError, match="mirostat"):
        SamplerConfig(temperature=0.8, mirostat=2)  # type: ignore[call-arg]
