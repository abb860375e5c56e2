"""The fleet page: `fleet status`'s rows (the same `cluster.fleet.fleet_status`) plus each
host's last load sample from the store.

The web view never starts a fleet: it follows the fleet every command follows
(`cluster/reach.py`: --address, $SPECFLEET_ADDRESS, $RAY_ADDRESS, the fleet this
machine joined) and where that is the embedded fleet, it says there is none.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable

from specfleet.cluster.reach import choose_fleet, connect_error, speaks_http2

REACH_TIMEOUT_S = 2.0  # a TCP connect to the head; Ray itself retries one for minutes
NO_HEAD_PROBE_S = 1.0  # a head's GCS answers an HTTP/2 greeting at once
CONNECT_WAIT_S = 8.0  # a page waits this long for `ray.init`; the connect goes on behind it

NO_FLEET = ("No fleet: `specfleet serve` was started without --address and this machine has "
            "not joined one (`specfleet fleet join HEAD:PORT`, or pass --address HEAD:PORT).")


def fleet_address(address: str | None) -> str | None:
    """The head the fleet page reads (None: no fleet; an embedded one is never started).

    Raises:
        UserError: a malformed address (naming the flag or variable it came from).
    """
    return choose_fleet(address).address


class _NoSigtermWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("SIGTERM handler is not set")


class _Connect(threading.Thread):
    """One `fleet.connect` in a daemon thread: a head that never answers holds neither a
    request nor the server's shutdown."""

    def __init__(self, address: str, after: Callable[[], None] | None = None):
        super().__init__(name=f"specfleet serve: connect {address}", daemon=True)
        self.address, self.after = address, after
        self.error: Exception | None = None

    def run(self) -> None:
        from specfleet.cluster import fleet

        # ray.init off the main thread warns on the console that it set no SIGTERM handler:
        # the server's own handler stops it, so the line only alarms.
        logging.getLogger("ray._private.worker").addFilter(_NoSigtermWarning())
        try:
            fleet.connect(self.address)
        except Exception as err:  # noqa: BLE001 - the fleet page says it
            self.error = err
        if self.after is not None:
            self.after()


class FleetReader:
    """Connects to the fleet once (on the first fleet page) and reads its status."""

    def __init__(self, address: str | None):
        self.address = address
        self._lock = threading.Lock()
        self._connect: _Connect | None = None
        self._keep_signals: Callable[[], None] | None = None
        self._no_head: bool | None = None  # a listener that answers no HTTP/2 greeting

    async def keep_signal_handlers(self) -> None:
        """At the server's start (on its event loop, the main thread): put the server's own
        SIGINT/SIGTERM handlers back after each connect. Ray's core installs a handler of
        its own when it connects, which printed a stack dump on a SIGTERM (systemd's stop)
        and skipped the server's shutdown."""
        loop = asyncio.get_running_loop()
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

        def restore() -> None:
            for sig, handler in handlers.items():
                if handler is not None:
                    signal.signal(sig, handler)

        def after_connect() -> None:  # in the connect's thread: restore runs on the loop
            loop.call_soon_threadsafe(restore)

        self._keep_signals = after_connect

    def rows(self) -> list[dict]:
        """`fleet_status()` rows.

        Raises:
            ConnectionError: the head refuses or does not answer (within seconds).
        """
        from specfleet.cluster import fleet

        assert self.address is not None
        err = connect_error(self.address, REACH_TIMEOUT_S)
        if err is not None:
            raise ConnectionError(f"no Ray head answers there ({err})")
        if self._no_head is None:  # asked once: a web server there held every page 8 s
            self._no_head = speaks_http2(self.address, NO_HEAD_PROBE_S) is False
        if self._no_head:
            raise ConnectionError("what answers there is not a Ray head (it answers no HTTP/2 "
                                  "greeting, as a Ray head's GCS does)")
        with self._lock:  # one connect at a time: Ray's driver API is not for concurrent ones
            if self._connect is None or self._connect.error is not None:
                self._connect = _Connect(self.address, self._keep_signals)
                self._connect.start()
            connect = self._connect
        connect.join(CONNECT_WAIT_S)
        if connect.is_alive():
            raise ConnectionError(f"the Ray head there has not answered in {CONNECT_WAIT_S:g} "
                                  "s (still trying; reload later)")
        if connect.error is not None:
            raise ConnectionError(str(connect.error))
        return fleet.fleet_status()


def fleet_page(reader: FleetReader | None, store, as_json: bool = False) -> dict:
    """Hosts with kind, health, targets and default policies, busy/idle and the run in
    progress, library versions, and the last load sample the store holds."""
    if reader is None or reader.address is None:
        return {"address": None, "hosts": [], "message": NO_FLEET}
    try:
        rows = reader.rows()
    except (ConnectionError, RuntimeError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
        return {"address": reader.address, "hosts": [],
                "message": f"Cannot reach the fleet at {reader.address}: {first}"}
    for row in rows:
        sample = store.latest_load_sample(row["host"])
        row["last_load"] = None if sample is None else {
            "t": sample.t.strftime("%Y-%m-%d %H:%M:%S"), "load1": sample.load1,
            "cpu_util": sample.cpu_util, "gpu_util": sample.gpu_util}
    message = None if rows else f"The fleet at {reader.address} has no hosts."
    return {"address": reader.address, "hosts": rows, "message": message}
