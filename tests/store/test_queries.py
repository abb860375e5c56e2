"""Reads: filters, a matrix's runs, a cell's runs across matrices, on SQLite and PostgreSQL,
and the figures `specfleet.stats` computes from them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from specfleet.stats import compare_rows, history_rows, view_of_runs
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


def view(store, matrix_id):
    return view_of_runs(matrix_id, "m", store.runs(matrix=matrix_id, status="done"))


def test_a_matrix_runs_give_medians_spread_and_counters(store):
    matrix_id = seed(store, FIRST, "one")
    cells = {(c.target.split("/")[0], c.arm): c for c in view(store, matrix_id).cells}
    assert sorted(cells) == [("mac1", "graded"), ("mac1", "plain"),
                             ("spark1", "graded"), ("spark1", "plain")]
    graded = cells[("mac1", "graded")]
    assert (graded.n, graded.median_tok_per_s, graded.rates) == (3, 22.0, (22.0, 20.0, 24.0))
    assert graded.spread == pytest.approx(4.0 / 22.0)
    assert (graded.counters.accepted, graded.loop_share, graded.noisy_runs) == (
        0, pytest.approx(0.1), 1)
    assert (graded.target, graded.model, graded.prompt) == ("mac1/mlx/metal", "m1", "edit_fn")


def test_runs_not_done_are_left_out(store):
    runs = grid(repeats=2)
    matrix_id = store.create_matrix("demo", {}, runs)
    store.record_result(result(runs[0], 10.0))
    store.mark_failed(runs[2].run_key, "boom")
    assert [(c.arm, c.n) for c in view(store, matrix_id).cells] == [("plain", 1)]


def test_speedups_over_plain_with_verdicts(store):
    matrix_id = seed(store, FIRST, "one")
    cells = {(c.target.split("/")[0], c.arm): c for c in view(store, matrix_id).cells}
    mac = cells[("mac1", "graded")]
    assert mac.speedup == pytest.approx(2.0) and mac.verdict == "gain"
    assert (mac.speedup_low, mac.speedup_high) == (pytest.approx(20.0 / 12.0), 2.4)
    spark = cells[("spark1", "graded")]
    assert spark.speedup == pytest.approx(1.04) and spark.verdict == "gain"
    assert cells[("mac1", "plain")].speedup is None
    with pytest.raises(UnknownMatrix):
        store.get_matrix("nope")


def test_speedup_without_plain_is_none(store):
    runs = grid(arms=("graded",), repeats=1)
    matrix_id = store.create_matrix("demo", {}, runs)
    store.record_result(result(runs[0], 10.0))
    (cell,) = view(store, matrix_id).cells
    assert (cell.speedup, cell.verdict, cell.speedup_low) == (None, None, None)


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
    assert len(store.runs(host="mac1", arm="graded", status="done")) == 6
    with pytest.raises(TypeError):
        store.runs(colour="red")


def history(store, arm, **where):
    runs = store.runs(model="m1", prompt="edit_fn", arm=[arm, "plain"], status="done", **where)
    return history_rows(runs, arm, store.submitted_times({r.matrix_id for r in runs}))


def test_a_cell_history_across_matrices(store):
    first = seed(store, FIRST, "one")
    second = seed(store, SECOND, "two")
    points = history(store, "graded", host="mac1")
    assert [(p.matrix_id, p.median_tok_per_s, len(p.values)) for p in points] == [
        (first, 22.0, 3), (second, 15.0, 3)]
    assert [p.speedup for p in points] == [pytest.approx(2.0), pytest.approx(15.0 / 11.0)]
    assert points[1].change is not None and points[1].change.changed
    both = history(store, "graded")
    assert [(p.matrix_id, p.target) for p in both] == [
        (first, "mac1/mlx/metal"), (second, "mac1/mlx/metal"),
        (first, "spark1/torch/cuda"), (second, "spark1/torch/cuda")]
    assert len(history(store, "graded", host="spark1", engine="torch", device="cuda")) == 2
    assert history(store, "gated") == []


def test_a_history_point_over_a_plain_timed_at_zero_has_no_speedup(store):
    # A hand-edited or damaged store: the history page was a 500 (ZeroDivisionError).
    runs = grid(repeats=1)
    matrix_id = store.create_matrix("zero", {}, runs)
    for run in runs:
        store.record_result(result(run, 0.0 if run.arm == "plain" else 10.0))
    (point,) = history(store, "graded")
    assert (point.matrix_id, point.median_tok_per_s, point.speedup) == (matrix_id, 10.0, None)


def test_compare_two_matrices_flags_regressions(store):
    first = seed(store, FIRST, "one")
    second = seed(store, SECOND, "two")
    rows = compare_rows(store.runs(matrix=first, status="done"),
                        store.runs(matrix=second, status="done"))
    by = {(r.target.split("/")[0], r.arm): r for r in rows}
    mac = by[("mac1", "graded")]
    assert (mac.median_a, mac.median_b, mac.ratio) == (22.0, 15.0, pytest.approx(15.0 / 22.0))
    # Every repeat slower, same provenance, but one run of B was timed on a busy host.
    assert (mac.verdict, mac.differs) == ("slower", ("host load (noisy runs)",))
    mixed = compare_rows(store.runs(matrix=first, status="done"),
                         store.runs(matrix=second, status="done"), allow_mixed=True)
    assert next(r for r in mixed if r.target.startswith("mac1") and r.arm == "graded"
                ).verdict == "regression"
    assert by[("mac1", "plain")].ratio == 1.0 and by[("mac1", "plain")].verdict == "within noise"
    spark = by[("spark1", "graded")]
    assert spark.ratio == pytest.approx(1.0) and spark.verdict == "within noise"


def test_compare_with_a_cell_only_on_one_side(store):
    runs_a = grid(arms=("plain",), repeats=1, prefix="a")
    runs_b = grid(arms=("plain", "gated"), repeats=1, prefix="b")
    first = store.create_matrix("a", {}, runs_a)
    second = store.create_matrix("b", {}, runs_b)
    for run in runs_a + runs_b:
        store.record_result(result(run, 10.0))
    rows = compare_rows(store.runs(matrix=first), store.runs(matrix=second))
    assert [(r.arm, r.ratio) for r in rows] == [("plain", 1.0)]


def test_list_matrices_newest_first_with_counts(store):
    first = seed(store, FIRST, "one")
    second = store.create_matrix("two", {}, grid(prefix="two", repeats=1))
    listed = store.list_matrices()
    assert [m.id for m in listed] == [second, first]
    assert listed[0].counts == {"pending": 2} and listed[1].counts == {"done": 12}
    assert [m.id for m in store.list_matrices(limit=1)] == [second]
    assert store.list_matrices(limit=1)[0].total_runs == 2


def test_light_rows_give_the_same_figures_as_whole_runs(store):
    from specfleet.stats.history import COMPARE_FIELDS
    from specfleet.stats.runs import ROW_FIELDS

    first, second = seed(store, FIRST, "one"), seed(store, SECOND, "two")
    whole = store.runs(matrix=first, status="done")
    light = store.runs(matrix=first, status="done", columns=(*ROW_FIELDS, "plan_order"))
    assert [tuple(getattr(w, name) for name in light[0]._fields) for w in whole] == [
        tuple(row) for row in light]
    assert not hasattr(light[0], "versions")  # a column not asked for is not read
    assert view_of_runs(first, "m", light) == view_of_runs(first, "m", whole)
    assert compare_rows(store.runs(matrix=first, columns=COMPARE_FIELDS),
                        store.runs(matrix=second, columns=COMPARE_FIELDS)) == compare_rows(
        store.runs(matrix=first), store.runs(matrix=second))
