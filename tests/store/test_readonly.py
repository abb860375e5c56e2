"""Read commands never write: a read-only open refuses a missing file (and creates none), an
empty database and another application's database, leaving each byte-identical; writing
opens refuse another application's database too. New stores are private (0600 in 0700)."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import stat
import tempfile
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from specfleet.errors import UserError
from specfleet.store import open_store, resolve_url
from tests.store.factory import grid


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_missing_file_is_refused_and_not_created(tmp_path) -> None:
    path = tmp_path / "typo.db"
    with pytest.raises(UserError, match="no store at .*typo.db; `specfleet db upgrade"):
        open_store(str(path), read_only=True)
    assert not path.exists()


def test_a_missing_default_store_is_nothing_stored_yet_not_a_bad_db_flag(
        tmp_path, monkeypatch) -> None:
    # `results` on a fresh machine blamed `--db`, which the user never gave.
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.delenv("SPECFLEET_DB", raising=False)
    with pytest.raises(UserError) as err:
        open_store(None, read_only=True)
    assert str(err.value).startswith(f"nothing stored yet: the default store {tmp_path}/")
    assert "name another with --db or $SPECFLEET_DB" in str(err.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("read_only", [True, False])
def test_another_applications_database_is_left_untouched(tmp_path, read_only) -> None:
    path = tmp_path / "someapp.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("create table users (id integer primary key, name text)")
        conn.execute("insert into users (name) values ('ada')")
    before = digest(path)
    with pytest.raises(UserError, match="not a specfleet store .*tables users"):
        open_store(str(path), read_only=read_only)
    assert digest(path) == before
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("select name from sqlite_master where type='table'")}
    assert tables == {"users"}


def test_read_only_reads_and_cannot_write(tmp_path) -> None:
    path = tmp_path / "s.db"
    with open_store(str(path)) as store:
        matrix_id = store.create_matrix("demo", {}, grid(repeats=1))
    before = digest(path)
    with open_store(str(path), read_only=True) as store:
        assert store.get_matrix(matrix_id).total_runs == 2
        with pytest.raises(Exception, match="readonly|read-only|attempt to write"):
            store.create_matrix("again", {}, grid(repeats=1))
    assert digest(path) == before


def test_a_read_leaves_no_side_files_and_a_writers_alone(tmp_path) -> None:
    """A read-only connection cannot remove the -wal and -shm files it makes beside a WAL
    store, so every read of a closed store left both behind; a writer's stay as they are."""
    path, wal, shm = (tmp_path / name for name in ("s.db", "s.db-wal", "s.db-shm"))
    with open_store(str(path)) as store:
        matrix_id = store.create_matrix("demo", {}, grid(repeats=1))
    before = digest(path)
    with open_store(str(path), read_only=True) as store:
        assert store.get_matrix(matrix_id).total_runs == 2
    assert sorted(os.listdir(tmp_path)) == ["s.db"] and digest(path) == before
    writer = sqlite3.connect(path, isolation_level=None)
    try:
        writer.execute("SELECT 1 FROM sqlite_master").fetchall()  # open, its -wal still empty
        open_store(str(path), read_only=True).close()
        assert wal.stat().st_size == 0 and shm.exists()
        writer.execute("INSERT INTO prompts (text_hash, text) VALUES ('h', 'kept')")
        size = wal.stat().st_size
        open_store(str(path), read_only=True).close()
        assert wal.stat().st_size == size > 0 and digest(path) == before
    finally:
        writer.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT text FROM prompts WHERE text_hash = 'h'").fetchone() == ("kept",)


def test_an_empty_file_is_not_a_store_for_readers(tmp_path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    with pytest.raises(UserError, match="empty, not a specfleet store yet"):
        open_store(str(path), read_only=True)
    assert path.stat().st_size == 0


def test_new_stores_are_private(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("SPECFLEET_DB", raising=False)
    default = resolve_url(None)
    assert stat.S_IMODE(os.stat(os.path.dirname(default.database)).st_mode) == 0o700
    path = tmp_path / "new.db"
    open_store(str(path)).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.postgres
def test_read_only_postgres_creates_nothing(pg_url) -> None:
    with pytest.raises(UserError, match="empty, not a specfleet store yet"):
        open_store(pg_url, read_only=True)
    engine = create_engine(pg_url)
    try:
        assert inspect(engine).get_table_names() == []
    finally:
        engine.dispose()
    open_store(pg_url).close()
    with open_store(pg_url, read_only=True) as store:
        assert store.list_matrices() == []
        with pytest.raises(Exception, match="read-only transaction"):
            store.create_matrix("demo", {}, grid(repeats=1))


def _read_as_nobody(read) -> str:
    """`read()` as an unprivileged user when we are root (root writes any folder): its
    result, or the error it raised, as text."""
    if os.geteuid() != 0:
        return _outcome(read)
    fd_read, fd_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop privileges, report through the pipe, never return to pytest
        os.close(fd_read)
        os.setgid(65534)
        os.setuid(65534)
        os.write(fd_write, _outcome(read).encode())
        os._exit(0)
    os.close(fd_write)
    with os.fdopen(fd_read) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    return text


def _outcome(read) -> str:
    try:
        return str(read())
    except Exception as err:  # noqa: BLE001 - the test compares the text
        return f"{type(err).__name__}: {err}"


def test_the_web_views_store_in_a_folder_we_cannot_write_is_read_untouched() -> None:
    """`serve` opened its store without the rule every other read follows: a store on a
    read-only mount or in another user's archive failed `cannot write the SQLite file`."""
    from specfleet.store.readonly import open_read_only

    folder = Path(tempfile.mkdtemp(prefix="specfleet-archive-"))
    path = folder / "s.db"
    try:
        open_store(str(folder / "spare.db")).close()
        open_read_only(str(folder / "spare.db")).close()  # imports done while root
        with open_store(str(path)) as store:
            matrix_id = store.create_matrix("demo", {}, grid(repeats=1))
        for spare_file in folder.glob("spare.db*"):
            spare_file.unlink()
        path.chmod(0o444)
        folder.chmod(0o555)
        before = digest(path)

        def read() -> int:
            with open_read_only(str(path)) as store:
                return store.get_matrix(matrix_id).total_runs

        assert _read_as_nobody(read) == "2"
        assert digest(path) == before and sorted(os.listdir(folder)) == ["s.db"]
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder)
