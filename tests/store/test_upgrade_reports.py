"""What `db upgrade` and a refused read say about a store's schema revision: the upgrade it
really did, and the command that upgrades the store the user named."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.settings import DB
from specfleet.store import engine as store_engine
from specfleet.store import head_revision
from specfleet.store.engine import WRITE_OPTION, make_engine, resolve_url
from specfleet.store.migrate import PG_UPGRADE_LOCK, alembic_config


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def store_at(url: str, revision: str) -> None:
    """A store at an older revision, as an older specfleet left it."""
    from alembic import command

    engine = create_engine(resolve_url(url))
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), revision)
    engine.dispose()


def wait_for_a_waiter(url: str, monkeypatch) -> threading.Event:
    """An event set once another connection waits for the upgrade lock the caller holds
    (SQLite: its `BEGIN IMMEDIATE`; PostgreSQL: the advisory lock, seen in pg_locks)."""
    waiting = threading.Event()
    if url.startswith("sqlite"):
        begin = store_engine._begin_immediate

        def begin_seen(dbapi_conn) -> None:
            waiting.set()
            begin(dbapi_conn)

        monkeypatch.setattr(store_engine, "_begin_immediate", begin_seen)
        return waiting
    import psycopg

    def watch() -> None:
        with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as watcher:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not watcher.execute(
                    "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                    "WHERE l.locktype = 'advisory' AND NOT l.granted "
                    "AND d.datname = current_database()").fetchone()[0]:
                time.sleep(0.02)
        waiting.set()

    threading.Thread(target=watch, daemon=True).start()
    return waiting


def test_an_upgrade_another_process_did_meanwhile_is_not_claimed(store_url, monkeypatch):
    """Two `db upgrade` at once both printed `0001 -> 0008 (head)`: the second read the
    revision before it waited for the first's lock."""
    from alembic import command

    store_at(store_url, "0001")
    holder = make_engine(resolve_url(store_url))
    with holder.connect().execution_options(**{WRITE_OPTION: True}) as conn, conn.begin():
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": PG_UPGRADE_LOCK})
        waiting = wait_for_a_waiter(store_url, monkeypatch)
        results = []
        second = threading.Thread(target=lambda: results.append(
            invoke("db", "upgrade", "--db", store_url)))
        second.start()
        assert waiting.wait(30)
        command.upgrade(alembic_config(conn), "head")  # the first upgrade, under its lock
    second.join(60)
    holder.dispose()
    (result,) = results
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith(f": already at {head_revision()} (head); nothing to upgrade\n")


def test_a_read_names_the_store_to_upgrade(tmp_path, monkeypatch):
    """`results --db old.db` said to run `specfleet db upgrade`, which upgrades the default
    store, not old.db; `db current` said the same."""
    monkeypatch.delenv(DB.name, raising=False)
    old = tmp_path / "old store.db"
    store_at(str(old), "0004")
    upgrading = f"`specfleet db upgrade --db '{old}'`"
    for args in (("results",), ("matrix", "list")):
        result = invoke(*args, "--db", str(old))
        assert result.exit_code == 2 and upgrading in result.output, result.output
    result = invoke("db", "current", "--db", str(old))
    assert result.exit_code == 0 and f"(behind head {head_revision()}; run {upgrading})" in (
        result.output)
    monkeypatch.setenv(DB.name, str(old))  # the variable names it for every command
    result = invoke("results")
    assert result.exit_code == 2 and "run `specfleet db upgrade` first" in result.output


@pytest.mark.parametrize(("db", "command"), [
    ("postgresql+psycopg://u@h:5432/d", "`specfleet db upgrade --db postgresql+psycopg://u@h:5432/d`"),
    ("postgresql+psycopg://u:secret@h/d", "`specfleet db upgrade` with the same --db"),
    ("postgresql+psycopg://u@h/d?password=secret", "`specfleet db upgrade` with the same --db"),
])
def test_the_upgrade_command_of_a_server_never_shows_its_password(db, command):
    from specfleet.store.engine import upgrade_command

    assert upgrade_command(resolve_url(db), "--db") == command
    assert upgrade_command(resolve_url(db), DB.name) == "`specfleet db upgrade`"


def test_an_interrupted_upgrade_changes_nothing_and_says_how_to_finish(store_url):
    """Ctrl-C (or SIGTERM) midway through the migrations, after three of seven ran: it said
    a bare `interrupted`, leaving unsaid whether the store was half-migrated."""
    from sqlalchemy import Engine, event, inspect

    store_at(store_url, "0001")
    engine = create_engine(resolve_url(store_url))
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO matrices (id, name, spec, spec_hash, submitted_at, status, "
            "specfleet_version) VALUES ('old-1', 'old', '{}', 'h', '2026-01-01 00:00:00', "
            "'done', '0.0.1')"))

    def stop_at_0006(_conn, _cursor, statement, *_args) -> None:
        if "refed_tokens" in statement:
            raise KeyboardInterrupt

    event.listen(Engine, "before_cursor_execute", stop_at_0006)
    try:
        result = invoke("db", "upgrade", "--db", store_url)
    finally:
        event.remove(Engine, "before_cursor_execute", stop_at_0006)
    assert result.exit_code == 130, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("interrupted: an upgrade is one transaction") and (
        "`specfleet db upgrade" in line and "finishes it" in line), line
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0001"
        assert "conditions" not in {c["name"] for c in inspect(conn).get_columns("runs")}
        assert conn.execute(text("SELECT id FROM matrices")).scalars().all() == ["old-1"]
    engine.dispose()
    result = invoke("db", "upgrade", "--db", store_url)
    assert result.exit_code == 0 and f": 0001 -> {head_revision()} (head)" in result.stdout
