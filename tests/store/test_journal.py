"""The result journal: entries written before the store sees them, written back idempotently by
the next `open_store`, conflicts kept apart."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from sqlalchemy import make_url

from specfleet.store import open_store
from specfleet.store.journal import CONFLICT_SUFFIX, STOPPED_SUFFIX, Journal, JournalError
from tests.store.factory import grid, result


def test_write_back_writes_once_and_keeps_conflicts(store_url, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SPECFLEET_JOURNAL_DIR", str(tmp_path / "journal"))
    runs = grid(repeats=2)
    with open_store(store_url) as store:
        store.create_matrix("demo", {}, runs)
        journal = Journal(store.url)
        for run in runs[:3]:
            journal.write(result(run))
        store.record_result(result(runs[0]))  # already stored before the outage
        store.record_result(result(runs[1], tok_per_s=99.0))  # a different result stands
    assert stat.S_IMODE(os.stat(journal.dir).st_mode) == 0o700
    assert len(journal.pending()) == 3
    with open_store(store_url) as store:
        back = store.written_back
        assert (back.written, back.already, back.conflicts) == (1, 1, 1)
        by_key = {r.run_key: r for r in store.runs()}
        assert by_key[runs[2].run_key].status == "done"
        assert by_key[runs[1].run_key].tok_per_s == 99.0
    assert journal.pending() == []
    assert len(list(journal.dir.glob(f"*{CONFLICT_SUFFIX}"))) == 1
    with open_store(store_url) as store:
        assert store.written_back.total == 0  # idempotent: nothing left to write back


def test_a_driver_that_stopped_on_an_outage_has_its_leases_ended_on_write_back(
        store_url, tmp_path, monkeypatch) -> None:
    """A driver that gave up on a store outage renews nothing; its note lets the next
    writing command end its leases, so `resume` takes its runs at once instead of
    refusing them for up to a lease (60 s) with `driver ... still runs it`."""
    monkeypatch.setenv("SPECFLEET_JOURNAL_DIR", str(tmp_path / "journal"))
    runs = grid(repeats=2)
    with open_store(store_url) as store:
        matrix_id = store.create_matrix("demo", {}, runs)
        store.claim_matrix(matrix_id, "gone", 600.0)
        store.mark_running(runs[0].run_key, "gone", 600.0)
        other = store.create_matrix("other", {}, grid(repeats=1, prefix="o"))
        store.claim_matrix(other, "alive", 600.0)  # another driver's lease stands
        journal = Journal(store.url)
        journal.write(result(runs[1]))
        journal.note_stopped("gone")
    with open_store(store_url) as store:
        back = store.written_back
        assert (back.written, back.stopped) == (1, 1)
        assert back.line() == ("journal: 1 finished result written to the store (0 already "
                               "there, 0 refused); ended the leases of 1 driver that stopped "
                               "on a store outage (a resume need not wait them out)")
        demo = next(m for m in store.list_matrices() if m.name == "demo")
        assert demo.status == "interrupted"
        claim = store.claim_matrix(demo.id, "resume", 30.0, requeue=True)
        assert (claim.taken, claim.requeued, claim.skipped) == (True, 3, 0)
        assert not store.claim_matrix(other, "resume", 30.0).taken
    with open_store(store_url) as store:
        assert store.written_back.line() == ""  # the note is used once


def test_a_stopped_note_that_is_not_text_is_set_aside(tmp_path, monkeypatch) -> None:
    """A damaged note (bytes no driver id is made of) was a UnicodeDecodeError traceback in
    every writing command on that store (`db upgrade`, `matrix run`); it is kept apart as a
    conflict, and the results beside it are written back."""
    monkeypatch.setenv("SPECFLEET_JOURNAL_DIR", str(tmp_path / "journal"))
    runs = grid(repeats=1)
    url = f"sqlite:///{tmp_path / 's.db'}"
    with open_store(url) as store:
        store.create_matrix("demo", {}, runs)
        journal = Journal(store.url)
        journal.write(result(runs[0]))
        journal.note_stopped("gone")
    (note,) = journal.dir.glob(f"*{STOPPED_SUFFIX}")
    note.write_bytes(b"\xff\xfe")
    with open_store(url) as store:
        assert (store.written_back.written, store.written_back.stopped) == (1, 0)
    assert [p.suffix for p in journal.dir.iterdir()] == [CONFLICT_SUFFIX]


def test_an_entry_another_driver_stores_meanwhile_is_skipped(tmp_path) -> None:
    """Two drivers on one store: the other one stores its result and drops the entry after
    this one listed it; writing back ended in a FileNotFoundError traceback."""
    runs = grid(repeats=1)
    with open_store(f"sqlite:///{tmp_path / 'shared.db'}") as store:
        store.create_matrix("demo", {}, runs)

        class Raced(Journal):
            def pending(self) -> list[Path]:
                listed = super().pending()
                for path in listed:
                    store.record_result(result(runs[0]))  # the other driver stores it
                    path.unlink()
                return listed

        journal = Raced(store.url, tmp_path / "journal")
        journal.write(result(runs[0]))
        assert journal.write_back(store).total == 0
        assert [r.status for r in store.runs()] == ["done", "pending"]
    assert list(journal.dir.iterdir()) == []


def test_a_result_the_journal_cannot_keep_is_one_line_and_leaves_no_partial_file(
        tmp_path) -> None:
    """A journal that cannot be written (a full disk) raised a bare OSError, a traceback,
    and left its half-written temp file behind."""
    run = grid(repeats=1)[0]
    journal = Journal(make_url(f"sqlite:///{tmp_path / 's.db'}"), tmp_path / "journal")
    journal.entry(run.run_key).mkdir(parents=True)  # the rename onto it fails
    with pytest.raises(JournalError, match="cannot keep the result of run") as err:
        journal.write(result(run))
    assert str(journal.dir) in str(err.value) and "\n" not in str(err.value)
    assert [p.name for p in journal.dir.iterdir()] == [journal.entry(run.run_key).name]
    assert journal.pending() == []


class _Refusing:
    """A store whose `record_result` raises `error` (a refusal, or a fault)."""

    url = make_url("sqlite:///refusing.db")  # names the journal folder; nothing written

    def __init__(self, error: Exception) -> None:
        self.error = error

    def record_result(self, result) -> bool:
        raise self.error

    def end_leases(self, driver_id: str) -> None:
        pass


def test_a_result_the_store_refuses_for_an_unforeseen_reason_is_kept(tmp_path, monkeypatch):
    # A DataError (a NUL PostgreSQL's text cannot hold) dropped the journal entry: the
    # finished result was lost. It stays, and the write-back sets it aside, kept.
    from sqlalchemy.exc import DataError, OperationalError, StatementError

    from specfleet.cluster.storewriter import StoreWriter

    monkeypatch.setenv("SPECFLEET_JOURNAL_DIR", str(tmp_path / "journal"))
    run = grid(repeats=1)[0]
    refused = DataError("INSERT", {}, Exception("text fields cannot contain NUL"))
    writer = StoreWriter(_Refusing(refused), "driver-1", 10.0, 0.1, on_wait=lambda _: None)
    with pytest.raises(DataError):
        writer.record(result(run))
    journal = writer.journal
    assert [p.name for p in journal.pending()] == [journal.entry(run.run_key).name]
    down = OperationalError("INSERT", {}, Exception("connection refused"))
    with pytest.raises(OperationalError):  # a fault: kept for the next write-back
        journal.write_back(_Refusing(down))
    assert len(journal.pending()) == 1
    unsent = StatementError("a value no column takes", "INSERT", {}, ValueError("bad"))
    for refusal in (refused, unsent):
        journal.write(result(run))
        assert journal.write_back(_Refusing(refusal)).conflicts == 1
        assert journal.pending() == []
    assert len(list(journal.dir.glob(f"*{CONFLICT_SUFFIX}"))) == 1  # the same run's entry
