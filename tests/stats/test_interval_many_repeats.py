"""The verdict rule on many repeats: `results --cells` pools every matrix's repeats of a cell
(a year of nightly 3-repeat matrices is over 1,000 a side), where counting every ordering
exactly took minutes a cell; past `EXACT_WORK` the rank comes from the normal approximation
of the Mann-Whitney U, checked here against the exact count where both can run."""

from __future__ import annotations

import math
import time
from fractions import Fraction

import pytest

from specfleet.stats.interval import CONFIDENCE, EXACT_WORK, _rank, _u_counts, ratio_interval


def _exact_rank(m: int, n: int) -> int:
    """The largest k whose counted coverage under one noise shape reaches CONFIDENCE."""
    counts, total = _u_counts(m, n), math.comb(m + n, m)
    limit, k, tail = (1 - Fraction(str(CONFIDENCE))) * total, 0, 0
    while 2 * (tail + counts[k]) <= limit:
        tail += counts[k]
        k += 1
    return k


def _exact_coverage(m: int, n: int, k: int) -> float:
    return 1 - 2 * sum(_u_counts(m, n)[:k]) / math.comb(m + n, m)


def _sign_bound(m: int, n: int) -> int:
    """k past which a steady side lets the other's order statistic miss its median more
    than 5% of the time each way (the binomial's tail, counted)."""
    def deepest(count: int) -> int:
        j, tail, term, whole = 0, 0, 1, 2**count  # term: C(count, j), stepped, not recounted
        while 20 * (tail + term) <= whole:  # 2 P(B < j + 1) <= 0.1
            tail += term
            term = term * (count - j) // (j + 1)
            j += 1
        return j
    return min(deepest(m) * n, deepest(n) * m)


@pytest.mark.parametrize(("m", "n"), [(101, 101), (30, 1200), (1200, 30), (11, 9000)])
def test_past_the_exact_work_the_rank_covers_what_it_says(m: int, n: int) -> None:
    """The approximate k's true coverage (counted) is at least the stated one and 90% within
    0.01%; k is the exact shift's (within 2 of its tens of thousands of ratios) or the sign
    tests' bound, whichever is smaller."""
    assert min(m, n) ** 2 * max(m, n) > EXACT_WORK  # the approximation answers these
    k, coverage = _rank(m, n)
    shift_k = _exact_rank(min(m, n), max(m, n))
    true = _exact_coverage(min(m, n), max(m, n), k)
    assert true >= coverage - 1e-4 and coverage >= CONFIDENCE - 1e-4
    assert abs(k - min(shift_k, _sign_bound(m, n))) <= 2


def test_a_thousand_repeats_a_side_take_no_time() -> None:
    begin = time.perf_counter()
    k, coverage = _rank(1095, 1095)  # was minutes (450 a side: 19 s)
    assert time.perf_counter() - begin < 0.5
    assert 0.899 <= coverage <= 0.93 and 0 < k < 1095 * 1095 / 2
    plain = [100.0 + (i % 7) for i in range(1095)]
    interval = ratio_interval(plain, [v * 1.02 for v in plain])
    assert interval is not None and interval.low <= 1.02 <= interval.high


def test_up_to_the_exact_work_the_counts_are_exact_either_way_round() -> None:
    assert _rank(3, 300) == _rank(300, 3) == (_exact_rank(3, 300),
                                              _exact_coverage(3, 300, _exact_rank(3, 300)))
    assert _rank(100, 100)[0] <= _exact_rank(100, 100)
    assert _rank(100, 100)[1] <= _exact_coverage(100, 100, _rank(100, 100)[0]) + 1e-12
