"""The parity rules a mutation run found unstated (tools/mutations.py --group rules): a
regression alone fails the check, nothing compared is no pass, a near-tie is close on both
paths."""

from __future__ import annotations

from specfleet.engine.forensics import PathRow, RowMargins, classify
from specfleet.report.coverage import Coverage
from specfleet.report.parity import ArmParity, ParityReport, Regression

ALL = Coverage(1, 1, "pairs")


def report(**fields) -> ParityReport:
    identical = ArmParity("h/toy/cpu", "m", "p", "graded", "identical")
    return ParityReport(**{"matrix_id": "now", "threshold": 0.25, "arms": (identical,),
                           "cross": (), "coverage": ALL, **fields})


def test_a_regression_against_the_baseline_fails_the_check_on_its_own() -> None:
    # No suspect divergence, every pair compared and found in the baseline: only the
    # regression (identical to plain then, differing now) is left to fail it.
    regression = Regression("h/toy/cpu", "m", "p", "graded", "then", token=3, char=7)
    assert not report(baseline_id="then", baseline_coverage=ALL).failed()
    assert report(baseline_id="then", baseline_coverage=ALL,
                  regressions=(regression,)).failed()


def test_a_check_that_compared_nothing_is_no_pass() -> None:
    assert not Coverage(0, 0, "pairs").complete
    assert report(arms=(), coverage=Coverage(0, 0, "pairs")).failed(allow_unverified=True)
    assert not report().failed()


def _margins(gap_a: float, gap_b: float) -> RowMargins:
    a = PathRow(((32, 7.0), (90, 7.0 - abs(gap_a))), abs(gap_a), gap_a, 1)
    b = PathRow(((90, 7.0), (32, 7.0 - abs(gap_b))), abs(gap_b), gap_b, 8)
    return RowMargins(5, 32, 90, a, b)


def test_a_near_tie_is_close_on_both_paths_not_on_one() -> None:
    assert classify(_margins(0.02, -0.02), 0.25) == "near-tie"
    # Plain's path nearly tied but the verify row put the other token 3 logits ahead: no
    # rounding explains that, whichever path came close.
    assert classify(_margins(0.02, -3.0), 0.25) == "suspect"
    assert classify(_margins(3.0, -0.02), 0.25) == "suspect"
