"""This machine's node record (`fleet-node.json`) unreadable, or nowhere to write it.

An empty, cut-short or foreign record read as "not joined": `fleet leave` said there was
nothing to leave, `fleet status` used the embedded fleet, the supervisor stopped watching a
node that may still run. A `SPECFLEET_HOME` where no record can be written let `fleet up`
start the head, then end in a traceback with the node running and no record of it."""

from __future__ import annotations

import dataclasses
import socket

import pytest

from specfleet.cluster import membership, noderecord, supervisor
from specfleet.cluster.membership import NodeOptions
from specfleet.cluster.reach import choose_fleet
from specfleet.errors import UserError


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECFLEET_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SPECFLEET_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "auth_token"))  # never the real one
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # `up` sets these: restored after
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


GOOD = '{"address": "127.0.0.1:6379", "host": "h1", "head": true, "temp_dir": "/tmp/r"}'


@pytest.mark.parametrize(("text", "why"), [
    ("", "empty"),
    ('{"address": "127.0.0.1:6379", "ho', "not JSON: Unterminated string"),
    ("[1]", "not a node record: not a JSON object"),
    ('{"address": "127.0.0.1:6379", "host": "h1", "head": true}',
     "not a node record, missing or wrong: temp_dir"),
    (GOOD[:-1] + ', "pids": 3}', "not a node record, missing or wrong: pids"),
    (GOOD[:-1] + ', "colour": 1}', "not a node record, unknown fields: colour"),
])
def test_an_unreadable_record_is_one_line_naming_it_never_not_joined(home, text, why) -> None:
    path = home / noderecord.RECORD_NAME
    path.write_text(text)
    for read in (noderecord.load, choose_fleet, membership.fleet_leave):
        with pytest.raises(UserError) as err:
            read()
        message = str(err.value)
        assert message.startswith(f"this machine's fleet node record {path} is unreadable "
                                  f"({why}"), message
        assert "delete the file" in message and "\n" not in message
    assert path.read_text() == text  # left for the user to look at


def test_a_record_that_is_a_fifo_is_refused_not_waited_on(home) -> None:
    # `read_text` of a FIFO waits for a writer: every command choosing a fleet hung.
    import os

    path = home / noderecord.RECORD_NAME
    os.mkfifo(path)
    with pytest.raises(UserError, match=r"is unreadable \(not a regular file\)"):
        noderecord.load()


def test_a_good_record_still_reads_and_no_record_is_not_joined(home) -> None:
    assert noderecord.load() is None and choose_fleet().embedded
    (home / noderecord.RECORD_NAME).write_text(GOOD)
    assert noderecord.load() == noderecord.NodeRecord("127.0.0.1:6379", "h1", True, "/tmp/r")
    # Every field of the record is checked when it is read.
    assert set(noderecord._FIELD_TYPES) == {f.name for f in dataclasses.fields(
        noderecord.NodeRecord)}


def test_the_supervisor_keeps_watching_through_an_unreadable_record(home) -> None:
    (home / noderecord.RECORD_NAME).write_text("")
    said: list[str] = []
    supervisor.supervise(said.append, max_checks=3, check_every_s=0.01)
    assert len(said) == 1 and "is unreadable (empty)" in said[0]  # said once, not "left"


@pytest.mark.parametrize("command", ["up", "join"])
def test_a_home_where_no_record_can_be_written_is_refused_before_ray_starts(
        command, home, monkeypatch) -> None:
    # A folder no one can make, root included: /proc takes no new entries.
    monkeypatch.setenv("SPECFLEET_HOME", "/proc/specfleet-test-home")
    monkeypatch.setattr(membership, "_ray_start", lambda *a: pytest.fail("ray start ran"))
    monkeypatch.setattr(membership, "read_head_versions", lambda head: pytest.fail("asked"))
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(UserError) as err:
        if command == "up":
            membership.fleet_up("h1", port=port, options=NodeOptions(), supervise=False)
        else:
            membership.fleet_join(f"127.0.0.1:{port}", "h1", supervise=False)
    assert str(err.value).startswith("$SPECFLEET_HOME /proc/specfleet-test-home: cannot "
                                     "create /proc/specfleet-test-home"), str(err.value)


def test_a_home_that_is_a_file_holds_no_record(tmp_path, monkeypatch) -> None:
    # "record ... is unreadable (Not a directory) ... delete the file": there was no file.
    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("HOME", str(tmp_path / "afile"))
    monkeypatch.delenv("SPECFLEET_HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert noderecord.load() is None
