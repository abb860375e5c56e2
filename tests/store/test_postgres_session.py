"""A PostgreSQL store's session as the user's URL and server set it: the URL's `options=` (a
search_path) and PGOPTIONS reach every command, reads included; a lock another session
holds ends the wait in one line; a missing password, another application's view and an
option given twice are said as such."""

from __future__ import annotations

import threading
import time
from urllib.parse import quote

import psycopg
import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.errors import UserError
from specfleet.store import open_store
from specfleet.store.engine import BUSY_TIMEOUT_S, make_engine, resolve_url
from specfleet.store.readonly import open_read_only
from tests.conftest import PG_PASSWORD_USER

pytestmark = pytest.mark.postgres


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def _admin(pg_url: str):
    return psycopg.connect(pg_url.replace("postgresql+psycopg", "postgresql"), autocommit=True)


def _one_line(result, fragment: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.output
    return lines[0]


@pytest.fixture
def schema_url(pg_url):
    """The store in schema `fleet` of a database whose `public` holds another app's table."""
    with _admin(pg_url) as conn:
        conn.execute("CREATE SCHEMA fleet")
        conn.execute("CREATE TABLE public.customers (id int)")
    return pg_url


def test_a_store_in_its_own_schema_is_read_where_it_was_written(schema_url, monkeypatch):
    url = f"{schema_url}?options={quote('-c search_path=fleet')}"
    assert invoke("db", "upgrade", "--db", url).exit_code == 0
    with open_store(url) as store:
        store.create_matrix("first", {}, [])
    with _admin(schema_url) as conn:  # written into the schema the URL named
        assert conn.execute("SELECT count(*) FROM fleet.matrices").fetchone() == (1,)
    done = invoke("db", "current", "--db", url)  # a read-only session: the URL's options kept
    assert done.exit_code == 0 and "(head)" in done.output, done.output
    with open_read_only(url) as store:
        assert store.count_matrices() == 1
        with store.engine.connect() as conn:  # still read-only
            assert conn.execute(text("SHOW default_transaction_read_only")).scalar() == "on"

    monkeypatch.setenv("PGOPTIONS", "-c search_path=fleet")  # libpq's environment, alike
    done = invoke("matrix", "list", "--db", schema_url)
    assert done.exit_code == 0 and "first" in done.output, done.output


def test_a_lock_wait_is_bounded_unless_the_url_sets_its_own(pg_url):
    engine = make_engine(resolve_url(pg_url))
    with engine.connect() as conn:
        shown = conn.execute(text("SELECT extract(epoch FROM current_setting('lock_timeout')"
                                  "::interval)")).scalar()
        assert float(shown) == BUSY_TIMEOUT_S
    engine.dispose()
    own = f"{pg_url}?options={quote('-c lock_timeout=700')}"
    assert invoke("db", "upgrade", "--db", own).exit_code == 0
    engine = make_engine(resolve_url(own))
    with engine.connect() as conn:
        assert conn.execute(text("SHOW lock_timeout")).scalar() == "700ms"
    engine.dispose()

    holding, release = threading.Event(), threading.Event()

    def hold_the_table() -> None:
        with _admin(pg_url) as conn, conn.transaction():
            conn.execute("LOCK TABLE matrices IN ACCESS EXCLUSIVE MODE")
            holding.set()
            release.wait(30)

    holder = threading.Thread(target=hold_the_table)
    holder.start()
    try:
        assert holding.wait(30)
        started = time.monotonic()
        result = invoke("matrix", "list", "--db", own)
        waited = time.monotonic() - started
    finally:
        release.set()
        holder.join(30)
    line = _one_line(result, "another session held a lock")
    assert "lock timeout" in line and waited < 10, (line, waited)


def test_a_missing_password_is_asked_for_not_called_unreachable(pg_server):
    result = invoke("db", "current", "--db", pg_server.url("postgres", PG_PASSWORD_USER))
    line = _one_line(result, "asks for a password and none was given")
    assert "cannot reach" not in line


def test_another_applications_view_is_no_store(pg_url):
    with _admin(pg_url) as conn:
        conn.execute("CREATE VIEW hosts AS SELECT 1 AS x")
    for command in ("current", "upgrade"):
        _one_line(invoke("db", command, "--db", pg_url),
                  "is not a specfleet store (it holds views hosts and no specfleet schema")
    with _admin(pg_url) as conn:  # nothing was added beside it
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
                            ).fetchone() == (0,)


def test_an_option_given_twice_is_refused_by_name(pg_url):
    with pytest.raises(UserError, match="the option 'sslmode' is given twice; expected it once"):
        resolve_url(f"{pg_url}?sslmode=disable&sslmode=require")


def test_the_urls_connect_timeout_is_used(pg_url):
    result = invoke("db", "current", "--db", f"{pg_url}?connect_timeout=abc")
    line = _one_line(result, "bad value for connect_timeout: 'abc'")
    assert "expected libpq's connection options" in line and "cannot reach" not in line
    assert invoke("db", "current", "--db", f"{pg_url}?connect_timeout=3").exit_code == 0
