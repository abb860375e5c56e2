"""The fleet page: `fleet status`'s rows (the same `cluster.fleet.fleet_status`) plus each
host's last load sample from the store.

The web view never starts a fleet: it follows the fleet every command follows
(`cluster/reach.py`: --address, $SPECFLEET_ADDRESS, $RAY_ADDRESS, the fleet this
machine joined) and where that is the embedded fleet, it says there is none.
"""

from __future__ import annotations

import threading

from specfleet.cluster.reach import choose_fleet

NO_FLEET = ("No fleet: `specfleet serve` was started without --address and this machine has "
            "not joined one (`specfleet fleet join HEAD:PORT`, or pass --address HEAD:PORT).")


def fleet_address(address: str | None) -> str | None:
    """The head the fleet page reads (None: no fleet; an embedded one is never started).

    Raises:
        UserError: a malformed address (naming the flag or variable it came from).
    """
    return choose_fleet(address).address


class FleetReader:
    """Connects to the fleet once (on the first fleet page) and reads its status."""

    def __init__(self, address: str | None):
        self.address = address
        self._lock = threading.Lock()

    def rows(self) -> list[dict]:
        """`fleet_status()` rows; raises ConnectionError when the head cannot be reached."""
        from specfleet.cluster import fleet

        with self._lock:  # Ray's driver API is not for concurrent first connects
            fleet.connect(self.address)
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
