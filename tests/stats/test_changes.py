"""Change detection between sets of repeats: Mann-Whitney from 3 a side, else min-max range."""

from __future__ import annotations

import pytest

from specfleet.stats.cells import cell_stats
from specfleet.stats.changes import (
    CHANGE_ALPHA,
    compare_cells,
    compare_matrices,
    detect_change,
    history_changes,
    no_floor_text,
)
from specfleet.stats.runs import CellKey


def test_three_against_three_fully_separated_is_a_change_at_p_0_1() -> None:
    change = detect_change([10.0, 10.2, 9.9], [11.0, 11.3, 11.1])
    assert change.test == "mann-whitney"
    assert change.p_value == pytest.approx(0.1)  # 2 / C(6, 3): the smallest attainable
    assert change.changed and CHANGE_ALPHA == 0.10
    assert change.ratio == pytest.approx(11.1 / 10.0)


def test_interleaved_repeats_are_no_change() -> None:
    change = detect_change([10.0, 10.4, 9.8], [10.1, 10.3, 9.9])
    assert change.test == "mann-whitney" and not change.changed
    assert change.p_value > 0.5


def test_more_repeats_give_smaller_p_values() -> None:
    change = detect_change([10.0, 10.1, 9.9, 10.05, 9.95], [10.5, 10.6, 10.4, 10.55, 10.45])
    assert change.p_value == pytest.approx(2 / 252)  # exact two-sided, C(10, 5) = 252
    assert change.changed


def test_identical_values_everywhere_are_no_change() -> None:
    change = detect_change([5.0, 5.0, 5.0], [5.0, 5.0, 5.0])
    assert (change.changed, change.p_value) == (False, 1.0)


def test_fewer_than_three_repeats_give_no_verdict() -> None:
    for before, after in (([10.0, 10.2], [11.0, 11.4]), ([10.0], [10.5, 10.7, 10.6]),
                          ([10.0], [15.4])):  # a 1.54x jump of single runs: not "same"
        change = detect_change(before, after)
        assert (change.test, change.changed, change.p_value) == ("too few repeats", False, None)
        assert change.verdict == "no noise floor" and not change.judged
    assert no_floor_text(1) == "n=1, no noise floor"


def test_factor_keeps_small_significant_changes_out() -> None:
    before, after = [20.0, 20.1, 19.9], [20.9, 21.0, 21.1]  # +5%, p = 0.1
    assert detect_change(before, after).verdict == "faster"
    assert detect_change(before, after, factor=1.1).verdict == "same"
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
    assert (same.verdict, same.significant) == ("same", False)


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


def test_exact_p_value_equals_scipys():
    """The plain-Python exact Mann-Whitney p-value is scipy's `method="exact"` one."""
    import random

    from scipy.stats import mannwhitneyu

    from specfleet.stats.changes import _exact_applies, _mann_whitney_p

    rng = random.Random(3)
    for _ in range(300):
        a = [rng.random() + rng.choice([0.0, 0.4]) for _ in range(rng.randint(1, 8))]
        b = [rng.random() for _ in range(rng.randint(1, 20))]
        assert _exact_applies(a, b)
        expected = float(mannwhitneyu(a, b, alternative="two-sided").pvalue)
        assert abs(_mann_whitney_p(a, b) - expected) < 1e-12
    assert not _exact_applies([1.0, 2.0, 2.0], [3.0, 4.0, 5.0])  # ties: scipy's normal approx.
