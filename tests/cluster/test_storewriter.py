"""A driver's last writes (the matrix's final status) wait out a store outage like its result
writes do, instead of ending `matrix run` with exit 2 although every run is stored (found by
tools/chaos.py)."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

import pytest
from sqlalchemy import make_url
from sqlalchemy.exc import OperationalError

from specfleet.cluster import scheduler
from specfleet.cluster.hoststate import HostState
from specfleet.cluster.outcome import finish_matrix
from specfleet.cluster.storewriter import StoreOutage, StoreWriter
from specfleet.settings import STORE_RETRY_S


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

    def record_calibration(self, target, model: str, calibration: dict) -> None:
        self._reach("record_calibration")
        self.finished.append(("calibration", model))

    def finish_matrix(self, matrix_id: str, status: str, driver_id: str) -> bool:
        self._reach("finish_matrix")
        self.finished.append((matrix_id, status))
        return True


def writer_for(store: FlakyStore, retry_s: float, said: list[str]) -> StoreWriter:
    return StoreWriter(store, "driver-1", lease_s=10.0, retry_s=retry_s, on_wait=said.append)


def test_the_final_status_waits_out_a_short_outage():
    store, said = FlakyStore(get_matrix=1, finish_matrix=2), []
    outcome = finish_matrix(writer_for(store, 30.0, said), "m-1", {}, 1.0, "driver-1")
    assert outcome.status == "done" and store.finished == [("m-1", "done")]
    assert len(said) == 3 and all("store unreachable" in line for line in said)


def test_an_outage_past_the_bound_is_one_line_naming_what_was_not_done():
    store, said = FlakyStore(get_matrix=10_000), []
    with pytest.raises(StoreOutage, match="read the matrix's counts"):
        finish_matrix(writer_for(store, 0.3, said), "m-1", {}, 1.0, "driver-1")


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


def test_a_long_driver_error_keeps_its_reason():
    """The wait line cut a driver's error at 160 characters, before its reason
    (`... port 55432 failed: Co`)."""
    from specfleet.cluster.storewriter import _short

    reason = ('connection to server at "127.0.0.1", port 55432 failed: Connection refused '
              "Is the server running on that host and accepting TCP/IP connections?")
    err = OperationalError("SELECT 1", {}, Exception(f"{'x' * 300} {reason}"))
    line = _short(err)
    assert line.startswith("x" * 20) and " … " in line and len(line) <= 163
    assert line.endswith("accepting TCP/IP connections?")
    assert _short(Exception("short")) == "short"


@pytest.mark.parametrize(("down", "retry_s", "stored"), [(2, 30.0, True), (10_000, 0.3, False)])
def test_a_measured_cost_table_waits_out_an_outage_and_never_costs_the_result(
        down, retry_s, stored, monkeypatch, capsys):
    """The table a run measured went to the store unretried: an outage at that moment ended
    the driver before the run's own result was journaled."""
    store, said, recorded = FlakyStore(record_calibration=down), [], []
    writer = writer_for(store, retry_s, said)
    monkeypatch.setattr(writer, "record", recorded.append)
    monkeypatch.setattr(scheduler, "_emit", lambda *args: None)
    result = SimpleNamespace(calibration={"measure_s": 1.5}, target=SimpleNamespace(label="h/t/c"),
                             status="done", total_s=1.0, error=None, tok_per_s=10.0)
    host = HostState("h", worker=None, machine="m", queue=deque())
    ctx = SimpleNamespace(writer=writer, store=store)
    scheduler._store_result(ctx, host, SimpleNamespace(model="m", run_key="r"), result)
    assert recorded == [result] and host.done == 1
    assert (store.finished == [("calibration", "m")]) is stored
    err = capsys.readouterr().err
    assert ("and stored it" in err) is stored and ("could not store it" in err) is not stored


def test_the_outage_line_says_how_long_the_tries_really_took():
    """Each try that waits for another process's SQLite write lock takes up to 60 s; the line
    said `unreachable for 5 s` (the retry bound) after two such tries, 120 s."""
    now = [0.0]

    class Locked(FlakyStore):
        def finish_matrix(self, matrix_id: str, status: str, driver_id: str) -> bool:
            now[0] += 60.0  # SQLite's busy timeout, then "database is locked"
            raise OperationalError("BEGIN IMMEDIATE", {}, Exception("database is locked"))

    writer = StoreWriter(Locked(), "driver-1", lease_s=10.0, retry_s=5.0, clock=lambda: now[0])
    with pytest.raises(StoreOutage) as caught:
        writer.retry("finish the matrix", writer.store.finish_matrix, "m-1", "done", "driver-1")
    assert str(caught.value).startswith(
        "the store stayed unreachable for 60 s (1 try; could not finish the matrix: "
        "database is locked)")
    writer = StoreWriter(Locked(), "driver-1", lease_s=10.0, retry_s=90.0, clock=lambda: now[0])
    with pytest.raises(StoreOutage, match=r"unreachable for 120 s \(2 tries; "):
        writer.retry("finish the matrix", writer.store.finish_matrix, "m-1", "done", "driver-1")


def test_the_last_retry_is_said_as_the_last_not_with_a_stale_give_up_time():
    """The last wait ends at the deadline; its line said `retry 5 in 2.5 s, giving up in
    2 s`, a retry past the give-up time."""
    now = [0.0]

    class Slow(FlakyStore):
        """Each try takes `step_s` of the clock."""

        def __init__(self, step_s: float) -> None:
            super().__init__(finish_matrix=1)
            self.step_s = step_s

        def finish_matrix(self, matrix_id: str, status: str, driver_id: str) -> bool:
            now[0] += self.step_s
            return super().finish_matrix(matrix_id, status, driver_id)

    for step_s, retry_s, line in (
            (1.0, 30.0, "retry 1 in 0.5 s, giving up in 29 s; 0 results journaled"),
            (2.75, 3.0, "last try in 0.2 s; 0 results journaled")):
        said: list[str] = []
        writer = StoreWriter(Slow(step_s), "driver-1", lease_s=10.0, retry_s=retry_s,
                             on_wait=said.append, clock=lambda: now[0])
        assert writer.retry("finish the matrix", writer.store.finish_matrix, "m-1", "done",
                            "driver-1")
        assert [text.split("); ", 1)[1] for text in said] == [line]


def test_a_long_store_path_is_cut_before_the_reason_is():
    """SQLite's lock message under a long path was cut in its middle, the key words with it
    (`database is … process held its write lock`)."""
    from specfleet.cluster.storewriter import _short

    path = "/srv/results/" + "team-a/" * 20 + "fleet.db"
    err = Exception(f"--db: cannot write the SQLite file {path} now (database is locked: "
                    "another process held its write lock for 60 s); expected that process to "
                    "finish its write")
    line = _short(err)
    assert len(line) <= 160, line
    assert line.startswith("--db: cannot write the SQLite file /srv/results/team-a")
    assert line.endswith("fleet.db now (database is locked: another process held its write "
                         "lock for 60 s)")


def test_every_driver_retries_as_long_as_the_variable_says_unless_its_options_say(monkeypatch):
    # `job generate` and `parity run` built their options without reading it, so only `matrix`
    # drivers honoured SPECFLEET_STORE_RETRY_S.
    monkeypatch.delenv("SPECFLEET_STORE_RETRY_S", raising=False)
    assert scheduler._store_retry_s(scheduler.SchedulerOptions()) == STORE_RETRY_S.default_s
    monkeypatch.setenv("SPECFLEET_STORE_RETRY_S", "7")
    assert scheduler._store_retry_s(scheduler.SchedulerOptions()) == 7.0
    assert scheduler._store_retry_s(scheduler.SchedulerOptions(store_retry_s=2.0)) == 2.0


TABLE = {"costs": {"pipelined_ms": 1.0, "n": 3, "ratio": [1.0, 1.1], "flagged": []}}


@pytest.mark.parametrize(("down", "retry_s", "stored"), [(2, 30.0, True), (10_000, 0.3, False)])
def test_job_calibrate_waits_out_an_outage_before_it_gives_up_a_measured_table(
        down, retry_s, stored, monkeypatch, capsys):
    """`job calibrate` wrote each table unretried: a store outage at that moment ended the
    command and lost every table still to come."""
    from specfleet.cli.job_calibrate import _store_costs
    from specfleet.cluster import storewriter

    monkeypatch.setattr(storewriter, "FIRST_BACKOFF_S", 0.01)
    store, said = FlakyStore(record_calibration=down), []
    target = SimpleNamespace(label="h1/torch/cpu")
    assert _store_costs(writer_for(store, retry_s, said), TABLE, target, "m") is stored
    assert (store.finished == [("calibration", "m")]) is stored
    assert said and all(line.startswith("store unreachable") for line in said)
    out, err = capsys.readouterr()
    assert ("h1/torch/cpu m: pipelined step 1.000 ms" in out) is stored
    assert ("h1/torch/cpu m: measured, but could not store it: the store stayed unreachable"
            in err) is not stored
    assert ("no finished result waits in its journal" in err) is not stored
    assert "0 finished results" not in err
