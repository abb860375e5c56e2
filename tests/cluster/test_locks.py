"""MachineLocks as a plain class: leases, renewals, turns between owners, dead drivers, whose
turn a refusal names; and two schedulers' `Leases` on the real lock actor."""

from __future__ import annotations

import os
import socket
import time

import pytest
import ray

from specfleet.cluster import locks
from specfleet.cluster.localfleet import LocalFleet
from specfleet.cluster.locks import Leases, MachineLocks


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


def test_a_refusal_names_whose_turn_it_is():
    lock = MachineLocks()
    assert lock.acquire("m", "a", None, 10, holder="matrix A")
    assert lock.acquire("m", "b", None, 10, holder="matrix B").holder == "matrix A"
    assert lock.acquire("m", "a", None, 10, holder="matrix A").holder == "matrix B"  # a yields
    assert lock.acquire("m", "c", None, 10, holder="matrix C").holder == "matrix B"  # b first
    assert lock.acquire("m", "b", None, 10, holder="matrix B") == locks.Turn(True)


@pytest.fixture
def head_only():
    """A Ray head alone (1 CPU, loopback, a throwaway token): where the lock actor lives."""
    with LocalFleet([]) as fleet:
        yield fleet


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_schedulers_take_turns_on_the_lock_actor_and_are_told_who_holds_it(head_only):
    first = Leases("bench-77aa01", lease_s=30, timeout_s=30, holder="matrix bench-77aa01")
    second = Leases("other-1", lease_s=30, timeout_s=30, holder="matrix other-1")
    driver = f"pid {os.getpid()} on {socket.gethostname()}"
    assert first.acquire("box")
    assert not second.acquire("box")
    assert second.refused["box"] == f"leased to matrix bench-77aa01, {driver} (another driver)"
    first.held["box"] = 0.0  # its next run asks the actor again: the waiter goes first
    assert not first.acquire("box")
    assert first.refused["box"] == f"leased to matrix other-1, {driver} (another driver)"
    assert second.acquire("box") and "box" not in second.refused
    second.release_all()
    assert first.acquire("box")  # it waited: its turn
    first.release_all()
    # A caller that does not say who it is (no `holder`) still takes turns; its refusal
    # names nobody.
    assert ray.get(first.lock.acquire.remote("box", "anonymous", None, 30), timeout=30)
    assert not first.acquire("box")
    assert first.refused["box"] == "leased to another driver"
    assert ray.get(first.lock.release.remote("box", "anonymous"), timeout=30)
    assert first.acquire("box")
    first.release_all()
