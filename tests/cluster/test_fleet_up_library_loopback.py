"""`membership.fleet_up` / `fleet_join` called from Python (not through the CLI) with loopback
addresses: only the CLI turned Ray's multi-node switch off, so a Python caller's head was moved
to this machine's network address and listened on every interface, and only the CLI refused a
join to a head on loopback only (Ray's `ray start` retried it for minutes). The listeners themselves
are proven through the CLI in tests/cluster/test_fleet_listeners.py (real Ray); here `ray
start` is stood in for: the command and environment it would get are read, nothing starts."""

from __future__ import annotations

import re
import socket

import pytest
from ray._private import ray_constants

from specfleet.cluster import membership
from specfleet.cluster.raybind import MULTINODE_SWITCH
from specfleet.cluster.raystart import start_env
from specfleet.errors import UserError


class _Stood(UserError):
    """Raised where `ray start` would run."""


@pytest.fixture
def ray_start(home, monkeypatch) -> list[tuple[list[str], dict[str, str]]]:
    """Each `ray start` fleet_up would run: its command and environment."""
    started: list[tuple[list[str], dict[str, str]]] = []

    def stand_in(cmd, ports, record=None):
        started.append((cmd, start_env(ports=ports)))
        raise _Stood("ray start stood in for")

    monkeypatch.setattr(membership, "_ray_start", stand_in)
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", True)  # Linux's default
    return started


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_loopback_head_started_from_python_starts_ray_with_the_switch_off(ray_start) -> None:
    options = membership.NodeOptions(node_ip="127.0.0.1", engines=["toy"])
    with pytest.raises(_Stood):
        membership.fleet_up("h1", port=free_port(), options=options, supervise=False)
    ((cmd, env),) = ray_start
    assert "--node-ip-address=127.0.0.1" in cmd, cmd
    assert env[MULTINODE_SWITCH] == "0"
    assert ray_constants.ENABLE_RAY_CLUSTER is False  # this process's own Ray dials it as given


def test_a_head_on_ipv6_loopback_is_refused_before_ray_starts(ray_start) -> None:
    options = membership.NodeOptions(node_ip="::1", engines=["toy"])
    with pytest.raises(UserError, match=r"^--node-ip ::1: Ray keeps a node on loopback at "
                                        r"127\.0\.0\.1 only; expected 127\.0\.0\.1"):
        membership.fleet_up("h1", port=free_port(), options=options, supervise=False)
    assert ray_start == []


def test_a_head_on_a_network_address_keeps_the_switch_as_it_was(ray_start) -> None:
    options = membership.NodeOptions(node_ip="10.0.0.7", engines=["toy"])
    with pytest.raises(_Stood):
        membership.fleet_up("h1", port=free_port(), options=options, supervise=False)
    ((cmd, env),) = ray_start
    assert "--node-ip-address=10.0.0.7" in cmd and MULTINODE_SWITCH not in env


@pytest.mark.parametrize("node_ip", ["127.0.0.1", "::1"])
def test_a_joining_node_on_loopback_is_refused_before_the_head_is_asked(ray_start,
                                                                        node_ip) -> None:
    """Ray moved such a node to this machine's network address, where its record did not
    say; the head (port 1, nothing there) is never dialed."""
    options = membership.NodeOptions(node_ip=node_ip, engines=["toy"])
    with pytest.raises(UserError, match=rf"^--node-ip {re.escape(node_ip)}: a joining node on "
                                        "loopback is one the fleet's other hosts cannot reach"):
        membership.fleet_join("127.0.0.1:1", "h2", options=options, supervise=False)
    assert ray_start == []


def test_a_join_to_a_head_on_loopback_only_is_refused_from_python_too(ray_start) -> None:
    """`ray start --address 127.0.0.1:PORT` dials this machine's network address, where such a
    head does not answer, and retried there for minutes (a listener on loopback stands in for
    the head: only whether something answers where is read)."""
    with socket.socket() as head:
        head.bind(("127.0.0.1", 0))
        head.listen()
        address = f"127.0.0.1:{head.getsockname()[1]}"
        with pytest.raises(UserError, match=rf"^HEAD {address}: that head listens on loopback "
                                            "only"):
            membership.fleet_join(address, "h2", supervise=False)
    assert ray_start == []
