"""Is a cell's speed different between two sets of repeats? (history, matrix vs matrix)

The test, documented once here and named in every result:
* With at least `MANN_WHITNEY_MIN_N` (3) repeats on each side: a two-sided Mann-Whitney U
  test over the repeats' tok/s (scipy; exact when there are no ties). "changed" when
  p <= `CHANGE_ALPHA` (0.10). Why 0.10, not 0.05: with 3 repeats a side the smallest p the
  test can give is 2/20 = 0.10 (the three new runs all faster, or all slower, than the three
  old ones), so 0.05 could never flag anything at the reference's 3 repeats.
* Otherwise: "changed" when each side's median lies outside the other side's min-max range.
  With a single run on both sides there is no spread to judge by: never "changed".
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from specfleet.jobs.rows import CellKey, group_by_cell, to_rows

CHANGE_ALPHA = 0.10
MANN_WHITNEY_MIN_N = 3

TestName = Literal["mann-whitney", "range", "single runs"]


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


@dataclass(frozen=True)
class CellComparison:
    """Cell `b` against cell `a`: ratio of medians and whether the difference is real."""

    key: CellKey | None
    ratio: float
    significant: bool
    verdict: Literal["faster", "slower", "same"]
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
    from scipy.stats import mannwhitneyu  # ~1 s to import: only when a test runs

    return float(mannwhitneyu(before, after, alternative="two-sided").pvalue)


def _outside_each_other(before: Sequence[float], after: Sequence[float]) -> bool:
    mb, ma = statistics.median(before), statistics.median(after)
    return not min(after) <= mb <= max(after) and not min(before) <= ma <= max(before)


def detect_change(before: Sequence[float], after: Sequence[float]) -> ChangeTest:
    """Test whether two sets of repeats differ (see the module docstring for the test).

    Args:
        before: tok/s of the earlier (baseline) repeats; at least one.
        after: tok/s of the later repeats; at least one.

    Returns:
        The test used, its verdict, the ratio of medians and the p-value when there is one.
    """
    if not before or not after:
        raise ValueError("detect_change needs at least one value on each side")
    before, after = [float(v) for v in before], [float(v) for v in after]
    mb, ma = statistics.median(before), statistics.median(after)
    common = dict(ratio=ma / mb if mb else float("inf"), n_before=len(before),
                  n_after=len(after), median_before=mb, median_after=ma)
    if min(len(before), len(after)) >= MANN_WHITNEY_MIN_N:
        p = _mann_whitney_p(before, after)
        return ChangeTest(test="mann-whitney", changed=p <= CHANGE_ALPHA + 1e-9, p_value=p,
                          **common)
    if len(before) == 1 and len(after) == 1:
        return ChangeTest(test="single runs", changed=False, p_value=None, **common)
    return ChangeTest(test="range", changed=_outside_each_other(before, after), p_value=None,
                      **common)


def _values(cell: Any) -> Sequence[float]:
    values = getattr(cell, "values", cell)
    return tuple(float(v) for v in values)


def compare_cells(a: Any, b: Any, key: CellKey | None = None) -> CellComparison:
    """Compare cell `b` with baseline cell `a`.

    Args:
        a: the baseline: a `CellStats` or a sequence of tok/s values.
        b: the candidate, likewise.
        key: the cell compared, carried into the result.

    Returns:
        Ratio of medians (b over a), significance by `detect_change`, and a verdict.
    """
    change = detect_change(_values(a), _values(b))
    verdict = "same"
    if change.changed:
        verdict = "faster" if change.ratio > 1.0 else "slower"
    return CellComparison(key=key, ratio=change.ratio, significant=change.changed,
                          verdict=verdict, change=change)


def _done_values(runs: Iterable[Any]) -> dict[CellKey, list[float]]:
    cells = group_by_cell(to_rows(runs))
    values = {key: [r.tok_per_s for r in rows if r.done] for key, rows in cells.items()}
    return {key: v for key, v in values.items() if v}


def compare_matrices(runs_a: Iterable[Any], runs_b: Iterable[Any]) -> list[CellComparison]:
    """Every cell measured in both matrices, `b` against baseline `a`, sorted by cell.

    Args:
        runs_a: the baseline matrix's runs (any shape `rows.to_rows` accepts).
        runs_b: the other matrix's runs.

    Returns:
        One comparison per common cell with at least one done run on each side.
    """
    a, b = _done_values(runs_a), _done_values(runs_b)
    return [compare_cells(a[key], b[key], key) for key in sorted(a.keys() & b.keys())]


def history_changes(points: Sequence[tuple[str, Sequence[float]]]) -> list[HistoryStep]:
    """Flag changes along one cell's history.

    Args:
        points: (label, tok/s of the repeats) in time order, e.g. one per matrix.

    Returns:
        One step per consecutive pair of points with values on both sides.
    """
    measured = [(label, values) for label, values in points if values]
    return [
        HistoryStep(before=la, after=lb, change=detect_change(va, vb))
        for (la, va), (lb, vb) in zip(measured, measured[1:], strict=False)
    ]
