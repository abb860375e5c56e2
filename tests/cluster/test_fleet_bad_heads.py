"""A fleet command whose head address is no Ray head: a web server (or a head's dashboard
port), or a hand-edited record's malformed address. Each is one line before anything stops or
starts; none waits on Ray's client. `leave` held signals inside `ray.init` for ever (after it
had stopped the supervisor), `join` said a loopback head took no other node, `serve` warned of
nothing."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.cluster import noderecord
from specfleet.store import open_store

SPECFLEET = str(Path(sys.executable).parent / "specfleet")
NO_HEAD = ("what answers there is not a Ray head (it answers no HTTP/2 greeting, as a Ray "
           "head's GCS (gRPC) does); expected the HOST:PORT `specfleet fleet up` printed")
NO_HOME = "/proc/specfleet-test-home"  # a folder no one can make, root included


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # its request log went to the CLI's stderr
        pass


@pytest.fixture
def web() -> Iterator[str]:
    """HOST:PORT of a web server on loopback: something listens, but no Ray head."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def node(home: Path) -> Iterator[tuple[psutil.Popen, psutil.Popen]]:
    """A recorded node of this machine without Ray: a process naming its temp dir (what
    `leave` stops) and a supervisor (what it stops first)."""
    temp_dir = home / "rt"
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    procs = (psutil.Popen([*sleep, str(temp_dir)]), psutil.Popen([*sleep, "--supervise"]))
    noderecord.save(noderecord.NodeRecord("127.0.0.1:1", "hb", True, str(temp_dir),
                                          supervisor_pid=procs[1].pid))
    try:
        yield procs
    finally:
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):  # `leave` stopped it
                proc.kill()
            proc.wait()


def _record(**fields: object) -> None:
    path = noderecord.record_path()
    path.write_text(json.dumps(json.loads(path.read_text()) | fields))


def _leave(*args: str) -> subprocess.CompletedProcess:
    # A subprocess: a leave that waits on Ray's client ignores SIGTERM, and is killed here.
    return subprocess.run([SPECFLEET, "fleet", "leave", *args], capture_output=True, text=True,
                          timeout=60)


def _running(proc: psutil.Popen) -> bool:
    return proc.poll() is None


def test_leave_through_an_address_that_is_no_head_stops_nothing(node, web) -> None:
    done = _leave("--address", web)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"error: {web} (from --address): {NO_HEAD}\n"
    assert all(_running(proc) for proc in node)  # its node and supervisor both
    assert noderecord.load() is not None


def test_leave_of_a_joined_head_whose_port_a_web_server_took_leaves_at_once(node, web) -> None:
    # The recorded head is gone: its node is left all the same, as where nothing listens.
    _record(address=web)
    done = _leave()
    assert (done.returncode, done.stdout, done.stderr) == (0, "host hb left the fleet\n", "")
    assert not any(_running(proc) for proc in node)
    assert noderecord.load() is None


def test_leave_of_a_record_with_a_malformed_address_is_the_line_status_says(node) -> None:
    _record(address="junk")
    line = "error: the fleet this machine joined 'junk': expected HOST:PORT, e.g. 192.168.1.10:6379\n"
    status = CliRunner().invoke(app, ["fleet", "status"])
    assert (status.exit_code, status.stderr) == (2, line)
    done = _leave()
    assert (done.returncode, done.stdout, done.stderr) == (2, "", line)
    assert all(_running(proc) for proc in node)
    assert noderecord.load() is not None


def test_join_of_a_loopback_web_server_says_it_is_no_head(home, web, monkeypatch) -> None:
    # It said "that head listens on loopback only ... and takes no other node".
    monkeypatch.setattr("specfleet.cluster.membership.read_head_versions",
                        lambda head: pytest.fail("the head was asked"))
    result = CliRunner().invoke(app, ["fleet", "join", web, "--name", "hb"])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"error: {web} (from HEAD): {NO_HEAD}\n"


@pytest.mark.parametrize("command", [["up", "--port", "1"], ["join", "127.0.0.1:1"]])
def test_an_unwritable_home_is_one_line_before_the_node_is_marked_starting(
        command, home, monkeypatch) -> None:
    # `starting()` made its mark's folder first: a FileNotFoundError traceback.
    monkeypatch.setenv("SPECFLEET_HOME", NO_HOME)
    for started in ("fleet_up", "fleet_join"):
        monkeypatch.setattr(f"specfleet.cluster.membership.{started}",
                            lambda *a, **k: pytest.fail("the node was started"))
    result = CliRunner().invoke(app, ["fleet", *command, "--name", "hb"])
    assert (result.exit_code, result.stdout) == (2, ""), result.output
    assert result.stderr.startswith(f"error: $SPECFLEET_HOME {NO_HOME}: cannot create {NO_HOME}")
    assert result.stderr.endswith("; expected a folder you can write\n")
    assert result.stderr.count("\n") == 1


def test_serve_warns_of_an_address_that_is_no_head(home, web, tmp_path, monkeypatch) -> None:
    served: list = []
    monkeypatch.setattr("uvicorn.run", lambda app, **kwargs: served.append(app))
    store = tmp_path / "store.db"
    open_store(str(store)).close()
    result = CliRunner().invoke(app, ["serve", "--db", str(store), "--address", web])
    assert result.exit_code == 0 and served, result.output
    assert result.stderr.splitlines()[0] == (
        f"warning: fleet {web}: what answers there is not a Ray head (it answers no HTTP/2 "
        "greeting, as a Ray head's GCS (gRPC) does); the fleet page will say so")
