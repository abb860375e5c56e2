"""Ctrl-C (or SIGTERM) while `fleet up` / `fleet join` runs `ray start`: what it started so far
is stopped before the command ends. A `fleet up` interrupted 9 s in left a head (GCS, raylet,
monitor, client server) running with no node record: it held the port, a new `fleet up` was
refused there, and `fleet leave` said there was nothing to leave.

`ray start` is replaced by a stand-in that starts one process naming the node's temp dir (as
every process of a Ray node does), then is interrupted."""

from __future__ import annotations

import subprocess
import sys

import pytest

from specfleet.cluster import membership, noderecord
from specfleet.cluster.membership import NodeOptions


@pytest.mark.parametrize("command", ["up", "join"])
def test_an_interrupted_ray_start_leaves_no_node_running(command, home, monkeypatch):
    temp_dir = str(home / "ray-h1")
    started: list[subprocess.Popen] = []

    def ray_start(cmd, record=None):
        started.append(subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)", temp_dir]))
        raise KeyboardInterrupt

    monkeypatch.setattr(membership, "_ray_start", ray_start)
    monkeypatch.setattr(membership, "read_head_versions", lambda head: membership.local_versions())
    options = NodeOptions(temp_dir=temp_dir)
    try:
        with pytest.raises(KeyboardInterrupt):
            if command == "up":
                membership.fleet_up("h1", port=26399, options=options, supervise=False)
            else:
                membership.fleet_join("127.0.0.1:26399", "h1", options=options, supervise=False)
        assert started[0].wait(timeout=15) is not None
        assert noderecord.load() is None
    finally:
        for proc in started:  # never left running, whatever the outcome
            if proc.poll() is None:
                proc.kill()
                proc.wait()
