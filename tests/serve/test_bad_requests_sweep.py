"""Requests the web view must refuse in one line rather than answer wrongly: a body where the
parameters belong in the query, an over-long parameter name or id, a NUL where PostgreSQL
cannot compare one, a login form or query that is not what the form sends, a second
`Authorization` header."""

from __future__ import annotations

import html
import re

import pytest
from starlette.testclient import TestClient

from specfleet.jobs.run import Target
from specfleet.serve import create_app
from specfleet.serve.auth import COOKIE
from specfleet.store import open_store
from specfleet.store.readonly import open_read_only
from tests.serve.seed import BASE, EVIL, JOB, LOOPBACK_URL, seed_store
from tests.store.factory import grid, result

TOKEN = "0123456789abcdef-the-right-token"
WRONG = "0123456789abcdef-the-wrong-token"


@pytest.fixture(scope="module")
def guarded(seeded_url):
    """A client of the view with a token; it shows redirects instead of following them."""
    with (open_read_only(seeded_url) as store,
          TestClient(create_app(store, token=TOKEN), follow_redirects=False) as web):
        yield web


@pytest.mark.parametrize("path", ["/api/matrices", "/matrices", f"/matrices/{BASE}/runs.csv",
                                  f"/api/matrices/{BASE}/progress", "/"])
def test_a_body_on_a_get_is_a_400_not_ignored(client, path):
    response = client.request("GET", path, json={"page": 2})
    assert response.status_code == 400, path
    says = f"GET {path} takes no request body; expected its parameters in the query string"
    assert says in (response.json()["error"] if path.startswith("/api/") else response.text)
    assert client.request("GET", path, content=b"", follow_redirects=False).status_code in (
        200, 307)


def test_an_over_long_unknown_parameter_name_is_cut_in_the_error(client):
    response = client.get("/api/matrices?" + "x" * 5000)
    assert response.status_code == 400
    assert response.json()["error"] == f"unknown query parameter {'x' * 80!r}; expected page, name"


@pytest.mark.parametrize("path", ["/matrices/{}", "/api/matrices/{}/progress",
                                  "/matrices/{}/runs.csv", "/matrices/{}/spec.yaml",
                                  "/api/jobs/{}"])
def test_an_over_long_id_is_cut_in_the_404(client, path):
    # Echoed whole before: a 50,000-character id made a 50 KB error line.
    response = client.get(path.format("x" * 50_000))
    error = response.json()["error"] if "/api/" in path else response.text
    assert response.status_code == 404 and len(error) < 5000
    assert f"{'x' * 64!r}...; expected an id of at most 64 characters" in error.replace(
        "&#39;", "'")


NUL_REQUESTS = ["/api/matrices/a%00b", "/api/matrices/%00/progress", "/api/matrices/%00/runs",
                "/api/matrices/%00/parity", "/matrices/%00/runs.csv", "/matrices/%00/spec.yaml",
                "/api/jobs/%00", f"/api/compare?a={BASE}&b=%00",
                "/api/history?model=%00&prompt=edit_fn&arm=graded",
                "/api/history?model=m1&prompt=a%00&arm=graded"]


def _refuses_nul(web, path):
    response = web.get(path)
    error = response.json()["error"] if path.startswith("/api/") else response.text
    assert "NUL" in error, (path, error)
    assert response.status_code == (400 if "?" in path else 404), path


@pytest.mark.parametrize("path", NUL_REQUESTS)
def test_a_nul_in_an_id_or_name_is_refused_before_the_store(client, path):
    _refuses_nul(client, path)


@pytest.mark.postgres
def test_a_nul_is_no_500_on_postgres(pg_url):
    # PostgreSQL refuses to compare a string holding a NUL: every one of these was a 500.
    seed_store(pg_url)
    with (open_read_only(pg_url) as store,
          TestClient(create_app(store), base_url=LOOPBACK_URL,
                     raise_server_exceptions=False) as web):
        for path in NUL_REQUESTS:
            _refuses_nul(web, path)
        assert web.get(f"/api/jobs/{JOB}").status_code == 200


@pytest.mark.parametrize(("query", "says"), [
    ("model=nope&prompt=edit_fn", "query parameter model: no stored run has 'nope'"),
    ("model=m1&prompt=nope", "query parameter prompt: no stored run has 'nope'"),
    ("model=m1&prompt=edit_fn&target=nosuch",
     "query parameter target's HOST: no stored run has 'nosuch'"),
])
def test_a_history_of_nothing_stored_names_the_query_parameter_not_a_flag(client, query, says):
    response = client.get(f"/api/history?{query}&arm=graded")
    assert response.status_code == 404
    assert response.json()["error"].startswith(says) and "--" not in response.json()["error"]


@pytest.mark.parametrize(("query", "says"), [
    ("next=/fleet&next=/matrices", "query parameter 'next' given twice; expected it once"),
    (f"token={TOKEN}", "unknown query parameter 'token'; expected next, wrong"),
    ("wrong=yes", "query parameter wrong='yes': expected 1, 0, true or false"),
])
def test_the_login_page_checks_its_query(guarded, query, says):
    response = guarded.get(f"/login?{query}")
    assert response.status_code == 400 and response.text == f"error: {says}\n"
    assert TOKEN not in response.text


def _post_login(web, query: str = "", **kwargs):
    return web.post(f"/login{query}", **kwargs)


def test_the_login_form_takes_no_query(guarded):
    response = _post_login(guarded, "?next=/fleet", data={"token": TOKEN})
    assert response.status_code == 400 and "set-cookie" not in response.headers
    assert response.text == "error: unknown query parameter 'next'; expected none\n"


def test_a_login_that_is_not_a_form_is_a_415_not_a_wrong_token(guarded):
    response = _post_login(guarded, json={"token": TOKEN})
    assert response.status_code == 415 and "set-cookie" not in response.headers
    assert response.text == ("error: the login form is sent as "
                             "application/x-www-form-urlencoded; got 'application/json'\n")


@pytest.mark.parametrize("body", [f"token={WRONG}&token={TOKEN}", f"token={TOKEN}&token={WRONG}",
                                  f"token={TOKEN}&next=/fleet&next=/matrices"])
def test_a_login_field_given_twice_is_a_400(guarded, body):
    response = _post_login(guarded, content=body.encode(),
                           headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert response.status_code == 400 and COOKIE not in response.headers.get("set-cookie", "")
    assert "twice; expected it once" in response.text


@pytest.mark.parametrize("order", [(TOKEN, WRONG), (WRONG, TOKEN)])
def test_two_authorization_headers_are_refused_whichever_comes_first(guarded, order):
    headers = [("Authorization", f"Bearer {token}") for token in order]
    response = guarded.get("/api/matrices", headers=headers)
    assert response.status_code == 401
    assert response.json()["error"].startswith("unreadable Authorization header; expected "
                                               "exactly one `Authorization: Bearer TOKEN`")


def test_a_store_whose_tables_are_gone_is_a_503_not_a_404(tmp_path):
    # A table renamed under a running view: every page said 404 "Not found", as if the
    # visitor had asked for something that was not there.
    import sqlite3

    url = f"sqlite:///{tmp_path / 'broken.db'}"
    seed_store(url)
    with (open_read_only(url) as store,
          TestClient(create_app(store), base_url=LOOPBACK_URL) as web):
        with sqlite3.connect(tmp_path / "broken.db") as db:
            db.execute("ALTER TABLE runs RENAME TO runs_gone")
        page, api = web.get(f"/matrices/{BASE}"), web.get(f"/api/matrices/{BASE}")
    assert page.status_code == api.status_code == 503, (page.text, api.text)
    assert "its tables do not match its schema revision" in api.json()["error"]


def test_every_history_link_of_a_matrix_page_answers(client):
    # The evil matrix's host holds a '/': its cells linked a target the view refused (400).
    for matrix_id in (BASE, EVIL):
        page = client.get(f"/matrices/{matrix_id}").text
        links = {html.unescape(href) for href in re.findall(r'href="(/history\?[^"]*)"', page)}
        assert links, matrix_id
        for link in links:
            assert client.get(link).status_code == 200, link


def seed_old_host(url: str) -> None:
    """A done matrix on host "old box", a name the host name rule refuses today."""
    runs = grid(targets=(Target(host="old box", engine="toy", device="cpu"),), prefix="old")
    with open_store(url) as store:
        store.create_matrix("old", {"name": "old"}, runs, matrix_id="old-000001")
        for run in runs:
            store.record_result(result(run, 10.0))
        store.finish_matrix("old-000001", "done")


def test_a_stored_host_outside_the_host_name_rule_has_a_history(tmp_path):
    # A store older than the rule (or hand-edited) holds "old box": `results` lists its
    # target and the matrix page links it, but ?target= refused it as no host name (400).
    url = f"sqlite:///{tmp_path / 'old.db'}"
    seed_old_host(url)
    with (open_read_only(url) as store,
          TestClient(create_app(store), base_url=LOOPBACK_URL) as web):
        page = web.get("/matrices/old-000001").text
        (link,) = {html.unescape(h) for h in re.findall(r'href="(/history\?[^"]*arm=graded[^"]*)"',
                                                         page)}
        assert "target=old+box%2Ftoy%2Fcpu" in link
        assert web.get(link).status_code == 200
        refused = web.get("/api/history?model=m1&prompt=edit_fn&arm=graded&target=new%20box")
    assert refused.status_code == 400
    assert "target='new box': HOST: expected a host name" in refused.json()["error"]


@pytest.mark.parametrize(("path", "says"), [
    ("/api/history?model=m1&prompt=edit_fn",
     "query parameter 'arm' is required; expected model, prompt and arm, and optionally "
     "target and last"),
    (f"/api/compare?a={BASE}", "query parameter 'b' is required; expected a and b, and "
     "optionally allow_mixed"),
])
def test_a_missing_parameter_names_the_ones_expected(client, path, says):
    response = client.get(path)
    assert response.status_code == 400 and response.json()["error"] == says
