"""Draft policies (spec 3, 4; scenarios 6.11-6.17, 6.30-6.35, 6.39)."""

from __future__ import annotations

import pytest

from specfleet.engine.config import PromptLookupConfig, make_governor
from specfleet.engine.governor import (
    FixedGovernor,
    GatedGovernor,
    GradedGovernor,
    round_half_away,
)


def pause_length(governor) -> int:
    """Consecutive zero budgets from now (the first non-zero budget is consumed)."""
    zeros = 0
    while governor.budget() == 0:
        zeros += 1
        assert zeros < 1000
    return zeros


def miss_streak(governor) -> None:
    for _ in range(3):
        assert governor.budget() > 0
        governor.record(0)


def test_governor_starts_with_the_full_block():
    """6.11 governor_starts_with_the_full_block."""
    assert GradedGovernor(7).budget() == 7


def test_governor_keeps_the_full_block_while_blocks_land():
    """6.12 governor_keeps_the_full_block_while_blocks_land."""
    governor = GradedGovernor(7)
    for _ in range(10):
        governor.record(6)
    assert governor.budget() == 7


def test_governor_shortens_the_block_when_few_tokens_land():
    """6.13 governor_shortens_the_block_when_few_tokens_land."""
    governor = GradedGovernor(7)
    for _ in range(10):
        governor.record(1)
    assert governor.budget() == 4


def test_governor_pauses_after_repeated_misses_and_backs_off():
    """6.14 governor_pauses_after_repeated_misses_and_backs_off."""
    governor = GradedGovernor(7)
    governor.record(0)
    governor.record(0)
    assert governor.budget() > 0  # two misses still propose
    governor.record(0)
    assert pause_length(governor) == 4
    miss_streak(governor)
    assert pause_length(governor) == 8


def test_three_misses_from_the_start_give_budgets_7_7_6_then_a_pause_of_4_then_4():
    """Spec 3 worked example."""
    governor = GradedGovernor(7)
    budgets = []
    for _ in range(3):
        budgets.append(governor.budget())
        governor.record(0)
    assert budgets == [7, 7, 6]
    assert [governor.budget() for _ in range(5)] == [0, 0, 0, 0, 4]


def test_governor_backoff_resets_once_a_round_lands():
    """6.15 governor_backoff_resets_once_a_round_lands."""
    governor = GradedGovernor(7)
    for expected in (4, 8, 16):
        miss_streak(governor)
        assert pause_length(governor) == expected
    governor.record(2)
    miss_streak(governor)
    assert pause_length(governor) == 4


def test_governor_backoff_is_capped():
    """6.16 governor_backoff_is_capped."""
    governor = GradedGovernor(7)
    lengths = []
    for _ in range(10):
        miss_streak(governor)
        lengths.append(pause_length(governor))
    assert lengths[:5] == [4, 8, 16, 32, 32]
    assert lengths[-1] == 32


def test_misses_count_only_among_drafted_rounds():
    """Undrafted rounds (budget calls without record) neither count nor reset misses."""
    governor = GradedGovernor(7)
    governor.record(0)
    governor.record(0)
    for _ in range(5):
        governor.budget()
    governor.record(0)
    assert pause_length(governor) == 4


def test_non_adaptive_governor_always_proposes_max_draft():
    """6.17 non_adaptive_governor_always_proposes_max_draft."""
    governor = make_governor(PromptLookupConfig(adaptive=False, policy="gated"))
    assert isinstance(governor, FixedGovernor)
    for _ in range(20):
        governor.record(0)
        assert governor.budget() == 7
    assert not governor.probes_while_paused()


@pytest.mark.parametrize(
    "accepted, budget", [((), 7), ((0,), 7), ((1, 1, 0), 5), ((0, 0), 6), ((1,) * 20, 4)]
)
def test_graded_budget_map_rounds_half_away_from_zero(accepted, budget):
    """Spec 3 budget map and 8.8: ema 1.25 gives 5 (Python's round would give 4)."""
    governor = GradedGovernor(7)
    for value in accepted:
        governor.record(value)
    assert governor.budget() == budget


def test_round_half_away_is_not_bankers_rounding():
    """Spec 8.8."""
    assert [round_half_away(x) for x in (0.5, 1.5, 2.5, 3.49, 3.5)] == [1, 2, 3, 3, 4]


def test_gated_governor_starts_narrow_on_probation():
    """6.30 gated_governor_starts_narrow_on_probation."""
    governor = GatedGovernor(7)
    assert governor.budget() == 2
    assert governor.state().probation
    governor.record(0)
    assert governor.budget() == 0
    assert governor.probes_while_paused()


def test_gated_pause_has_no_length_and_ends_on_a_confirmed_proposal():
    """6.31 gated_pause_has_no_length_and_ends_on_a_confirmed_proposal."""
    governor = GatedGovernor(7)
    governor.record(0)
    assert all(governor.budget() == 0 for _ in range(1000))
    governor.shadow_confirmed()
    assert governor.budget() == 2
    governor.record(0)  # on probation again: one miss pauses
    assert governor.budget() == 0


def test_gated_block_widens_after_a_whole_narrow_block_and_narrows_after_misses():
    """6.32 gated_block_widens_after_a_whole_narrow_block_and_narrows_after_misses."""
    governor = GatedGovernor(7)
    governor.record(2)
    assert governor.budget() == 7
    governor.record(5)
    assert governor.budget() == 7
    governor.record(0)
    governor.record(0)
    assert governor.budget() == 2
    governor.record(0)
    assert governor.budget() == 0


def test_gated_block_never_uses_the_widths_between_narrow_and_full():
    """6.33 gated_block_never_uses_the_widths_between_narrow_and_full."""
    governor = GatedGovernor(7)
    seen = set()
    for accepted in [2, 5, 7, 1, 0, 0, 3, 0, 0, 0, 2, 2, 6, 0, 1, 0, 0, 0, 4, 0] * 3:
        budget = governor.budget()
        seen.add(budget)
        if budget == 0:
            governor.shadow_confirmed()
            continue
        governor.record(min(accepted, budget))
    assert seen <= {0, 2, 7}
    assert seen == {0, 2, 7}


def test_gated_respects_a_max_draft_below_the_narrow_block():
    """6.34 gated_respects_a_max_draft_below_the_narrow_block."""
    governor = GatedGovernor(1)
    assert governor.budget() == 1
    governor.record(1)
    assert governor.budget() == 1
    assert not governor.state().probation  # a whole (1-token) narrow block


def test_shadow_confirmation_is_ignored_unless_paused_and_gated():
    """6.35 shadow_confirmation_is_ignored_unless_paused_and_gated."""
    gated = GatedGovernor(7)
    gated.record(2)
    gated.shadow_confirmed()
    assert gated.budget() == 7
    graded = GradedGovernor(7)
    for _ in range(3):
        graded.record(0)
    graded.shadow_confirmed()
    assert not graded.probes_while_paused()
    assert pause_length(graded) == 4
    fixed = FixedGovernor(7)
    fixed.shadow_confirmed()
    assert fixed.budget() == 7 and not fixed.probes_while_paused()


def test_gated_probation_ends_only_on_a_whole_narrow_block():
    """6.39 gated_probation_ends_only_on_a_whole_narrow_block."""
    governor = GatedGovernor(7)
    governor.record(1)
    assert governor.budget() == 2 and governor.state().probation
    governor.record(0)
    assert governor.budget() == 0
    governor = GatedGovernor(7)
    governor.record(2)
    governor.record(0)  # off probation: a miss narrows (ema 0.75) instead of pausing
    assert governor.budget() == 2 and not governor.state().probation


def test_make_governor_follows_the_config():
    assert isinstance(make_governor(PromptLookupConfig(policy="gated")), GatedGovernor)
    assert isinstance(make_governor(PromptLookupConfig(policy="graded")), GradedGovernor)


@pytest.mark.parametrize("governor", [GradedGovernor(7), GatedGovernor(7), FixedGovernor(7)],
                         ids=["graded", "gated", "fixed"])
def test_the_spec_policies_verify_the_whole_proposal(governor):
    """Spec 2.4 (c): draft = find(context)[:budget]; `size` after the lookup is the identity."""
    for n in range(8):
        assert governor.size(list(range(n)), 3) == n
        assert governor.size(list(range(n)), 2) == n
