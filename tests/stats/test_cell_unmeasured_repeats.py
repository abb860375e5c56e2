"""A done run at 0 tok/s has no rate (a one-token reply under `--rate decode`): it is left out
of its cell's median, spread and n (docs/trust.md), as it is out of a speed-up, for either
rate and for the decode / prompt tok/s the counters table shows beside it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specfleet.report.tables import counters_grid, noisy_summary, plain_grid
from specfleet.stats.cells import cell_stats
from specfleet.stats.view import view_of_runs

T = "h/toy/cpu"


def _run(arm: str, repeat: int, generated: int, decode_s: float, tok_per_s: float = 50.0,
         noisy: bool = False) -> dict:
    return dict(host="h", engine="toy", device="cpu", model="m", prompt_name="p", arm=arm,
                repeat=repeat, status="done", tok_per_s=tok_per_s, noisy=noisy,
                generated_tokens=generated, decode_s=decode_s, prompt_tokens=10, prefill_s=0.1)


# The review's plain cell: two one-token replies (decode 0.0) among four repeats.
PLAIN = [_run("plain", 0, 1, 0.0), _run("plain", 1, 41, 0.8), _run("plain", 2, 41, 0.81),
         _run("plain", 3, 1, 0.0)]


def test_a_decode_rate_of_zero_is_out_of_the_median_the_spread_and_n() -> None:
    (cell,) = cell_stats(PLAIN, rate="decode")
    assert cell.values == pytest.approx((50.0, 40 / 0.81))  # was (0.0, 50.0, 49.38, 0.0)
    assert cell.n == 2 and cell.n_failed == 0
    assert cell.median_tok_per_s == pytest.approx((50.0 + 40 / 0.81) / 2)  # was 24.7
    assert cell.spread == pytest.approx((50.0 - 40 / 0.81) / cell.median_tok_per_s)  # was 202%
    assert not cell.spread_flag and cell.min_tok_per_s == pytest.approx(40 / 0.81)


def test_the_table_shows_the_measured_median_and_spread() -> None:
    view = view_of_runs("x", "x", [SimpleNamespace(**r) for r in PLAIN], rate="decode")
    (row,) = plain_grid(view, T).rows
    assert row[1] == "49.7 ±1.2%"  # was "24.7 ±202.5%!"


def test_a_whole_call_rate_of_zero_is_not_measured_either() -> None:
    rows = [_run("plain", i, 41, 0.8, tok_per_s=v) for i, v in enumerate((0.0, 40.0, 42.0))]
    (cell,) = cell_stats(rows)
    assert (cell.n, cell.median_tok_per_s, cell.values) == (2, 41.0, (40.0, 42.0))


def test_a_cell_with_no_rate_has_none() -> None:
    (cell,) = cell_stats([_run("plain", i, 1, 0.0) for i in range(3)], rate="decode")
    assert (cell.n, cell.values, cell.median_tok_per_s, cell.spread) == (0, (), None, None)


def test_the_decode_rate_beside_the_whole_call_rate_leaves_zeros_out() -> None:
    (cell,) = cell_stats(PLAIN)  # whole-call rates lead; decode tok/s is shown beside
    assert cell.n == 4 and cell.median_decode_tok_per_s == pytest.approx(
        (50.0 + 40 / 0.81) / 2)  # was 24.7, the median of (0, 50, 49.4, 0)
    view = view_of_runs("x", "x", [SimpleNamespace(**r) for r in PLAIN])
    (row,) = counters_grid(view, T).rows
    assert row[-1] == "49.7 / 100.0"
    one_token = [SimpleNamespace(**_run("plain", i, 1, 0.0)) for i in range(3)]
    (row,) = counters_grid(view_of_runs("x", "x", one_token), T).rows
    assert row[-1] == "– / 100.0"  # no decode rate at all: not "0.0"


def test_noisy_runs_are_counted_among_the_measured_ones() -> None:
    rows = [_run("plain", 0, 1, 0.0, noisy=True), _run("plain", 1, 41, 0.8),
            _run("plain", 2, 41, 0.81, noisy=True)]
    view = view_of_runs("x", "x", [SimpleNamespace(**r) for r in rows], rate="decode")
    assert noisy_summary(view) == ("Noisy runs (timed while the host was busy; --require-quiet "
                                   "waits instead): h/toy/cpu m/p plain: 1 of 2.")  # not 2 of 2
