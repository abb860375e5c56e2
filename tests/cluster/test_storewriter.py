"""A driver's last writes (the matrix's final status) wait out a store outage like its result
writes do, instead of ending `matrix run` with exit 2 although every run is stored (found by
tools/chaos.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from sqlalchemy import make_url
from sqlalchemy.exc import OperationalError

from specfleet.cluster import scheduler
from specfleet.cluster.storewriter import StoreOutage, StoreWriter


class FlakyStore:
    """A store whose methods are unreachable for their first `down[name]` calls each."""

    url = make_url("sqlite:///flaky-store.db")  # names its journal folder; nothing written

    def __init__(self, **down: int) -> None:
        self.down = down
        self.finished: list[tuple[str, str]] = []

    def _reach(self, method: str) -> None:
        if self.down.get(method, 0) > 0:
            self.down[method] -= 1
            raise OperationalError("SELECT 1", {}, Exception("connection refused"))

    def get_matrix(self, matrix_id: str):
        self._reach("get_matrix")
        return SimpleNamespace(counts={"done": 4}, status="running")

    def finish_matrix(self, matrix_id: str, status: str, driver_id: str) -> bool:
        self._reach("finish_matrix")
        self.finished.append((matrix_id, status))
        return True


def writer_for(store: FlakyStore, retry_s: float, said: list[str]) -> StoreWriter:
    return StoreWriter(store, "driver-1", lease_s=10.0, retry_s=retry_s, on_wait=said.append)


def test_the_final_status_waits_out_a_short_outage():
    store, said = FlakyStore(get_matrix=1, finish_matrix=2), []
    outcome = scheduler._finish(writer_for(store, 30.0, said), "m-1", {}, 1.0, "driver-1")
    assert outcome.status == "done" and store.finished == [("m-1", "done")]
    assert len(said) == 3 and all("store unreachable" in line for line in said)


def test_an_outage_past_the_bound_is_one_line_naming_what_was_not_done():
    store, said = FlakyStore(get_matrix=10_000), []
    with pytest.raises(StoreOutage, match="read the matrix's counts"):
        scheduler._finish(writer_for(store, 0.3, said), "m-1", {}, 1.0, "driver-1")


def test_a_result_the_journal_cannot_keep_is_still_stored(tmp_path, monkeypatch):
    """A journal folder that cannot be written (a full disk) ended the driver with an OSError
    traceback and dropped a finished result the store could still take."""
    import os

    from specfleet.store import open_store
    from tests.store.factory import grid, result

    monkeypatch.setenv("SPECFLEET_JOURNAL_DIR", str(tmp_path / "journal"))
    runs, said = grid(repeats=1), []
    with open_store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        store.create_matrix("demo", {}, runs)
        writer = StoreWriter(store, "driver-1", 10.0, 5.0, on_wait=said.append)
        entry = writer.journal.entry(runs[0].run_key)
        entry.with_name(f".{entry.name}.{os.getpid()}.tmp").mkdir(parents=True)  # in the way
        assert writer.record(result(runs[0]))
        assert [r.status for r in store.runs()] == ["done", "pending"]
    assert len(said) == 1 and "cannot keep the result of run" in said[0]
