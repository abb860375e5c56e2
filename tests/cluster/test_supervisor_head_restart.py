"""The supervisor of a head whose raylet died: what is left of the node (its GCS, holding the
head's port) is stopped before the head starts again. It was not: `fleet up` refused the port
the old GCS held, and the supervisor said `rejoin failed: --port 26377: the head's GCS cannot
listen there` every 2 s for good."""

from __future__ import annotations

import subprocess
import sys

from specfleet.cluster import membership, noderecord, supervisor


def test_a_head_restart_stops_what_is_left_of_the_node_first(tmp_path, monkeypatch) -> None:
    temp_dir = str(tmp_path / "ray-h1")
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                             f"--temp-dir={temp_dir}"])  # the GCS that outlived its raylet
    started: list[bool] = []
    monkeypatch.setattr(membership, "fleet_up",
                        lambda *a, **k: started.append(left.poll() is None))
    try:
        record = noderecord.NodeRecord("127.0.0.1:1", "h1", True, temp_dir,
                                       join_args={"temp_dir": temp_dir, "port": 1})
        supervisor.rejoin(record)
        assert started == [False]  # stopped before the head started again
    finally:
        left.kill()
        left.wait(timeout=10)
