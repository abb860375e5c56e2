"""The n-gram drafter and the shadow probe (spec 1, 4.1; scenarios 6.1-6.8, 6.18-6.20, 6.36)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specfleet.engine.config import PromptLookupConfig
from specfleet.engine.governor import SHADOW_CONFIRM
from specfleet.engine.lookup import NgramIndex, ShadowProbe, cycle_out, find_draft
from specfleet.engine.runners.toy import lcg_tokens


def cfg(ngram_max: int, ngram_min: int, max_draft: int) -> PromptLookupConfig:
    return PromptLookupConfig(ngram_max=ngram_max, ngram_min=ngram_min, max_draft=max_draft)


def index_find(context: list[int], config: PromptLookupConfig) -> list[int]:
    index = NgramIndex(config.ngram_min, config.ngram_max)
    index.extend(context)
    return index.find(context, config.max_draft)


@pytest.fixture(params=["scan", "index"])
def lookup(request):
    """Every scenario holds for the reference scan and for the incremental index."""
    return find_draft if request.param == "scan" else index_find


def test_proposes_the_tokens_after_an_earlier_occurrence(lookup):
    """6.1 proposes_the_tokens_after_an_earlier_occurrence."""
    assert lookup([9, 1, 2, 3, 4, 5, 6, 8, 1, 2], cfg(2, 1, 3)) == [3, 4, 5]


def test_draft_is_capped_by_max_draft_and_context_end(lookup):
    """6.2 draft_is_capped_by_max_draft_and_context_end."""
    assert lookup([1, 2, 3, 4, 1, 2], cfg(3, 1, 7)) == [3, 4, 1, 2]
    assert lookup([1, 2, 3, 4, 1, 2], cfg(3, 1, 1)) == [3]


def test_prefers_the_longest_matching_suffix(lookup):
    """6.3 prefers_the_longest_matching_suffix: a 2-gram beats a later 1-gram."""
    assert lookup([0, 0, 0, 5, 2, 7, 2, 9, 5, 2], cfg(2, 1, 1)) == [7]


def test_prefers_the_most_recent_occurrence_of_a_given_length(lookup):
    """6.4 prefers_the_most_recent_occurrence_of_a_given_length."""
    assert lookup([1, 2, 10, 1, 2, 20, 1, 2], cfg(2, 2, 1)) == [20]


def test_never_matches_the_suffix_against_itself(lookup):
    """6.5 never_matches_the_suffix_against_itself."""
    assert lookup([1, 2, 3, 4], cfg(1, 1, 3)) == []


def test_falls_back_to_shorter_ngrams(lookup):
    """6.6 falls_back_to_shorter_ngrams."""
    assert lookup([4, 7, 8, 3, 4], cfg(2, 1, 2)) == [7, 8]
    assert lookup([4, 7, 8, 3, 4], cfg(2, 2, 2)) == []


def test_short_and_empty_contexts_propose_nothing(lookup):
    """6.7 short_and_empty_contexts_propose_nothing."""
    assert lookup([], PromptLookupConfig()) == []
    assert lookup([1], PromptLookupConfig()) == []
    assert lookup([1, 1], cfg(3, 1, 7)) == [1]


def test_repeated_run_proposes_the_run(lookup):
    """6.8 repeated_run_proposes_the_run: no cyclic self-extension."""
    assert lookup([7, 7, 7, 7], cfg(2, 1, 5)) == [7]


def test_default_ngram_min_skips_single_token_matches(lookup):
    """6.18 default_ngram_min_skips_single_token_matches."""
    assert lookup([4, 7, 8, 3, 4], PromptLookupConfig()) == []


@pytest.mark.parametrize("seed, alphabet", [(1, 3), (2, 5), (3, 11), (4, 40)])
@pytest.mark.parametrize(
    "config", [cfg(3, 1, 7), cfg(3, 2, 7), cfg(5, 2, 4), cfg(1, 1, 3)], ids=str
)
def test_index_matches_the_scan_at_every_length(seed, alphabet, config):
    """6.19 index_matches_the_scan_at_every_length: grown one token at a time."""
    tokens = lcg_tokens(seed, 300, alphabet)
    index = NgramIndex(config.ngram_min, config.ngram_max)
    for length in range(301):
        context = tokens[:length]
        index.extend(context)
        assert index.find(context, config.max_draft) == find_draft(context, config), length


def test_index_matches_the_scan_when_extended_in_blocks():
    """6.20 index_matches_the_scan_when_extended_in_blocks."""
    tokens = lcg_tokens(7, 400, 6)
    config = cfg(3, 2, 7)
    index = NgramIndex(2, 3)
    length = 50
    while length <= 400:
        context = tokens[:length]
        index.extend(context)
        assert index.find(context, 7) == find_draft(context, config), length
        length += 1 + length % 7


def test_lcg_tokens_follows_the_spec_reading():
    """Spec 10: advance the state first, then take (state >> 33) % alphabet."""
    state = (5 * 6364136223846793005 + 1442695040888963407) % 2**64
    assert lcg_tokens(5, 1, 1000) == [(state >> 33) % 1000]
    assert lcg_tokens(1, 48, 6) == lcg_tokens(1, 60, 6)[:48]
    assert set(lcg_tokens(3, 200, 6)) == set(range(6))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    tokens=st.lists(st.integers(0, 4), max_size=80),
    ngram_min=st.integers(1, 4),
    extra=st.integers(0, 3),
    max_draft=st.integers(1, 9),
    steps=st.lists(st.integers(1, 9), min_size=1, max_size=30),
)
def test_index_equals_scan_on_random_sequences_and_block_growth(
    tokens, ngram_min, extra, max_draft, steps
):
    """Property: index == scan at every length reached by random block growth."""
    config = cfg(ngram_min + extra, ngram_min, max_draft)
    index = NgramIndex(config.ngram_min, config.ngram_max)
    length, i = 0, 0
    while length <= len(tokens):
        context = tokens[:length]
        index.extend(context)
        assert index.find(context, max_draft) == find_draft(context, config)
        length += steps[i % len(steps)]
        i += 1


def test_shadow_probe_settles_on_the_first_two_emitted_tokens():
    """6.36 shadow_probe_settles_on_the_first_two_emitted_tokens."""
    probe = ShadowProbe(start=3, proposal=(7, 8, 9))
    assert SHADOW_CONFIRM == 2
    assert probe.settle([0, 0, 0]) is None
    assert probe.settle([0, 0, 0, 7]) is None
    assert probe.settle([0, 0, 0, 7, 8]) is True
    assert probe.settle([0, 0, 0, 7, 8, 1]) is True  # only two count
    assert probe.settle([0, 0, 0, 6]) is False  # decided at the first mismatch
    assert probe.settle([0, 0, 0, 7, 1]) is False


def test_a_proposal_cut_short_by_the_context_s_end_is_cycled_only_when_asked():
    context = [9, 1, 2, 3, 1, 2, 3, 1, 2]  # a reply caught in the cycle 3, 1, 2
    index = NgramIndex(2, 3)
    index.extend(context)
    # The latest earlier [3, 1, 2] ends one period back: the spec proposes that period only.
    assert index.find(context, 7) == [3, 1, 2] == find_draft(context, cfg(3, 2, 7))
    assert index.match(context, 7, cyclic=True) == ([3, 1, 2, 3, 1, 2, 3], 3)


def test_a_single_recurrence_is_not_cycled():
    context = [8, 5, 1, 2, 3, 9, 1, 2, 3]  # [1, 2, 3] came back once: no loop yet
    index = NgramIndex(2, 3)
    index.extend(context)
    assert index.find(context, 7, cyclic=True) == [9, 1, 2, 3] == index.find(context, 7)


def test_cycle_out_repeats_a_proposal_seen_twice_at_the_end_and_leaves_others():
    assert cycle_out([7, 4, 5, 4, 5], [4, 5], 5) == [4, 5, 4, 5, 4]
    assert cycle_out([7, 3, 5, 4, 5], [4, 5], 5) == [4, 5]  # one turn only
    assert cycle_out([4, 5, 6, 4, 5, 6], [4, 5, 6], 3) == [4, 5, 6]  # cut by max_draft
    assert cycle_out([1, 2], [], 4) == []


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(1, 10_000), length=st.integers(2, 60), max_draft=st.integers(1, 12))
def test_a_cycled_proposal_starts_with_the_spec_s_and_continues_its_period(seed, length,
                                                                           max_draft):
    context = lcg_tokens(seed, length, 3)
    index = NgramIndex(1, 3)
    index.extend(context)
    plain = index.find(context, max_draft)
    cycled = index.find(context, max_draft, cyclic=True)
    assert cycled[: len(plain)] == plain
    period = len(plain)
    if len(cycled) > period:  # only a loop: the context ends in two turns of the proposal
        assert context[length - 2 * period :] == plain * 2 and len(cycled) == max_draft
        assert all(cycled[i] == cycled[i - period] for i in range(period, len(cycled)))
    elif plain and period < max_draft:
        assert context[max(length - 2 * period, 0) : length - period] != plain
