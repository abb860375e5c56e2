"""`fleet up` / `fleet join` when this host's worker does not start: one line, never Ray's
traceback (a loaded box's first start timed out at 120 s and printed one, 2026-12-05).

Ray is replaced here by stand-ins for the three calls the wait makes: the point is what the
user reads; tests/cluster/test_fleet.py starts real workers."""

from __future__ import annotations

import pytest
from ray.exceptions import GetTimeoutError, RayActorError

from specfleet.cluster import membership
from specfleet.errors import UserError


@pytest.fixture
def worker_start(monkeypatch):
    """Patch Ray out of `_start_own_worker`; set `outcome` to what the wait raises."""
    waits: list[float] = []
    outcome: dict[str, BaseException] = {}

    def wait(handle, timeout_s):
        waits.append(timeout_s)
        raise outcome["error"]

    monkeypatch.setattr(membership.ray, "init", lambda **_: None)
    monkeypatch.setattr(membership.ray, "shutdown", lambda: None)
    monkeypatch.setattr(membership, "start_worker", lambda host, kwargs: object())
    monkeypatch.setattr(membership, "wait_ready", wait)
    return outcome, waits


def _start(command: str = "fleet up") -> str:
    with pytest.raises(UserError) as err:
        membership._start_own_worker("10.0.0.1:6379", "h1", None, command, "/tmp/r-h1")
    return str(err.value)


def test_a_worker_that_does_not_answer_in_time_is_one_line_naming_host_and_log(worker_start):
    outcome, waits = worker_start
    outcome["error"] = GetTimeoutError("Get timed out: some object(s) not ready.")
    message = _start()
    assert waits == [membership.WORKER_READY_S] and membership.WORKER_READY_S >= 300
    assert message.startswith("fleet up: the worker of host h1 did not answer within 300 s")
    assert "/tmp/r-h1/session_latest/logs" in message and "fleet status" in message
    assert "\n" not in message


def test_a_worker_that_dies_starting_says_why_in_one_line(worker_start):
    outcome, _ = worker_start
    outcome["error"] = RayActorError(
        error_msg="The actor died because of an error raised in its creation task\n"
                  "ImportError: no module named mlx")
    message = _start("fleet join")
    assert message.startswith("fleet join: the worker of host h1 died while starting "
                              "(ImportError: no module named mlx)")
    assert "\n" not in message
