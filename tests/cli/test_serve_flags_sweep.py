"""`specfleet serve --host/--port` as the listener binds them: a port whose last connections
linger in TIME_WAIT is free, a host the listener cannot bind is one line naming --host, and
the loopback shorthands the socket layer takes are loopback."""

from __future__ import annotations

import socket

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.cli.serve import check_free
from specfleet.store import open_store

runner = CliRunner()


@pytest.fixture
def served(monkeypatch):
    """`uvicorn.run` replaced: the app `serve` would listen with, instead of listening."""
    apps: list = []
    monkeypatch.setattr("uvicorn.run", lambda app, **kwargs: apps.append((app, kwargs)))
    return apps


@pytest.fixture
def store_path(tmp_path, monkeypatch) -> str:
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)  # this machine holds no fleet token
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "no-ray" / "auth_token"))
    path = tmp_path / "store.db"
    open_store(str(path)).close()
    return str(path)


def _port_in_time_wait() -> int:
    """A port nothing listens on where a listener like uvicorn's (SO_REUSEADDR) closed a
    connection first (as uvicorn does at Ctrl-C), so it lingers in TIME_WAIT."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as peer:
            accepted, _ = listener.accept()
            accepted.close()  # the server closes first: its side goes to TIME_WAIT
            peer.recv(1)
    return port


def test_a_port_whose_connections_linger_in_time_wait_is_free():
    check_free("127.0.0.1", _port_in_time_wait())  # uvicorn listens there: so may we


def refused_host(tmp_path, store_path: str, host: str, served: list) -> list[str]:
    """The lines `serve --host HOST` (shared, with a token file) refuses it with."""
    token_file = tmp_path / "view.token"
    token_file.write_text("5e1f0c3a9b7d4e2f8a6c1b3d5f7e9a0c\n")
    token_file.chmod(0o600)
    result = runner.invoke(app, ["serve", "--db", store_path, "--host", host, "--port", "8266",
                                 "--token-file", str(token_file)])
    assert result.exit_code == 2 and not served, result.output
    return result.stderr.splitlines()


@pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6 on this machine")
@pytest.mark.parametrize("host", ["::ffff:127.0.0.1", "fe80::1"])
def test_a_host_the_listener_cannot_bind_is_one_line_naming_host(tmp_path, store_path, served,
                                                                host):
    assert refused_host(tmp_path, store_path, host, served) == [
        f"error: --host {host}: not an address of this machine (Invalid argument); expected "
        "one of its addresses, e.g. 127.0.0.1 or 0.0.0.0"]


@pytest.mark.parametrize("host", ["127.1", "LOCALHOST"])
def test_loopback_shorthands_are_open_as_loopback(store_path, served, host):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = runner.invoke(app, ["serve", "--db", store_path, "--host", host, "--port",
                                 str(port)])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0].endswith("; open to every account on this machine: --token-file asks for one)")
    assert "note:" not in result.stderr and served


@pytest.mark.parametrize("host", ["a..b", "h" * 64, "."])
def test_a_host_name_the_resolver_cannot_encode_is_one_line_naming_host(tmp_path, store_path,
                                                                        served, host):
    # The resolver's IDNA codec raised a UnicodeError: a traceback.
    assert refused_host(tmp_path, store_path, host, served) == [
        f"error: --host {host!r}: not a host name (a label between dots is empty or over 63 "
        "characters); expected an address of this machine, e.g. 127.0.0.1 or 0.0.0.0"]
