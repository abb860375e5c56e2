"""`fleet up` again after the head crashed (or after `leave`): the address `ray start --head`
left in the node's temp dir (`ray_current_cluster`) goes before Ray starts. With it there and
any process here still pointing at that address (a survivor of the crashed head, another
host's node), `ray start --head` refused with "already running" and `fleet up` said "a Ray
head already runs at 192.0.2.2:26379 on this machine" where nothing listened.

Ray's start is replaced by a stand-in that records what the temp dir holds when it runs."""

from __future__ import annotations

import socket

import pytest

from specfleet.cluster import membership
from specfleet.cluster.membership import NodeOptions
from specfleet.cluster.reach import RAY_CLUSTER_FILE


class RayStarted(Exception):
    """The stand-in `ray start` ran: the test stops there."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_up_removes_the_address_a_crashed_head_left_before_ray_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECFLEET_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SPECFLEET_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "auth_token"))  # never the real one
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # `fleet up` sets these: restored after
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    temp_dir = tmp_path / "ray-h1"
    temp_dir.mkdir()
    port = _free_port()
    (temp_dir / RAY_CLUSTER_FILE).write_text(f"127.0.0.1:{port}")
    seen: list[bool] = []

    def ray_start(cmd, ports, record=None):
        seen.append((temp_dir / RAY_CLUSTER_FILE).exists())
        raise RayStarted

    monkeypatch.setattr(membership, "_ray_start", ray_start)
    with pytest.raises(RayStarted):
        membership.fleet_up("h1", port=port, options=NodeOptions(temp_dir=str(temp_dir)),
                            supervise=False)
    assert seen == [False]
