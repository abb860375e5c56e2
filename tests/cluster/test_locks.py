"""MachineLocks as a plain class: leases, renewals, turns between owners, dead drivers."""

from __future__ import annotations

import time

from specfleet.cluster import locks
from specfleet.cluster.locks import MachineLocks


def test_a_lease_is_exclusive_renewable_and_released():
    lock = MachineLocks()
    assert lock.acquire("m", "a", None, 10)
    assert lock.acquire("m", "a", None, 10)  # the holder renews
    assert not lock.acquire("m", "b", None, 10)
    assert lock.acquire("other", "b", None, 10)  # machines are independent
    assert not lock.release("m", "b") and lock.release("m", "a")
    assert lock.holders() == {"other": "b"}


def test_owners_take_turns_run_by_run():
    lock = MachineLocks()
    assert lock.acquire("m", "a", None, 10)
    assert not lock.acquire("m", "b", None, 10)  # b now waits
    assert lock.renew("m", "a", 10)  # a run in flight is never cut short
    assert not lock.acquire("m", "a", None, 10)  # a's next run: b's turn first
    assert not lock.acquire("m", "a", None, 10)
    assert lock.acquire("m", "b", None, 10)
    assert not lock.acquire("m", "b", None, 10)  # and back to a
    assert lock.acquire("m", "a", None, 10)


def test_an_expired_lease_or_a_silent_waiter_does_not_block(monkeypatch):
    lock = MachineLocks()
    assert lock.acquire("m", "a", None, 0.01)
    time.sleep(0.02)
    assert lock.acquire("m", "b", None, 10)  # a's lease ran out
    assert not lock.acquire("m", "c", None, 10)  # c waits, then stops asking
    monkeypatch.setattr(locks, "WAIT_TTL_S", 0.0)
    assert lock.acquire("m", "b", None, 10)  # a waiter gone quiet is forgotten


def test_the_lease_of_a_dead_driver_is_reclaimed_at_once(monkeypatch):
    lock = MachineLocks()
    assert lock.acquire("m", "killed", "0a000000", 3600)
    monkeypatch.setattr(locks, "_job_is_dead", lambda job_id: job_id == "0a000000")
    assert lock.acquire("m", "resume", "0b000000", 3600)
