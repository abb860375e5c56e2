"""`history` follows each target and token limit as a series of its own: a matrix of another
limit between two of one limit never hides their slow-down, and the failing line says the
limit."""

from __future__ import annotations

import json
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


def test_last_shows_the_newest_points_each_still_compared_with_the_one_before(tmp_path):
    # A year of nightly matrices printed every point; the web view has had `last=`.
    url = f"sqlite:///{tmp_path / 's.db'}"
    with open_store(url) as store:
        for matrix_id, graded in (("a-000001", 20.0), ("b-000002", 20.0), ("c-000003", 14.0)):
            _matrix(store, matrix_id, 256, 10.0, graded)
            time.sleep(0.01)  # submission times order the points
    cell = ["history", "--model", "m1", "--prompt", "edit_fn", "--arm", "graded", "--db", url]
    newest = CliRunner().invoke(app, [*cell, "--last", "1"])
    assert newest.exit_code == 1 and "regression at mac1/mlx/metal (256 tokens) c-000003" in \
        newest.stderr  # its previous point is not shown, and still compared
    (point,) = [line for line in newest.stdout.splitlines() if "mac1/mlx/metal" in line]
    assert "c-000003" in point and "CHANGED 0.70x" in point, newest.stdout
    assert ("Showing the points of the newest 1 of the 3 matrices that measured this cell; "
            "--last 3 shows them all.") in newest.stdout
    two = CliRunner().invoke(app, [*cell, "--last", "2", "-o", "json"])
    assert [p["matrix_id"] for p in json.loads(two.stdout)] == ["b-000002", "c-000003"]
    every = CliRunner().invoke(app, [*cell, "--last", "3"])
    assert "Showing" not in every.stdout and every.stdout.count("mac1/mlx/metal ") == 3
