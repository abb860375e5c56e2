"""`fleet up` / `fleet join` when this host's worker does not start: one line, never Ray's
traceback (a loaded box's first start timed out at 120 s and printed one, 2026-12-05); and
`fleet up` on a taken port, `fleet join` / `fleet leave` over another node: refused before
they start or stop anything.

Ray is replaced here by stand-ins for the calls made: the point is what the user reads and
what is left running; tests/cluster/test_fleet.py starts real workers."""

from __future__ import annotations

import socket

import pytest
from ray.exceptions import GetTimeoutError, RayActorError

from specfleet.cluster import membership, noderecord, raystart
from specfleet.cluster.noderecord import NodeRecord
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


HEAD1 = NodeRecord(address="127.0.0.1:6379", host="head1", head=True, temp_dir="/tmp/r")
BOX1 = NodeRecord(address="127.0.0.1:6379", host="box1", head=False, temp_dir="/tmp/r")
RUNS_HEAD1 = ("this machine already runs the fleet head head1 (127.0.0.1:6379); `specfleet fleet "
              "status` shows it, `specfleet fleet leave` stops it before `fleet join` as ")


@pytest.mark.parametrize(("recorded", "name", "said"), [
    (HEAD1, "head1", RUNS_HEAD1 + "head1"),
    (HEAD1, "box2", RUNS_HEAD1 + "box2"),
    (BOX1, "box2", "this machine is already host box1 of the fleet at 127.0.0.1:6379; "
     "`specfleet fleet status` shows it, `specfleet fleet leave` first to join as box2"),
])
def test_join_beside_a_running_head_or_other_host_is_refused_before_anything_starts(
        tmp_path, monkeypatch, recorded, name, said) -> None:
    # It started a second node and overwrote the record: the first node (a head: the whole
    # fleet) kept running with nothing left to stop it; `fleet leave` stopped only the new one.
    monkeypatch.setenv("SPECFLEET_HOME", str(tmp_path))
    noderecord.save(recorded)
    monkeypatch.setattr(noderecord, "node_alive", lambda record: True)
    monkeypatch.setattr(membership, "read_head_versions", lambda head: pytest.fail("reached"))
    monkeypatch.setattr(membership, "_ray_start", lambda *a: pytest.fail("ray start ran"))
    with pytest.raises(UserError) as err:
        membership.fleet_join("127.0.0.1:6379", name)
    assert str(err.value) == said
    assert noderecord.load() == recorded
    membership.refuse_running_node(BOX1, joining_as="box1")  # a rejoin as the same host replaces its node
    monkeypatch.setattr(noderecord, "node_alive", lambda record: False)
    membership.refuse_running_node(recorded, joining_as=name)  # a lost node: its record is no longer live


def test_leave_with_another_hosts_name_is_refused_before_anything_stops(tmp_path,
                                                                         monkeypatch) -> None:
    # `fleet leave --name h2` on h1 killed h2's worker for good, stopped h1's node and said
    # "host h2 left the fleet".
    monkeypatch.setenv("SPECFLEET_HOME", str(tmp_path))
    recorded = NodeRecord(address="127.0.0.1:6379", host="h1", head=False, temp_dir="/tmp/r")
    noderecord.save(recorded)
    monkeypatch.setattr(membership, "_stop_own_worker", lambda *a: pytest.fail("stopped"))
    monkeypatch.setattr(noderecord, "stop_processes", lambda *a: pytest.fail("stopped"))
    with pytest.raises(UserError) as err:
        membership.fleet_leave("h2")
    assert str(err.value) == (
        "--name h2: this machine is host h1 of the fleet at 127.0.0.1:6379, and leave stops "
        "only this host's own worker and node; expected --name h1, or no --name")
    assert noderecord.load() == recorded


def test_up_on_a_port_something_listens_on_is_refused_before_ray_starts(tmp_path,
                                                                         monkeypatch) -> None:
    # `ray start --head` ran and failed ~40 s later: "`ray start --head` failed: .Please check
    # .../gcs_server.out for details. Last connection error: None".
    monkeypatch.setenv("SPECFLEET_HOME", str(tmp_path))
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "auth_token"))  # never the real one
    monkeypatch.setattr(membership, "_ray_start", lambda *a: pytest.fail("ray start ran"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UserError) as err:
            membership.fleet_up("h1", port=port)
    assert str(err.value) == (
        f"--port {port}: the head's GCS cannot listen there (Address already in use); expected "
        "a port that no Ray head or other program here listens on")
    assert noderecord.load() is None


@pytest.mark.parametrize("port", [16399, 10002, 19999])
def test_up_on_one_of_rays_worker_ports_is_refused_before_ray_starts(
        port, tmp_path, monkeypatch) -> None:
    # `ray start --head --port=16399` failed with "If you allocate ports, please make sure the
    # same port is not used by multiple components.", naming no flag.
    monkeypatch.setenv("SPECFLEET_HOME", str(tmp_path))
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "auth_token"))  # never the real one
    monkeypatch.setattr(membership, "_ray_start", lambda *a: pytest.fail("ray start ran"))
    with pytest.raises(UserError) as err:
        membership.fleet_up("h1", port=port)
    assert str(err.value) == (f"--port {port} is one of Ray's worker ports (10002-19999), which "
                              "the head gives its worker processes; expected another port, "
                              "e.g. 6379")
    assert noderecord.load() is None
    assert 20000 not in raystart.RAY_WORKER_PORTS  # the user's again


def test_up_on_the_dashboards_port_moves_the_dashboard(home, monkeypatch) -> None:
    # `fleet up --port 8265` was refused as "the dashboard's port, which the head uses itself",
    # though the dashboard (like the client server, the agent and the metrics exporters) now
    # takes another port where its own is taken.
    if raystart.bind_error(raystart.DEFAULT_DASHBOARD_PORT) is not None:
        pytest.skip("something here listens on 8265 already")
    started: list[list[str]] = []
    monkeypatch.setattr(membership, "_ray_start",
                        lambda cmd, ports, record=None: started.append(cmd))
    monkeypatch.setattr(membership, "_start_own_worker", lambda *a: None)
    done = membership.fleet_up("h1", port=8265, supervise=False, options=membership.NodeOptions(
        node_ip="127.0.0.1", temp_dir=str(home / "ray-h1")))
    assert "--port=8265" in started[0] and done.address == "127.0.0.1:8265"
    assert done.ports["dashboard"] != 8265
    assert f"--dashboard-port={done.ports['dashboard']}" in started[0]


@pytest.mark.parametrize("command", ["up", "join"])
def test_a_runtime_folder_the_worker_would_refuse_is_refused_before_ray_starts(
        command, tmp_path, monkeypatch) -> None:
    # `fleet up` started the head, then its worker refused SPECFLEET_RUNTIME_DIR (open to
    # others): the head and its supervisor ran on until `fleet leave`.
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    monkeypatch.setenv("SPECFLEET_HOME", str(tmp_path))
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "auth_token"))  # never the real one
    monkeypatch.setenv("SPECFLEET_RUNTIME_DIR", str(shared))
    monkeypatch.setattr(membership, "_ray_start", lambda *a: pytest.fail("ray start ran"))
    with pytest.raises(UserError) as err:
        if command == "up":
            membership.fleet_up("h1", port=6391)
        else:
            membership.fleet_join("127.0.0.1:6391", "h2")
    assert str(err.value).startswith(f"SPECFLEET_RUNTIME_DIR: {shared} has mode 0755")
    assert noderecord.load() is None
