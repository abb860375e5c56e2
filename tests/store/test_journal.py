"""The result journal: entries written before the store sees them, written back idempotently by
the next `open_store`, conflicts kept apart."""

from __future__ import annotations

import os
import stat

from specfleet.store import open_store
from specfleet.store.journal import CONFLICT_SUFFIX, Journal
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
