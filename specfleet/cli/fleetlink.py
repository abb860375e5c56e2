"""What the `matrix` and `job` commands share: one-line usage errors and the fleet's targets.

`open_fleet` resolves which fleet to use (`cluster/whichfleet.py`: --address,
$SPECFLEET_ADDRESS, $RAY_ADDRESS, the fleet this machine joined, else embedded), connects,
says which in one stderr line, finds every host by its label, makes sure each has its worker,
and asks each worker for its targets: the scheduler then gets worker handles and the planner
gets (host, engine, device) targets.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from specfleet.cluster.whichfleet import FleetChoice, announce, choose_fleet
from specfleet.errors import UserError
from specfleet.jobs.run import Target

INFO_TIMEOUT_S = 30.0  # a worker that is starting up imports the engine first


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
        suspects: asked-for hosts whose node is gone now but whose worker may come back
            (their handles are in `workers`; the scheduler waits for them, `--wait`).
    """

    targets: list[Target]
    kinds: dict[str, str]
    workers: dict[str, Any]
    machines: dict[str, str]
    infos: dict[str, dict]
    suspects: list[str] = field(default_factory=list)

    def record_hosts(self, store) -> None:
        """Refresh every host of the view in the store's `hosts` table."""
        for info in self.infos.values():
            store.upsert_host(info)


def connect_fleet(address: str | None, embedded: bool = False) -> FleetChoice:
    """Resolve the fleet (`whichfleet.choose_fleet`), then connect to it or start the
    embedded one. Errors name where the address came from."""
    from specfleet.cluster import fleet

    choice = choose_fleet(address, embedded)
    if choice.address is not None:
        fleet.ensure_token(create=False)  # a missing token is the likelier mistake: say it first
        check_reachable(choice.address, choice.source)
    try:
        fleet.connect(choice.address)
    except ConnectionError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else "no answer"
        raise UserError(f"{_where(choice)}: cannot reach a Ray head there ({first})") from None
    return choice


def say_fleet(choice: FleetChoice, hosts: int) -> None:
    """The one line (stderr) saying which fleet this command uses."""
    print(announce(choice, hosts), file=sys.stderr, flush=True)


def _where(choice: FleetChoice) -> str:
    return f"{choice.address} (from {choice.source})"


def check_reachable(address: str, source: str = "--address", timeout_s: float = 3.0) -> None:
    """Fail fast on a wrong address: Ray itself retries an unreachable head for minutes."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"{source}: expected HOST:PORT of the Ray head, got {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as err:
        hint = " (run `specfleet fleet leave` or use --embedded)" if "joined" in source else ""
        raise UserError(f"{address} (from {source}): no Ray head answers there "
                        f"({err}){hint}") from None


def open_fleet(
    address: str | None,
    with_toy: bool = False,
    hosts: Iterable[str] | None = None,
    *,
    embedded: bool = False,
) -> FleetView:
    """Resolve the fleet, connect, say which, then collect every live host's worker and
    targets.

    Args:
        address: the `--address` flag (None: resolved as `whichfleet` says).
        with_toy: add a `toy/cpu` target per host (every worker runs the toy engine).
        hosts: only these hosts (default: every host found by label).
        embedded: the `--embedded` flag.

    Returns:
        The `FleetView`; a host whose worker does not answer is left out with a warning.
    """
    import ray

    from specfleet.cluster import fleet
    from specfleet.workers import actor

    choice = connect_fleet(address, embedded)
    every = fleet.discover_hosts()
    say_fleet(choice, len(every))
    wanted = set(hosts) if hosts is not None else None
    found = [h for h in every if wanted is None or h.host in wanted]
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
        for label, reason in sorted(info.get("failed_targets", {}).items()):
            print(f"warning: {name}: {label} left out: it failed its self-test ({reason}); "
                  f"`specfleet selftest` on that host shows the details", file=sys.stderr)
    for name in sorted((wanted or set()) - set(handles)):
        handle = actor.get_worker(name)  # a detached worker outlives its node: it may return
        if handle is not None:
            view.workers[name] = handle
            view.suspects.append(name)
    return view


def _targets(host: str, info: dict, with_toy: bool) -> list[Target]:
    """The host's targets, leaving out any that failed the worker's start-up self-test."""
    failed = info.get("failed_targets", {})
    targets = [
        Target(host=host, engine=engine, device=device)
        for engine, devices in sorted(info.get("engines", {}).items())
        for device in devices
        if f"{engine}/{device}" not in failed
    ]
    if with_toy:
        targets.append(Target(host=host, engine="toy", device="cpu"))
    return targets


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else type(err).__name__
