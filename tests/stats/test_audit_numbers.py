"""Known answers for the numbers an audit found wrong: a rate that is no measurement (0 tok/s,
the engine's "not measured"; NaN; inf) gives no interval and no speed-up, and a LOOP plain
marks its arm's speed-up in history as in the matrix tables."""

from __future__ import annotations

import functools
import itertools
import math
from datetime import UTC, datetime
from fractions import Fraction
from types import SimpleNamespace

import pytest

from specfleet.stats import detect_change, history_rows, ratio_interval, view_of_runs
from specfleet.stats.interval import _rank, side


def _run(arm: str, repeat: int, tok_per_s: float, prompt: str = "p", **extra) -> dict:
    return dict(host="h", engine="toy", device="cpu", model="m", prompt_name=prompt, arm=arm,
                repeat=repeat, tok_per_s=tok_per_s, status="done", **extra)


@pytest.mark.parametrize(("base", "other"), [
    ([0.0, 0.0, 0.0], [20.0, 21.0, 22.0]),  # every ratio inf: was "above" (a gain)
    ([20.0, 21.0, 22.0], [0.0, 0.0, 0.0]),  # every ratio 0: was "below" (a loss)
    ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0]),  # 0/0 read as 1: was "within noise"
    ([100.0, math.nan, 99.0], [150.0, 151.0, 152.0]),
    ([math.inf, 1.0, 2.0], [3.0, 4.0, 5.0]),
])
def test_a_rate_that_is_no_measurement_gives_no_verdict(base, other) -> None:
    assert ratio_interval(base, other) is None
    assert side(ratio_interval(base, other)) == "no verdict"


def test_a_nan_repeat_never_makes_the_verdict_depend_on_the_order_of_the_repeats() -> None:
    # Before: NaN sorted anywhere, so one ordering read "above" and another "within noise".
    sides = {side(ratio_interval(list(b), [150.0, 151.0, 152.0]))
             for b in itertools.permutations([100.0, math.nan, 99.0])}
    assert sides == {"no verdict"}


def test_one_token_replies_have_no_decode_speedup_and_the_headline_counts_what_it_averages():
    """`--rate decode`: a reply of one token has no decode rate (0.0, not measured). Before,
    prompt `p` read "0.00x gain" (interval inf-inf) and the headline said "1.83x over 2 cells
    (1 gain, 1 within noise)" while its geometric mean averaged one."""
    plain_p = [_run("plain", i, 10.0, generated_tokens=1, decode_s=0.0) for i in range(3)]
    arm_p = [_run("graded", i, 20.0, generated_tokens=5, decode_s=0.1 * (i + 1))
             for i in range(3)]  # decode 40, 20, 13.3 tok/s
    plain_q = [_run("plain", i, 10.0, "q", generated_tokens=9, decode_s=1.0 + i / 10)
               for i in range(3)]  # 8, 7.27, 6.67
    arm_q = [_run("graded", i, 20.0, "q", generated_tokens=9, decode_s=0.5 + i / 10)
             for i in range(3)]  # 16, 13.3, 11.4
    runs = [SimpleNamespace(**r) for r in plain_p + arm_p + plain_q + arm_q]
    view = view_of_runs("x", "x", runs, rate="decode")
    p = view.cell("h/toy/cpu", "m", "p", "graded")
    q = view.cell("h/toy/cpu", "m", "q", "graded")
    assert p is not None and (p.speedup, p.verdict, p.speedup_low) == (None, None, None)
    assert q is not None and q.speedup == pytest.approx((40 / 3) / (80 / 11))
    assert q.verdict == "gain" and q.speedup_low == pytest.approx((80 / 7) / 8)
    (head,) = view.headlines
    assert (head.cells, head.gains, head.within_noise) == (1, 1, 0)
    assert head.geomean_speedup == pytest.approx(q.speedup)


def test_a_change_from_nothing_measured_is_no_verdict_and_zero_over_zero_no_change() -> None:
    still = detect_change([0.0, 0.0, 0.0], [0.0, 0.0, 0.0])
    assert (still.ratio, still.interval, still.verdict, still.changed) == (
        1.0, None, "no verdict", False)  # was "within noise" at an infinite ratio
    appeared = detect_change([0.0, 0.0, 0.0], [5.0, 5.0, 5.0])
    assert appeared.interval is None and appeared.verdict == "no verdict"  # was "faster"


def test_history_marks_a_speedup_loop_when_its_plain_partner_loops() -> None:
    """docs/trust.md: a speed-up whose arm *or plain* cell loops is marked LOOP in history,
    as `matrix show` marks it (`cells.speedups`)."""
    runs = [SimpleNamespace(**_run("plain", i, 10.0, matrix_id="m1", loop_share=0.6))
            for i in range(3)]
    runs += [SimpleNamespace(**_run("graded", i, 30.0, matrix_id="m1", loop_share=0.0))
             for i in range(3)]
    (row,) = history_rows(runs, "graded", {"m1": datetime(2026, 12, 1, tzinfo=UTC)})
    assert row.speedup == pytest.approx(3.0)
    assert row.loop  # was False: the arm's own replies do not loop
    view = view_of_runs("m1", "m1", runs)
    cell = view.cell("h/toy/cpu", "m", "p", "graded")
    assert cell is not None and cell.loop  # the matrix table's answer, the same


def _tail_orderings(m: int, n: int, below: int) -> int:
    """Orderings of m + n distinct values with U < `below`, by the recursion on the largest
    value (from side m: it beats all n; from side n: it beats none), independent of
    `interval._u_counts`."""
    @functools.cache
    def count(a: int, b: int, u: int) -> int:
        if u < 0:
            return 0
        if a == 0 or b == 0:
            return int(u == 0)
        return count(a - 1, b, u - b) + count(a, b - 1, u)

    return sum(count(m, n, u) for u in range(below))


def _sign_tail(count: int, j: int) -> Fraction:
    """P(Binomial(count, 1/2) < j): the j-th smallest of `count` repeats above their median."""
    return Fraction(sum(math.comb(count, i) for i in range(j)), 2**count)


def _deepest(count: int) -> int:
    return max((j for j in range(1, count + 1) if 2 * _sign_tail(count, j) <= Fraction(1, 10)),
               default=0)


@pytest.mark.parametrize(("m", "n"), list(itertools.product(range(3, 11), repeat=2)))
def test_k_is_the_largest_rank_whose_exact_coverage_reaches_90_percent(m: int, n: int) -> None:
    """Under one noise shape (U's orderings), and from 5 repeats a side also were either
    side's repeats all alike (a sign test on the other side's order statistic)."""
    total = math.comb(m + n, m)
    best = max(k for k in range(1, m * n // 2 + 1)
               if 10 * 2 * _tail_orderings(m, n, k) <= total)  # 1 - 2 P(U < k) >= 0.9
    coverage = 1 - 2 * _tail_orderings(m, n, best) / total
    if min(m, n) >= 5:  # ceil(k / n) is the order statistic of side m a steady side n leaves
        best = min(best, _deepest(m) * n, _deepest(n) * m)
        coverage = min(1 - 2 * _tail_orderings(m, n, best) / total,
                       1 - 2 * _sign_tail(m, -(-best // n)), 1 - 2 * _sign_tail(n, -(-best // m)))
    assert _rank(m, n) == (best, pytest.approx(float(coverage)))
    assert _rank(m, n)[1] >= 0.9
    documented = {(3, 3): 0.900, (4, 4): 0.943, (5, 5): 0.905}  # docs/trust.md
    if (m, n) in documented:
        assert round(_rank(m, n)[1], 3) == documented[m, n]


@pytest.mark.parametrize(("repeats", "false_share"), [(3, 0.25), (5, 1 / 16), (6, 1 / 32)])
def test_a_steady_side_against_a_noisy_one_keeps_the_level_from_five_repeats(
        repeats: int, false_share: float) -> None:
    """Plain steady, the arm's repeats scattered around the same median: how often a verdict
    is called, over every way the arm's repeats fall either side of it (each 1 / 2^n)."""
    plain = [100.0] * repeats
    called = 0
    for signs in itertools.product((-1, 1), repeat=repeats):
        arm = [100.0 * (1 + 0.1 * sign * (i + 1)) for i, sign in enumerate(signs)]
        called += side(ratio_interval(plain, arm)) in ("above", "below")
    assert called / 2**repeats == pytest.approx(false_share)
    assert (called / 2**repeats <= 0.1) == (repeats >= 5)
