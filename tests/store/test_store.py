"""Writes: matrices and their runs, run lifecycle, idempotent and conflicting results."""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime

import pytest

from specfleet.engine.stats import COUNTER_FIELDS as ENGINE_COUNTERS
from specfleet.jobs.run import RunResult, Target
from specfleet.stats.runs import Counters, to_row
from specfleet.store import RunRow, StoreConflict, UnknownMatrix, UnknownRun
from specfleet.store.tables import Run
from specfleet.store.values import _RESULT_FIELDS
from tests.store.factory import HOST_B, grid, result, spec


def test_create_matrix_stores_every_run_pending_in_plan_order(store):
    runs = grid(repeats=2)
    matrix_id = store.create_matrix("demo", {"models": ["m1"]}, runs)
    matrix = store.get_matrix(matrix_id)
    assert matrix.name == "demo" and matrix.status == "running"
    assert matrix.spec == {"models": ["m1"]} and len(matrix.spec_hash) == 64
    assert matrix.counts == {"pending": 4}
    rows = store.runs(matrix=matrix_id)
    assert [r.run_key for r in rows] == [r.run_key for r in runs]
    assert [r.plan_order for r in rows] == [0, 1, 2, 3]
    assert {r.status for r in rows} == {"pending"}


def test_runs_not_done_rebuilds_the_specs(store):
    runs = grid(repeats=1)
    matrix_id = store.create_matrix("demo", {}, runs)
    back = store.runs_not_done(matrix_id)
    assert [r.model_dump() for r in back] == [
        r.model_copy(update={"matrix_id": matrix_id}).model_dump() for r in runs
    ]


def test_create_matrix_with_a_duplicate_key_writes_nothing(store):
    runs = grid(repeats=1) + [spec("k-mac1-m1-edit_fn-0-plain")]
    with pytest.raises(StoreConflict, match="twice"):
        store.create_matrix("demo", {}, runs)
    assert store.list_matrices() == [] and store.runs() == []


def test_create_matrix_with_an_existing_key_writes_nothing(store):
    store.create_matrix("first", {}, grid(repeats=1))
    with pytest.raises(StoreConflict, match="already exists"):
        store.create_matrix("second", {}, [spec("new-key"), *grid(repeats=1)])
    assert [m.name for m in store.list_matrices()] == ["first"]
    assert len(store.runs()) == 2
    assert "new-key" not in {r.run_key for r in store.runs()}


def test_result_round_trips_every_field(store):
    run = spec("a")
    store.create_matrix("demo", {}, [run])
    store.mark_running("a")
    assert store.runs()[0].status == "running"
    res = result(run, 12.5)
    store.record_result(res)
    row = store.runs()[0]
    assert (row.status, row.tok_per_s, row.token_ids, row.output_text) == ("done", 12.5,
                                                                            [5, 6, 7], "out")
    assert row.load_before == [0.5, 0.4, 0.3] and row.versions["torch"] == "2.13.0"
    assert row.weights_hash == "w" * 8 and row.resolved_policy == "plain"
    assert row.finished_at == datetime(2026, 11, 1, 12, 0, 1)  # naive UTC
    assert (row.rounds, row.drafted_rounds, row.proposed, row.accepted) == (4, 2, 5, 3)


def test_every_counter_is_stored_and_read_back_in_its_place(store):
    """`RunResult`, the `runs` columns, `RunRow` and `stats.Counters` follow `COUNTER_FIELDS`."""
    run = spec("a")
    store.create_matrix("demo", {}, [run])
    counted = {name: i + 1 for i, name in enumerate(ENGINE_COUNTERS)}
    store.record_result(result(run).model_copy(update=counted))
    row = store.runs()[0]
    assert {name: getattr(row, name) for name in ENGINE_COUNTERS} == counted
    assert to_row(row).counters == Counters(**counted, generated_tokens=3)
    for names in (list(RunResult.model_fields), [f.name for f in fields(RunRow)],
                  list(Run.__table__.columns.keys())):
        start = names.index("stop_reason") + 1
        assert tuple(names[start:start + len(ENGINE_COUNTERS)]) == ENGINE_COUNTERS


def test_every_result_field_copied_by_name_has_a_column():
    """A field added to `RunResult` needs its `runs` column (and migration), or it is lost."""
    assert set(_RESULT_FIELDS) <= set(Run.__table__.columns.keys())


def test_identical_second_write_is_a_no_op(store):
    run = spec("a")
    store.create_matrix("demo", {}, [run])
    store.record_result(result(run, 12.5))
    before = store.runs()
    store.record_result(result(run, 12.5))
    assert store.runs() == before and len(before) == 1


def test_conflicting_write_to_a_done_run_is_refused(store):
    run = spec("a")
    store.create_matrix("demo", {}, [run])
    store.record_result(result(run, 12.5))
    with pytest.raises(StoreConflict, match="different result"):
        store.record_result(result(run, 99.0))
    with pytest.raises(StoreConflict):
        store.mark_running("a")
    assert store.runs()[0].tok_per_s == 12.5


def test_result_from_another_target_is_refused(store):
    run = spec("a")
    store.create_matrix("demo", {}, [run])
    stray = result(run).model_copy(update={"target": HOST_B})
    with pytest.raises(StoreConflict, match="planned on mac1/mlx/metal"):
        store.record_result(stray)
    assert store.runs()[0].status == "pending"


def test_unknown_run_key_is_refused(store):
    with pytest.raises(UnknownRun):
        store.record_result(result(spec("nope")))
    with pytest.raises(UnknownRun):
        store.mark_running("nope")


def test_failed_and_interrupted_then_requeue(store):
    runs = grid(repeats=2)
    matrix_id = store.create_matrix("demo", {}, runs)
    store.record_result(result(runs[0]))
    store.mark_failed(runs[1].run_key, "RuntimeError: boom")
    store.mark_running(runs[2].run_key)
    store.mark_interrupted(runs[2].run_key, "worker lost")
    store.mark_interrupted(runs[0].run_key, "late")  # a done run stays done
    by_key = {r.run_key: r for r in store.runs()}
    assert by_key[runs[0].run_key].status == "done"
    assert (by_key[runs[1].run_key].status, by_key[runs[1].run_key].error) == (
        "failed", "RuntimeError: boom")
    assert by_key[runs[2].run_key].status == "interrupted"
    assert [r.run_key for r in store.runs_not_done(matrix_id)] == [r.run_key for r in runs[1:]]
    assert [r.run_key for r in store.runs_not_done(matrix_id, statuses=["failed"])] == [
        runs[1].run_key]
    store.finish_matrix(matrix_id, "failed")
    assert store.get_matrix(matrix_id).finished_at is not None
    assert store.requeue(matrix_id) == 3
    matrix = store.get_matrix(matrix_id)
    assert matrix.counts == {"done": 1, "pending": 3} and matrix.status == "running"
    assert matrix.finished_at is None


def test_a_failed_run_can_later_succeed(store):
    run = spec("a")
    store.create_matrix("demo", {}, [run])
    store.mark_failed("a", "oom")
    store.record_result(result(run, 8.0))
    row = store.runs()[0]
    assert (row.status, row.error, row.tok_per_s) == ("done", None, 8.0)


def test_unknown_matrix_is_a_user_error(store):
    with pytest.raises(UnknownMatrix, match="no matrix 'zzz'"):
        store.get_matrix("zzz")
    with pytest.raises(UnknownMatrix):
        store.requeue("zzz")
    with pytest.raises(ValueError):
        store.finish_matrix("zzz", "exploded")


def test_upsert_host_keeps_first_seen(store):
    store.upsert_host({"name": "mac1", "kind": "mac-mlx", "memory_gb": 64.0,
                       "versions": {"mlx": "0.32"}})
    store.upsert_host({"name": "mac1", "kind": "mac-mlx", "memory_gb": 96.0, "chip": "M3"})
    store.upsert_host({"name": "spark1", "kind": "gb10-cuda"})
    run_a, run_b = spec("a"), spec("b", target=HOST_B)
    store.create_matrix("demo", {}, [run_a, run_b])
    assert [r.run_key for r in store.runs(kind="mac-mlx")] == ["a"]
    assert [r.run_key for r in store.runs(kind=["gb10-cuda", "mac-mlx"])] == ["a", "b"]


def test_a_worker_that_measured_no_bandwidth_yet_keeps_the_stored_figure(store):
    # A worker probes read bandwidth before its first real run, so a fresh one registers
    # without a figure: that must not erase the one its host's last worker measured.
    store.upsert_host({"name": "mac1", "kind": "mac-mlx", "read_gb_per_s": 120.0})
    store.upsert_host({"name": "mac1", "kind": "mac-mlx", "read_gb_per_s": None})
    assert store.hosts(["mac1"])[0].read_gb_per_s == 120.0
    store.upsert_host({"name": "mac1", "kind": "mac-mlx", "read_gb_per_s": 80.0})
    assert store.hosts(["mac1"])[0].read_gb_per_s == 80.0


def test_generation_job_links_its_runs(store):
    target = Target(host="here", engine="toy", device="cpu")
    runs = [spec(f"g{i}", target=target, prompt=p) for i, p in enumerate(["edit_fn", "story"])]
    job_id = store.create_generation_job("batch", target, "m1", runs, params={"n": 2})
    assert [r.run_key for r in store.runs(job=job_id)] == ["g0", "g1"]
    assert {r.job_id for r in store.runs()} == {job_id}
    store.finish_generation_job(job_id, "done")


def test_width_costs_keep_the_latest_measurement(store):
    target = Target(host="mac1", engine="mlx", device="metal")
    store.record_width_costs(target, "m1", {1: (10.0, 5.0), 2: (12.0, 5.0)},
                             measured_at=datetime(2026, 1, 1))
    store.record_width_costs(target, "m1", [{"width": 2, "sync_ms": 11.0, "pipelined_ms": 4.0}],
                             measured_at=datetime(2026, 2, 1))
    latest = store.width_costs(host="mac1")
    assert [(c.width, c.sync_ms, c.pipelined_ms) for c in latest] == [(1, 10.0, 5.0),
                                                                     (2, 11.0, 4.0)]
    assert len(store.width_costs(host="mac1", latest=False)) == 3
    assert store.width_costs(host="other") == []


def test_load_samples_series(store):
    matrix_id = store.create_matrix("demo", {}, [spec("a")])
    samples = [{"t": datetime(2026, 1, 1, 0, 0, s), "load1": 0.1 * s, "cpu_util": 50.0}
               for s in range(3)]
    assert store.record_load_samples("mac1", samples, matrix_id=matrix_id) == 3
    got = store.load_samples(host="mac1", since=datetime(2026, 1, 1, 0, 0, 1))
    assert [(s.load1, s.cpu_util, s.gpu_util, s.matrix_id) for s in got] == [
        (0.1, 50.0, None, matrix_id), (0.2, 50.0, None, matrix_id)]


def test_open_store_turns_connection_faults_into_one_line_user_errors(tmp_path, pg_server):
    from specfleet.errors import UserError
    from specfleet.store import open_store
    from tests.conftest import PG_PASSWORD_USER

    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not sqlite at all " * 20)
    cases = {
        str(bad): "not a usable SQLite database",
        pg_server.url("postgres", PG_PASSWORD_USER, "nope"): "refused the credentials",
        pg_server.url("no_such_db"): "does not exist",
        "oracle://u@h/db": "unsupported database scheme",
    }
    for url, fragment in cases.items():
        with pytest.raises(UserError) as err:
            open_store(url)
        assert fragment in str(err.value) and "\n" not in str(err.value)


def test_a_read_after_the_server_went_away_is_one_line_not_a_traceback():
    """Reads, like writes, say `cannot reach PostgreSQL` (exit 2) when the server is gone
    after the store opened (tools/chaos.py seed 1: a `resume` ended with a traceback)."""
    import socket

    from sqlalchemy.engine import make_url

    from specfleet.store.engine import make_engine
    from specfleet.store.errors import StoreUnreachable
    from specfleet.store.store import Store

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    url = make_url(f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres")
    gone = Store(make_engine(url), url, "--db")
    for read in (lambda: gone.get_matrix("m"), gone.count_matrices, gone.runs):
        with pytest.raises(StoreUnreachable, match="cannot reach PostgreSQL"):
            read()


def test_a_full_disk_is_one_line_and_leaves_the_store_as_it_was(tmp_path):
    """SQLite's `database or disk is full` was a traceback; it is a store that cannot be
    written now (a driver retries it, a command says it in one line). `max_page_count` fills
    the file as a full disk would."""
    from sqlalchemy import event

    from specfleet.store import open_store
    from specfleet.store.errors import StoreUnreachable

    with open_store(f"sqlite:///{tmp_path / 'full.db'}") as store:
        store.create_matrix("first", {}, grid(repeats=1))
        with store.engine.connect() as conn:
            pages = conn.exec_driver_sql("PRAGMA page_count").scalar()
        event.listen(store.engine, "connect",
                     lambda conn, _record: conn.execute(f"PRAGMA max_page_count = {pages}"))
        store.engine.dispose()  # the next connection has the limit
        with pytest.raises(StoreUnreachable, match="disk is full.*expected free space") as err:
            store.create_matrix("big", {}, grid(repeats=200, prefix="big"))
        assert "\n" not in str(err.value)
        assert [m.name for m in store.list_matrices()] == ["first"]
        assert store.count_runs() == 2
