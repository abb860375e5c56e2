"""A ratio beside a verdict never reads 1.00x (docs/trust.md): an arm 0.3% faster in every
repeat is a gain, shown `1.003x gain` in every table that prints it (the speed-up intervals of
the record, the headline, history, the web view's history plot), and `compare`'s B/A column
beside a REGRESSION of 0.9996 reads `0.9996`, not `1.000`. A change test that got no
interval for a repeat at 0 tok/s does not claim its full n (`n=3, no verdict`)."""

from __future__ import annotations

from types import SimpleNamespace

from specfleet.report.history import change_text, compare_grid, history_grid
from specfleet.report.record import interval_grid
from specfleet.report.tables import headline
from specfleet.serve.svg import history_plot
from specfleet.stats.changes import ChangeTest, detect_change
from specfleet.stats.history import CompareRow, HistoryRow
from specfleet.stats.interval import MIN_REPEATS, RatioInterval, no_verdict_text
from specfleet.stats.view import view_of_runs

T = "h/torch/cpu"
REPEATS = max(6, MIN_REPEATS)  # a verdict under any repeats rule of 3 to 6 a side


def _run(arm: str, repeat: int, tok_per_s: float, loop_share: float = 0.0) -> SimpleNamespace:
    return SimpleNamespace(host="h", engine="torch", device="cpu", model="m", prompt_name="p",
                           arm=arm, repeat=repeat, status="done", tok_per_s=tok_per_s,
                           loop_share=loop_share)


def _view(arm_step: float, loop_share: float = 0.0):
    """Plain 100.00-100.25 tok/s; the arm `arm_step` above (below) every plain repeat."""
    plain = [100.0 + 0.05 * i for i in range(REPEATS)]
    runs = [_run("plain", i, v) for i, v in enumerate(plain)]
    runs += [_run("graded", i, v + arm_step, loop_share) for i, v in enumerate(plain)]
    return view_of_runs("x", "x", runs)


def test_the_speedup_intervals_table_says_a_gain_or_a_loss_off_one() -> None:
    ((*_, speedup, interval, verdict, _repeats),) = interval_grid(_view(0.3)).rows
    assert (speedup, verdict) == ("1.003x", "gain")  # was "1.00x" beside the gain
    ((*_, speedup, interval, verdict, _repeats),) = interval_grid(_view(-0.3)).rows
    assert (speedup, verdict) == ("0.997x", "loss")


def test_a_headline_of_gains_only_never_reads_one() -> None:
    (line,) = headline(_view(0.3), T)
    assert line.startswith("Headline graded: 1.003x geometric mean over 1 cell (1 gain")


def test_a_speedup_kept_out_of_the_headline_keeps_its_digits() -> None:
    lines = headline(_view(0.3, loop_share=0.9), T)
    assert lines == ["Kept out of the graded headline (replies loop): m/p 1.003x"]


def _point(speedup: float | None) -> HistoryRow:
    return HistoryRow(target=T, matrix_id="M1", submitted_at="2026-12-06 18:00",
                      values=(100.3, 100.4, 100.5), median_tok_per_s=100.4, spread=0.002,
                      speedup=speedup, loop=False, change=None)


def test_history_shows_a_speedup_off_one_as_off_one() -> None:
    (row,) = history_grid([_point(1.003)], "t").rows
    assert row[6] == "1.003x"  # its verdict is not stored with the point: never "1.00x"
    (row,) = history_grid([_point(1.0)], "t").rows
    assert row[6] == "1.00x"
    plot = history_plot([_point(1.003)], speedup=True)
    assert plot is not None and "; speed-up 1.003x;" in plot.points[0].title


def test_compare_ratio_beside_a_regression_never_reads_one() -> None:
    change = ChangeTest(changed=True, ratio=0.9996, interval=RatioInterval(0.999, 0.9998, 0.9),
                        n_before=3, n_after=3, median_before=100.0, median_after=99.96)
    row = CompareRow(T, "m", "p", "graded", 100.0, 99.96, 0.9996, change, "regression", ())
    ((*_, ratio, test, verdict),) = compare_grid([row], "A", "B").rows
    assert (ratio, verdict) == ("0.9996", "REGRESSION")  # was "1.000"
    assert test.startswith("CHANGED 0.9996x")
    within = ChangeTest(changed=False, ratio=0.8, interval=RatioInterval(0.7, 1.1, 0.9),
                        n_before=3, n_after=3, median_before=100.0, median_after=80.0)
    row = CompareRow(T, "m", "p", "graded", 100.0, 80.0, 0.8, within, "within noise", ())
    ((*_, ratio, _test, _verdict),) = compare_grid([row], "A", "B").rows
    assert ratio == "0.800"  # three places, as before


def test_a_repeat_not_measured_does_not_count_toward_the_n_shown() -> None:
    before = [100.0 + i for i in range(MIN_REPEATS)]
    after = [0.0, *before[1:]]  # one repeat at 0 tok/s: under MIN_REPEATS measured
    text = change_text(detect_change(before, after))
    assert "no verdict" in text and no_verdict_text(MIN_REPEATS) not in text
    assert no_verdict_text(MIN_REPEATS - 1) in change_text(detect_change(before, before[1:]))
