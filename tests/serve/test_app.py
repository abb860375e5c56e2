"""The web view over HTTP (Starlette's TestClient): every route, every error, escaping,
read-only access, and numbers equal to the terminal's."""

from __future__ import annotations

import json
import re
import sqlite3
from types import SimpleNamespace
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from specfleet.report.history import cell_history, compare
from specfleet.report.results import render_matrix
from specfleet.serve import create_app
from specfleet.serve.svg import heatmap
from specfleet.store import open_store
from specfleet.store.readonly import open_read_only
from tests.serve.seed import (
    BASE,
    EVIL,
    JOB,
    LIVE,
    LOOPBACK_URL,
    NEXT,
    THROTTLE_REASON,
    XSS_IMG,
    XSS_SCRIPT,
    seed_store,
)
from tests.store.factory import grid

HISTORY = "/history?model=m1&prompt=edit_fn&arm=graded"
PAGES = [
    "/matrices", "/matrices?page=1", f"/matrices/{BASE}", f"/matrices/{BASE}/runs",
    f"/matrices/{BASE}/parity", f"/matrices/{EVIL}/parity",
    f"/matrices/{BASE}/runs?page=1", HISTORY, f"{HISTORY}&target=mac1/mlx/metal",
    f"/compare?a={BASE}&b={NEXT}", f"/compare?a={BASE}&b={NEXT}&allow_mixed=1", "/fleet",
    f"/matrices/{EVIL}", f"/matrices/{EVIL}/runs", f"/matrices/{LIVE}",
    "/jobs", "/jobs?page=1", f"/jobs/{JOB}", f"/jobs/{JOB}?page=1",
]
OTHER = [f"/matrices/{BASE}/runs.csv", f"/matrices/{BASE}/runs.json",
         f"/matrices/{BASE}/spec.yaml", f"/api/matrices/{LIVE}/progress", "/static/app.css",
         "/static/live.js", "/"]
ROUTES = PAGES + [p.replace("/", "/api/", 1) for p in PAGES if p != "/fleet"] + ["/api/fleet"]


@pytest.mark.parametrize("path", PAGES)
def test_every_page_renders(client, path):
    response = client.get(path)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert "<h1>" in response.text


def test_every_answer_forbids_framing_and_cross_origin_reads(client):
    for path in (f"/matrices/{BASE}", f"/api/matrices/{BASE}", f"/matrices/{BASE}/runs.csv",
                 "/static/app.css", "/matrices/nope", "/matrices?page=0"):
        headers = client.get(path).headers
        assert headers["x-frame-options"] == "DENY", path
        assert headers["cross-origin-resource-policy"] == "same-origin", path
        assert "frame-ancestors 'none'" in headers["content-security-policy"], path


def test_a_bug_is_a_500_of_one_line_with_every_page_s_headers(seeded_url):
    # Starlette answers a bug outside every middleware: the 500 had no CSP and no no-store.
    with open_read_only(seeded_url) as store:
        def fail(*args, **kwargs):
            raise RuntimeError(f"bug reading {seeded_url}")

        store.count_matrices = fail
        with TestClient(create_app(store), base_url=LOOPBACK_URL,
                        raise_server_exceptions=False) as web:
            for path in ("/matrices", "/api/matrices"):
                response = web.get(path)
                assert response.status_code == 500, path
                assert response.headers["cache-control"] == "no-store", path
                assert "script-src 'self'" in response.headers["content-security-policy"]
                assert response.headers["x-content-type-options"] == "nosniff"
                assert "the view failed on this request" in response.text, path
                assert "Traceback" not in response.text and "seeded" not in response.text
            assert web.get("/api/matrices").json()["error"].startswith("the view failed")


@pytest.mark.parametrize("path", [p.replace("/", "/api/", 1) for p in PAGES] + OTHER)
def test_every_api_route_and_asset_answers(client, path):
    response = client.get(path)
    assert response.status_code == 200, response.text
    if path.startswith("/api/"):
        assert isinstance(response.json(), dict)


def test_no_asset_comes_from_elsewhere(client):
    """Works offline: no page, script or stylesheet refers to another host."""
    for path in PAGES + ["/static/app.css", "/static/live.js"]:
        text = client.get(path).text
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), path
        assert "@import" not in text and "url(http" not in text


def test_heatmap_cells_equal_matrix_show_json(client, seeded_url):
    with open_read_only(seeded_url) as store:
        shown = json.loads(render_matrix(store, BASE, "json"))
    page = client.get(f"/matrices/{BASE}").text
    cells = dict(re.findall(r'data-cell="([^"]+)" data-speedup="([^"]*)"', page))
    expected = {"|".join((c["target"], c["model"], c["prompt"], c["arm"])): c["speedup"]
                for c in shown["cells"]}
    assert len(cells) == len(expected) == 4
    for key, speedup in expected.items():
        assert (float(cells[key]) if cells[key] else None) == speedup
    assert "1.50x ±1.3% gain =" in page  # the terminal table's text, markers and all
    api = client.get(f"/api/matrices/{BASE}").json()
    assert {k: v for k, v in api.items() if k != "progress"} == shown


def test_heatmap_cells_start_right_of_the_longest_row_label():
    # "smollm2-135m · llama.cpp-lookup" at 12.5 px monospace (~7.6 px a character, drawn
    # from x = 6) ran under the first column when the label column was a fixed 230 px.
    arms = ("plain", "llama.cpp-lookup")
    view = SimpleNamespace(cells=[], models=("smollm2-135m",), arms=arms, prompts=("p1", "p2"),
                           cell=lambda target, model, prompt, arm: SimpleNamespace(rates=[]))
    drawn = heatmap(view, "vm/torch/cpu", href=lambda cell: "")
    longest = max(len(label) for _, label in drawn.rows)
    assert longest == len("smollm2-135m · llama.cpp-lookup")
    assert 6 + 7.6 * longest < drawn.columns[0][0]
    assert drawn.width == drawn.columns[-1][0] + drawn.cell_w + 2


def test_history_page_has_a_point_per_matrix_and_marks_the_change(client, seeded_url):
    page = client.get(HISTORY).text
    with open_read_only(seeded_url) as store:
        rows = cell_history(store, "m1", "edit_fn", "graded")
    assert len(rows) == 2 and rows[1].change.changed
    # Two plots (tok/s and speed-up), one point per matrix in each; the second is a change,
    # marked on the tok/s plot (the test is on tok/s).
    assert page.count('<g class="point"') == 3 and page.count('<g class="point changed"') == 1
    assert "CHANGED 0.80x (90% interval 0.79-0.81x)" in page
    # The same settings throughout: each plot one unbroken line.
    assert rows[1].differs == ()
    assert page.count('<polyline class="line"') == 2 and 'class="settings"' not in page
    api = client.get("/api/history?model=m1&prompt=edit_fn&arm=graded").json()
    assert [p["matrix_id"] for p in api["points"]] == [BASE, NEXT]
    newest = client.get("/api/history?model=m1&prompt=edit_fn&arm=graded&last=1").json()
    assert [p["matrix_id"] for p in newest["points"]] == [NEXT]
    assert newest["points"][0]["change"] is None  # its previous point is not shown
    every = client.get(f"{HISTORY}&last=all").text
    assert every.count('<g class="point changed"') == 1


def test_compare_highlights_regressions(client, seeded_url):
    page = client.get(f"/compare?a={BASE}&b={NEXT}").text
    with open_read_only(seeded_url) as store:
        rows = compare(store, BASE, NEXT)
    regressions = [r for r in rows if r.verdict == "regression"]
    assert len(regressions) == 2
    assert page.count('<tr class="regression">') == 2
    assert "2 regressions. <span id=\"coverage\">4 of 4 cells compared.</span>" in page


def test_compare_with_no_cells_in_common_says_so(client):
    """As `specfleet compare` does ("0 of 6 cells compared", exit 1): never a bare "0"."""
    page = client.get(f"/compare?a={BASE}&b={EVIL}").text
    assert f'<span id="coverage" class="error">0 of 6 cells compared (measured in both {BASE}' \
        in page
    api = client.get(f"/api/compare?a={BASE}&b={EVIL}").json()
    assert api["coverage"] == {"compared": 0, "planned": 6, "complete": False}
    assert client.get(f"/api/compare?a={BASE}&b={NEXT}").json()["coverage"]["complete"]


def test_matrices_page_lists_progress_for_live_updates(client):
    page = client.get("/matrices").text
    assert f'data-matrix="{LIVE}" data-status="running"' in page
    progress = client.get(f"/api/matrices/{LIVE}/progress").json()
    assert (progress["done"], progress["pending"], progress["status"]) == (1, 1, "running")
    listed = {m["id"]: m for m in client.get("/api/matrices").json()["matrices"]}
    assert listed[BASE]["done"] == 12 and listed[LIVE]["total"] == 2


def test_the_jobs_pages_list_each_job_and_show_its_replies(client):
    # `job generate`'s outputs were in the store but on no page.
    listed = client.get("/api/jobs").json()
    assert listed["total"] == 1 and listed["pages"] == 1
    (job,) = listed["jobs"]
    assert (job["id"], job["name"], job["target"], job["model"], job["status"]) == (
        JOB, "batch", "mac1/mlx/metal", "g1", "failed")
    assert (job["done"], job["failed"], job["total"]) == (1, 1, 2)
    page = client.get("/jobs").text
    assert f'<a class="job-link" href="/jobs/{JOB}">{JOB}</a>' in page
    shown = client.get(f"/api/jobs/{JOB}").json()
    assert shown["job"]["params"] == {"policy": "graded"} and shown["total"] == 2
    assert [(r["prompt_name"], r["status"], r["output_text"] is not None)
            for r in shown["runs"]] == [
        ("hello", "done", True), ("line2", "failed", True)]
    html = client.get(f"/jobs/{JOB}").text
    assert "hello" in html and "line2" in html and "20.0" in html
    assert '<a href="/jobs">Jobs</a>' in html  # every page's navigation names them


def test_store_texts_are_escaped(client):
    for path in (f"/matrices/{EVIL}", f"/matrices/{EVIL}/runs", "/matrices", f"/jobs/{JOB}"):
        page = client.get(path).text
        assert XSS_SCRIPT not in page and XSS_IMG not in page, path
        assert "&lt;script&gt;window.__xss = 1&lt;/script&gt;" in page, path
    runs = client.get(f"/matrices/{EVIL}/runs").text
    assert "&lt;img src=x onerror=" in runs and "h&lt;b&gt;x&lt;/b&gt;" in runs


def test_matrix_page_shows_host_conditions(client):
    page = client.get(f"/matrices/{BASE}").text
    table = page[page.index('id="conditions"'):]
    assert "<td>mac1</td><td class=\"right\">12</td><td class=\"right\">1</td>" in table
    assert THROTTLE_REASON in table and "CPU powersave 1200/3000 MHz" in table
    assert "No host conditions stored" in client.get(f"/matrices/{EVIL}").text


def test_matrix_page_says_its_finish_time_is_utc(client):
    page = client.get(f"/matrices/{BASE}").text  # as its submit time is
    finished = r'data-field="finished_at" data-suffix=" UTC">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC<'
    assert re.search(finished, page), page[page.index("submitted"):][:200]


def test_fleet_page_without_a_fleet_says_so(client):
    assert "No fleet" in client.get("/fleet").text
    assert client.get("/api/fleet").json()["hosts"] == []


@pytest.mark.parametrize(("path", "back"), [
    *[(path, '<a id="back" href="/matrices">← back to the matrices</a>') for path in (
        "/matrices/nope", "/matrices/nope/runs", "/matrices/nope/spec.yaml",
        "/matrices/nope/parity", "/matrices/nope/runs.csv", f"/compare?a={BASE}&b=nope",
        "/history?model=m1&prompt=edit_fn&arm=gated", "/no/such/page", "/jobsnope")],
    # An unknown job's page went back to the matrices, a list it is not in.
    *[(path, '<a id="back" href="/jobs">← back to the generation jobs</a>')
      for path in ("/jobs/nope", "/jobs?page=2", f"/jobs/{JOB}?page=2")],
])
def test_unknown_things_are_a_404_page_with_a_link_back(client, path, back):
    response = client.get(path)
    assert response.status_code == 404
    assert back in response.text


@pytest.mark.parametrize(("path", "back"), [
    ("/jobs?page=0", "/jobs"), (f"/jobs/{JOB}?page=x", "/jobs"), ("/fleet?x=1", "/fleet"),
    ("/matrices?page=0", "/matrices"), ("/history?model=m1", "/matrices"),
])
def test_a_refused_page_links_back_to_the_list_it_belongs_to(client, path, back):
    page = client.get(path, headers={"Accept": "text/html"})
    assert page.status_code == 400 and f'<a id="back" href="{back}">' in page.text


def test_an_unknown_download_names_the_ones_there_are(client):
    response = client.get(f"/matrices/{BASE}/runs.xml")
    assert response.status_code == 404 and '<a id="back"' in response.text
    assert "no download runs.xml; expected runs.json or runs.csv" in response.text
    assert "--format" not in response.text


def test_a_download_is_named_by_the_id_without_its_quotes_or_line_breaks(tmp_path):
    # A stored id's `"` and `;` added parameters to Content-Disposition (a browser saved
    # runs.csv as evil.html); a line break or a non-Latin-1 character was a 500.
    ids = {"x\";filename*=UTF-8''evil.html": "x__filename__UTF-8__evil.html",
           "tick-\u2713": "tick-_", "crlf\r\nSet-Cookie: a=1": "crlf__Set-Cookie__a_1"}
    url = f"sqlite:///{tmp_path / 'ids.db'}"
    with open_store(url) as store:
        for n, matrix_id in enumerate(ids):
            store.create_matrix("m", {"name": "m"}, grid(repeats=1, prefix=f"i{n}"),
                                matrix_id=matrix_id)
    with (open_read_only(url) as store,
          TestClient(create_app(store), base_url=LOOPBACK_URL) as web):
        for matrix_id, name in ids.items():
            response = web.get(f"/matrices/{quote(matrix_id, safe='')}/runs.csv")
            assert response.status_code == 200, matrix_id
            assert response.headers["content-disposition"] == \
                f'attachment; filename="{name}-runs.csv"', matrix_id
            assert "set-cookie" not in response.headers


@pytest.mark.parametrize("path", ["/matrices?page=2", "/matrices?page=1000000",
                                  f"/matrices/{BASE}/runs?page=2", "/jobs?page=2",
                                  f"/jobs/{JOB}?page=2"])
def test_a_page_past_the_last_is_a_404_naming_the_last(client, path):
    response = client.get(path)
    assert response.status_code == 404 and "expected a page from 1 to 1" in response.text
    api = client.get(path.replace("/", "/api/", 1))
    assert api.status_code == 404 and api.json()["error"].startswith(
        f"page {path.rpartition('=')[2]} is past the last page of the ")


@pytest.mark.parametrize("path", ["/api/matrices/nope", "/api/matrices/nope/progress",
                                  "/api/jobs/nope"])
def test_unknown_matrix_in_the_api_is_a_json_404(client, path):
    response = client.get(path)
    assert response.status_code == 404 and "nope" in response.json()["error"]


@pytest.mark.parametrize(("path", "says"), [
    ("/matrices?page=0", "page='0': expected a whole number from 1 to 1000000"),
    ("/matrices?page=99999999999999999999", "expected a whole number from 1 to 1000000"),
    (f"/api/matrices/{BASE}/runs?page=1000001", "expected a whole number from 1 to 1000000"),
    ("/matrices?page=%C2%B2", "page='²': expected a whole number"),
    (f"{HISTORY}&last=%D9%A3", "last='٣': expected a whole number"),
    ("/matrices?page=abc", "page='abc'"),
    ("/matrices?sort=name", "unknown query parameter 'sort'; expected page"),
    (f"/matrices/{BASE}?x=1", "unknown query parameter 'x'"),
    (f"/matrices/{BASE}/runs?page=-2", "page='-2'"),
    ("/history?model=m1&prompt=edit_fn", "query parameter 'arm' is required"),
    ("/history?model=m1&prompt=edit_fn&arm=turbo", "arm='turbo': expected one of plain"),
    (f"{HISTORY}&target=a//b", "expected HOST, HOST/ENGINE or HOST/ENGINE/DEVICE"),
    (f"{HISTORY}&target=vm/nope", "target='vm/nope': expected HOST, HOST/ENGINE or "
     "HOST/ENGINE/DEVICE with ENGINE one of mlx, torch, toy and DEVICE one of metal"),
    (f"{HISTORY}&target=vm/torch/gpu", "target='vm/torch/gpu': expected HOST, HOST/ENGINE"),
    (f"{HISTORY}&target=vm/TORCH", "target='vm/TORCH': expected HOST, HOST/ENGINE"),
    (f"{HISTORY}&target=%00", "target='\\x00': HOST: expected a host name"),
    ("/matrices?page=abc&page=1", "query parameter 'page' given twice; expected it once"),
    (f"/compare?a={BASE}&b={NEXT}&a={EVIL}", "query parameter 'a' given twice"),
    (f"{HISTORY}&arm=plain", "query parameter 'arm' given twice"),
    (f"{HISTORY}&last=0", "last='0': expected a whole number from 1 to 100000, or all"),
    (f"/compare?a={BASE}", "query parameter 'b' is required"),
    (f"/compare?a={BASE}&b={BASE}", f"a and b are both '{BASE}'; expected two different"),
    (f"/compare?a={BASE}&b={NEXT}&allow_mixed=maybe", "expected 1, 0, true or false"),
    ("/api/matrices?page=x", "page='x'"),
    ("/?q=1", "unknown query parameter 'q'"),
])
def test_bad_query_parameters_are_a_400_with_one_line(client, path, says):
    response = client.get(path)
    assert response.status_code == 400
    if path.startswith("/api/"):
        assert says in response.json()["error"] and "--" not in response.json()["error"]
        return
    assert response.text.count("\n") == 1 and response.text.startswith("error: ")
    assert says in response.text and "--" not in response.text
    api = client.get(path.replace("/", "/api/", 1))
    assert api.status_code in (400, 404)  # "/" has no twin under /api/
    assert api.status_code == 404 or says in api.json()["error"]


def test_a_wrong_method_is_a_405_that_names_the_allowed_ones(client):
    for path in ("/api/matrices", "/matrices", "/static/app.css", "/login"):
        response = client.put(path)
        assert response.status_code == 405, path
        allowed = {"GET", "HEAD"} | ({"POST"} if path == "/login" else set())
        assert set(response.headers["allow"].split(", ")) == allowed, path
        error = response.json()["error"] if path.startswith("/api/") else response.text
        assert error.startswith("method PUT is not allowed here; expected " if
                                path.startswith("/api/") else "error: method PUT"), path


def test_a_trailing_slash_redirects_by_path_only(client):
    asked = {f"/matrices/{BASE}/runs.json/": f"/matrices/{BASE}/runs.json",
             "/matrices/?page=1": "/matrices?page=1", "/api/fleet//": "/api/fleet"}
    for path, location in asked.items():
        response = client.get(path, headers={"Host": "localhost:1"}, follow_redirects=False)
        assert response.status_code == 307 and response.headers["location"] == location, path
    assert client.get("/nope/", follow_redirects=False).status_code == 404


def _dump(url: str) -> list[str]:
    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return list(conn.iterdump())


def test_no_route_writes_to_the_store(client, seeded_url):
    before = _dump(seeded_url)
    for path in ROUTES + OTHER:
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            response = client.request(method, path, content=b"status=done")
            assert response.status_code == 405, (method, path)
        assert client.get(path).status_code == 200
    assert _dump(seeded_url) == before


def test_a_non_finite_stored_rate_is_null_in_json_not_a_500(tmp_path):
    # A hand-edited store's `inf` tok/s: Starlette's JSONResponse refused it, a 500 and a
    # traceback on /api/matrices/ID, /runs, /history and /compare.
    url = f"sqlite:///{tmp_path / 'inf.db'}"
    seed_store(url)
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        conn.execute("update runs set tok_per_s = 1e999 where run_key = ?", (f"{BASE}-mac1-m1-"
                                                                           "edit_fn-0-graded",))
    with (open_read_only(url) as store,
          TestClient(create_app(store), base_url=LOOPBACK_URL) as web):
        runs = web.get(f"/api/matrices/{BASE}/runs")
        assert runs.status_code == 200, runs.text
        rates = {r["run_key"]: r["tok_per_s"] for r in runs.json()["runs"]}
        assert rates[f"{BASE}-mac1-m1-edit_fn-0-graded"] is None
        for path in (f"/api/matrices/{BASE}", f"{HISTORY.replace('/', '/api/', 1)}",
                     f"/api/compare?a={BASE}&b={NEXT}"):
            assert web.get(path).status_code == 200, path
        # The runs.json download wrote `Infinity`, which no strict JSON parser reads.
        download = json.loads(web.get(f"/matrices/{BASE}/runs.json").text,
                              parse_constant=lambda name: pytest.fail(f"runs.json: {name}"))
        assert {r["run_key"]: r["tok_per_s"] for r in download} == rates


def test_the_app_store_refuses_writes_itself(seeded_url):
    """Read-only below the routes too: SQLite itself refuses a write on this connection."""
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    with (open_read_only(seeded_url) as store, store.engine.connect() as conn,
          pytest.raises(OperationalError, match="readonly")):
        conn.execute(text("UPDATE matrices SET status = 'failed'"))
    with open_read_only(seeded_url) as store:
        assert store.get_matrix(BASE).status == "done"


@pytest.mark.postgres
def test_postgres_store_is_read_only(pg_url):
    from sqlalchemy import text
    from sqlalchemy.exc import InternalError

    from tests.serve.seed import seed_store

    seed_store(pg_url)
    store = open_read_only(pg_url)
    try:
        with TestClient(create_app(store), base_url=LOOPBACK_URL) as pg_client:
            assert pg_client.get(f"/matrices/{BASE}").status_code == 200
        with store.engine.connect() as conn, pytest.raises(InternalError, match="read-only"):
            conn.execute(text("UPDATE matrices SET status = 'failed'"))
    finally:
        store.close()


def test_the_parity_page_names_the_pairs_it_could_not_compare(client):
    # The page listed only the pairs compared: a matrix with its graded run still pending
    # read as an empty table, as if nothing were wrong.
    page = client.get(f"/matrices/{LIVE}/parity").text
    assert "Pairs not compared" in page and "graded pending" in page
    assert "Pairs not compared" not in client.get(f"/matrices/{BASE}/parity").text
    body = client.get(f"/api/matrices/{LIVE}/parity").json()
    assert [u["why"] for u in body["uncompared"]] == ["graded pending"]
