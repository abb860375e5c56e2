"""Prompt-lookup configuration (spec 1.2; scenarios 6.9, 6.23, 6.37)."""

from __future__ import annotations

import pytest

from specfleet.engine.config import (
    ConfigError,
    LookupOptions,
    PromptLookupConfig,
    options_for,
    resolve_policy,
)


def test_config_validation():
    """6.9 config_validation."""
    assert PromptLookupConfig().validate() == PromptLookupConfig(3, 2, 7, True, "graded")
    with pytest.raises(ConfigError, match="ngram-min must be at least 1"):
        PromptLookupConfig(ngram_min=0).validate()
    with pytest.raises(ConfigError, match=r"ngram-max \(2\) must be >= ngram-min \(3\)"):
        PromptLookupConfig(ngram_max=2, ngram_min=3).validate()
    with pytest.raises(ConfigError, match="max-draft must be at least 1"):
        PromptLookupConfig(max_draft=0).validate()


def test_config_validation_bounds_the_index_and_the_verify_block():
    """6.23 config_validation_bounds_the_index_and_the_verify_block."""
    PromptLookupConfig(ngram_max=16, ngram_min=2, max_draft=64).validate()
    with pytest.raises(ConfigError, match=r"ngram-max \(17\) must be at most 16"):
        PromptLookupConfig(ngram_max=17).validate()
    with pytest.raises(ConfigError, match=r"max-draft \(65\) must be at most 64"):
        PromptLookupConfig(max_draft=65).validate()


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)
    with pytest.raises(ConfigError, match="policy"):
        PromptLookupConfig(policy="fast").validate()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "device, policy", [("cuda", "gated"), ("metal", "graded"), ("cpu", "graded"), ("mps", "graded")]
)
def test_default_policy_follows_the_build(device, policy):
    """6.37 default_policy_follows_the_build: auto is Gated iff the backend is CUDA."""
    assert resolve_policy("auto", device) == policy
    assert resolve_policy("graded", "cuda") == "graded"
    assert resolve_policy("gated", "cpu") == "gated"
    with pytest.raises(ConfigError, match="prompt-lookup-policy"):
        resolve_policy("fast", device)


def test_with_max_draft_copies():
    config = PromptLookupConfig(policy="gated")
    assert config.with_max_draft(2) == PromptLookupConfig(policy="gated", max_draft=2)


def test_options_run_under_a_policy_keep_every_option():
    options = LookupOptions(ngram_max=4, ngram_min=1, max_draft=5, adaptive=False)
    assert PromptLookupConfig.of(options, "calibrated", (1.0, 1.5)) == PromptLookupConfig(
        4, 1, 5, False, "calibrated", (1.0, 1.5))


def test_options_given_take_the_policy_s_own_max_draft_when_left_out():
    assert options_for("calibrated", {"ngram_min": 1}) == LookupOptions(ngram_min=1,
                                                                        max_draft=32)
    assert options_for("graded", {"max_draft": 3}).max_draft == 3
