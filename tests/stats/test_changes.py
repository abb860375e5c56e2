"""Change detection between sets of repeats: the verdict rule (`interval.py`) on after over
before, from 3 repeats a side, and asv's `--factor`."""

from __future__ import annotations

import pytest

from specfleet.stats.cells import cell_stats
from specfleet.stats.changes import (
    compare_cells,
    compare_matrices,
    detect_change,
    history_changes,
)
from specfleet.stats.interval import RatioInterval
from specfleet.stats.runs import CellKey


def test_three_against_three_fully_separated_is_a_change_at_90_percent() -> None:
    change = detect_change([10.0, 10.2, 9.9], [11.0, 11.3, 11.1])
    assert change.interval == RatioInterval(11.0 / 10.2, 11.3 / 9.9, 0.9)
    assert change.changed and change.verdict == "faster" and change.judged
    assert change.ratio == pytest.approx(11.1 / 10.0)


def test_interleaved_repeats_are_within_noise() -> None:
    change = detect_change([10.0, 10.4, 9.8], [10.1, 10.3, 9.9])
    assert not change.changed and change.verdict == "within noise"
    assert change.interval is not None and change.interval.low < 1.0 < change.interval.high


def test_a_wide_spread_after_is_within_noise_a_tight_one_a_change() -> None:
    before = [100.0, 101.5, 98.6]
    assert detect_change(before, [90.0, 97.0, 104.3]).verdict == "within noise"
    assert detect_change(before, [96.5, 97.0, 97.5]).verdict == "slower"


def test_more_repeats_give_narrower_intervals_at_stated_coverage() -> None:
    change = detect_change([10.0, 10.1, 9.9, 10.05, 9.95], [10.5, 10.6, 10.4, 10.55, 10.45])
    assert change.interval is not None and change.interval.coverage == pytest.approx(1 - 24 / 252)
    assert change.changed


def test_identical_values_everywhere_are_no_change() -> None:
    change = detect_change([5.0, 5.0, 5.0], [5.0, 5.0, 5.0])
    assert (change.changed, change.verdict) == (False, "within noise")
    assert change.interval == RatioInterval(1.0, 1.0, 0.9)


def test_fewer_than_three_repeats_give_no_verdict() -> None:
    for before, after in (([10.0, 10.2], [11.0, 11.4]), ([10.0], [10.5, 10.7, 10.6]),
                          ([10.0], [15.4])):  # a 1.54x jump of single runs: no verdict
        change = detect_change(before, after)
        assert (change.interval, change.changed) == (None, False)
        assert change.verdict == "no verdict" and not change.judged


def test_factor_keeps_small_significant_changes_out() -> None:
    before, after = [20.0, 20.1, 19.9], [20.9, 21.0, 21.1]  # +5%, interval above 1
    assert detect_change(before, after).verdict == "faster"
    assert detect_change(before, after, factor=1.1).verdict == "within noise"
    assert detect_change(before, [30.0, 30.1, 29.9], factor=1.1).verdict == "faster"
    assert detect_change([30.0, 30.1, 29.9], before, factor=1.1).verdict == "slower"
    with pytest.raises(ValueError):
        detect_change(before, after, factor=0.9)


def test_detect_change_needs_values() -> None:
    with pytest.raises(ValueError):
        detect_change([], [1.0])


def test_compare_cells_with_values_or_cell_stats() -> None:
    slower = compare_cells([20.0, 20.1, 19.9], [18.0, 18.2, 18.1])
    assert (slower.verdict, slower.significant) == ("slower", True)
    assert slower.ratio == pytest.approx(18.1 / 20.0)
    rows = [dict(target="h/t/c", model="m", prompt="p", arm="plain", tok_per_s=v)
            for v in (10.0, 10.1, 10.2)]
    (cell,) = cell_stats(rows)
    same = compare_cells(cell, [10.05, 10.15, 10.0])
    assert (same.verdict, same.significant) == ("within noise", False)


def test_compare_matrices_common_cells_only() -> None:
    def rows(prompt: str, rates: list[float], status: str = "done") -> list[dict]:
        return [dict(target="h/t/c", model="m", prompt=prompt, arm="gated", tok_per_s=r,
                     status=status) for r in rates]

    a = rows("p", [10.0, 10.1, 10.2]) + rows("q", [5.0, 5.0, 5.0]) + rows("f", [1.0])
    b = rows("p", [12.0, 12.1, 12.2]) + rows("r", [1.0]) + rows("f", [1.0], status="failed")
    (only,) = compare_matrices(a, b)
    assert only.key == CellKey("h/t/c", "m", "p", "gated")
    assert only.verdict == "faster" and only.ratio == pytest.approx(12.1 / 10.1)


def test_history_flags_each_step() -> None:
    steps = history_changes([
        ("m1", [10.0, 10.1, 10.2]),
        ("m2", [10.1, 10.0, 10.2]),
        ("empty", []),
        ("m3", [8.0, 8.1, 8.2]),
    ])
    assert [(s.before, s.after, s.change.changed) for s in steps] == [
        ("m1", "m2", False), ("m2", "m3", True)]


def test_a_ratio_exactly_at_the_factor_is_within_it() -> None:
    # asv's rule and the help's "only beyond this ratio": 0.8x under --factor 1.25 read as
    # a regression.
    before = [100.0, 100.0, 100.0]
    assert detect_change(before, [80.0, 80.0, 80.0], factor=1.25).verdict == "within noise"
    assert detect_change(before, [125.0, 125.0, 125.0], factor=1.25).verdict == "within noise"
    assert detect_change(before, [79.0, 79.0, 79.0], factor=1.25).verdict == "slower"
    assert detect_change(before, [126.0, 126.0, 126.0], factor=1.25).verdict == "faster"
