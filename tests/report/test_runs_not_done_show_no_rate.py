"""A failed run is stored with tok/s 0.0 (it measured nothing): the runs table and the web
view's runs page showed `0.00`, as if it had decoded at no speed; both show `–`."""

from __future__ import annotations

from specfleet.report.results import runs_grid
from specfleet.store import open_store
from tests.serve.conftest import client_of
from tests.store.factory import result, spec


def test_a_failed_run_shows_no_rate(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    done, failed = spec("ok"), spec("bad", "graded")
    with open_store(url) as store:
        store.create_matrix("m", {}, [done, failed], matrix_id="m-000001")
        store.record_result(result(done, 12.5))
        store.record_result(result(failed, 0.0, status="failed"))
        runs = {r.run_key: r for r in store.runs(matrix="m-000001")}
    grid = runs_grid([runs["ok"], runs["bad"]])
    column = grid.headers.index("tok/s")
    assert [row[column] for row in grid.rows] == ["12.50", "–"]
    for web in client_of(url):
        page = web.get("/matrices/m-000001/runs").text
        assert "12.50" in page and ">0.00<" not in page
