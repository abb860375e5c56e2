"""Clients that leave mid-request or send a malformed body, against a real `specfleet serve`
(uvicorn's own HTTP parsing is part of the path): no traceback in the server's log, at most
one line, and the view keeps answering."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from specfleet.serve import create_app
from specfleet.serve.body import MAX_BODY_BYTES
from specfleet.store.readonly import open_read_only
from tests.serve.seed import LOOPBACK_URL
from tests.serve.serving import serving

pytestmark = pytest.mark.timeout(120)

FORM = b"Content-Type: application/x-www-form-urlencoded\r\n"
CHUNKED = b"Transfer-Encoding: chunked\r\n"


@pytest.fixture(scope="module")
def served(seeded_url, tmp_path_factory):
    """`specfleet serve` as a real process on a free loopback port: its port and stderr file."""
    log = tmp_path_factory.mktemp("aborts") / "serve.log"
    with serving(["--db", seeded_url], log) as base:
        yield int(base.rsplit(":", 1)[1]), log


def _request(method: str, path: str, headers: bytes) -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode() + headers + b"\r\n"


def _send(port: int, *parts: bytes, answer: bool = True) -> bytes:
    """Each part sent a moment apart; the answer read until the server closes (or 5 s)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        for part in parts:
            sock.sendall(part)
            time.sleep(0.2)  # the server reads (and may answer) each part on its own
        got = b""
        while answer and (chunk := sock.recv(65536)):
            got += chunk
        return got


def _after(port: int, log: Path, offset: int) -> list[str]:
    """The server's log lines since `offset`, once it has answered a good request after."""
    with httpx.Client(trust_env=False, timeout=10) as web:
        assert web.get(f"http://127.0.0.1:{port}/api/matrices").status_code == 200
    return log.read_bytes()[offset:].decode(errors="replace").splitlines()


def _quiet(lines: list[str]) -> None:
    text = "\n".join(lines)
    assert "Traceback" not in text and "Exception in ASGI application" not in text, text
    assert len(lines) <= 1, text


def test_a_client_gone_mid_login_form_is_no_answer_and_no_log_line(served):
    port, log = served
    offset = len(log.read_bytes())
    head = _request("POST", "/login", FORM + b"Content-Length: 100\r\n")
    _send(port, head + b"token=abc", answer=False)  # 9 of the 100 bytes, then gone
    assert _after(port, log, offset) == []


@pytest.mark.parametrize("method, path", [("GET", "/api/matrices"), ("POST", "/login")])
@pytest.mark.parametrize("parts", [(b"zz\r\n",), (b"5\r\nhello\r\n", b"zz\r\n")],
                         ids=["bad-first-chunk", "bad-later-chunk"])
def test_a_malformed_chunked_body_is_uvicorns_400_and_one_log_line(served, method, path,
                                                                   parts):
    port, log = served
    offset = len(log.read_bytes())
    head = _request(method, path, FORM + CHUNKED)
    answer = _send(port, head + parts[0], *parts[1:])
    assert answer.startswith(b"HTTP/1.1 400 ") and b"Invalid HTTP request received." in answer
    lines = _after(port, log, offset)
    _quiet(lines)


def test_a_body_over_the_limit_is_a_413(seeded_url):
    with (open_read_only(seeded_url) as store,
          TestClient(create_app(store), base_url=LOOPBACK_URL) as web):
        response = web.request("GET", "/api/matrices", content=b"x" * (MAX_BODY_BYTES + 1))
        assert response.status_code == 413
        assert response.json()["error"].startswith(
            f"the request body has {MAX_BODY_BYTES + 1} bytes, over the {MAX_BODY_BYTES}")
        assert web.get("/api/matrices").status_code == 200
