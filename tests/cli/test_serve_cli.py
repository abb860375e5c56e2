"""`specfleet serve`'s mistakes through the real Typer app: one line each, exit 2, nothing
listened on; which token the view asks for. (The server itself is tested in tests/serve/.)"""

from __future__ import annotations

import socket
import sqlite3

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.cli.serve import url_of
from specfleet.settings import is_loopback
from specfleet.store import open_store
from tests.serve.seed import LOOPBACK_URL

runner = CliRunner()
TOKEN = "5e1f0c3a9b7d4e2f8a6c1b3d5f7e9a0c"


@pytest.fixture
def no_fleet_token(tmp_path, monkeypatch):
    """This machine holds no fleet token (the box running the tests may hold a real one)."""
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "no-ray" / "auth_token"))


@pytest.fixture
def served(monkeypatch):
    """`uvicorn.run` replaced: the app `serve` would listen with, instead of listening."""
    apps: list = []
    monkeypatch.setattr("uvicorn.run", lambda app, **kwargs: apps.append((app, kwargs)))
    return apps


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
    assert "'--port': expected a number <= 65535" in _error(
        "--port", "70000", "--db", empty_store)
    assert _error("--db", str(tmp_path / "missing.db")).strip() == (
        f"error: --db: no store at {tmp_path / 'missing.db'}; `specfleet db upgrade --db "
        f"{tmp_path / 'missing.db'}` or a writing command (`specfleet matrix run`) creates one")
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


def test_beyond_loopback_without_a_token_is_refused(tmp_path, empty_store, no_fleet_token):
    for host in ("0.0.0.0", "192.168.1.4", "::"):
        stderr = _error("--host", host, "--db", empty_store)
        assert stderr.splitlines() == [
            f"error: --host {host}: the view would show every stored prompt and output to the "
            "network; pass --token-file PATH (a file holding the token to log in with), or copy "
            f"the fleet's token to {tmp_path / 'no-ray' / 'auth_token'}"]


@pytest.mark.parametrize(("content", "says"), [
    (None, "no such file; expected a file holding the token"),
    ("dir", "is a directory; expected a file holding the token"),
    (b"", "is empty; expected a token (make one with `openssl rand -hex 32`)"),
    (b" \n\n", "is empty; expected a token"),
    (b"\x89PNG\r\n\x1a\n\xff\xfe" + TOKEN.encode(), "not UTF-8 text (byte 0)"),
    (TOKEN.encode() + b"\x00", "a NUL byte at byte 32, so not text; expected a file holding"),
    (f"{TOKEN}\n{TOKEN}".encode(), "holds '\\n'; expected one line of printable ASCII"),
    (f"{TOKEN} x".encode(), "holds ' '; expected one line"),
    ("jeton-très-secret-0123".encode(), "holds 'è'; expected one line of printable ASCII"),
    (b"short-token", "the token has 11 characters; expected at least 16"),
])
def test_token_file_mistakes_are_one_line(tmp_path, empty_store, content, says):
    path = tmp_path / "token"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    for host in ("127.0.0.1", "0.0.0.0"):
        lines = _error("--host", host, "--token-file", str(path), "--db", empty_store).splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: --token-file {path}: {says}")


def test_a_bad_fleet_token_is_one_line_naming_its_file(tmp_path, empty_store, monkeypatch):
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    bad = tmp_path / "auth_token"
    bad.write_text("abc\n")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(bad))
    assert _error("--host", "0.0.0.0", "--db", empty_store).splitlines() == [
        f"error: the fleet's token file {bad}: the token has 3 characters; expected at least 16 "
        "(make one with `openssl rand -hex 32`)"]


def _serve(*args: str) -> str:
    result = runner.invoke(app, ["serve", "--port", str(_free_port()), *args])
    assert result.exit_code == 0, result.output
    return result.stderr


def test_beyond_loopback_the_fleet_token_guards_the_view(tmp_path, empty_store, served,
                                                         monkeypatch):
    from starlette.testclient import TestClient

    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    fleet_file = tmp_path / "auth_token"
    fleet_file.write_text(TOKEN + "\n")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(fleet_file))
    lines = _serve("--host", "0.0.0.0", "--db", empty_store).splitlines()
    assert lines[0].endswith(f"; fleet none; needs a token: the fleet's token ({fleet_file}))")
    assert lines[1].startswith("note: --host 0.0.0.0: plain HTTP, the token and the pages cross")
    monkeypatch.setenv("RAY_AUTH_TOKEN", TOKEN[::-1])  # Ray reads the variable first, so do we
    assert "needs a token: the fleet's token ($RAY_AUTH_TOKEN)" in _serve(
        "--host", "0.0.0.0", "--db", empty_store)
    (first, options), (second, _) = served
    assert options["host"] == "0.0.0.0"
    for guarded, token in ((first, TOKEN), (second, TOKEN[::-1])):
        with TestClient(guarded, follow_redirects=False) as web:
            assert web.get("/api/matrices").status_code == 401
            assert web.get("/api/matrices", headers={
                "Authorization": f"Bearer {token}"}).status_code == 200


def test_loopback_is_open_unless_a_token_file_is_given(tmp_path, empty_store, served,
                                                       no_fleet_token):
    from starlette.testclient import TestClient

    assert _serve("--db", empty_store).splitlines()[0].endswith("; open to every account on this machine: --token-file asks for one)")
    token_file = tmp_path / "view-token"
    token_file.write_text(f"  {TOKEN}\n")
    token_file.chmod(0o640)  # the group could read it: refused, as ssh refuses such a key
    assert _error("--db", empty_store, "--token-file", str(token_file)).strip() == (
        f"error: --token-file {token_file}: other users may read or change it (mode 0640); "
        f"expected a file only its owner can use (chmod 600 {token_file})")
    token_file.chmod(0o600)
    stderr = _serve("--db", empty_store, "--token-file", str(token_file))
    assert stderr.splitlines()[0].endswith(f"; needs a token: the token in {token_file})")
    assert "note:" not in stderr
    (open_app, _), (guarded, _) = served
    with TestClient(open_app, base_url=LOOPBACK_URL) as web:
        assert web.get("/api/matrices").status_code == 200
    with TestClient(guarded, follow_redirects=False) as web:
        assert web.get("/api/matrices").status_code == 401
        assert web.get("/matrices").headers["location"] == "/login?next=%2Fmatrices"
        assert web.get("/api/matrices", headers={
            "Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_loopback_and_urls():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")
    assert url_of("::1", 8266, "/matrices/x") == "http://[::1]:8266/matrices/x"


def test_a_fleet_address_nobody_answers_is_a_warning_and_the_view_still_serves(
        empty_store, served, no_fleet_token):
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    stderr = _serve("--db", empty_store, "--address", f"127.0.0.1:{port}")
    assert stderr.startswith(f"warning: fleet 127.0.0.1:{port}: no Ray head answers there ("), \
        stderr
    assert stderr.splitlines()[0].endswith("; the fleet page will say so") and served
