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
* At 3 repeats a side (the default, `jobs/spec.py`) k = 1 and the coverage is exactly 90%
  (2 of the 20 orderings are the extreme ones): the interval runs from the smallest ratio to
  the largest, so a gain needs every arm repeat faster than every plain repeat. A wide spread
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
# Steps (smaller side squared times the larger) up to which U's orderings are counted
# exactly: 100 a side takes 0.2 s; `results --cells` pools thousands (hours to count).
EXACT_WORK = 1_000_000

Side = Literal["above", "below", "within noise", "no verdict"]

# The rule in words, for every legend (tables, record, history, compare, web view).
RULE = (
    f"gain or loss (faster or slower) only when the {CONFIDENCE:.0%} interval on the ratio of "
    f"medians excludes 1x, else within noise (the interval: from the k-th smallest to the k-th "
    f"largest ratio of a repeat over a repeat of the other side, distribution-free; at 3 "
    f"repeats a side the smallest to the largest); no verdict under {MIN_REPEATS} repeats a side"
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
    size = m * n + 1
    poly = [1] + [0] * (size - 1)
    for i in range(1, m + 1):
        for u in range(size - 1, n + i - 1, -1):  # times (1 - q^(n+i))
            poly[u] -= poly[u - n - i]
        for u in range(i, size):  # over (1 - q^i): running sums i apart
            poly[u] += poly[u - i]
    return tuple(poly)


@functools.cache
def _rank(m: int, n: int) -> tuple[int, float]:
    """k and the interval's coverage 1 - 2 P(U < k); k = 0 when no interval reaches
    `CONFIDENCE`. Exact up to `EXACT_WORK`, the normal approximation past it."""
    m, n = min(m, n), max(m, n)  # U's distribution is the same either way round
    if m * m * n > EXACT_WORK:
        return _rank_normal(m, n)
    counts, total = _u_counts(m, n), math.comb(m + n, m)
    limit = (1 - Fraction(str(CONFIDENCE))) * total  # exact: 2 of 20 is within 10%
    k = tail = 0
    while k < len(counts) // 2 and 2 * (tail + counts[k]) <= limit:
        tail += counts[k]
        k += 1
    return k, 1 - 2 * tail / total


def _rank_normal(m: int, n: int) -> tuple[int, float]:
    """`_rank` from U's normal approximation (mean mn/2, variance mn(m + n + 1)/12), with
    continuity correction and the Edgeworth term of U's kurtosis: its coverage is within
    0.01% of the exact one where both were counted."""
    mean, sd = m * n / 2, math.sqrt(m * n * (m + n + 1) / 12)
    kurtosis = -6 * (m * m + n * n + m * n + m + n) / (5 * m * n * (m + n + 1))
    z = NormalDist()

    def below(k: int) -> float:  # P(U < k)
        x = (k - 0.5 - mean) / sd
        return z.cdf(x) - z.pdf(x) * kurtosis / 24 * (x**3 - 3 * x)

    k = math.floor(mean + 0.5 + sd * z.inv_cdf((1 - CONFIDENCE) / 2))
    while k > 0 and 2 * below(k) > 1 - CONFIDENCE:
        k -= 1
    while 2 * below(k + 1) <= 1 - CONFIDENCE:
        k += 1
    return k, 1 - 2 * below(k)


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
