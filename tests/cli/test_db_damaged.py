"""`db upgrade` and `db current` on a store whose tables do not match its head stamp (a table
or column dropped by hand): refused in the one line every read says
(`store.migrate.check_tables`), with the store left as it was, on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.store import head_revision, open_store
from specfleet.store.engine import resolve_url
from tests.store.factory import grid, result

MISMATCH = "its tables do not match its schema revision"


def _stored(store_url: str) -> tuple[str, int]:
    """The store's stamp and how many runs it holds."""
    engine = create_engine(resolve_url(store_url))
    with engine.connect() as conn:
        stamp = conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        runs = conn.execute(text("SELECT count(*) FROM runs")).scalar_one()
    engine.dispose()
    return stamp, runs


def _damaged(store_url: str, damage: str) -> str:
    """A store at head holding a matrix and one done run, then `damage` (SQL) done to it."""
    runs = grid(arms=("plain",), repeats=1)
    with open_store(store_url) as store:
        store.create_matrix("m", {}, runs, matrix_id="m-000001")
        store.record_result(result(runs[0]))
    engine = create_engine(resolve_url(store_url))
    with engine.begin() as conn:
        conn.execute(text(damage))
    engine.dispose()
    return store_url


def _file(store_url: str) -> Path | None:
    return Path(store_url.removeprefix("sqlite:///")) if store_url.startswith("sqlite") else None


def _digest(path: Path | None) -> str | None:
    return None if path is None else hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(("damage", "missing"), [
    ("ALTER TABLE runs DROP COLUMN refed_tokens", "refed_tokens"),
    ("DROP TABLE load_samples", "load_samples"),
])
@pytest.mark.parametrize("command", ["upgrade", "current"])
def test_tables_that_do_not_match_the_stamp_are_refused(store_url, damage, missing, command):
    # `db upgrade` said "already at 0008 (head); nothing to upgrade" and `db current`
    # "revision: 0008 (head)", both exit 0, while `matrix show` refused the store.
    url = _damaged(store_url, damage)
    path, before = _file(url), _stored(url)
    digest = _digest(path)
    said = CliRunner().invoke(app, ["db", command, "--db", url])
    lines = said.output.strip().splitlines()
    assert said.exit_code == 2, (said.exit_code, said.output, said.exception)
    assert len(lines) == 1 and lines[0].startswith("error: --db: "), said.output
    assert MISMATCH in lines[0] and missing in lines[0], lines[0]
    assert "restore it from a backup" in lines[0] and "Traceback" not in said.output
    assert _stored(url) == before and before[0] == head_revision()
    if path is not None:  # nothing written, no side file left
        assert _digest(path) == digest
        assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_a_store_that_matches_its_stamp_still_reads_at_head(store_url):
    url = _damaged(store_url, "SELECT 1")
    current = CliRunner().invoke(app, ["db", "current", "--db", url])
    assert current.exit_code == 0 and f"revision: {head_revision()} (head)" in current.output
    upgraded = CliRunner().invoke(app, ["db", "upgrade", "--db", url])
    assert upgraded.exit_code == 0 and "nothing to upgrade" in upgraded.output, upgraded.output
