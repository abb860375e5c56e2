"""Schema creation and upgrades: from empty, models == migrations, future revisions refused."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.errors import UserError
from specfleet.store import FutureSchemaError, head_revision, open_store
from specfleet.store.engine import resolve_url
from specfleet.store.tables import Base

REPO = Path(__file__).resolve().parents[2]


def raw_engine(url: str):
    return create_engine(resolve_url(url))


def snapshot(url: str) -> tuple:
    """What a database holds: its revision, tables and matrix rows (plus file bytes)."""
    engine = raw_engine(url)
    with engine.connect() as conn:
        rev = conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        tables = sorted(inspect(conn).get_table_names())
        matrices = conn.execute(text("SELECT id, status FROM matrices ORDER BY id")).all()
    engine.dispose()
    path = resolve_url(url).database if url.startswith("sqlite") else None
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else None
    return rev, tables, matrices, digest


def test_upgrade_from_empty_creates_every_table(store_url):
    with open_store(store_url):
        pass
    engine = raw_engine(store_url)
    with engine.connect() as conn:
        assert MigrationContext.configure(conn).get_current_revision() == head_revision()
        tables = set(inspect(conn).get_table_names())
    engine.dispose()
    assert tables == set(Base.metadata.tables) | {"alembic_version"}


def test_revisions_read_without_alembic_agree_with_alembic(store_url):
    from alembic.script import ScriptDirectory

    from specfleet.store.migrate import alembic_config, current_revision, known_revisions

    script = ScriptDirectory.from_config(alembic_config())
    assert head_revision() == script.get_current_head()
    assert known_revisions() == {s.revision for s in script.walk_revisions()}
    engine = raw_engine(store_url)
    with engine.connect() as conn:
        assert current_revision(conn) is None
        assert MigrationContext.configure(conn).get_current_revision() is None
    with open_store(store_url):
        pass
    with engine.connect() as conn:
        assert current_revision(conn) == MigrationContext.configure(
            conn).get_current_revision() == head_revision()
    engine.dispose()


def test_models_match_the_migrations(store_url):
    with open_store(store_url):
        pass
    engine = raw_engine(store_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    assert diff == []


def test_reopening_is_a_no_op(store_url):
    with open_store(store_url) as store:
        matrix_id = store.create_matrix("demo", {}, [])
    before = snapshot(store_url)
    with open_store(store_url) as store:
        assert store.get_matrix(matrix_id).name == "demo"
    assert snapshot(store_url)[:3] == before[:3]


def test_future_revision_is_refused_and_untouched(store_url):
    with open_store(store_url) as store:
        store.create_matrix("demo", {}, [])
    engine = raw_engine(store_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
    engine.dispose()
    before = snapshot(store_url)
    with pytest.raises(FutureSchemaError) as err:
        open_store(store_url)
    message = str(err.value)
    assert "\n" not in message and "9999_from_the_future" in message
    assert "newer than this specfleet" in message
    assert snapshot(store_url) == before


def test_foreign_tables_without_revision_are_refused(store_url):
    engine = raw_engine(store_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE runs (id INTEGER PRIMARY KEY)"))
    engine.dispose()
    with pytest.raises(UserError, match="no specfleet schema revision"):
        open_store(store_url)


@pytest.mark.slow
def test_migrations_ship_in_a_non_editable_install(tmp_path):
    """Build the wheel, then open a store from it with the checkout off sys.path."""
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(REPO)],
        capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("specfleet-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "specfleet/store/migrations/env.py" in names
    assert "specfleet/store/migrations/versions/0001_initial.py" in names
    assert {"specfleet/configs/models.yaml", "specfleet/configs/matrices/demo.yaml",
            "specfleet/configs/matrices/full.yaml", "specfleet/configs/prompts/story.txt"} <= names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = (
        "import specfleet.store as s, sys; from specfleet.store import open_store;"
        f"assert s.__file__.startswith({str(site)!r}), s.__file__;"
        f"st = open_store({str(tmp_path / 'w.db')!r}); print(st.list_matrices())"
    )
    ran = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env={"PYTHONPATH": str(site), "HOME": str(tmp_path)})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[]"


def test_upgrade_from_the_first_revision_keeps_the_data(store_url):
    from alembic import command

    from specfleet.store.migrate import alembic_config

    engine = raw_engine(store_url)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0001")
        conn.execute(text(
            "INSERT INTO matrices (id, name, spec, spec_hash, submitted_at, status, "
            "specfleet_version) VALUES ('old-1', 'old', '{}', 'h', '2026-01-01 00:00:00', "
            "'done', '0.0.1')"))
    engine.dispose()
    result = CliRunner().invoke(app, ["db", "upgrade", "--db", store_url])
    assert result.exit_code == 0 and f"0001 -> {head_revision()}" in result.output
    with open_store(store_url) as store:
        assert store.get_matrix("old-1").status == "done"
    test_models_match_the_migrations(store_url)


def test_an_upgrade_that_fills_the_disk_says_so_and_creates_nothing(tmp_path):
    """A full disk mid-upgrade was blamed on the tables ("its tables do not match it"); a
    full disk at its commit was a traceback. `max_page_count` fills the file as a full disk
    would (SQLite's `database or disk is full`)."""
    from sqlalchemy import event

    from specfleet.store.engine import make_engine
    from specfleet.store.errors import StoreUnreachable
    from specfleet.store.migrate import upgrade
    from specfleet.store.store import connection_errors

    url = resolve_url(str(tmp_path / "full.db"))
    engine = make_engine(url)
    event.listen(engine, "connect",
                 lambda conn, _record: conn.execute("PRAGMA max_page_count = 4"))
    with (pytest.raises(StoreUnreachable, match="disk is full.*expected free space") as err,
          connection_errors(url, "--db", engine)):
        upgrade(engine, url, "--db")
    assert "\n" not in str(err.value)
    engine = raw_engine(str(tmp_path / "full.db"))
    assert inspect(engine).get_table_names() == []
    engine.dispose()


@pytest.mark.postgres
def test_a_role_without_privileges_is_one_line_and_changes_nothing(pg_server, pg_url):
    """A role the database's owner granted nothing: every command was a traceback
    (`permission denied for table alembic_version`), and an upgrade of an empty database
    blamed the tables (`says revision none but its tables do not match it`)."""
    from tests.conftest import PG_PASSWORD, PG_PASSWORD_USER

    role_url = pg_server.url(pg_url.rsplit("/", 1)[1], PG_PASSWORD_USER, PG_PASSWORD)
    refused = f"PostgreSQL refused role '{PG_PASSWORD_USER}'"
    admin = raw_engine(pg_url)
    with admin.begin() as conn:  # PostgreSQL 15's default; older servers let anyone create
        conn.execute(text("REVOKE CREATE ON SCHEMA public FROM PUBLIC"))
    with pytest.raises(UserError, match=f"{refused}.*permission denied for schema public"):
        open_store(role_url)
    assert inspect(admin).get_table_names() == []
    with open_store(pg_url) as store:
        store.create_matrix("first", {}, [])
    for opening in (lambda: open_store(role_url), lambda: open_store(role_url, read_only=True)):
        with pytest.raises(UserError, match=f"{refused}.*table alembic_version") as err:
            opening()
        assert "\n" not in str(err.value)
    with admin.begin() as conn:  # may read, not write
        conn.execute(text(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {PG_PASSWORD_USER}"))
    with open_store(role_url) as store:
        with pytest.raises(UserError, match=f"{refused}.*table matrices"):
            store.create_matrix("second", {}, [])
        assert [m.name for m in store.list_matrices()] == ["first"]
    admin.dispose()
