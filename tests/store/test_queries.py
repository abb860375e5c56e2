"""Reads: filters, per-cell medians, speed-ups, one cell's history, matrix vs matrix."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from specfleet.store import UnknownMatrix
from tests.store.factory import HOST_A, HOST_B, grid, result

# tok/s per (target host, arm) in repeat order: known medians and spreads.
FIRST = {("mac1", "plain"): [10.0, 12.0, 11.0], ("mac1", "graded"): [22.0, 20.0, 24.0],
         ("spark1", "plain"): [5.0, 5.0, 5.0], ("spark1", "graded"): [5.2, 5.2, 5.2]}
SECOND = {("mac1", "plain"): [11.0, 11.0, 11.0], ("mac1", "graded"): [14.0, 15.0, 16.0],
          ("spark1", "plain"): [5.0, 5.0, 5.0], ("spark1", "graded"): [5.2, 5.3, 5.1]}


def seed(store, rates, prefix):
    runs = grid(targets=(HOST_A, HOST_B), prefix=prefix)
    matrix_id = store.create_matrix(prefix, {"prefix": prefix}, runs)
    for run in runs:
        tps = rates[(run.target.host, run.arm)][run.repeat]
        noisy = run.target.host == "mac1" and run.arm == "graded" and run.repeat == 2
        store.record_result(result(run, tps, noisy=noisy, accepted=run.repeat,
                                   loop_share=0.1 * run.repeat))
    return matrix_id


def test_cells_give_medians_spread_and_counters(store):
    matrix_id = seed(store, FIRST, "one")
    cells = {(c.host, c.arm): c for c in store.cells(matrix_id)}
    assert list(cells) == [("mac1", "plain"), ("mac1", "graded"),
                           ("spark1", "plain"), ("spark1", "graded")]
    graded = cells[("mac1", "graded")]
    assert (graded.n, graded.median_tok_per_s, graded.min_tok_per_s, graded.max_tok_per_s) == (
        3, 22.0, 20.0, 24.0)
    assert graded.spread == pytest.approx(4.0 / 22.0)
    assert (graded.median_accepted, graded.median_loop_share, graded.noisy_count) == (
        1.0, pytest.approx(0.1), 1)
    assert (graded.engine, graded.device, graded.model, graded.prompt) == (
        "mlx", "metal", "m1", "edit_fn")


def test_cells_ignore_runs_not_done(store):
    runs = grid(repeats=2)
    matrix_id = store.create_matrix("demo", {}, runs)
    store.record_result(result(runs[0], 10.0))
    store.mark_failed(runs[2].run_key, "boom")
    cells = store.cells(matrix_id)
    assert [(c.arm, c.n) for c in cells] == [("plain", 1)]


def test_speedups_over_plain_with_noise_floor(store):
    matrix_id = seed(store, FIRST, "one")
    rows = {(r.host, r.arm): r for r in store.speedups(matrix_id)}
    mac = rows[("mac1", "graded")]
    assert mac.speedup == pytest.approx(2.0) and mac.plain_median_tok_per_s == 11.0
    assert mac.noise_floor == pytest.approx(2.0 / 11.0) and mac.beyond_noise is True
    assert (mac.n, mac.plain_n, mac.noisy_count) == (3, 3, 1)
    spark = rows[("spark1", "graded")]
    assert spark.speedup == pytest.approx(1.04) and spark.noise_floor == 0.0
    assert rows[("mac1", "plain")].speedup == 1.0
    assert rows[("mac1", "plain")].beyond_noise is False
    with pytest.raises(UnknownMatrix):
        store.speedups("nope")


def test_speedup_without_plain_is_none(store):
    runs = grid(arms=("graded",), repeats=1)
    matrix_id = store.create_matrix("demo", {}, runs)
    store.record_result(result(runs[0], 10.0))
    (row,) = store.speedups(matrix_id)
    assert (row.speedup, row.noise_floor, row.beyond_noise) == (None, None, None)


def test_filters(store):
    first = seed(store, FIRST, "one")
    second = seed(store, SECOND, "two")
    assert len(store.runs()) == 24
    assert len(store.runs(matrix=first)) == 12 and len(store.runs(matrix_id=second)) == 12
    assert {r.host for r in store.runs(host="spark1")} == {"spark1"}
    assert len(store.runs(engine="torch", arm="graded")) == 6
    assert len(store.runs(device=["cuda", "metal"], matrix=first)) == 12
    assert len(store.runs(model="m1", prompt="edit_fn", status="done")) == 24
    assert store.runs(model="other") == [] and store.runs(status="pending") == []
    assert len(store.runs(specfleet_version="0.1.0")) == 24
    finished = datetime(2026, 11, 1, 12, 0, 1)
    assert len(store.runs(since=finished, until=finished + timedelta(seconds=1))) == 24
    assert store.runs(since=finished + timedelta(seconds=1)) == []
    assert len(store.runs(until=datetime(2026, 11, 1, 13, 0, 1, tzinfo=UTC) - timedelta(hours=1,
                                                                                      seconds=-1))) == 24
    assert [c.arm for c in store.cells(host="mac1", arm="graded")] == ["graded"]
    assert store.cells(host="mac1", arm="graded")[0].n == 6
    with pytest.raises(TypeError):
        store.runs(colour="red")


def test_cell_history_across_matrices(store):
    first = seed(store, FIRST, "one")
    second = seed(store, SECOND, "two")
    points = store.cell_history("m1", "edit_fn", "graded", target=HOST_A)
    assert [(p.matrix_id, p.median_tok_per_s, p.n) for p in points] == [
        (first, 22.0, 3), (second, 15.0, 3)]
    assert [p.speedup for p in points] == [pytest.approx(2.0), pytest.approx(15.0 / 11.0)]
    assert points[0].submitted_at < points[1].submitted_at
    both = store.cell_history("m1", "edit_fn", "graded")
    assert [(p.matrix_id, p.host) for p in both] == [
        (first, "mac1"), (first, "spark1"), (second, "mac1"), (second, "spark1")]
    assert len(store.cell_history("m1", "edit_fn", "graded", target="spark1/torch/cuda")) == 2
    assert store.cell_history("m1", "edit_fn", "gated") == []


def test_compare_two_matrices_flags_regressions(store):
    first = seed(store, FIRST, "one")
    second = seed(store, SECOND, "two")
    rows = {(r.host, r.arm): r for r in store.compare(first, second)}
    mac = rows[("mac1", "graded")]
    assert (mac.median_a, mac.median_b, mac.ratio) == (22.0, 15.0, pytest.approx(15.0 / 22.0))
    assert mac.regression is True  # 0.68 is below 1 - the larger spread (4/22)
    assert rows[("mac1", "plain")].ratio == 1.0 and rows[("mac1", "plain")].regression is False
    spark = rows[("spark1", "graded")]
    assert spark.ratio == pytest.approx(1.0) and spark.regression is False


def test_compare_with_a_cell_only_on_one_side(store):
    runs_a = grid(arms=("plain",), repeats=1, prefix="a")
    runs_b = grid(arms=("plain", "gated"), repeats=1, prefix="b")
    first = store.create_matrix("a", {}, runs_a)
    second = store.create_matrix("b", {}, runs_b)
    for run in runs_a + runs_b:
        store.record_result(result(run, 10.0))
    rows = store.compare(first, second)
    assert [(r.arm, r.n_a, r.n_b, r.ratio) for r in rows] == [("plain", 1, 1, 1.0),
                                                             ("gated", 0, 1, None)]


def test_list_matrices_newest_first_with_counts(store):
    first = seed(store, FIRST, "one")
    second = store.create_matrix("two", {}, grid(prefix="two", repeats=1))
    listed = store.list_matrices()
    assert [m.id for m in listed] == [second, first]
    assert listed[0].counts == {"pending": 2} and listed[1].counts == {"done": 12}
    assert [m.id for m in store.list_matrices(limit=1)] == [second]
    assert store.list_matrices(limit=1)[0].total_runs == 2
