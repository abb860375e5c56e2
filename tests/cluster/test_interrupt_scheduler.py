"""Ctrl-C and SIGTERM at the scheduler's edges: in its last writes, a second one while the
interrupted matrix is written, and one that `ray.init` must not see when it is ignored.

A real SQLite store; the signal is raised where it lands (a KeyboardInterrupt, as the CLI's
handlers raise it). No Ray fleet: these runs are settled before dispatch, or never sent.
"""

from __future__ import annotations

import os
import signal
import time
from collections import deque
from types import SimpleNamespace

import pytest

from specfleet.cluster import scheduler
from specfleet.cluster.hoststate import HostState, InFlight
from specfleet.cluster.outcome import RunInterrupted
from specfleet.cluster.rayinit import signals_held_while_ray_starts
from specfleet.cluster.scheduler import run_matrix
from specfleet.store import open_store
from tests.store.factory import grid, result


@pytest.fixture
def store(tmp_path):
    with open_store(f"sqlite:///{tmp_path / 's.db'}") as opened:
        yield opened


def matrix_with(store, settled: dict[int, str]) -> tuple[str, list]:
    """A matrix of two runs, settled before any driver claims it: index -> done or failed."""
    runs = [run.model_copy(update={"matrix_id": "m-1"}) for run in grid(repeats=1)]
    store.create_matrix("m", {"name": "m"}, runs, matrix_id="m-1")
    for i, status in settled.items():
        if status == "done":
            store.record_result(result(runs[i]))
        else:
            store.mark_failed(runs[i].run_key, "failed on purpose")
    return "m-1", runs


def stopped(*args, **kwargs):
    raise KeyboardInterrupt


def interrupted_by(call) -> BaseException:
    try:
        call()
    except KeyboardInterrupt as err:  # a bare one would end pytest's session
        return err
    raise AssertionError("not interrupted")


def test_ctrl_c_in_the_last_writes_after_the_last_run_finishes_the_matrix_done(
    store, monkeypatch
) -> None:
    # The load samples were written outside the scheduler's Ctrl-C guard: a Ctrl-C while they
    # waited for another command's SQLite write left the matrix `running` under a lease nobody
    # renews (`resume` refused it as a live driver's), then `interrupted` with every run done.
    matrix_id, _ = matrix_with(store, {0: "done", 1: "done"})
    monkeypatch.setattr(scheduler, "store_load_samples", stopped)
    caught = interrupted_by(lambda: run_matrix(store, matrix_id, {}))
    assert isinstance(caught, RunInterrupted), repr(caught)
    assert str(caught) == ("matrix m-1 interrupted after its last run; every run is stored "
                           "done")
    matrix = store.get_matrix(matrix_id)
    assert (matrix.status, matrix.lease_until) == ("done", None)


def test_ctrl_c_in_the_last_writes_with_runs_left_says_how_to_resume(store, monkeypatch) -> None:
    matrix_id, _ = matrix_with(store, {0: "done", 1: "failed"})
    monkeypatch.setattr(scheduler, "store_load_samples", stopped)
    caught = interrupted_by(lambda: run_matrix(store, matrix_id, {}))
    assert isinstance(caught, RunInterrupted), repr(caught)
    assert "resume with: specfleet matrix resume m-1" in str(caught)
    assert store.get_matrix(matrix_id).status == "interrupted"


def test_a_second_ctrl_c_while_the_interrupted_matrix_is_written_still_says_resume(
    store, monkeypatch
) -> None:
    # The user presses Ctrl-C again while the finish waits for another command's write: the
    # second one escaped bare ("interrupted", no matrix id, no resume line).
    matrix_id, _ = matrix_with(store, {0: "done", 1: "failed"})
    monkeypatch.setattr(scheduler, "store_load_samples", stopped)
    monkeypatch.setattr(store, "finish_matrix", stopped)
    caught = interrupted_by(lambda: run_matrix(store, matrix_id, {}))
    assert isinstance(caught, RunInterrupted), repr(caught)
    assert caught.status is None
    said = str(caught)
    assert "before it could be marked so" in said and "within 60 s" in said, said
    assert said.endswith("resume with: specfleet matrix resume m-1"), said


class Worker:
    """A worker handle whose `cancel.remote()` is recorded."""

    def __init__(self, name: str, cancelled: list[str]) -> None:
        self.cancel = SimpleNamespace(remote=lambda: cancelled.append(name))


def test_every_run_in_flight_is_cancelled_before_a_mark_waits_for_the_store(store) -> None:
    # A second Ctrl-C while the first host's run was marked (waiting for SQLite's write lock)
    # left the other hosts' runs going on their workers.
    matrix_id, runs = matrix_with(store, {})
    cancelled: list[str] = []
    hosts = {}
    for name, run in zip(("alpha", "beta"), runs, strict=True):
        host = HostState(name, Worker(name, cancelled), name, deque())
        host.inflight = InFlight(run, ref=None, sent_at=time.monotonic())
        hosts[name] = host
    marked: list[str] = []

    def mark_waits_then_ctrl_c(run_key: str, reason: str) -> None:
        marked.append(run_key)
        raise KeyboardInterrupt

    ctx = SimpleNamespace(hosts=hosts, store=SimpleNamespace(
        mark_interrupted=mark_waits_then_ctrl_c))
    interrupted_by(lambda: scheduler._abandon(ctx, "driver stopped"))  # type: ignore[arg-type]
    assert cancelled == ["alpha", "beta"] and marked == [runs[0].run_key]


def test_a_signal_ignored_while_ray_starts_stays_ignored() -> None:
    # `specfleet bench ... &` in a script ignores SIGINT (the shell's rule for a background
    # command): one during ray.init was held and raised, and the command stopped.
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    finished = []
    try:
        with signals_held_while_ray_starts():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # a handler would run here
            finished.append("ray.init's end")
    except KeyboardInterrupt:  # a bare one would end pytest's session
        pytest.fail("an ignored SIGINT stopped the start")
    else:
        assert finished == ["ray.init's end"]
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
