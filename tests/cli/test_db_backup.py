"""`specfleet db backup FILE`: a SQLite store copied as one moment of it, while a writer may be
at work, into a new private file checked before it gets its name; never a file replaced,
never a half copy left; a PostgreSQL store is pointed at pg_dump without its password."""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.store.backup import PARTIAL_PREFIX
from tests.serve.seed import seed_store
from tests.store.disks import fill, mounted


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def one_line_error(result, fragment: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in result.output, \
        result.output
    return lines[0]


def rows(path: Path) -> dict[str, list[tuple]]:
    """Every row of every table, in rowid order."""
    with contextlib.closing(sqlite3.connect(path)) as conn:  # closed: no side files left
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: conn.execute(f'SELECT * FROM "{t}" ORDER BY rowid').fetchall() for t in tables}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def store(tmp_path) -> Path:
    path = tmp_path / "store.db"
    seed_store(f"sqlite:///{path}")
    return path


def test_a_backup_holds_every_row_is_private_and_leaves_the_store_alone(store, tmp_path):
    before = digest(store)
    result = invoke("db", "backup", str(tmp_path / "copy.db"), "--db", str(store))
    assert result.exit_code == 0, result.output
    copy = tmp_path / "copy.db"
    assert f"backed up to {copy} (revision " in result.output
    assert "4 matrices, 30 runs" in result.output and "quick_check ok" in result.output
    assert rows(copy) == rows(store) and rows(copy)["runs"]
    assert os.stat(copy).st_mode & 0o777 == 0o600
    assert digest(store) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.db", "store.db"]  # no side files
    shown = invoke("matrix", "list", "--db", str(copy))  # a store every command reads
    assert shown.exit_code == 0 and "next-000002" in shown.output


def test_a_backup_is_one_moment_while_a_writer_is_at_work(store, tmp_path):
    writer = sqlite3.connect(store, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # a write in flight: its lock held, its row not committed
    writer.execute("UPDATE runs SET tok_per_s = -1")
    try:
        result = invoke("db", "backup", str(tmp_path / "copy.db"), "--db", str(store))
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert result.exit_code == 0, result.output
    assert rows(tmp_path / "copy.db") == rows(store)  # what was committed, nothing of the write


@pytest.mark.parametrize("taken", ["file", "folder", "dangling link"])
def test_a_backup_never_replaces_anything(store, tmp_path, taken):
    target = tmp_path / "taken"
    if taken == "file":
        target.write_text("last week's backup")
    elif taken == "folder":
        target.mkdir()
    else:
        target.symlink_to(tmp_path / "nowhere")
    one_line_error(invoke("db", "backup", str(target), "--db", str(store)),
                   f"FILE {target}: already exists; expected a new file name")
    if taken == "file":
        assert target.read_text() == "last week's backup"


@pytest.mark.parametrize(("file", "says"), [
    ("", "FILE '' is blank; expected a new file path"),
    ("no/such/folder/copy.db", "its folder no/such/folder does not exist"),
])
def test_a_bad_file_is_one_line(store, file, says):
    one_line_error(invoke("db", "backup", file, "--db", str(store)), says)


def test_what_is_no_store_is_not_backed_up(tmp_path):
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE customers (id int)")
    one_line_error(invoke("db", "backup", str(tmp_path / "c.db"), "--db", str(other)),
                   "is not a specfleet store (it holds tables customers")
    one_line_error(invoke("db", "backup", str(tmp_path / "c.db"), "--db",
                          str(tmp_path / "none.db")), "no store at")
    assert not (tmp_path / "c.db").exists()


def test_a_postgresql_store_is_pointed_at_pg_dump_without_its_password(tmp_path):
    line = one_line_error(invoke("db", "backup", str(tmp_path / "c.db"), "--db",
                                 "postgresql://fleet:s3cret@db.example:5432/specfleet"),
                          "back it up with PostgreSQL's own tool: pg_dump -Fc -f FILE "
                          "'postgresql://fleet@db.example:5432/specfleet'")
    assert "s3cret" not in line and not (tmp_path / "c.db").exists()


def test_a_full_disk_leaves_no_half_copy(store, tmp_path):
    with mounted(tmp_path / "full", "tmpfs") as disk:
        fill(disk, leave_bytes=16 * 1024)
        line = one_line_error(invoke("db", "backup", str(disk / "copy.db"), "--db", str(store)),
                              f"FILE {disk / 'copy.db'}: the backup of sqlite:///")
        assert "full" in line and "nothing was written there" in line
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]
        assert not any(p.name.startswith(PARTIAL_PREFIX) for p in disk.iterdir())
