"""The interval on a ratio of medians, checked as a statistician would: it holds the ratio it
is shown beside (a "gain" never reads below 1x), its coverage on simulated repeats with a
known true ratio is the stated one, and every place that gives a verdict gives the same one
for the same repeats."""

from __future__ import annotations

import itertools
import math
import statistics
from datetime import UTC, datetime
from types import SimpleNamespace

import numpy as np
import pytest

from specfleet.stats import detect_change, history_rows, ratio_interval, view_of_runs
from specfleet.stats.changes import compare_matrices
from specfleet.stats.history import compare_rows
from specfleet.stats.interval import _rank, side

# Two host states (e.g. a clock that steps between 2 levels): the arm is 2% faster in each,
# but 6 of its 12 repeats landed in the slow state against 5 of plain's 12. The medians of
# 12 fall between the two states, so their ratio reads 0.86x while every pairwise view
# says 1.01-1.02x.
BIMODAL_PLAIN = [100.0, 100.2, 100.4, 100.6, 100.8, 146.0, 146.2, 146.4, 146.6, 146.8, 147.0,
                 147.2]
BIMODAL_ARM = [102.0, 102.2, 102.4, 102.6, 102.8, 103.0, 149.0, 149.2, 149.4, 149.6, 149.8,
               150.0]


def _ratio_of_medians(base: list[float], other: list[float]) -> float:
    return statistics.median(other) / statistics.median(base)


def test_the_interval_holds_the_ratio_of_medians_it_is_shown_beside() -> None:
    """Was `0.86x gain` (interval 1.012-1.024x, the ratio of medians outside it) and
    `compare` read "faster" at 0.86x, even with `--factor 1.1`."""
    ratio = _ratio_of_medians(BIMODAL_PLAIN, BIMODAL_ARM)
    assert ratio == pytest.approx(126.0 / 146.1)  # (103 + 149) / 2 over (146.0 + 146.2) / 2
    interval = ratio_interval(BIMODAL_PLAIN, BIMODAL_ARM)
    assert interval is not None and interval.low <= ratio <= interval.high
    assert side(interval) == "within noise"
    assert interval.coverage == pytest.approx(_rank(12, 12)[1])  # the rank interval's, kept
    assert detect_change(BIMODAL_PLAIN, BIMODAL_ARM).verdict == "within noise"
    assert detect_change(BIMODAL_PLAIN, BIMODAL_ARM, factor=1.1).verdict == "within noise"


@pytest.mark.parametrize(("m", "n"), [(3, 3), (5, 5), (6, 14), (12, 12), (20, 20), (3, 30)])
def test_the_interval_holds_the_ratio_of_medians_on_two_state_repeats(m: int, n: int) -> None:
    rng = np.random.default_rng(83)
    for _ in range(300):
        gap = rng.uniform(1.05, 1.6)
        base = [float(v) for v in 100 * np.where(rng.random(m) < 0.5, 1.0, gap)
                * np.exp(rng.normal(0, 0.005, m))]
        other = [float(v) for v in 100 * rng.uniform(0.9, 1.1) * np.where(
            rng.random(n) < 0.5, 1.0, gap) * np.exp(rng.normal(0, 0.005, n))]
        interval = ratio_interval(base, other)
        assert interval is not None
        assert interval.low <= _ratio_of_medians(base, other) <= interval.high


@pytest.mark.parametrize(("m", "n"), [(3, 3), (3, 4), (5, 5), (3, 10), (10, 3), (8, 8)])
@pytest.mark.parametrize("noise", ["lognormal", "skewed", "uniform"])
def test_coverage_on_simulated_repeats_is_the_stated_level(m: int, n: int, noise: str) -> None:
    """The arm is plain times 1.3 under noise of one shape: the interval holds 1.3 in the
    stated share of 3,000 simulated matrices, within 4 Monte-Carlo standard errors (the
    seed fixes the draws: the same answer on every run and machine)."""
    rng = np.random.default_rng(2026)
    draw = {"lognormal": lambda k: np.exp(rng.normal(0, 0.05, k)),
            "skewed": lambda k: 1 + rng.exponential(0.1, k),
            "uniform": lambda k: rng.uniform(0.9, 1.1, k)}[noise]
    trials, true_ratio = 3000, 1.3
    held = 0
    for _ in range(trials):
        interval = ratio_interval([float(v) for v in 100 * draw(m)],
                                  [float(v) for v in 100 * true_ratio * draw(n)])
        assert interval is not None
        held += interval.low <= true_ratio <= interval.high
    stated = _rank(m, n)[1]
    assert abs(held / trials - stated) <= 4 * math.sqrt(stated * (1 - stated) / trials)


def test_an_interval_touching_one_exactly_is_within_noise() -> None:
    # One arm repeat equals one plain repeat: the smallest ratio is exactly 1.0.
    interval = ratio_interval([100.0, 101.0, 102.0], [102.0, 110.0, 111.0])
    assert interval is not None and interval.low == 1.0 and side(interval) == "within noise"
    interval = ratio_interval([100.0, 101.0, 102.0], [90.0, 95.0, 100.0])
    assert interval is not None and interval.high == 1.0 and side(interval) == "within noise"


def test_zero_spread_on_both_sides_is_a_point_interval() -> None:
    interval = ratio_interval([50.0] * 3, [75.0] * 4)
    assert interval is not None and (interval.low, interval.high) == (1.5, 1.5)
    assert side(interval) == "above"


def test_one_stalled_plain_repeat_widens_one_end_only() -> None:
    """k = 5 at 5 a side: the interval runs from the 5th smallest to the 5th largest of the
    25 ratios. A plain repeat stalled at 30 tok/s makes the 5 largest (4.97-5.07x): the
    high end moves to the smallest of them, the low end stays where the others put it."""
    plain = [100.0, 101.0, 99.0, 100.5, 30.0]
    interval = ratio_interval(plain, [150.0, 151.0, 149.0, 150.5, 152.0])
    assert interval is not None and side(interval) == "above"
    assert interval.low == pytest.approx(150.5 / 101.0)  # 149/101, 149/100.5, 150/101, 149/100
    assert interval.high == pytest.approx(149.0 / 30.0)


def test_very_unequal_repeat_counts() -> None:
    # 3 against 30 (a resumed arm): k = 18 of 90 ratios, coverage 91.3%, either way round.
    assert _rank(3, 30) == _rank(30, 3) == (18, pytest.approx(0.9131, abs=1e-4))
    plain = [100.0, 100.5, 99.5]
    arm = [104.0 + i * 0.1 for i in range(30)]
    interval = ratio_interval(plain, arm)
    assert interval is not None and side(interval) == "above"
    assert ratio_interval(plain[:2], arm) is None  # 2 against 30: no verdict


def test_the_interval_is_the_same_whatever_the_order_or_the_call() -> None:
    plain, arm = [100.0, 97.0, 103.0, 101.0], [110.0, 95.0, 108.0, 112.0, 104.0]
    first = ratio_interval(plain, arm)
    orders = {ratio_interval(list(p), list(a)) for p in itertools.permutations(plain)
              for a in itertools.permutations(arm)}
    assert orders == {first}
    assert first is not None and type(first.low) is float and type(first.high) is float


def _run(matrix_id: str, arm: str, repeat: int, rate: float) -> SimpleNamespace:
    return SimpleNamespace(host="h", engine="toy", device="cpu", model="m", prompt_name="p",
                           arm=arm, repeat=repeat, tok_per_s=rate, status="done",
                           matrix_id=matrix_id, loop_share=0.0, max_tokens=32,
                           temperature=0.0, noisy=False, throttled=False, engine_config={},
                           versions={}, weights_hash="w", prompt_hash="p",
                           host_fingerprint="f", conditions=None)


@pytest.mark.parametrize(("before", "after", "expected"), [
    ([100.0, 101.0, 99.0], [150.0, 152.0, 148.0], "above"),
    ([100.0, 101.0, 99.0], [90.0, 120.0, 105.0], "within noise"),
    ([100.0, 101.0, 99.0], [80.0, 81.0, 79.0], "below"),
    (BIMODAL_PLAIN, BIMODAL_ARM, "within noise"),
    ([100.0, 101.0], [150.0, 152.0, 148.0], "no verdict"),
])
def test_tables_history_and_compare_give_one_verdict(before, after, expected) -> None:
    """The same repeats as plain and an arm (tables, record, web view) and as one cell in two
    matrices (history, compare) read the same side of 1."""
    speedup = {"above": "gain", "below": "loss"}.get(expected, expected)
    change = {"above": "faster", "below": "slower"}.get(expected, expected)
    table = [_run("m1", "plain", i, v) for i, v in enumerate(before)]
    table += [_run("m1", "graded", i, v) for i, v in enumerate(after)]
    cell = view_of_runs("m1", "m1", table).cell("h/toy/cpu", "m", "p", "graded")
    assert cell is not None and cell.verdict == speedup
    a = [_run("a", "graded", i, v) for i, v in enumerate(before)]
    b = [_run("b", "graded", i, v) for i, v in enumerate(after)]
    when = {"a": datetime(2026, 1, 1, tzinfo=UTC), "b": datetime(2026, 1, 2, tzinfo=UTC)}
    (_, newest) = history_rows(a + b, "graded", when)
    assert newest.change is not None and newest.change.verdict == change
    (comp,) = compare_matrices(a, b)
    assert comp.verdict == change
    (row,) = compare_rows(a, b)
    assert row.verdict == ("regression" if change == "slower" else change)
