"""`fleet up --node-ip 127.0.0.1` (real Ray, one head): nothing it starts listens beyond
loopback. Ray's `ray start` replaced a loopback node address by this machine's network
address, so the head's GCS, raylet, workers and agents listened on every interface and its
metrics exporters (autoscaler, dashboard, the node's) on 0.0.0.0, though the record and the
printed address said 127.0.0.1."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from specfleet.cluster import noderecord
from specfleet.cluster.raybind import MULTINODE_SWITCH

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listeners(procs: list[psutil.Process]) -> list[tuple[str, int, str]]:
    """(address, port, process name) of every TCP socket the processes listen on."""
    found = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append((conn.laddr.ip, conn.laddr.port, proc.name()))
    return found


def loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)  # [::ffff:127.0.0.1], a gRPC server's
    return (mapped or address).is_loopback


@pytest.mark.slow
def test_a_loopback_head_listens_on_loopback_only(tmp_path: Path) -> None:
    home = tmp_path / "home"
    # A user's shell: not this worker's Ray settings (an embedded fleet earlier in this process
    # turned Ray's multi-node switch off, which a join would inherit).
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "SPECFLEET_ADDRESS", "RAY_AUTH_TOKEN", MULTINODE_SWITCH)} | {
        "RAY_AUTH_TOKEN_PATH": str(tmp_path / "auth_token"), "SPECFLEET_HOME": str(home),
        "SPECFLEET_RUNTIME_DIR": str(tmp_path / "run"), "SPECFLEET_SELFTEST": "0"}
    temp_dir = tempfile.mkdtemp(prefix="sflo-")  # Ray's socket paths stay under 108 bytes
    try:
        port = free_port()
        up = subprocess.run(
            [str(BIN / "specfleet"), "fleet", "up", "--name", "lo", "--node-ip", "127.0.0.1",
             "--port", str(port), "--num-cpus", "1", "--engines", "torch",
             "--temp-dir", temp_dir], env=env, capture_output=True, text=True, timeout=300)
        assert up.returncode == 0, up.stderr[-2000:]
        assert not (home / noderecord.STARTING_NAME).exists()  # `up` is done: status reads on
        record = noderecord.NodeRecord(**json.loads((home / noderecord.RECORD_NAME).read_text()))
        found = listeners(noderecord.own_processes(record))
        names = {name for _, _, name in found}
        assert {"gcs_server", "raylet"} <= names, found  # the head's listeners were seen
        wide = [entry for entry in found if not loopback(entry[0])]
        assert not wide, f"listening beyond loopback: {wide}"
        # `ray start --address 127.0.0.1:PORT` dials this machine's network address, where
        # no loopback head answers, and retried there for minutes.
        join = subprocess.run(
            [str(BIN / "specfleet"), "fleet", "join", f"127.0.0.1:{port}", "--name", "lo2"],
            env=env | {"SPECFLEET_HOME": str(tmp_path / "home2")}, capture_output=True,
            text=True, timeout=120)
        assert join.returncode == 2 and join.stderr.count("\n") == 1, join.stderr[-2000:]
        assert join.stderr.startswith(f"error: HEAD 127.0.0.1:{port}: that head listens on "
                                      "loopback only"), join.stderr
        left = subprocess.run([str(BIN / "specfleet"), "fleet", "leave"], env=env,
                              capture_output=True, text=True, timeout=120)
        assert left.returncode == 0, left.stderr[-2000:]
    finally:  # stop only what this test started: its record's processes, found by temp dir
        record_file = home / noderecord.RECORD_NAME
        if record_file.exists():
            left_over = noderecord.NodeRecord(**json.loads(record_file.read_text()))
            noderecord.stop_supervisor(left_over)
            noderecord.stop_processes(noderecord.own_processes(left_over))
        noderecord.stop_processes(noderecord.node_processes(temp_dir))
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_a_loopback_node_address_other_than_ray_s_own_is_refused(tmp_path: Path) -> None:
    # Ray moves a node on ::1 to 127.0.0.1, where the record and the printed address do not say.
    env = {k: v for k, v in os.environ.items()} | {"SPECFLEET_HOME": str(tmp_path / "home")}
    up = subprocess.run([str(BIN / "specfleet"), "fleet", "up", "--node-ip", "::1"], env=env,
                        capture_output=True, text=True, timeout=60)
    assert up.returncode == 2
    assert up.stderr == ("error: --node-ip ::1: Ray keeps a node on loopback at 127.0.0.1 only; "
                         "expected 127.0.0.1 for a fleet of this machine alone, or this host's "
                         "network address, e.g. 192.168.1.11\n")
