"""The one rule behind every verdict: does a ratio of medians differ from 1 at a stated level?

Every gain, loss and "within noise" of the tables, the record and the web view (arm over
plain on one target, model and prompt), and every change `history` and `compare` flag (after
over before), is judged here, from the repeats of both sides:

* The interval: the m x n ratios `other_i / base_j` of every repeat of one side over every
  repeat of the other, sorted; it runs from the k-th smallest to the k-th largest, k the
  largest whose two tails together hold at most 1 - `CONFIDENCE` of the C(m + n, m) equally
  likely orderings of the repeats (the Mann-Whitney U distribution). This is the
  distribution-free interval for a scale shift (Hodges-Lehmann's, on log tok/s): when one
  side's tok/s are the other's times one factor, the ratio of their medians, it holds that
  factor with probability `coverage` = 1 - 2 P(U < k) >= `CONFIDENCE`, whatever the shape of
  the noise (exact for continuous tok/s; ties only widen it). No random draws: the same
  repeats always give the same interval.
* The interval is widened, where needed, to hold the ratio of the sample medians it is shown
  beside: from 10 repeats a side, or 6 against 14, repeats that fall in two host states can
  put the medians' ratio outside the rank interval (0.86x next to 1.01-1.02x), and a "gain"
  must never read below 1x. Widening only raises the coverage, so `coverage` is then a floor.
* Unequal spreads. The rank interval's level assumes one noise shape on both sides; when
  one side is much noisier than the other it falls (at 3 repeats a side, down to 75%: the
  three noisy repeats all land beyond a steady median one time in eight each way). From
  `ROBUST_REPEATS` (5) repeats a side k is also bounded by the sign tests: were one side's
  repeats all alike, the k-th ratio is the other side's ceil(k / count)-th order statistic,
  which must lie beyond that side's median with probability at most 5% each way
  (`_sign_depth`). `coverage` is then the lowest of the three, and the level holds at both
  ends (one noise shape; one side steady); measured between them, at least 89% at 5 to 20
  repeats a side (docs/trust.md). At 5 a side k = 5 either way (90.5%).
* At 3 repeats a side k = 1 and the coverage is exactly 90% under one noise shape (2 of the
  20 orderings are the extreme ones): the interval runs from the smallest ratio to the
  largest, so a gain needs every arm repeat faster than every plain repeat. A wide spread
  on either side widens the interval; plain's spread alone decides nothing.
* "above" (a gain, faster) when the whole interval lies above 1; "below" (a loss, slower)
  when it lies below 1; otherwise "within noise". With fewer than `MIN_REPEATS` (3) repeats
  on either side: "no verdict", never a gain, a loss or within noise (at 2 a side no
  interval covers more than 67%).
* A repeat whose tok/s is not a positive finite number (0.0 is the engine's "not measured":
  a one-token reply has no decode rate) gives no interval, so "no verdict": a ratio over an
  unmeasured side is undefined, and a NaN would sort anywhere and make the verdict depend on
  the order of the repeats.
"""

from __future__ import annotations

import functools
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist
from typing import Literal

CONFIDENCE = 0.90  # the stated level: an interval covers the true ratio at least this often
MIN_REPEATS = 3  # per side; fewer give no verdict
ROBUST_REPEATS = 5  # per side; from here the level holds whatever the two sides' spreads
# Steps (smaller side squared times the larger) up to which U's orderings are counted
# exactly: 100 a side takes 0.2 s; `results --cells` pools thousands (hours to count).
EXACT_WORK = 1_000_000

Side = Literal["above", "below", "within noise", "no verdict"]

# The rule in words, for every legend (tables, record, history, compare, web view).
RULE = (
    f"gain or loss (faster or slower) only when the {CONFIDENCE:.0%} interval on the ratio of "
    f"medians excludes 1x, else within noise (the interval: from the k-th smallest to the k-th "
    f"largest ratio of a repeat over a repeat of the other side, distribution-free; at 3 "
    f"repeats a side the smallest to the largest, its level assuming both sides equally noisy; "
    f"from {ROBUST_REPEATS} a side it holds whatever their spreads); no verdict under "
    f"{MIN_REPEATS} repeats a side"
)


@dataclass(frozen=True)
class RatioInterval:
    """Where the ratio of medians (other over base) lies, at `coverage`."""

    low: float
    high: float
    coverage: float  # the rank interval's, exact, at least CONFIDENCE; a floor when widened


def no_verdict_text(n: int) -> str:
    """What a cell with fewer than `MIN_REPEATS` repeats (`n`, the smaller side) says."""
    return f"n={n}, no verdict"


@functools.cache
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """How many of the C(m + n, m) orderings of m + n distinct values give each U = 0..m*n:
    the coefficients of the Gaussian binomial prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i)."""
    return _gaussian_head(m, n, m * n + 1)


def _gaussian_head(m: int, n: int, size: int) -> tuple[int, ...]:
    """The first `size` coefficients of `_u_counts`' product (each depends on lower ones only,
    so a head is counted in m x size steps)."""
    poly = [1] + [0] * (size - 1)
    for i in range(1, m + 1):
        for u in range(size - 1, n + i - 1, -1):  # times (1 - q^(n+i))
            poly[u] -= poly[u - n - i]
        for u in range(i, size):  # over (1 - q^i): running sums i apart
            poly[u] += poly[u - i]
    return tuple(poly)


@functools.cache
def _rank(m: int, n: int) -> tuple[int, float]:
    """k and the interval's coverage, the lower of the scale shift's and the sign tests' (see
    the module docstring); k = 0 when no interval reaches `CONFIDENCE`."""
    m, n = min(m, n), max(m, n)  # U's distribution is the same either way round
    robust = m >= ROBUST_REPEATS  # else k = the shift's alone: one noise shape assumed
    k = _rank_shift(m, n, most=min(_sign_depth(m) * n, _sign_depth(n) * m) if robust else m * n)
    if k == 0:
        return 0, 0.0
    # Were all of one side's repeats equal, the k-th ratio is the other side's
    # ceil(k / this side's count)-th order statistic: a sign test on the other side.
    shift = 1 - 2 * _u_below(m, n, k)
    if not robust:
        return k, shift
    return k, min(shift, _sign_coverage(m, -(-k // n)), _sign_coverage(n, -(-k // m)))


def _rank_shift(m: int, n: int, most: int) -> int:
    """The largest k <= `most` with 2 P(U < k) <= 1 - CONFIDENCE (m <= n): counted exactly
    up to `EXACT_WORK`, else from the normal approximation, the k it picks checked against
    the counted tail where that can be counted (`_u_below`)."""
    if most <= 0:
        return 0
    if m * m * n <= EXACT_WORK:
        counts, total = _u_counts(m, n), math.comb(m + n, m)
        limit = (1 - Fraction(str(CONFIDENCE))) * total  # exact: 2 of 20 is within 10%
        k = tail = 0
        while k < min(len(counts) // 2, most) and 2 * (tail + counts[k]) <= limit:
            tail += counts[k]
            k += 1
        return k
    mean, sd = m * n / 2, math.sqrt(m * n * (m + n + 1) / 12)
    k = min(most, math.floor(mean + 0.5 + sd * NormalDist().inv_cdf((1 - CONFIDENCE) / 2)))
    if m * (k + 2) <= EXACT_WORK:  # the approximate k and its neighbours, counted once
        _u_counts_below(m, n, k + 2)
    while k > 0 and 2 * _u_below(m, n, k) > 1 - CONFIDENCE:
        k -= 1
    while k < most and 2 * _u_below(m, n, k + 1) <= 1 - CONFIDENCE:
        k += 1
    return k


def _u_below(m: int, n: int, k: int) -> float:
    """P(U < k) for m <= n: counted exactly (the Gaussian binomial's first k coefficients,
    m x k steps) up to `EXACT_WORK` steps, else U's normal approximation (mean mn/2, variance
    mn(m + n + 1)/12) with continuity correction and the Edgeworth term of U's kurtosis,
    within 0.01% of the exact tail where both were counted (balanced sizes); the counted tail
    is what keeps a lopsided pair (3 repeats against 100,000) at its stated level."""
    if k <= 0:
        return 0.0
    if m * m * n <= EXACT_WORK:
        return sum(_u_counts(m, n)[:k]) / math.comb(m + n, m)
    if m * k <= EXACT_WORK:
        return sum(_u_counts_below(m, n, k)) / math.comb(m + n, m)
    mean, sd = m * n / 2, math.sqrt(m * n * (m + n + 1) / 12)
    kurtosis = -6 * (m * m + n * n + m * n + m + n) / (5 * m * n * (m + n + 1))
    z = NormalDist()
    x = (k - 0.5 - mean) / sd
    return z.cdf(x) - z.pdf(x) * kurtosis / 24 * (x**3 - 3 * x)


_COUNTED: dict[tuple[int, int], tuple[int, ...]] = {}  # (m, n): the longest head counted


def _u_counts_below(m: int, n: int, k: int) -> tuple[int, ...]:
    """`_u_counts(m, n)[:k]` without the rest (`_gaussian_head`); a head counted once serves
    every shorter one."""
    counted = _COUNTED.get((m, n), ())
    if len(counted) < k:
        counted = _COUNTED[m, n] = _gaussian_head(m, n, k)
    return counted[:k]


@functools.cache
def _sign_depth(count: int) -> int:
    """The deepest j for which `count` repeats' j-th smallest (or largest) value lies beyond
    their median with probability at most (1 - CONFIDENCE) / 2: 0 under 5 repeats (at 3, all
    three lie above it one time in 8)."""
    low, high = 0, count  # the coverage falls as j grows: the last j that holds, by halves
    while low < high:
        j = (low + high + 1) // 2
        low, high = (j, high) if _sign_coverage(count, j) >= CONFIDENCE - 1e-12 else (low, j - 1)
    return low


@functools.cache
def _sign_coverage(count: int, j: int) -> float:
    """1 - 2 P(Binomial(count, 1/2) < j): how often the j-th smallest and the j-th largest of
    `count` repeats hold their median between them."""
    if count <= 2000:
        return 1 - 2 * sum(math.comb(count, i) for i in range(j)) / 2**count
    return 1 - 2 * NormalDist(count / 2, math.sqrt(count) / 2).cdf(j - 0.5)


def measured(values: Sequence[float]) -> bool:
    """Every rate is a positive finite tok/s (0.0: not measured; NaN, inf: not a timing)."""
    return all(math.isfinite(v) and v > 0 for v in values)


def ratio_interval(base: Sequence[float], other: Sequence[float]) -> RatioInterval | None:
    """The interval on median(other) / median(base) (see the module docstring).

    Args:
        base: tok/s of the baseline's repeats (plain, or the earlier matrix).
        other: tok/s of the other side's repeats (the arm, or the later matrix).

    Returns:
        The interval and its exact coverage, or None with fewer than `MIN_REPEATS` repeats
        on either side or a repeat that is not `measured`.
    """
    if min(len(base), len(other)) < MIN_REPEATS or not (measured(base) and measured(other)):
        return None
    k, coverage = _rank(len(base), len(other))
    if k == 0:
        return None
    low = kth_ratio(base, other, k)
    high = kth_ratio(base, other, len(base) * len(other) - k + 1)
    medians = float(statistics.median(other)) / float(statistics.median(base))
    return RatioInterval(low=min(low, medians), high=max(high, medians), coverage=coverage)


def kth_ratio(base: Sequence[float], other: Sequence[float], k: int) -> float:
    """The k-th smallest (from 1) of the ratios o / b over every pair of positive rates:
    exactly `sorted(o / b for o in other for b in base)[k - 1]`, without listing them (a year
    of repeats pooled in a cell is 2.25 M ratios to sort). Division by a positive number keeps
    order, so with `other` ascending and `base` descending every row and every column of the
    ratios ascends: a pivot's rank is counted in one walk down the rows, and a pivot drawn
    among the ratios still in play narrows them until one has rank k."""
    rows = sorted(float(o) for o in other)
    cols = sorted((float(b) for b in base), reverse=True)
    lo, hi = [0] * len(rows), [len(cols)] * len(rows)  # row i's candidates: lo[i]..hi[i]-1
    draw = random.Random(k)  # any pivot gives the same answer; seeded, so runs repeat
    while True:
        sizes = [h - low for low, h in zip(lo, hi, strict=True)]
        pick = draw.randrange(sum(sizes))
        for i, size in enumerate(sizes):
            if pick < size:
                pivot = rows[i] / cols[lo[i] + pick]
                break
            pick -= size
        below, upto = _ranks_of(rows, cols, pivot)
        if k <= sum(below):
            hi = [min(h, c) for h, c in zip(hi, below, strict=True)]
        elif k > sum(upto):
            lo = [max(low, c) for low, c in zip(lo, upto, strict=True)]
        else:
            return pivot


def _ranks_of(rows: list[float], cols: list[float], pivot: float) -> tuple[list[int], list[int]]:
    """Per row, how many of its ratios are < pivot and <= pivot (prefixes of the row)."""
    below, upto = [], []
    lt = le = len(cols)
    for o in rows:  # as o grows, fewer columns stay under the pivot
        while lt and o / cols[lt - 1] >= pivot:
            lt -= 1
        while le and o / cols[le - 1] > pivot:
            le -= 1
        below.append(lt)
        upto.append(le)
    return below, upto


def side(interval: RatioInterval | None) -> Side:
    """"above" or "below" 1 when the whole interval is; "within noise" when it holds 1;
    "no verdict" without an interval."""
    if interval is None:
        return "no verdict"
    if interval.low > 1.0:
        return "above"
    if interval.high < 1.0:
        return "below"
    return "within noise"
