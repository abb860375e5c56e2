"""A second fleet node on one machine (another user, another SPECFLEET_HOME, another --name).

- Ray's fixed ports: a second `fleet up` started its head with no dashboard (8265 taken; Ray
  said nothing) and a Ray Client server sharing 10001 with the first (gRPC's SO_REUSEPORT:
  each took some of the other's connections); its dashboard agent found 52365 taken, and its
  metrics exporters 44217 and 44227 (a traceback in its logs). Each now gets a free port, in
  the `ray start` line or its environment, and the node record.
- The same name from another SPECFLEET_HOME shared the first node's Ray temp dir, and `leave`
  on either, finding a node by its temp dir, stopped both: refused before Ray starts.
- A temp dir whose name begins another's (`.../ray-h1` and `.../ray-h10`): `leave` on h1 took
  h10's processes for its own.

`ray start` is replaced by a stand-in; the processes of a "node" are sleeping Pythons naming
its temp dir on their command line, as every process of a Ray node does."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys

import pytest

from specfleet.cluster import membership, noderecord
from specfleet.cluster.membership import NodeOptions
from specfleet.cluster.raystart import NODE_PARTS, start_env
from specfleet.errors import UserError


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def sleeping(*args: str):
    """A process whose command line holds `args`, stopped after the block."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *args])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


@contextlib.contextmanager
def held(port: int):
    """Something listening on `port` (on one address, as Ray's parts bind): None when another
    program here holds it already, which takes it all the same."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            pass
        yield


def test_a_second_head_gets_free_ports_for_its_dashboard_client_server_agent_and_metrics(
        home, monkeypatch) -> None:
    started: list[tuple[list[str], dict[str, int]]] = []
    monkeypatch.setattr(membership, "_ray_start",
                        lambda cmd, ports, record=None: started.append((cmd, ports)))
    monkeypatch.setattr(membership, "_start_own_worker", lambda *a: None)
    with contextlib.ExitStack() as stack:
        for part in NODE_PARTS:  # what the first head on this machine holds
            stack.enter_context(held(part.default))
        done = membership.fleet_up("h2", port=free_port(), supervise=False, options=NodeOptions(
            node_ip="127.0.0.1", temp_dir=str(home / "ray-h2")))
    cmd, ports = started[0]
    moved = dict(arg.split("=", 1) for arg in cmd if "=" in arg) | start_env(ports=ports)
    for part in NODE_PARTS:  # a flag of `ray start`, or a variable of its environment
        port = done.ports[part.name]
        assert port != part.default and moved[part.flag or part.variable] == str(port), part
    assert noderecord.load().ports == done.ports  # recorded, as `fleet up` printed it
    assert len(set(done.ports.values())) == len(NODE_PARTS)


def test_a_joining_node_moves_only_its_agent(home, monkeypatch) -> None:
    from specfleet.cluster.raystart import choose_ports, join_command

    with held(52365):
        ports = choose_ports(head=False)
    assert list(ports) == ["dashboard_agent"] and ports["dashboard_agent"] != 52365
    cmd = join_command("10.0.0.1:6379", "h3", "linux-cpu", ports=ports)
    assert f"--dashboard-agent-listen-port={ports['dashboard_agent']}" in cmd


@pytest.mark.parametrize("command", ["up", "join"])
def test_a_temp_dir_another_nodes_processes_name_is_refused_before_ray_starts(
        command, home, monkeypatch) -> None:
    temp_dir = str(home / "ray-h1")
    monkeypatch.setattr(membership, "_ray_start", lambda *a: pytest.fail("ray start ran"))
    monkeypatch.setattr(membership, "read_head_versions", lambda head: membership.local_versions())
    options = NodeOptions(temp_dir=temp_dir)
    with sleeping(f"--temp-dir={temp_dir}") as other, pytest.raises(UserError) as err:
        if command == "up":
            membership.fleet_up("h1", port=free_port(), options=options, supervise=False)
        else:
            membership.fleet_join("127.0.0.1:6379", "h1", options=options, supervise=False)
    assert str(err.value).startswith(f"the Ray temp dir {temp_dir} is in use by a Ray node "
                                     "this machine's fleet record"), str(err.value)
    assert f"(pid {other.pid}: another SPECFLEET_HOME's node of the same name?)" in str(err.value)
    assert noderecord.load() is None


def test_a_node_is_found_by_its_own_temp_dir_not_one_whose_name_it_begins(home) -> None:
    short, longer = str(home / "ray-h1"), str(home / "ray-h10")
    with (sleeping(f"--temp-dir={longer}", f"--log_dir={longer}/session_1/logs") as h10,
          sleeping(f"--temp-dir={short}") as h1, sleeping(f"--log_dir={short}/s/logs") as h1b):
        found = {proc.pid for proc in noderecord.node_processes(short)}
        assert h10.pid not in found and {h1.pid, h1b.pid} <= found
        assert h10.pid in {proc.pid for proc in noderecord.node_processes(longer)}
        record = noderecord.NodeRecord("127.0.0.1:1", "h1", False, short)
        assert h10.pid not in {proc.pid for proc in noderecord.own_processes(record)}
