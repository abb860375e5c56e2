"""Did a cell's speed change between two sets of repeats? (history, matrix vs matrix)

Judged by the one rule of `interval.py`, on the ratio of medians after over before: changed
when its 90% interval, over both sets of repeats, excludes 1 and the ratio lies beyond
`factor` (asv's `--factor`: above `factor` or below `1/factor`; 1.0 = any change the interval
shows); otherwise "within noise". With fewer than `MIN_REPEATS` (3) repeats on either side:
no verdict, shown `n=1, no verdict` (n the smaller side), never a change or within noise.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from specfleet.stats.interval import RatioInterval, Side, ratio_interval, side
from specfleet.stats.runs import CellKey, group_by_cell, to_rows

DEFAULT_FACTOR = 1.0

Verdict = Literal["faster", "slower", "within noise", "no verdict"]
_VERDICTS: dict[Side, Verdict] = {"above": "faster", "below": "slower",
                                  "within noise": "within noise", "no verdict": "no verdict"}


@dataclass(frozen=True)
class ChangeTest:
    """Outcome of comparing a `before` and an `after` set of repeats."""

    changed: bool
    ratio: float  # median after / median before
    interval: RatioInterval | None  # on `ratio`; None: too few repeats for a verdict
    n_before: int
    n_after: int
    median_before: float
    median_after: float

    @property
    def judged(self) -> bool:
        """Both sides had enough repeats for the rule to give a verdict."""
        return self.interval is not None

    @property
    def verdict(self) -> Verdict:
        """"within noise" also when the interval excludes 1 but the ratio is inside `factor`."""
        if self.judged and not self.changed:
            return "within noise"
        return _VERDICTS[side(self.interval)]


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


def beyond_factor(ratio: float, factor: float) -> bool:
    """The ratio of medians lies above `factor` or below `1/factor`."""
    return ratio > factor or ratio < 1.0 / factor  # strictly, as asv: a ratio at it is within


def detect_change(
    before: Sequence[float], after: Sequence[float], factor: float = DEFAULT_FACTOR
) -> ChangeTest:
    """Whether two sets of repeats differ (see the module docstring for the rule).

    Args:
        before: tok/s of the earlier (baseline) repeats; at least one.
        after: tok/s of the later repeats; at least one.
        factor: a significant difference counts only beyond this ratio (>= 1).

    Returns:
        The ratio of medians, its interval (None under `MIN_REPEATS` a side), the verdict.
    """
    if not before or not after:
        raise ValueError("detect_change needs at least one value on each side")
    if factor < 1.0:
        raise ValueError(f"factor must be >= 1, got {factor}")
    before, after = [float(v) for v in before], [float(v) for v in after]
    mb, ma = statistics.median(before), statistics.median(after)
    # 0 tok/s is not measured (`interval.measured`): no interval then, and 0 over 0 no change.
    ratio = ma / mb if mb else (float("inf") if ma else 1.0)
    interval = ratio_interval(before, after)
    changed = side(interval) in ("above", "below") and beyond_factor(ratio, factor)
    return ChangeTest(changed=changed, ratio=ratio, interval=interval, n_before=len(before),
                      n_after=len(after), median_before=mb, median_after=ma)


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
