"""The supervisor's decisions without Ray: rejoin only when the node is gone AND the head
answers; stop when the host left. (The namespace fleet test proves the real rejoin.)"""

from __future__ import annotations

import socket

import pytest

from specfleet.cli.options import parse_wait
from specfleet.cluster import noderecord, supervisor
from specfleet.errors import UserError


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECFLEET_HOME", str(tmp_path))
    return tmp_path


def record(address: str, tmp_path) -> noderecord.NodeRecord:
    return noderecord.NodeRecord(address, "h2", False, str(tmp_path / "no-such-ray-dir"))


def test_rejoins_only_when_the_node_is_gone_and_the_head_answers(home, monkeypatch) -> None:
    rejoined: list[str] = []
    monkeypatch.setattr(supervisor, "rejoin", lambda rec: rejoined.append(rec.host))
    noderecord.save(record("127.0.0.1:1", home))  # nothing listens on port 1: head away
    supervisor.supervise(lambda line: None, max_checks=2, check_every_s=0.01)
    assert rejoined == []
    with socket.socket() as head:  # a head that answers again
        head.bind(("127.0.0.1", 0))
        head.listen()
        noderecord.save(record(f"127.0.0.1:{head.getsockname()[1]}", home))
        lines: list[str] = []
        supervisor.supervise(lines.append, max_checks=1, check_every_s=0.01)
    assert rejoined == ["h2"]
    assert lines[0].startswith("supervisor: node of h2 is gone and 127.0.0.1:")


def test_an_upgrade_under_it_restarts_it_from_the_new_code(home, monkeypatch) -> None:
    # After `pip install -U`, its lazy imports failed every 2 s ("cannot import name ...")
    # until someone restarted it by hand, and the lost node never came back.
    def rejoin(rec):
        raise ImportError("cannot import name 'NodeOptions' from 'specfleet.cluster.membership'")

    monkeypatch.setattr(supervisor, "rejoin", rejoin)
    restarts: list[bool] = []
    lines: list[str] = []
    with socket.socket() as head:
        head.bind(("127.0.0.1", 0))
        head.listen()
        noderecord.save(record(f"127.0.0.1:{head.getsockname()[1]}", home))
        supervisor.supervise(lines.append, max_checks=1, check_every_s=0.01,
                             restart=lambda: restarts.append(True))
    assert restarts == [True]
    assert lines[1].startswith("supervisor: specfleet changed on disk since this supervisor "
                               "started (cannot import name 'NodeOptions'")
    execs: list[list[str]] = []
    monkeypatch.setattr(supervisor.os, "execv", lambda exe, argv: execs.append(argv))
    supervisor.restart_from_disk()  # the same pid, the module's own entry point
    assert execs == [[supervisor.sys.executable, "-m", "specfleet.cluster.supervisor"]]


def test_stops_when_the_host_left(home) -> None:
    lines: list[str] = []
    supervisor.supervise(lines.append, max_checks=5, check_every_s=0.01)
    assert lines == ["supervisor: this host left the fleet; stopping"]


def test_wait_durations() -> None:
    assert [parse_wait(t) for t in ("90s", "10m", "1h", "2", "1.5m")] == [90, 600, 3600, 2, 90]
    with pytest.raises(UserError, match=r"^--wait '10x': expected a duration"):
        parse_wait("10x")
