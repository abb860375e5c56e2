"""`history` follows each target and token limit as a series of its own: a matrix of another
limit between two of one limit never hides their slow-down, and the failing line says the
limit."""

from __future__ import annotations

import time

from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.store import open_store
from tests.store.factory import grid, result


def _matrix(store, matrix_id: str, limit: int, plain: float, graded: float) -> None:
    runs = [r.model_copy(update={"max_tokens": limit, "matrix_id": matrix_id})
            for r in grid(prefix=matrix_id)]
    store.create_matrix(matrix_id.split("-")[0], {"name": matrix_id}, runs, matrix_id=matrix_id)
    for run in runs:
        rate = (plain if run.arm == "plain" else graded) + run.repeat * 0.1
        store.record_result(result(run, rate))
    store.finish_matrix(matrix_id, "done")


def test_a_slow_down_between_points_of_one_limit_fails_across_another_limit(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with open_store(url) as store:
        for matrix_id, limit, graded in (("a-000001", 256, 20.0), ("b-000002", 48, 17.0),
                                         ("c-000003", 256, 14.0)):
            _matrix(store, matrix_id, limit, 10.0, graded)
            time.sleep(0.01)  # submission times order the points
    done = CliRunner().invoke(app, ["history", "--model", "m1", "--prompt", "edit_fn", "--arm",
                                    "graded", "--db", url])
    assert done.exit_code == 1, done.output
    assert done.stderr.startswith("history: regression at mac1/mlx/metal (256 tokens) c-000003 "
                                  "0.70x")


def test_the_web_view_plots_each_series_under_its_limit(tmp_path):
    # The section named the limit; both plots of each section said only the target.
    from specfleet.serve.pages import history_page

    url = f"sqlite:///{tmp_path / 's.db'}"
    with open_store(url) as store:
        for matrix_id, limit in (("a-000001", 256), ("b-000002", 48)):
            _matrix(store, matrix_id, limit, 10.0, 20.0)
        page = history_page(store, "m1", "edit_fn", "graded")
    captions = [(heading, tps.title, ups.title) for heading, tps, ups in page["plots"]]
    assert captions == [
        (f"mac1/mlx/metal, {n} new tokens", f"mac1/mlx/metal, {n} new tokens: tok/s (median, "
         "min-max bars)", f"mac1/mlx/metal, {n} new tokens: speed-up over plain")
        for n in (48, 256)]
