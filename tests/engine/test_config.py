"""Prompt-lookup configuration (spec 1.2; scenarios 6.9, 6.23, 6.37)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import ClassVar

import pytest

from specfleet.engine import config as config_module
from specfleet.engine.config import (
    POLICY_NAMES,
    POLICY_OPTIONS,
    ConfigError,
    LookupOptions,
    PromptLookupConfig,
    make_governor,
    options_for,
    resolve_policy,
)
from specfleet.engine.governor import GradedGovernor, PolicyOption
from specfleet.engine.policies import POLICIES


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


class _Capped(GradedGovernor):
    """A toy policy with one option of its own: graded's budgets, never above `cap`."""

    name: ClassVar[str] = "capped"
    options: ClassVar[tuple[PolicyOption, ...]] = (PolicyOption("cap", 3, "Most per round."),)

    @classmethod
    def build(cls, max_draft: int, costs: Sequence[float], refeeds: bool,
              own: Mapping[str, int]) -> _Capped:
        governor = cls(max_draft)
        governor.cap = own["cap"]
        return governor

    def budget(self) -> int:
        return min(super().budget(), self.cap)


@pytest.fixture
def capped(monkeypatch):
    """`_Capped` in the registry, as a policy declaring an option would be."""
    monkeypatch.setitem(POLICIES, "capped", _Capped)
    monkeypatch.setitem(POLICY_OPTIONS, "cap", _Capped.options[0])
    monkeypatch.setattr(config_module, "POLICY_NAMES", (*POLICY_NAMES, "capped"))


def test_a_policy_s_own_option_is_carried_bounded_and_built(capped):
    options = options_for("capped", {"ngram_min": 1, "cap": 2})
    assert options == LookupOptions(ngram_min=1, policy_options={"cap": 2})
    config = PromptLookupConfig.of(options, "capped").validate()  # type: ignore[arg-type]
    assert make_governor(config).cap == 2  # type: ignore[attr-defined]
    default = PromptLookupConfig(policy="capped")  # type: ignore[arg-type]
    assert make_governor(default).cap == 3  # type: ignore[attr-defined]
    too_wide = replace(default, policy_options={"cap": 8})
    with pytest.raises(ConfigError, match=r"^cap \(8\) must be from 1 to max-draft \(7\)$"):
        too_wide.validate()


def test_a_policy_s_own_option_is_refused_under_another_policy(capped):
    given = options_for("graded", {"cap": 2})
    with pytest.raises(ConfigError, match="^cap is the capped policy's own; graded sizes its "
                                          r"drafts itself \(drop cap or use capped\)$"):
        PromptLookupConfig.of(given).validate()
    with pytest.raises(ConfigError, match="fixed sizes its drafts itself"):
        PromptLookupConfig.of(replace(given, adaptive=False)).validate()
    with pytest.raises(ConfigError, match=r"^no policy takes gap \(policies' own options: cap\)"):
        PromptLookupConfig(policy_options={"gap": 1}).validate()


def test_own_options_are_stored_only_where_given():
    assert "policy_options" not in PromptLookupConfig().as_dict()
    assert LookupOptions(policy_options={"cap": 2}).as_dict()["policy_options"] == {"cap": 2}
