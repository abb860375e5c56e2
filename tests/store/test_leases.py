"""Run ownership in the store: claims, heartbeats, expired leases read `interrupted`, and a
second driver takes nothing a live one holds. On SQLite and PostgreSQL."""

from __future__ import annotations

import time

import pytest

from specfleet.store.errors import StoreConflict
from tests.store.factory import grid, result


def test_a_live_driver_keeps_its_matrix_and_runs(store) -> None:
    runs = grid(repeats=2)
    matrix_id = store.create_matrix("demo", {}, runs)
    assert store.claim_matrix(matrix_id, "d1", 30.0).taken
    store.mark_running(runs[0].run_key, "d1", 30.0)
    second = store.claim_matrix(matrix_id, "d2", 30.0, requeue=True)
    assert (second.taken, second.owner, second.skipped) == (False, "d1", 4)
    with pytest.raises(StoreConflict, match="now run by d1"):
        store.mark_running(runs[1].run_key, "d2", 30.0)
    row = store.get_matrix(matrix_id)
    assert (row.status, row.driver_id, row.counts) == ("running", "d1",
                                                      {"running": 1, "pending": 3})


def test_an_expired_lease_reads_interrupted_and_can_be_taken_over(store) -> None:
    runs = grid(repeats=2)
    matrix_id = store.create_matrix("demo", {}, runs)
    store.claim_matrix(matrix_id, "dead", 0.3)
    store.record_result(result(runs[0]))
    store.mark_running(runs[1].run_key, "dead", 0.3)
    time.sleep(0.5)
    row = store.get_matrix(matrix_id)
    assert row.status == "interrupted"
    assert row.counts == {"done": 1, "interrupted": 1, "pending": 2}
    claim = store.claim_matrix(matrix_id, "d2", 30.0, requeue=True)
    assert (claim.taken, claim.requeued, claim.skipped) == (True, 3, 0)
    assert store.get_matrix(matrix_id).counts == {"done": 1, "pending": 3}
    assert not store.finish_matrix(matrix_id, "done", "dead")  # the dead driver lost it
    assert store.finish_matrix(matrix_id, "done", "d2")


def test_a_stopped_driver_leaves_no_run_running(store) -> None:
    """SIGTERM can land after a run is marked running but before the driver tracks it (or
    after its result is fetched but before it is stored); interrupting the matrix settles
    every run that driver still has running, in the same transaction, and nothing else."""
    runs = grid(repeats=2)
    matrix_id = store.create_matrix("demo", {}, runs)
    store.claim_matrix(matrix_id, "d1", 30.0)
    store.record_result(result(runs[0]))
    store.mark_running(runs[1].run_key, "d1", 30.0)
    assert store.finish_matrix(matrix_id, "interrupted", "d1")
    row = store.get_matrix(matrix_id)
    assert (row.status, row.counts) == ("interrupted", {"done": 1, "interrupted": 1, "pending": 2})
    [stopped] = store.runs(matrix=matrix_id, status="interrupted")
    assert (stopped.run_key, stopped.error) == (runs[1].run_key, "driver stopped")


def test_an_interrupted_generation_job_leaves_no_run_running(store) -> None:
    # Its run read `running` under an `interrupted` job until the run's lease ran out.
    target = grid(repeats=1)[0].target
    runs = grid(repeats=1)
    job_id = store.create_generation_job("gen", target, "m1", runs, driver_id="d1")
    store.record_result(result(runs[0]))
    store.mark_running(runs[1].run_key, "d1", 30.0)
    store.finish_generation_job(job_id, "interrupted")
    rows = store.runs(job=job_id, columns=("run_key", "status", "error"))
    assert [(row.status, row.error) for row in rows] == [("done", None),
                                                         ("interrupted", "driver stopped")]


def test_interrupting_leaves_another_drivers_running_run_alone(store) -> None:
    runs = grid(repeats=1)
    matrix_id = store.create_matrix("demo", {}, runs)
    store.claim_matrix(matrix_id, "d1", 30.0)
    store.mark_running(runs[0].run_key, "d1", 30.0)
    assert store.finish_matrix(matrix_id, "done")  # no driver named: only the matrix changes
    assert store.get_matrix(matrix_id).counts.get("running") == 1


def test_heartbeat_keeps_a_lease_alive(store) -> None:
    runs = grid(repeats=1)
    matrix_id = store.create_matrix("demo", {}, runs)
    store.claim_matrix(matrix_id, "d1", 0.6)
    store.mark_running(runs[0].run_key, "d1", 0.6)
    for _ in range(3):
        time.sleep(0.3)
        store.heartbeat("d1", 0.6)
    assert store.get_matrix(matrix_id).status == "running"
    assert not store.claim_matrix(matrix_id, "d2", 30.0, requeue=True).taken


def test_a_dead_drivers_running_runs_read_interrupted_in_every_run_read(store) -> None:
    """A SIGKILLed `job generate` (no `resume`) left its run `running` in `results` forever,
    and a killed matrix's run read `running` per target under an `interrupted` matrix."""
    target = grid(repeats=1)[0].target
    runs = grid(repeats=2)
    job_id = store.create_generation_job("gen", target, "m1", runs)
    store.mark_running(runs[0].run_key, "dead", 0.3)
    store.mark_running(runs[1].run_key, "live", 30.0)
    time.sleep(0.5)
    rows = store.runs(job=job_id, columns=("run_key", "status"))
    assert [row.status for row in rows] == ["interrupted", "running", "pending", "pending"]
    assert [r.run_key for r in store.runs(status="interrupted")] == [runs[0].run_key]
    assert [r.run_key for r in store.runs(status=["running"])] == [runs[1].run_key]
    assert store.count_runs(status=["interrupted", "pending"]) == 3
    assert store.stored_values("status") == ["interrupted", "pending", "running"]
    assert store.stored_values("status", ["interrupted"]) == ["interrupted"]
    assert store.stored_values("prompt") == ["edit_fn"]


def test_a_dead_drivers_generation_job_reads_interrupted(store) -> None:
    """A SIGKILLed `job generate` left its job `running` forever: the job had no lease for
    its driver's heartbeat to keep, nor for a read to find run out."""
    from sqlalchemy import select

    from specfleet.store.tables import GenerationJob

    target = grid(repeats=1)[0].target
    dead = store.create_generation_job("dead", target, "m1", grid(prefix="d"), driver_id="d1",
                                       lease_s=0.3)
    live = store.create_generation_job("live", target, "m1", grid(prefix="l"), driver_id="d2",
                                       lease_s=0.3)
    store.heartbeat("d2", 30.0)
    time.sleep(0.5)
    assert store.get_generation_job(dead).status == "interrupted"
    assert store.get_generation_job(live).status == "running"
    with store.engine.connect() as conn:  # read so, never rewritten
        assert conn.scalar(select(GenerationJob.status).where(GenerationJob.id == dead)) == "running"
    store.finish_generation_job(live, "done")
    assert (store.get_generation_job(live).status, store.get_generation_job(live).lease_until
            ) == ("done", None)


def test_a_matrix_and_its_running_run_read_interrupted_together(store) -> None:
    # The run's lease, taken when it started, outlived its matrix's by the time since the
    # last heartbeat: `matrix status` read "1 interrupted" above a target "1 running".
    runs = grid(repeats=1)
    matrix_id = store.create_matrix("demo", {}, runs)
    store.claim_matrix(matrix_id, "dead", 1.0)
    time.sleep(0.5)
    store.mark_running(runs[0].run_key, "dead", 2.0)
    time.sleep(0.8)  # past the claim's lease (1 s), within the run's (2.5 s): 1.2 s to spare
    assert store.get_matrix(matrix_id).status == "running"
    assert [r.status for r in store.runs(matrix=matrix_id)][0] == "running"
    time.sleep(1.4)
    assert store.get_matrix(matrix_id).counts == {"interrupted": 1, "pending": 1}
    assert [r.status for r in store.runs(matrix=matrix_id)] == ["interrupted", "pending"]
