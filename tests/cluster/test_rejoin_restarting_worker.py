"""`fleet join` again as the same host after its node was lost (a raylet killed, a host back
from a crash; the supervisor's rejoin too): the detached worker is still restarting, and its
first pings are `ActorUnavailableError`. That is a worker coming back, not one that died
starting: the join waits for it (bounded by `WORKER_READY_S`) instead of exiting 2 with
"died while starting" while `fleet status` shows the worker healthy seconds later.

Ray is replaced by stand-ins for the calls made, as in tests/cluster/test_membership.py."""

from __future__ import annotations

import pytest
from ray.exceptions import ActorUnavailableError

from specfleet.cluster import membership
from specfleet.errors import UserError

UNAVAILABLE = ActorUnavailableError(
    "The actor is temporarily unavailable: RpcError: failed to connect to all addresses",
    actor_id=None)


@pytest.fixture
def pings(monkeypatch):
    """Patch Ray out of `_start_own_worker`; each ping raises the next of `answers`
    (None: it answers)."""
    answers: list[BaseException | None] = []
    waits: list[float] = []

    def wait(handle, timeout_s):
        waits.append(timeout_s)
        answer = answers.pop(0) if answers else UNAVAILABLE
        if answer is not None:
            raise answer

    monkeypatch.setattr(membership.ray, "init", lambda **_: None)
    monkeypatch.setattr(membership.ray, "shutdown", lambda: None)
    monkeypatch.setattr(membership, "start_worker", lambda host, kwargs: object())
    monkeypatch.setattr(membership, "wait_ready", wait)
    monkeypatch.setattr(membership, "UNAVAILABLE_RETRY_S", 0.01)
    return answers, waits


def _start(command: str = "fleet join") -> None:
    membership._start_own_worker("10.0.0.1:6379", "h1", None, command, "/tmp/r-h1")


def test_a_restarting_worker_is_waited_for_not_called_dead(pings):
    answers, waits = pings
    answers.extend([UNAVAILABLE, UNAVAILABLE, None])
    _start()
    assert len(waits) == 3 and waits[0] == membership.WORKER_READY_S
    assert all(later < membership.WORKER_READY_S for later in waits[1:])


def test_a_worker_unavailable_past_the_bound_is_the_did_not_answer_line(pings, monkeypatch):
    monkeypatch.setattr(membership, "WORKER_READY_S", 0.05)
    with pytest.raises(UserError) as err:
        _start()
    assert str(err.value).startswith("fleet join: the worker of host h1 did not answer within")
    assert "died" not in str(err.value)
