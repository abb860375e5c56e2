"""The token gate over HTTP (Starlette's TestClient): refusals, the bearer header, the login
form and its cookie, local-only redirects, and no caching of anything holding stored data."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from specfleet.serve import create_app
from specfleet.serve.auth import MAX_FORM_BYTES, cookie_name, session_value
from specfleet.store.readonly import open_read_only
from tests.serve.seed import BASE, LOOPBACK_URL
from tests.serve.test_app import OTHER, ROUTES

TOKEN = "0123456789abcdef-the-right-token"
WRONG = "0123456789abcdef-the-wrong-token"
ASSETS = [p for p in OTHER if p.startswith("/static/")]
GUARDED = [p for p in ROUTES + OTHER if p not in ASSETS]  # every page, download and API call
API = [p for p in GUARDED if p.startswith("/api/")]
PAGES = [p for p in GUARDED if p not in API]


@pytest.fixture(scope="module")
def app(seeded_url):
    store = open_read_only(seeded_url)
    yield create_app(store, token=TOKEN)
    store.close()


@pytest.fixture
def web(app):
    """A fresh client (its own cookie jar) that shows redirects instead of following them."""
    with TestClient(app, follow_redirects=False) as test_client:
        yield test_client


def _bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def _login(web, token: str, next_path: str = "/matrices"):
    return web.post("/login", data={"token": token, "next": next_path})


def test_without_a_token_pages_go_to_login_and_api_calls_are_401(web):
    for path in PAGES + ["/no-such-page"]:
        response = web.get(path)
        assert response.status_code == 303, path
        assert response.headers["location"] == f"/login?next={quote(path, safe='')}", path
        assert BASE not in response.text
    for path in API + ["/api/no-such-page"]:
        response = web.get(path)
        assert response.status_code == 401, path
        assert response.json() == {"error": "this view needs a token: send "
                                   "`Authorization: Bearer TOKEN` or log in at /login"}
        assert response.headers["www-authenticate"] == 'Bearer realm="specfleet"'
    for path in ASSETS + ["/login"]:  # what the login page needs, and nothing stored
        assert web.get(path).status_code == 200, path


def test_a_wrong_bearer_is_refused_and_the_right_one_opens_every_route(web):
    for path in (f"/matrices/{BASE}", f"/api/matrices/{BASE}", f"/matrices/{BASE}/runs.csv"):
        wrong = [_bearer(WRONG), _bearer(TOKEN[:-1]), _bearer(TOKEN + "x"),
                 {"Authorization": f"Bearer {TOKEN}é".encode()}]
        unreadable = [_bearer(""), {"Authorization": f"Basic {TOKEN}"}, {"Authorization": TOKEN}]
        for headers in wrong + unreadable:
            response = web.get(path, headers=headers)
            assert response.status_code == 401, (path, headers)
            assert response.json()["error"].startswith(
                "wrong token: the bearer token sent is not this view's" if headers in wrong
                else "unreadable Authorization header"), (path, headers)
    for path in GUARDED:
        assert web.get(path, headers=_bearer(TOKEN)).status_code in (200, 307), path


def test_login_sets_a_cookie_derived_from_the_token_that_then_opens_the_view(web):
    form = web.get(f"/login?next=/matrices/{BASE}")
    assert form.status_code == 200 and 'name="token"' in form.text
    assert f'name="next" value="/matrices/{BASE}"' in form.text
    assert BASE + " " not in form.text and "read-only" not in form.text  # no store, no nav

    # A wrong token goes back to the form (Post/Redirect/Get), which answers 401 and says so.
    refused = _login(web, WRONG, f"/matrices/{BASE}")
    assert refused.status_code == 303
    asked = quote(f"/matrices/{BASE}", safe="")
    assert refused.headers["location"] == f"/login?next={asked}&wrong=1"
    assert "set-cookie" not in refused.headers and not web.cookies
    told = web.get(refused.headers["location"])
    assert told.status_code == 401 and "Wrong token." in told.text
    assert f'name="next" value="/matrices/{BASE}"' in told.text
    assert "Wrong token." not in form.text

    done = _login(web, TOKEN, f"/matrices/{BASE}")
    assert done.status_code == 303 and done.headers["location"] == f"/matrices/{BASE}"
    cookie = done.headers["set-cookie"]
    assert cookie.startswith(f"{cookie_name(TOKEN)}={session_value(TOKEN)};")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert TOKEN not in cookie and session_value(TOKEN) != session_value(WRONG)
    for path in GUARDED:
        assert web.get(path).status_code in (200, 307), path


def test_two_views_on_one_host_keep_their_logins_apart(app, seeded_url, web):
    # Browsers keep cookies per host, not per port: a login to a second view (another
    # token, another port) replaced the first view's cookie of the same name.
    store = open_read_only(seeded_url)
    try:
        other = create_app(store, token=WRONG)
        with TestClient(other, follow_redirects=False) as second:
            assert _login(web, TOKEN).status_code == 303
            assert _login(second, WRONG).status_code == 303
            jar = {**dict(web.cookies), **dict(second.cookies)}  # one browser's jar
            assert len(jar) == 2
            for client in (web, second):
                client.cookies.clear()
                for name, value in jar.items():
                    client.cookies.set(name, value)
                assert client.get(f"/api/matrices/{BASE}").status_code == 200
    finally:
        store.close()


def test_a_wrong_or_stale_cookie_is_refused(web):
    for value in ("", "x", session_value(WRONG), TOKEN, session_value(TOKEN)[:-1]):
        web.cookies.set(cookie_name(TOKEN), value)
        assert web.get(f"/matrices/{BASE}").status_code == 303, value
        assert web.get(f"/api/matrices/{BASE}").status_code == 401, value


def test_login_returns_only_to_a_page_of_this_site(web):
    for asked in ("//evil.example/x", "https://evil.example/", "/\\evil.example", "",
                  "/login?next=/login", "matrices"):
        assert _login(web, TOKEN, asked).headers["location"] == "/matrices", asked
    query = f"/history?model=m1&prompt=edit_fn&arm=graded&target={quote('a b')}"
    assert _login(web, TOKEN, query).headers["location"] == query
    # The redirect to the login page carries the query, the form hands it back.
    assert web.get("/login?next=" + quote(query, safe="")).text.count(
        'value="/history?model=m1&amp;prompt=edit_fn&amp;arm=graded&amp;target=a%20b"') == 1


def test_an_oversized_login_form_is_refused(web):
    response = web.post("/login", content=b"token=" + b"a" * MAX_FORM_BYTES,
                        headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert response.status_code == 413 and "set-cookie" not in response.headers
    many = "&".join(f"f{i}=1" for i in range(20))
    assert web.post("/login", content=many.encode()).status_code == 400


def test_stored_data_is_never_cached(web):
    for path in GUARDED:
        response = web.get(path, headers=_bearer(TOKEN))
        assert response.headers["cache-control"] == "no-store", path
    for path in (f"/matrices/{BASE}", f"/api/matrices/{BASE}", "/login"):
        assert web.get(path).headers["cache-control"] == "no-store", path  # refusals too
    for path in ASSETS:
        assert "cache-control" not in web.get(path).headers, path


def test_without_a_token_the_view_is_open_and_login_goes_back(seeded_url):
    with (open_read_only(seeded_url) as store,
          TestClient(create_app(store), base_url=LOOPBACK_URL, follow_redirects=False) as open_web):
        for path in (f"/matrices/{BASE}", f"/api/matrices/{BASE}"):
            response = open_web.get(path)
            assert response.status_code == 200, path
            assert response.headers["cache-control"] == "no-store"
        assert open_web.get(f"/login?next=/matrices/{BASE}").headers["location"] == \
            f"/matrices/{BASE}"
        assert _login(open_web, "anything").headers["location"] == "/matrices"
        assert "set-cookie" not in _login(open_web, "anything").headers


def test_an_open_view_answers_only_a_host_that_names_loopback(seeded_url):
    # A page whose name a DNS server re-points at 127.0.0.1 (DNS rebinding) read the store
    # from the browser of whoever ran the view: its Host was answered like any other.
    with (open_read_only(seeded_url) as store,
          TestClient(create_app(store), follow_redirects=False) as open_web):
        for host in ("127.0.0.1:8266", "localhost", "LOCALHOST:1", "[::1]:8266", "127.1"):
            assert open_web.get("/api/matrices", headers={"Host": host}).status_code == 200, host
        for host in ("rebound.example:8266", "rebound.example", "127.0.0.1.rebound.example",
                     "[::2]:8266", "10.0.0.1", "localhost.", "",
                     "127.0.0.1 rebound.example", "127.1\trebound.example:8266", "[::1",
                     "[::1:8266"):
            for path in ("/api/matrices", f"/matrices/{BASE}", "/static/app.css", "/login"):
                response = open_web.get(path, headers={"Host": host})
                assert response.status_code == 400, (host, path)
                error = response.json()["error"] if path.startswith("/api/") else response.text
                assert f"Host {host!r} names no loopback address; expected 127.0.0.1, ::1 or " \
                       "localhost" in error, (host, error)
                assert "seeded.db" not in error and BASE not in response.text
    with (open_read_only(seeded_url) as store,  # with a token, the token is the gate
          TestClient(create_app(store, token="t" * 16), follow_redirects=False) as guarded):
        asked = {"Host": "view.example", "Authorization": f"Bearer {'t' * 16}"}
        assert guarded.get("/api/matrices", headers=asked).status_code == 200


def test_a_missing_asset_shows_nothing_of_the_store(web):
    """/static/ answers without a token, so its 404 page must not name the store."""
    for path in ("/static/nope.css", "/static/%2e%2e/api/matrices"):
        response = web.get(path)
        assert response.status_code == 404, path
        assert "seeded.db" not in response.text and "read-only" not in response.text, path
    # With the token, a 404 page still says which store it read.
    assert "seeded.db · read-only" in web.get("/matrices/nope", headers=_bearer(TOKEN)).text
