"""A PostgreSQL server that takes no writes (a hot standby, `default_transaction_read_only`):
every write and upgrade is one line saying so, never a traceback or a blame on the tables."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import create_engine, inspect, text
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.errors import UserError
from specfleet.store import open_store

pytestmark = pytest.mark.postgres

READ_ONLY = "is read-only (cannot execute"


def make_read_only(pg_url: str) -> None:
    """What a standby does to every session: set for the database, seen by new sessions."""
    name = pg_url.rsplit("/", 1)[1]
    engine = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'))
    engine.dispose()


def test_an_upgrade_on_a_read_only_server_says_so(pg_url):
    """It said `says revision none but its tables do not match it`: a store to restore."""
    make_read_only(pg_url)
    result = CliRunner().invoke(app, ["db", "upgrade", "--db", pg_url])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert READ_ONLY in line and "CREATE TABLE" in line and "do not match" not in line
    engine = create_engine(pg_url)
    assert inspect(engine).get_table_names() == []
    engine.dispose()


def test_a_write_on_a_read_only_server_says_so(pg_url):
    """It was a traceback (psycopg's ReadOnlySqlTransaction)."""
    with open_store(pg_url) as store:
        store.create_matrix("before", {}, [])
    make_read_only(pg_url)
    with open_store(pg_url) as store:  # at head: opening it writes nothing
        with pytest.raises(UserError, match=rf"{re.escape(READ_ONLY)} INSERT.*not a standby") as err:
            store.create_matrix("after", {}, [])
        assert "\n" not in str(err.value)
        assert [m.name for m in store.list_matrices()] == ["before"]


def test_a_writing_command_hears_it_before_the_fleet_starts(pg_url):
    """It failed only at its first write, once a fleet had started (~20 s embedded)."""
    from specfleet.store.store import check_store_before_fleet

    check_store_before_fleet(pg_url)  # a primary passes
    make_read_only(pg_url)
    with pytest.raises(UserError, match=r"is read-only \(transaction_read_only is on\); "
                                        r"expected a server that takes writes") as err:
        check_store_before_fleet(pg_url)
    assert "\n" not in str(err.value)
