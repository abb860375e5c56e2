"""A generation job claimed again (`job resume`): what is re-queued, what is kept, and a
second driver beside a live one takes nothing. On SQLite and PostgreSQL."""

from __future__ import annotations

import time

import pytest

from specfleet.store.errors import StoreConflict, UnknownMatrix
from tests.store.factory import HOST_B, result, spec

DONE, FAILED, CUT, WAITING = (spec(f"j{i}", target=HOST_B) for i in range(4))


def _cut_job(store) -> str:
    """A job whose driver died: one reply done, one failed, one cut mid-run, one not sent."""
    job_id = store.create_generation_job("night", HOST_B, "m1", [DONE, FAILED, CUT, WAITING],
                                         driver_id="dead", lease_s=0.3)
    store.record_result(result(DONE, 42.0, text="kept"))
    store.mark_running(FAILED.run_key, "dead", 0.3)
    store.mark_failed(FAILED.run_key, "model ran out of memory")
    store.mark_running(CUT.run_key, "dead", 0.3)
    time.sleep(0.4)  # the dead driver's leases run out
    return job_id


def test_a_claim_requeues_every_run_not_done_and_keeps_the_done_one(store) -> None:
    job_id = _cut_job(store)
    assert store.get_generation_job(job_id).counts == {
        "done": 1, "failed": 1, "interrupted": 1, "pending": 1}
    claim = store.claim_job(job_id, "d2", 30.0)
    assert (claim.taken, claim.requeued, claim.skipped) == (True, 3, 0)
    job = store.get_generation_job(job_id)
    assert (job.status, job.driver_id, job.counts) == ("running", "d2", {"done": 1, "pending": 3})
    assert [s.run_key for s in store.pending_job_runs(job_id)] == ["j1", "j2", "j3"]
    (kept,) = store.runs(job=job_id, status="done")
    assert (kept.run_key, kept.output_text, kept.tok_per_s) == ("j0", "kept", 42.0)


def test_a_second_claim_beside_a_live_driver_takes_nothing(store) -> None:
    job_id = _cut_job(store)
    assert store.claim_job(job_id, "d2", 30.0).taken
    store.mark_running(FAILED.run_key, "d2", 30.0)
    second = store.claim_job(job_id, "d3", 30.0)
    assert (second.taken, second.owner, second.skipped) == (False, "d2", 3)
    job = store.get_generation_job(job_id)
    assert (job.driver_id, job.counts) == ("d2", {"done": 1, "running": 1, "pending": 2})


def test_the_driver_that_lost_its_job_neither_runs_nor_finishes_it(store) -> None:
    job_id = _cut_job(store)
    store.claim_job(job_id, "d2", 30.0)
    with pytest.raises(StoreConflict, match="now run by d2"):
        store.mark_running(WAITING.run_key, "dead", 30.0)
    assert not store.finish_generation_job(job_id, "interrupted", "dead")
    store.mark_running(WAITING.run_key, "d2", 30.0)
    assert store.finish_generation_job(job_id, "interrupted", "d2")
    job = store.get_generation_job(job_id)
    assert (job.status, job.counts) == ("interrupted", {"done": 1, "interrupted": 1,
                                                        "pending": 2})


def test_an_unknown_job_is_refused(store) -> None:
    with pytest.raises(UnknownMatrix, match="no generation job 'nope'"):
        store.claim_job("nope", "d2", 30.0)
