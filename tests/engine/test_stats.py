"""Counters, summary line, loop guard and loop share (spec 5, 10; scenario 6.10)."""

from __future__ import annotations

import re

import pytest

from specfleet.engine.config import ConfigError
from specfleet.engine.stats import (
    LoopGuardConfig,
    PromptLookupStats,
    Timings,
    loop_guard_fires,
    loop_share,
)


def test_tokens_per_forward_excludes_the_prefill_token():
    """6.10 tokens_per_forward_excludes_the_prefill_token."""
    stats = PromptLookupStats(rounds=4, proposed=28, accepted=20)
    assert stats.tokens_per_forward(25) == 6.0
    assert stats.acceptance_rate == 20 / 28
    assert PromptLookupStats().tokens_per_forward(1) == 0.0
    assert PromptLookupStats().acceptance_rate == 0.0
    assert PromptLookupStats(rounds=2).tokens_per_forward(0) == 0.0


def test_summary_line_is_exact():
    stats = PromptLookupStats(
        rounds=63, drafted_rounds=41, paused_rounds=0, proposed=259, accepted=147,
        shadow_confirmations=2,
    )
    assert stats.summary_line(210) == (
        "[Prompt lookup] rounds=63 drafted_rounds=41 paused_rounds=0 proposed=259 "
        "accepted=147 acceptance_rate=0.5676 tokens_per_forward=3.3175 shadow_confirmations=2"
    )
    pattern = (
        r"\[Prompt lookup\] rounds=\d+ drafted_rounds=\d+ paused_rounds=\d+ proposed=\d+ "
        r"accepted=\d+ acceptance_rate=\d\.\d{4} tokens_per_forward=\d\.\d{4} "
        r"shadow_confirmations=\d+"
    )
    assert re.fullmatch(pattern, PromptLookupStats().summary_line(0))


def test_timings_are_frozen():
    timings = Timings(prefill_s=0.5, decode_s=1.5, total_s=2.0)
    with pytest.raises(AttributeError):
        timings.total_s = 3.0  # type: ignore[misc]


def test_loop_guard_fires_on_whole_repetitions_of_the_generated_tokens():
    """Spec 10: eight 3s fire (1, 1, 8); seven do not."""
    assert not loop_guard_fires([3] * 7, 1, 1, 8)
    assert loop_guard_fires([3] * 8, 1, 1, 8)
    assert loop_guard_fires([5, 1, 2, 1, 2, 1, 2], 2, 2, 3)
    assert not loop_guard_fires([5, 1, 2, 1, 2, 1, 2], 2, 2, 4)
    assert not loop_guard_fires([1, 2, 1, 2, 1, 2], 1, 1, 3)  # period 2 is outside [1, 1]
    assert loop_guard_fires([9, 4, 5, 6, 4, 5, 6], 1, 4, 2)
    assert not loop_guard_fires([4, 5, 6, 4, 5, 7], 1, 4, 2)
    assert not loop_guard_fires([], 1, 64, 2)


def test_loop_guard_config_validates():
    assert LoopGuardConfig().validate() == LoopGuardConfig(1, 64, 8)
    for bad in [LoopGuardConfig(0, 4, 3), LoopGuardConfig(5, 4, 3), LoopGuardConfig(1, 4, 1)]:
        with pytest.raises(ConfigError, match="loop-guard"):
            bad.validate()


def test_loop_share_without_a_loop_is_zero():
    assert loop_share(list(range(100))) == 0.0
    assert loop_share([]) == 0.0


def test_loop_share_of_a_period_one_tail():
    tokens = list(range(10)) + [7] * 10
    assert loop_share(tokens) == 10 / 20
    assert loop_share([1, 2, 3, 4, 4, 4, 4, 4, 4, 4]) == 7 / 10


def test_loop_share_of_a_long_period_with_a_partial_last_copy():
    cycle = list(range(100, 140))  # period 40
    tokens = [1, 2, 3] + cycle * 3 + cycle[:5]
    assert loop_share(tokens) == 125 / 128
    assert loop_share(tokens, max_period=39) == 0.0


def test_loop_share_of_a_loop_that_ends_is_zero():
    tokens = [5, 6] * 10 + [1, 2, 3, 4]
    assert loop_share(tokens) == 0.0


def test_loop_share_needs_three_repeats():
    assert loop_share([9, 1, 2, 3, 1, 2, 3]) == 0.0
    assert loop_share([9, 1, 2, 3, 1, 2, 3, 1, 2, 3]) == 9 / 10
    assert loop_share([9, 1, 2, 3, 1, 2, 3], min_repeats=2) == 6 / 7
