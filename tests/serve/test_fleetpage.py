"""The fleet page against a head that refuses or never answers: a quick answer, no queue, and
no thread that keeps the server from stopping. `fleet.connect` is a stand-in: no Ray here."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from specfleet.cluster import fleet
from specfleet.serve import fleetpage
from specfleet.serve.fleetpage import FleetReader, fleet_page


@pytest.fixture
def connects(monkeypatch):
    """Calls to `fleet.connect`; each blocks until `release` is set (a head that hangs)."""
    calls: list[str] = []
    release = threading.Event()

    def connect(address):
        calls.append(address)
        if not release.wait(10):
            raise ConnectionError("gave up")

    monkeypatch.setattr(fleet, "connect", connect)
    monkeypatch.setattr(fleet, "fleet_status", lambda: [])
    yield calls, release
    release.set()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_refused_address_is_said_at_once_without_ray(connects):
    calls, _ = connects
    address = f"127.0.0.1:{_closed_port()}"
    started = time.perf_counter()
    page = fleet_page(FleetReader(address), store=None)
    assert time.perf_counter() - started < 2 and calls == []
    assert page["message"].startswith(f"Cannot reach the fleet at {address}: no Ray head "
                                      "answers there (")


def test_a_web_server_at_the_address_is_said_at_once_without_ray(connects):
    # Each fleet page waited 8 s for Ray's connect, then said "has not answered".
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    calls, _ = connects
    web = ThreadingHTTPServer(("127.0.0.1", 0), SimpleHTTPRequestHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        address = f"127.0.0.1:{web.server_address[1]}"
        started = time.perf_counter()
        page = fleet_page(FleetReader(address), store=None)
        assert time.perf_counter() - started < 2 and calls == []
        assert page["message"] == (f"Cannot reach the fleet at {address}: what answers there "
                                   "is not a Ray head (it answers no HTTP/2 greeting, as a Ray "
                                   "head's GCS does)")
    finally:
        web.shutdown()
        web.server_close()


def test_a_head_that_never_answers_neither_holds_nor_queues_requests(connects, monkeypatch):
    calls, release = connects
    monkeypatch.setattr(fleetpage, "CONNECT_WAIT_S", 0.2)
    with socket.socket() as head:  # accepts TCP (the kernel's backlog), never speaks Ray
        head.bind(("127.0.0.1", 0))
        head.listen(8)
        reader = FleetReader(f"127.0.0.1:{head.getsockname()[1]}")
        started = time.perf_counter()
        pages = [fleet_page(reader, store=None) for _ in range(3)]
        assert time.perf_counter() - started < 3
        assert all("has not answered in 0.2 s (still trying" in p["message"] for p in pages)
        assert len(calls) == 1  # the later pages wait on the one connect, not a new one each
        connecting = [t for t in threading.enumerate() if t.name.startswith("specfleet serve")]
        assert [t.daemon for t in connecting] == [True]  # Ctrl-C does not wait for it
        release.set()
        connecting[0].join(2)
        assert fleet_page(reader, store=None)["message"].endswith("has no hosts.")
