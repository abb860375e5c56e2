"""The -wal and -shm beside a SQLite store (`store.sidefiles`): a full disk refused in one
line before SQLite maps a -shm it cannot fill (it died of SIGBUS), nothing left by a refused
first write, no row left in the -wal alone once a writer closes, and a -wal that is not the
store's refused rather than deleted or replayed."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.store import open_store
from specfleet.store.errors import StoreDamaged, StoreUnreachable
from tests.store.disks import fill
from tests.store.factory import grid


def _open_in_child(path: Path) -> tuple[int, str]:
    """Open the store for writing in a forked child: how it ended (a signal number, negated,
    or its exit status) and what it said."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover  (the child)
        os.close(reader)
        try:
            open_store(str(path)).close()
            said, status = "opened", 0
        except StoreUnreachable as err:
            said, status = str(err), 2
        os.write(writer, said.encode())
        os._exit(status)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        said = pipe.read()
    status = os.waitpid(pid, 0)[1]
    return (-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)), said


def test_a_write_on_a_full_small_block_disk_is_one_line_never_sigbus(small_block_disk) -> None:
    """SQLite writes one byte per 4 KiB page of the -shm, then writes through a map of it:
    on a full ext4 of 1 KiB blocks the page's other blocks could not be had, and the command
    died of SIGBUS (exit 135) without a word, at a few KiB of free space."""
    path = small_block_disk / "s.db"
    open_store(str(path)).close()
    for leave_kib in range(78, 102, 2):  # where SIGBUS struck here: 86-90 KiB free (root's count)
        (small_block_disk / "filler").unlink(missing_ok=True)
        fill(small_block_disk, leave_kib * 1024)
        ended, said = _open_in_child(path)
        assert ended != -signal.SIGBUS, f"SIGBUS with {leave_kib} KiB free"
        assert (ended, said) == (0, "opened") or (ended == 2 and "expected free space" in said)


@pytest.mark.parametrize("leave_kib", [32, 96])
def test_a_refused_first_write_on_a_full_disk_leaves_no_file(small_disk, leave_kib) -> None:
    """A new store on a full disk left an empty file, or a one-page one with a -wal and -shm
    (`is empty, not a specfleet store yet` to every read after)."""
    fill(small_disk, leave_kib * 1024)
    with pytest.raises(StoreUnreachable, match="expected free space on its disk"):
        open_store(str(small_disk / "s.db"))
    assert os.listdir(small_disk) == ["filler"]


def test_a_refused_db_upgrade_on_a_full_disk_leaves_no_file(small_disk) -> None:
    """`db upgrade` makes its file as `open_store` does: it left a 4096-byte one behind."""
    fill(small_disk, 96 * 1024)
    said = CliRunner().invoke(app, ["db", "upgrade", "--db", str(small_disk / "s.db")])
    assert said.exit_code == 2, said.output
    assert os.listdir(small_disk) == ["filler"]


def test_a_writer_closing_while_a_reader_is_open_leaves_its_rows_in_the_file(tmp_path) -> None:
    """SQLite folds the -wal into the file only when the last connection closes: a `matrix
    run` that ended while `serve` was reading left its rows in the -wal alone, and a copy or
    move of the store file without it lost them."""
    path = tmp_path / "s.db"
    open_store(str(path)).close()
    with open_store(str(path), read_only=True) as reader:
        assert reader.runs() == []  # holds a connection open meanwhile
        with open_store(str(path)) as writer:
            writer.create_matrix("demo", {}, grid(repeats=1))
        shutil.copy(path, tmp_path / "copy.db")  # the file alone, as `mv` or a backup takes it
    with open_store(str(tmp_path / "copy.db"), read_only=True) as copy:
        assert len(copy.runs()) == 2


def _committed_wal(tmp_path: Path) -> bytes:
    """The -wal of a store whose writer was killed: its rows live there alone."""
    path = tmp_path / "killed.db"
    open_store(str(path)).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE alembic_version SET version_num = version_num")
    conn.commit()
    wal = path.with_name(path.name + "-wal").read_bytes()
    conn.close()
    return wal


@pytest.mark.parametrize("beside", ["does not exist", "is empty"])
def test_a_store_moved_without_its_wal_keeps_that_wal(tmp_path, beside) -> None:
    """A writing command on the old path made a new store there, and SQLite deleted the -wal
    left behind, the moved store's last rows with it."""
    path = tmp_path / "s.db"
    wal = _committed_wal(tmp_path)
    path.with_name("s.db-wal").write_bytes(wal)
    if beside == "is empty":
        path.touch()
    with pytest.raises(StoreDamaged, match=f"s.db-wal holds committed writes, but .*s.db beside "
                                           f"it {beside}, so they are not its") as err:
        open_store(str(path))
    assert "\n" not in str(err.value)
    assert path.with_name("s.db-wal").read_bytes() == wal


def test_another_stores_wal_is_not_read_into_a_database_not_in_wal_mode(tmp_path) -> None:
    """SQLite replayed it: the other store's tables were read as this file's."""
    path = tmp_path / "restored.db"
    with sqlite3.connect(path) as conn:  # a rollback-journal database, as a restore may make
        conn.execute("CREATE TABLE notes (x)")
    conn.close()
    path.with_name("restored.db-wal").write_bytes(_committed_wal(tmp_path))
    with pytest.raises(StoreDamaged, match="beside it is a SQLite database not in WAL mode"):
        open_store(str(path), read_only=True)
