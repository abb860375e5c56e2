"""Real processes: concurrent writers lose nothing; concurrent first opens both succeed."""

from __future__ import annotations

import multiprocessing as mp

import pytest

from specfleet.store import head_revision, open_store
from tests.store.factory import grid, result

RUNS_PER_WRITER = 40


def _runs():
    return grid(repeats=RUNS_PER_WRITER, arms=("plain", "graded"))


def _writer(url: str, index: int, start, errors) -> None:
    """Write `index`'s half of the runs; both write the first ten (identical results)."""
    try:
        start.wait(30)
        runs = _runs()
        with open_store(url) as store:
            for i, run in enumerate(runs):
                if i % 2 == index or i < 10:
                    if i >= 10:
                        store.mark_running(run.run_key)
                    store.record_result(result(run, float(i)))
    except BaseException as err:  # noqa: BLE001 - reported to the parent
        errors.put(f"writer {index}: {err!r}")


def _opener(url: str, index: int, start, errors) -> None:
    try:
        start.wait(30)
        with open_store(url) as store:
            store.create_matrix(f"m{index}", {}, [])
    except BaseException as err:  # noqa: BLE001 - reported to the parent
        errors.put(f"opener {index}: {err!r}")


def _run_together(target, url: str, count: int) -> list[str]:
    ctx = mp.get_context("spawn")
    start, errors = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=target, args=(url, i, start, errors)) for i in range(count)]
    for proc in procs:
        proc.start()
    start.set()
    for proc in procs:
        proc.join(120)
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert [p.exitcode for p in procs] == [0] * count, found
    return found


@pytest.mark.slow
def test_two_writer_processes_lose_nothing(store_url):
    runs = _runs()
    with open_store(store_url) as store:
        matrix_id = store.create_matrix("race", {}, runs)
    assert _run_together(_writer, store_url, 2) == []
    with open_store(store_url) as store:
        rows = store.runs(matrix=matrix_id)
        assert store.get_matrix(matrix_id).counts == {"done": len(runs)}
    assert [r.tok_per_s for r in rows] == [float(i) for i in range(len(runs))]


@pytest.mark.slow
def test_processes_opening_a_fresh_database_at_once_all_succeed(store_url):
    assert _run_together(_opener, store_url, 3) == []
    with open_store(store_url) as store:
        assert sorted(m.name for m in store.list_matrices()) == ["m0", "m1", "m2"]
    from sqlalchemy import create_engine, text

    from specfleet.store.engine import resolve_url

    engine = create_engine(resolve_url(store_url))
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).all() == [
            (head_revision(),)]
    engine.dispose()



def test_a_fresh_sqlite_file_opens_while_another_connection_holds_a_write_lock(tmp_path):
    """Switching a new file to WAL needs a lock SQLite's busy handler does not wait for: a
    second process opening the file during the first one's write must wait, not fail."""
    import sqlite3
    import threading
    import time

    from specfleet.store import open_store

    path = tmp_path / "fresh.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # a writer in the file's initial rollback-journal mode
    holder.execute("CREATE TABLE held (x)")
    # Rolled back: the file holds no foreign table afterwards (that would not be a store).
    release = threading.Timer(0.5, lambda: holder.execute("ROLLBACK"))
    release.start()
    started = time.monotonic()
    open_store(f"sqlite:///{path}").close()
    release.join()
    holder.close()
    assert time.monotonic() - started >= 0.4  # it waited for the writer instead of failing


def test_a_write_waiting_for_another_processs_write_lock_says_so_once(tmp_path, monkeypatch,
                                                                      capsys):
    """A write behind another process's long SQLite transaction waited up to 60 s without a
    word (a driver's progress then stood still)."""
    import sqlite3
    import threading

    from specfleet.store import engine

    monkeypatch.setattr(engine, "LOCK_SAY_S", 0.3)
    path = tmp_path / "busy.db"
    with open_store(f"sqlite:///{path}") as store:
        runs = grid(repeats=1)
        store.create_matrix("demo", {}, runs)
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")
        release = threading.Timer(1.2, lambda: holder.execute("ROLLBACK"))
        release.start()
        store.record_result(result(runs[0]))  # waits for the holder, then writes
        release.join()
        holder.close()
        assert [r.status for r in store.runs()][:1] == ["done"]
    said = capsys.readouterr().err.splitlines()
    assert said == [f"{path}: waiting for another process's write to this SQLite store to "
                    "finish (up to 60 s)"], said
