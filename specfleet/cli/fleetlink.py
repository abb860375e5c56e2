"""What the `matrix` and `job` commands share: one-line usage errors and the fleet's targets.

`open_fleet` connects (or starts the embedded fleet), finds every host by its label, makes
sure each has its worker, and asks each worker for its targets: the scheduler then gets
worker handles and the planner gets (host, engine, device) targets.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from specfleet.errors import UserError
from specfleet.jobs.run import Target

INFO_TIMEOUT_S = 30.0  # a worker that is starting up imports the engine first
DB_HELP = ("Database URL (sqlite:///PATH, postgresql+psycopg://...) or SQLite file path; "
           "default $SPECFLEET_DB, else the user data dir.")
ADDRESS_HELP = "Ray head address HOST:PORT of the fleet; default: start the embedded fleet."


@dataclass(frozen=True)
class FleetView:
    """The fleet as a matrix needs it.

    Attributes:
        targets: every (host, engine, device) the workers offer, plus a toy target per host
            when asked for.
        kinds: host name -> kind label (`linux-cpu`, `mac-mlx`, ...).
        workers: host name -> worker actor handle.
        machines: host name -> machine id (hosts on one machine share its machine lock).
        infos: host name -> the worker's `HostInfo` dict (for `Store.upsert_host`).
    """

    targets: list[Target]
    kinds: dict[str, str]
    workers: dict[str, Any]
    machines: dict[str, str]
    infos: dict[str, dict]

    def record_hosts(self, store) -> None:
        """Refresh every host of the view in the store's `hosts` table."""
        for info in self.infos.values():
            store.upsert_host(info)


def connect_fleet(address: str | None) -> None:
    """Connect to the head at `address`, or start the embedded fleet (address None)."""
    from specfleet.cluster import fleet

    if address is not None:
        check_reachable(address)
    try:
        fleet.connect(address)
    except ConnectionError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else "no answer"
        raise UserError(f"--address {address}: cannot reach a Ray head there ({first})") from None


def check_reachable(address: str, timeout_s: float = 3.0) -> None:
    """Fail fast on a wrong --address: Ray itself retries an unreachable head for minutes."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"--address: expected HOST:PORT of the Ray head, got {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise UserError(f"--address {address}: no Ray head answers there ({err})") from None


def open_fleet(
    address: str | None, with_toy: bool = False, hosts: Iterable[str] | None = None
) -> FleetView:
    """Connect, then collect every live host's worker and targets.

    Args:
        address: the head (`HOST:PORT`) or None for the embedded fleet.
        with_toy: add a `toy/cpu` target per host (every worker runs the toy engine).
        hosts: only these hosts (default: every host found by label).

    Returns:
        The `FleetView`; a host whose worker does not answer is left out with a warning.
    """
    import ray

    from specfleet.cluster import fleet
    from specfleet.workers import actor

    connect_fleet(address)
    wanted = set(hosts) if hosts is not None else None
    found = [h for h in fleet.discover_hosts() if wanted is None or h.host in wanted]
    handles = {h.host: actor.get_worker(h.host) or actor.start_worker(h.host) for h in found}
    refs = {name: handle.info.remote() for name, handle in handles.items()}
    view = FleetView([], {h.host: h.kind for h in found}, {}, {}, {})
    for name, ref in refs.items():
        try:
            info = ray.get(ref, timeout=INFO_TIMEOUT_S)
        except Exception as err:  # noqa: BLE001 - a host that cannot answer is left out
            print(f"warning: host {name} left out: {_first_line(err)}", file=sys.stderr)
            continue
        view.workers[name] = handles[name]
        view.infos[name] = info
        view.machines[name] = info.get("machine_id") or name
        view.targets.extend(_targets(name, info, with_toy))
    return view


def _targets(host: str, info: dict, with_toy: bool) -> list[Target]:
    targets = [
        Target(host=host, engine=engine, device=device)
        for engine, devices in sorted(info.get("engines", {}).items())
        for device in devices
    ]
    if with_toy:
        targets.append(Target(host=host, engine="toy", device="cpu"))
    return targets


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else type(err).__name__
