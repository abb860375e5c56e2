"""The SQLite store as machines fail it: the file deleted or replaced under a running command,
a writer holding the lock while Ctrl-C comes, the disk filling up (`store.engine`,
`store.store.Store._write`)."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specfleet.cluster.storewriter import StoreOutage, StoreWriter
from specfleet.store import engine as store_engine
from specfleet.store import open_store
from specfleet.store.errors import StoreUnreachable
from tests.store.disks import fill
from tests.store.factory import grid, result


@pytest.fixture
def planned(tmp_path) -> Iterator[tuple[Path, str]]:
    """A store file holding one planned matrix (two pending runs), and its first run key."""
    path = tmp_path / "s.db"
    runs = grid(repeats=1)
    with open_store(str(path)) as store:
        store.create_matrix("demo", {}, runs)
    yield path, runs[0].run_key


def _move_away(path: Path, how: str) -> None:
    """Delete the file, or replace it by a rename as a restore from a backup does."""
    if how == "deleted":
        path.unlink()
        return
    spare = path.with_name("spare.db")
    open_store(str(spare)).close()
    os.replace(spare, path)


@pytest.mark.parametrize("how", ["deleted", "replaced by another file"])
def test_a_store_file_moved_under_an_open_store_refuses_writes(planned, how) -> None:
    """SQLite goes on writing to a deleted or renamed-away file: a bench whose store was
    deleted mid-run said `done`, exit 0, and its results were gone with the file."""
    path, key = planned
    with open_store(str(path)) as store:
        kept = path.with_name("kept.db")
        os.link(path, kept)  # the old file, to look at after
        _move_away(path, how)
        with pytest.raises(StoreUnreachable, match=f"s.db was {how} while specfleet had it "
                                                   "open; expected it back in place") as err:
            store.mark_running(key, "driver-1", 60.0)
        assert "\n" not in str(err.value)
        os.replace(kept, path)  # put back: the write goes through
        store.mark_running(key, "driver-1", 60.0)
    with open_store(str(path), read_only=True) as store:
        assert {r.run_key: r.status for r in store.runs()}[key] == "running"


def test_a_result_for_a_deleted_store_stays_in_the_journal(planned) -> None:
    """The driver's retries end in one line naming the journal, which keeps the result."""
    path, key = planned
    (run,) = [r for r in grid(repeats=1) if r.run_key == key]
    with open_store(str(path)) as store:
        said: list[str] = []
        writer = StoreWriter(store, "driver-1", lease_s=60.0, retry_s=0.6, on_wait=said.append)
        path.unlink()
        with pytest.raises(StoreOutage, match="store a result: --db: the SQLite file .* would "
                                              "be lost.*1 finished result is kept"):
            writer.record(result(run))
        assert writer.journal.pending() == [writer.journal.entry(key)]
        assert said and said[0].startswith("store unreachable (--db: the SQLite file")
        writer.journal.done(key)


@contextlib.contextmanager
def _write_lock_held(path: Path) -> Iterator[None]:
    """Another connection holds the store's write lock (`BEGIN EXCLUSIVE`) meanwhile."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_ctrl_c_is_heard_while_a_write_waits_for_another_writers_lock(planned, monkeypatch):
    """SQLite's busy wait sleeps in C: Ctrl-C (and SIGTERM, which raises the same
    KeyboardInterrupt) took effect only once the whole 60 s wait ended."""
    path, key = planned
    monkeypatch.setattr(store_engine, "BUSY_TIMEOUT_S", 8.0)  # the old wait, made short
    # A worker started in the background (`make test &`) inherits SIGINT ignored.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with open_store(str(path)) as store, _write_lock_held(path):
            timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
            started = time.monotonic()
            timer.start()
            try:
                with pytest.raises(KeyboardInterrupt):
                    store.mark_running(key, "driver-1", 60.0)
            finally:
                timer.cancel()
            assert time.monotonic() - started < 5.0  # against the 8 s wait
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_lock_held_past_the_busy_timeout_says_who_holds_it(planned, monkeypatch) -> None:
    """It said only `database is locked`, not why nor what to wait for."""
    path, key = planned
    monkeypatch.setattr(store_engine, "BUSY_TIMEOUT_S", 0.6)
    with open_store(str(path)) as store, _write_lock_held(path):
        with pytest.raises(StoreUnreachable, match=r"s.db now \(database is locked: another "
                           r"process held its write lock for 0.6 s\); expected that process "
                           "to finish its write") as err:
            store.mark_running(key, "driver-1", 60.0)
        assert "\n" not in str(err.value)
    with open_store(str(path), read_only=True) as store:
        assert {r.status for r in store.runs()} == {"pending"}


def test_a_closed_store_on_a_full_disk_is_read_and_left_as_it_was(small_disk) -> None:
    """A read needs a -shm beside a WAL store: on a full disk it failed `disk I/O error`
    and left a -wal and a 3-byte -shm behind; it reads the file as immutable instead."""
    path = small_disk / "s.db"
    with open_store(str(path)) as store:
        store.create_matrix("demo", {}, grid(repeats=1))
    fill(small_disk)
    with open_store(str(path), read_only=True) as store:
        assert [r.status for r in store.runs()] == ["pending", "pending"]
    assert sorted(os.listdir(small_disk)) == ["filler", "s.db"]


def test_a_write_on_a_full_disk_says_the_disk_is_full(small_disk) -> None:
    """It said `disk I/O error`, which reads as a failing disk or a damaged store."""
    path = small_disk / "s.db"
    open_store(str(path)).close()
    fill(small_disk)
    with pytest.raises(StoreUnreachable, match=r"s.db now \(its disk is full: SQLite needs 64 "
                                               r"KiB for the -shm file beside it\); expected "
                                               "free space on its disk") as err:
        open_store(str(path))
    assert "\n" not in str(err.value)
    assert sorted(os.listdir(small_disk)) == ["filler", "s.db"]
