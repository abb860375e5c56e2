"""Is a cell's speed different between two sets of repeats? (history, matrix vs matrix)

The test, documented once here and named in every result (history, compare and the
speed-up verdicts of `summarize.py` all use it):
* With at least `MIN_REPEATS` (3) repeats on each side: a two-sided Mann-Whitney U test over
  the repeats' tok/s (scipy; exact when there are no ties). "changed" when p <=
  `CHANGE_ALPHA` (0.10) and the ratio of medians lies beyond `factor` (asv's `--factor`:
  above `factor` or below `1/factor`; 1.0 = any significant difference). Why 0.10, not 0.05:
  with 3 repeats a side the smallest p the test can give is 2/20 = 0.10 (the three new runs
  all faster, or all slower, than the three old ones), so 0.05 could never flag anything at
  the reference's 3 repeats.
* With fewer repeats on either side there is no noise floor to judge by: no verdict, shown
  as `n=1, no noise floor` (n the smaller side), never as a gain, a loss or "same".
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from specfleet.stats.runs import CellKey, group_by_cell, to_rows

CHANGE_ALPHA = 0.10
MIN_REPEATS = 3  # a side with fewer repeats has no noise floor
DEFAULT_FACTOR = 1.0

TestName = Literal["mann-whitney", "too few repeats"]
Verdict = Literal["faster", "slower", "same", "no noise floor"]


def no_floor_text(n: int) -> str:
    """What a cell with fewer than `MIN_REPEATS` repeats says instead of a verdict."""
    return f"n={n}, no noise floor"


@dataclass(frozen=True)
class ChangeTest:
    """Outcome of comparing a `before` and an `after` set of repeats."""

    test: TestName
    changed: bool
    ratio: float  # median after / median before
    p_value: float | None  # Mann-Whitney only
    n_before: int
    n_after: int
    median_before: float
    median_after: float

    @property
    def judged(self) -> bool:
        """Both sides had enough repeats for the test to give a verdict."""
        return self.test == "mann-whitney"

    @property
    def verdict(self) -> Verdict:
        if not self.judged:
            return "no noise floor"
        if not self.changed:
            return "same"
        return "faster" if self.ratio > 1.0 else "slower"


@dataclass(frozen=True)
class CellComparison:
    """Cell `b` against cell `a`: ratio of medians and whether the difference is real."""

    key: CellKey | None
    ratio: float
    significant: bool
    verdict: Verdict
    change: ChangeTest


@dataclass(frozen=True)
class HistoryStep:
    """One step of a cell's history: the change from one point in time to the next."""

    before: str
    after: str
    change: ChangeTest


def _mann_whitney_p(before: Sequence[float], after: Sequence[float]) -> float:
    if len(set(before) | set(after)) == 1:
        return 1.0  # every run equal: no evidence of a difference (scipy would return nan)
    if _exact_applies(before, after):
        return _exact_p(before, after)
    from scipy.stats import mannwhitneyu  # ~1 s to import: only when a test runs

    return float(mannwhitneyu(before, after, alternative="two-sided").pvalue)


def beyond_factor(ratio: float, factor: float) -> bool:
    """The ratio of medians lies above `factor` or below `1/factor`."""
    return ratio >= factor or ratio <= 1.0 / factor


def _exact_applies(before: Sequence[float], after: Sequence[float]) -> bool:
    """scipy's `method="auto"` picks the exact distribution here (no ties, a side of at most
    8); we compute that same p-value in plain Python: a web page runs hundreds of these and
    scipy's per-call overhead is milliseconds (bench/serve.py)."""
    values = [*before, *after]
    no_ties = len(set(values)) == len(values)
    return no_ties and min(len(before), len(after)) <= 8 and max(len(before), len(after)) <= 64


@functools.lru_cache(maxsize=256)
def _u_counts(n1: int, n2: int) -> tuple[int, ...]:
    """How many orderings of n1 + n2 distinct values give each U = 0 .. n1 * n2."""
    if n1 == 0 or n2 == 0:
        return (1,)
    # The largest value belongs to sample 1 (adding n2 to U) or to sample 2 (adding nothing).
    with_first, with_second = _u_counts(n1 - 1, n2), _u_counts(n1, n2 - 1)
    counts = [0] * (n1 * n2 + 1)
    for u, ways in enumerate(with_first):
        counts[u + n2] += ways
    for u, ways in enumerate(with_second):
        counts[u] += ways
    return tuple(counts)


def _exact_p(before: Sequence[float], after: Sequence[float]) -> float:
    """Two-sided exact Mann-Whitney p-value without ties, as scipy's `method="exact"`."""
    n1, n2 = len(before), len(after)
    u1 = sum(1 for b in before for a in after if b > a)
    u = max(u1, n1 * n2 - u1)
    counts = _u_counts(n1, n2)
    at_least_u = sum(counts[u:])  # P(U >= u) by counting orderings
    return min(1.0, 2 * at_least_u / math.comb(n1 + n2, n1))


def detect_change(
    before: Sequence[float], after: Sequence[float], factor: float = DEFAULT_FACTOR
) -> ChangeTest:
    """Test whether two sets of repeats differ (see the module docstring for the test).

    Args:
        before: tok/s of the earlier (baseline) repeats; at least one.
        after: tok/s of the later repeats; at least one.
        factor: a significant difference counts only beyond this ratio (>= 1).

    Returns:
        The test used, its verdict, the ratio of medians and the p-value when there is one.
    """
    if not before or not after:
        raise ValueError("detect_change needs at least one value on each side")
    if factor < 1.0:
        raise ValueError(f"factor must be >= 1, got {factor}")
    before, after = [float(v) for v in before], [float(v) for v in after]
    mb, ma = statistics.median(before), statistics.median(after)
    ratio = ma / mb if mb else float("inf")
    common: dict[str, Any] = dict(ratio=ratio, n_before=len(before), n_after=len(after),
                                  median_before=mb, median_after=ma)
    if min(len(before), len(after)) < MIN_REPEATS:
        return ChangeTest(test="too few repeats", changed=False, p_value=None, **common)
    p = _mann_whitney_p(before, after)
    changed = p <= CHANGE_ALPHA + 1e-9 and beyond_factor(ratio, factor)
    return ChangeTest(test="mann-whitney", changed=changed, p_value=p, **common)


def _values(cell: Any) -> Sequence[float]:
    values = getattr(cell, "values", cell)
    return tuple(float(v) for v in values)


def compare_cells(
    a: Any, b: Any, key: CellKey | None = None, factor: float = DEFAULT_FACTOR
) -> CellComparison:
    """Compare cell `b` with baseline cell `a`.

    Args:
        a: the baseline: a `CellStats` or a sequence of tok/s values.
        b: the candidate, likewise.
        key: the cell compared, carried into the result.
        factor: as in `detect_change`.

    Returns:
        Ratio of medians (b over a), significance by `detect_change`, and a verdict.
    """
    change = detect_change(_values(a), _values(b), factor)
    return CellComparison(key=key, ratio=change.ratio, significant=change.changed,
                          verdict=change.verdict, change=change)


def _done_values(runs: Iterable[Any]) -> dict[CellKey, list[float]]:
    cells = group_by_cell(to_rows(runs))
    values = {key: [r.tok_per_s for r in rows if r.done] for key, rows in cells.items()}
    return {key: v for key, v in values.items() if v}


def compare_matrices(
    runs_a: Iterable[Any], runs_b: Iterable[Any], factor: float = DEFAULT_FACTOR
) -> list[CellComparison]:
    """Every cell measured in both matrices, `b` against baseline `a`, sorted by cell.

    Args:
        runs_a: the baseline matrix's runs (any shape `runs.to_rows` accepts).
        runs_b: the other matrix's runs.
        factor: as in `detect_change`.

    Returns:
        One comparison per common cell with at least one done run on each side.
    """
    a, b = _done_values(runs_a), _done_values(runs_b)
    return [compare_cells(a[key], b[key], key, factor) for key in sorted(a.keys() & b.keys())]


def history_changes(
    points: Sequence[tuple[str, Sequence[float]]], factor: float = DEFAULT_FACTOR
) -> list[HistoryStep]:
    """Flag changes along one cell's history.

    Args:
        points: (label, tok/s of the repeats) in time order, e.g. one per matrix.
        factor: as in `detect_change`.

    Returns:
        One step per consecutive pair of points with values on both sides.
    """
    measured = [(label, values) for label, values in points if values]
    return [
        HistoryStep(before=la, after=lb, change=detect_change(va, vb, factor))
        for (la, va), (lb, vb) in zip(measured, measured[1:], strict=False)
    ]
