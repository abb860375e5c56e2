"""The one verdict rule: the distribution-free interval on a ratio of medians, its exact
coverage, and the side of 1 it lies on, on repeats whose answer is known."""

from __future__ import annotations

import itertools
import math

import pytest

from specfleet.stats.interval import (
    CONFIDENCE,
    MIN_REPEATS,
    RatioInterval,
    _rank,
    _u_counts,
    no_verdict_text,
    ratio_interval,
    side,
)

PLAIN = [100.0, 101.0, 99.0]


def _u_by_enumeration(m: int, n: int) -> tuple[int, ...]:
    counts = [0] * (m * n + 1)
    for first in itertools.combinations(range(m + n), m):
        rest = set(range(m + n)) - set(first)
        counts[sum(1 for i in first for j in rest if i > j)] += 1
    return tuple(counts)


def test_u_counts_are_the_orderings_counted_one_by_one() -> None:
    for m, n in itertools.product(range(1, 6), repeat=2):
        assert _u_counts(m, n) == _u_by_enumeration(m, n), (m, n)
        assert sum(_u_counts(m, n)) == math.comb(m + n, m)


@pytest.mark.parametrize(("m", "n", "k", "coverage"), [
    (3, 3, 1, 0.9),  # 2 of C(6, 3) = 20 orderings are extreme: exactly 90%
    (4, 4, 2, 1 - 2 * 2 / 70),
    (5, 5, 5, 1 - 2 * 12 / 252),
    (3, 10, 5, 1 - 2 * 11 / 286),
])
def test_rank_and_coverage(m: int, n: int, k: int, coverage: float) -> None:
    assert CONFIDENCE == 0.90 and MIN_REPEATS == 3
    assert _rank(m, n) == (k, pytest.approx(coverage))
    assert _rank(m, n)[1] >= CONFIDENCE
    assert _rank(2, 2)[0] == 0  # at 2 a side no interval reaches 90%


@pytest.mark.parametrize(("m", "n"), [(3, 3), (3, 4), (4, 4), (4, 5)])
def test_coverage_is_exact_over_every_ordering(m: int, n: int) -> None:
    """Both sides from one distribution (true ratio 1): every ordering of m + n distinct
    tok/s is equally likely, and the interval holds 1 in exactly `coverage` of them."""
    values = [10.0 + i for i in range(m + n)]
    held = total = 0
    for first in itertools.combinations(range(m + n), m):
        base = [values[i] for i in first]
        other = [v for i, v in enumerate(values) if i not in first]
        interval = ratio_interval(base, other)
        assert interval is not None
        held += interval.low <= 1.0 <= interval.high
        total += 1
    assert held / total == pytest.approx(_rank(m, n)[1])


def test_clear_gain_and_clear_loss() -> None:
    gain = ratio_interval(PLAIN, [150.0, 152.0, 148.0])
    assert gain == RatioInterval(low=148.0 / 101.0, high=152.0 / 99.0, coverage=0.9)
    assert side(gain) == "above"
    assert side(ratio_interval(PLAIN, [80.0, 81.0, 79.0])) == "below"


def test_the_arms_own_wide_spread_is_within_noise() -> None:
    """MLX `story`: 0.97x with the arm at ±14.7% against plain's ±2.9%. Outside plain's
    spread, but the arm's repeats straddle plain's: within noise, not a loss."""
    plain, arm = [100.0, 101.5, 98.6], [90.0, 97.0, 104.3]
    interval = ratio_interval(plain, arm)
    assert interval is not None and interval.low < 1.0 < interval.high
    assert side(interval) == "within noise"
    # The same median ratio with a tight arm is a loss: the arm's spread decided it.
    assert side(ratio_interval(plain, [96.5, 97.0, 97.5])) == "below"


def test_one_crossing_pair_is_enough_for_within_noise_at_three_a_side() -> None:
    # Every ratio above 1 but 100.5 / 101: the interval's low end is that one ratio.
    interval = ratio_interval([99.0, 100.0, 101.0], [100.5, 110.0, 111.0])
    assert interval is not None and interval.low == pytest.approx(100.5 / 101.0)
    assert side(interval) == "within noise"
    assert side(ratio_interval([99.0, 100.0, 100.4], [100.5, 110.0, 111.0])) == "above"


def test_too_few_repeats_give_no_verdict() -> None:
    for base, other in (([10.0], [20.0]), ([10.0, 10.1], [20.0, 20.1]),
                        ([10.0, 10.1], [20.0, 20.1, 20.2, 20.3, 20.4]),  # 90.5% reachable
                        (PLAIN, [150.0, 152.0])):
        assert ratio_interval(base, other) is None
        assert side(ratio_interval(base, other)) == "no verdict"
    assert no_verdict_text(2) == "n=2, no verdict"


def test_equal_repeats_are_within_noise_and_order_does_not_matter() -> None:
    assert side(ratio_interval([5.0] * 3, [5.0] * 3)) == "within noise"
    arm = [90.0, 120.0, 105.0, 111.0]
    intervals = {ratio_interval(list(p), list(a)) for p in itertools.permutations(PLAIN)
                 for a in itertools.permutations(arm)}
    assert len(intervals) == 1
