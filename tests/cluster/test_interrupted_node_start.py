"""Ctrl-C (or SIGTERM) while `fleet up` / `fleet join` runs, or a `ray start` that fails: what
it started so far is stopped before the command ends, and no record or supervisor is left. A `fleet up` interrupted 9 s in
(`ray start` running) left a head (GCS, raylet, monitor, client server) running with no node
record: it held the port, a new `fleet up` was refused there, and `fleet leave` said there was
nothing to leave. One interrupted while its worker started (up to 300 s) said `interrupted`,
then started a supervisor and left the node running. A `ray start --head` that timed out on a
loaded machine ("The current node timed out during startup") left its GCS, monitor and
dashboard running, with no record.

`ray start` is replaced by a stand-in that starts one process naming the node's temp dir (as
every process of a Ray node does); the interrupt comes in it, or in the worker's start; or
it fails as `_ray_start` does, in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from specfleet.cluster import membership, noderecord
from specfleet.cluster.membership import NodeOptions
from specfleet.errors import UserError


def interrupt(*args) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("during", ["ray start", "the worker's start", "a failed ray start"])
@pytest.mark.parametrize("command", ["up", "join"])
def test_an_interrupted_or_failed_start_leaves_no_node_running(command, during, home, monkeypatch):
    temp_dir = str(home / "ray-h1")
    started: list[subprocess.Popen] = []

    def ray_start(cmd, ports, record=None):
        started.append(subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)", temp_dir]))
        if during == "ray start":
            raise KeyboardInterrupt
        if during == "a failed ray start":
            raise UserError("`ray start --head` failed: Exception: The current node timed out")

    monkeypatch.setattr(membership, "_ray_start", ray_start)
    monkeypatch.setattr(membership, "_start_own_worker", interrupt)
    monkeypatch.setattr(membership, "_spawn_supervisor", lambda: pytest.fail("supervised"))
    monkeypatch.setattr(membership, "read_head_versions", lambda head: membership.local_versions())
    options = NodeOptions(temp_dir=temp_dir)
    try:
        with pytest.raises(UserError if "failed" in during else KeyboardInterrupt):
            if command == "up":
                membership.fleet_up("h1", port=26399, options=options)
            else:
                membership.fleet_join("127.0.0.1:26399", "h1", options=options)
        assert started[0].wait(timeout=15) is not None
        assert noderecord.load() is None
    finally:
        for proc in started:  # never left running, whatever the outcome
            if proc.poll() is None:
                proc.kill()
                proc.wait()
