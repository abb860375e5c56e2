"""Damaged and odd stores met by a read: refused in one line, left as they were, side files
included (`store.store.connection_errors`, `store.dberrors.translate_error`)."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import pytest

from specfleet.errors import UserError
from specfleet.store import open_store
from tests.store.factory import grid, result


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> Path:
    """A WAL store at head holding one done run (closed: no side files beside it)."""
    path = tmp_path_factory.mktemp("seeded") / "specfleet.db"
    runs = grid(arms=("plain",), repeats=1)
    with open_store(str(path)) as store:
        store.create_matrix("m", {}, runs, matrix_id="m-000001")
        store.record_result(result(runs[0]))
    return path


def damaged(seeded: Path, tmp_path: Path, sql: str) -> Path:
    path = tmp_path / "store.db"
    shutil.copy(seeded, path)
    with sqlite3.connect(path) as conn:
        conn.execute(sql)
    conn.close()
    return path


def side_files(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(("damage", "said"), [
    ("UPDATE alembic_version SET version_num = '9999'", "newer than this specfleet"),
    ("UPDATE alembic_version SET version_num = '0001'", "behind this specfleet's"),
])
def test_a_refused_read_leaves_no_side_files(seeded, tmp_path, damage, said) -> None:
    # The refused read's -wal and -shm stayed beside a store the docs say reads never touch.
    path = damaged(seeded, tmp_path, damage)
    before = digest(path)
    with pytest.raises(UserError, match=said):
        open_store(str(path), read_only=True)
    assert side_files(path) == [] and digest(path) == before


def test_a_truncated_copy_is_refused_without_side_files(seeded, tmp_path) -> None:
    path = tmp_path / "store.db"
    path.write_bytes(seeded.read_bytes()[:4096])  # the header says WAL; the pages are gone
    with pytest.raises(UserError, match="is not a usable SQLite database"):
        open_store(str(path), read_only=True)
    assert side_files(path) == []


@pytest.mark.parametrize(("damage", "missing"), [
    ("DROP TABLE runs", "no such table: runs"),
    ("ALTER TABLE runs DROP COLUMN loop_share", "no such column: runs.loop_share"),
])
def test_tables_that_do_not_match_the_stamp_are_one_line(seeded, tmp_path, damage,
                                                         missing) -> None:
    # A hand-dropped table or column under a head stamp was a SQLAlchemy traceback per read.
    path = damaged(seeded, tmp_path, damage)
    before = digest(path)
    with open_store(str(path), read_only=True) as store, \
            pytest.raises(UserError, match="its tables do not match its schema revision") as err:
        store.runs(matrix="m-000001")
    assert missing in str(err.value) and "restore it from a backup" in str(err.value)
    assert side_files(path) == [] and digest(path) == before
