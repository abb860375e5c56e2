"""`specfleet serve`'s mistakes through the real Typer app: one line each, exit 2, nothing
listened on. (The server itself is tested in tests/serve/.)"""

from __future__ import annotations

import socket
import sqlite3

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.cli.serve import is_loopback, url_of
from specfleet.store import open_store

runner = CliRunner()


@pytest.fixture
def empty_store(tmp_path) -> str:
    path = tmp_path / "store.db"
    open_store(str(path)).close()
    return str(path)


def _error(*args: str) -> str:
    result = runner.invoke(app, ["serve", *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ")
    return result.stderr


def test_mistakes_are_one_line(tmp_path, empty_store):
    assert "--port 70000: expected 1..65535" in _error("--port", "70000", "--db", empty_store)
    assert "no SQLite file at" in _error("--db", str(tmp_path / "missing.db"))
    assert "no matrix 'nope'" in _error("--db", empty_store, "--matrix", "nope")
    assert "--address 'nowhere'" in _error("--db", empty_store, "--address", "nowhere")
    bare = tmp_path / "bare.db"
    sqlite3.connect(bare).close()
    assert "holds no specfleet store yet" in _error("--db", str(bare))


def test_a_taken_port_is_one_line(empty_store):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        stderr = _error("--db", empty_store, "--port", str(port))
    assert f"--port {port}: cannot listen on 127.0.0.1" in stderr


def test_binding_beyond_loopback_warns_first(tmp_path):
    stderr = _error("--host", "0.0.0.0", "--db", str(tmp_path / "missing.db"))
    first = stderr.splitlines()[0]
    assert first.startswith("warning: --host 0.0.0.0: the web view is reachable from the network")


def test_loopback_and_urls():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")
    assert url_of("::1", 8266, "/matrices/x") == "http://[::1]:8266/matrices/x"
