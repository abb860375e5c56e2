"""The head side of the fleet: connect (or start the embedded fleet), discover hosts, health.

- `connect()` with no address starts the embedded fleet: a local Ray instance bound to
  127.0.0.1 with one worker for this machine. With an address it joins as a client.
- Hosts are found by node label (`specfleet.host`, `specfleet.kind`), never by node id.
- Health of a host (`Health`): healthy (ping answered) -> suspect (actor unavailable or no
  answer in time while its node takes connections: restarting, busy starting) or unreachable
  (no answer and its node takes no connection either: link down, host off) -> dead (actor
  died for good) or healthy again. Unreachable is judged on specfleet's own terms
  (`probe_node`), not by Ray's health checks, which take about a minute with Ray's defaults.

Token auth is on everywhere (`RAY_AUTH_MODE=token`, token file mode 0600; `raytoken.py`); see
docs/fleet.md.
The `fleet up / join / leave` commands live in `specfleet/cluster/membership.py`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError
from tenacity import RetryCallState, Retrying, retry_if_result, stop_after_delay, wait_fixed

from specfleet.cluster.raybind import bind_for, bind_loopback
from specfleet.cluster.rayinit import ray_connecting, stop_what_a_cut_short_init_started
from specfleet.cluster.raytoken import enable_token_auth, ensure_token
from specfleet.cluster.startfailures import (
    RAY_START_FAILURES,
    check_ray_dir_room,
    embedded_start_failed,
    load_text,
    session_logs,
)
from specfleet.errors import UserError
from specfleet.settings import logical_cpus
from specfleet.workers.actor import (
    DRIVER_OPTIONS,
    HOST_LABEL,
    KIND_LABEL,
    NO_IDLE_WORKERS,
    SLOT_RESOURCE,
    get_worker,
    list_workers,
    start_worker,
    wait_ready,
)
from specfleet.workers.hardware import detect_host

Health = Literal["healthy", "suspect", "unreachable", "dead"]
HEALTH_STATES: tuple[Health, ...] = get_args(Health)
HEALTHY, SUSPECT, UNREACHABLE, DEAD = HEALTH_STATES
WORKER_START_TIMEOUT_S = 120.0
RAY_DIR_MAX_LEN = 40  # Ray adds ~65 bytes (session_<date>_<pid>/sockets/plasma_store)
NODE_DOWN = ("its node is down (Ray lists it dead); its worker comes back when the host "
             "rejoins: its supervisor does so, or `specfleet fleet join` there")


@dataclass(frozen=True)
class FleetConnection:
    """How this process is connected: the GCS address, embedded or not, the local host."""

    address: str
    embedded: bool
    local_host: str | None = None


@dataclass(frozen=True)
class HostNode:
    """A host as Ray's node table shows it."""

    host: str
    kind: str
    node_id: str
    node_ip: str
    alive: bool
    node_port: int = 0  # the raylet's port: `reach.probe_node` connects there


@dataclass(frozen=True)
class HostHealth:
    """One health reading of a host's worker."""

    host: str
    state: Health
    reason: str = ""
    ping: dict = field(default_factory=dict)


# ---- connect ---------------------------------------------------------------------------


def connect(
    address: str | None = None,
    *,
    num_cpus: int | None = None,
    host: str | None = None,
    worker_kwargs: dict | None = None,
) -> FleetConnection:
    """Connect to the fleet, or start the embedded one when no address is given.

    Args:
        address: the head's GCS address (`HOST:6379`); None starts the embedded fleet.
        num_cpus: CPUs the embedded Ray instance accounts (default: the CPUs this
            process may run on, `settings.logical_cpus`).
        host: fleet name of this machine in the embedded fleet (default: detected).
        worker_kwargs: `HostWorker` keyword arguments for the embedded worker.

    Returns:
        The `FleetConnection`.
    """
    if ray.is_initialized():
        context = ray.get_runtime_context()
        return FleetConnection(context.gcs_address, embedded=False)
    enable_token_auth()
    if address is not None:
        ensure_token(create=False)
        bind_for(address)
        with ray_connecting():
            ray.init(address=address, **DRIVER_OPTIONS)
        return FleetConnection(ray.get_runtime_context().gcs_address, embedded=False)
    return _start_embedded(num_cpus, host, worker_kwargs)


def _start_embedded(
    num_cpus: int | None, host: str | None, worker_kwargs: dict | None
) -> FleetConnection:
    ensure_token(create=True)
    bind_loopback()
    info = detect_host(host)
    from specfleet.dirs import runtime_dir

    ray_dir = _private_ray_dir(runtime_dir() / "ray")
    check_ray_dir_room(ray_dir)
    with stop_what_a_cut_short_init_started(), ray_connecting():
        try:
            _init_embedded(info, num_cpus, ray_dir)
        except Exception as err:
            if not str(err).startswith(RAY_START_FAILURES):  # a bug stays a traceback
                raise
            raise embedded_start_failed(err, ray_dir) from None
    _wait_for_embedded_worker(start_worker(info.name, worker_kwargs), ray_dir)
    return FleetConnection(ray.get_runtime_context().gcs_address, True, info.name)


def _wait_for_embedded_worker(handle: Any, ray_dir: str) -> None:
    """Wait for the embedded worker's first answer; one line when it gives none in time
    (several commands starting at once on a small machine each load torch and MLX) or dies
    starting, naming this command's own logs."""
    try:
        wait_ready(handle, WORKER_START_TIMEOUT_S)
    except GetTimeoutError:
        raise UserError(f"the embedded fleet's worker did not answer within "
                        f"{WORKER_START_TIMEOUT_S:g} s ({load_text()}its logs: "
                        f"{session_logs(ray_dir)}); expected it to start: try again once the "
                        "machine is less busy, or read the logs") from None
    except ActorDiedError as err:
        cause = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise UserError(f"the embedded fleet's worker died while starting ({cause[:200]}); "
                        f"expected it to start: its logs are under {session_logs(ray_dir)}"
                        ) from None


def _private_ray_dir(preferred) -> str:
    """Ray's session dir inside our 0700 runtime dir, or a fresh 0700 dir in /tmp when that
    path is too long for the Unix sockets Ray puts under it (~107 bytes on Linux)."""
    if len(str(preferred)) <= RAY_DIR_MAX_LEN:
        return str(preferred)
    import atexit
    import tempfile

    made = tempfile.mkdtemp(prefix="sf-ray-", dir="/tmp")
    # Gone at exit when Ray left nothing in it (one per command piled up in /tmp); logs stay.
    atexit.register(_remove_if_empty, made)
    return made


def _remove_if_empty(folder: str) -> None:
    with contextlib.suppress(OSError):  # not empty (Ray's logs) or gone already
        os.rmdir(folder)


def _init_embedded(info, num_cpus: int | None, temp_dir: str) -> None:
    ray.init(
        address="local",  # always a new instance, never another local cluster found on disk
        # The CPUs this process may run on (taskset too; Ray's own count reads only cgroups).
        num_cpus=num_cpus or logical_cpus(),
        include_dashboard=False,  # nothing to look at locally; one less port
        labels={HOST_LABEL: info.name, KIND_LABEL: info.kind},
        resources={SLOT_RESOURCE: 1},
        _temp_dir=temp_dir,  # session logs and sockets in our 0700 dir, not a shared /tmp/ray
        _system_config=NO_IDLE_WORKERS,
        **DRIVER_OPTIONS,
    )


def disconnect() -> None:
    """Leave the Ray session (an embedded fleet stops with it)."""
    ray.shutdown()


# ---- discovery and health --------------------------------------------------------------


def discover_hosts(include_dead: bool = False) -> list[HostNode]:
    """Hosts by node label (`specfleet.host`); one entry per host, alive nodes first."""
    found: dict[str, HostNode] = {}
    for node in ray.nodes():
        labels = node.get("Labels") or {}
        name = labels.get(HOST_LABEL)
        if not name or (not node["Alive"] and not include_dead):
            continue
        entry = HostNode(
            name,
            labels.get(KIND_LABEL, "?"),
            node["NodeID"],
            node.get("NodeManagerAddress", ""),
            bool(node["Alive"]),
            int(node.get("NodeManagerPort") or 0),
        )
        if name not in found or (entry.alive and not found[name].alive):
            found[name] = entry
    return sorted(found.values(), key=lambda h: h.host)


def health(host: str, timeout_s: float = 2.0) -> HostHealth:
    """Ping a host's worker once and classify the answer.

    Returns:
        healthy (answered), suspect (unavailable or no answer within `timeout_s`: restarting,
        its node gone or busy starting), unreachable (no answer, and its node takes no
        connection), or dead (died for good, or no worker at all).
    """
    handle = get_worker(host)
    if handle is None:
        return HostHealth(host, DEAD, "no worker actor")
    try:
        ping = ray.get(handle.ping.remote(), timeout=timeout_s)
    except (ActorUnavailableError, GetTimeoutError) as err:
        why = f"no answer within {timeout_s:g} s" if isinstance(err, GetTimeoutError) \
            else _first_line(err)
        nodes = {h.host: h for h in discover_hosts(include_dead=True)}
        reading = _not_answering(nodes.get(host), why)
        return HostHealth(host, reading["health"], reading["reason"])
    except ActorDiedError as err:
        return HostHealth(host, DEAD, _first_line(err))
    return HostHealth(host, HEALTHY, ping=ping)


def wait_for_health(
    host: str, states: tuple[str, ...], timeout_s: float, poll_s: float = 0.5
) -> HostHealth:
    """Poll `health(host)` until its state is one of `states`.

    Raises:
        TimeoutError: not reached within `timeout_s` (the message has the last reading).
    """
    poll = Retrying(retry=retry_if_result(lambda reading: reading.state not in states),
                    stop=stop_after_delay(timeout_s), wait=wait_fixed(poll_s),
                    retry_error_callback=_last_reading)
    reading = poll(health, host, timeout_s=min(2.0, max(poll_s, 0.2)))
    if reading.state not in states:
        raise TimeoutError(f"{host} stayed {reading.state} ({reading.reason}) for {timeout_s:g} s")
    return reading


def _last_reading(state: RetryCallState) -> HostHealth:
    assert state.outcome is not None  # tenacity calls this only after an attempt
    return state.outcome.result()


def fleet_status(timeout_s: float = 3.0) -> list[dict]:
    """One row per host in the fleet (a host that left is not): kind, node, health, busy,
    targets, default policies, loaded models, versions. Status calls go to every worker at
    once; a worker that does not answer within `timeout_s` is reported with its health
    instead."""
    nodes = {h.host: h for h in discover_hosts(include_dead=True)}
    # A host whose node is gone and whose worker was killed for good has left (`fleet leave`).
    names = sorted({name for name, node in nodes.items() if node.alive} | set(list_workers()))
    pending = {}
    for name in names:
        handle = get_worker(name)
        if handle is not None:
            pending[name] = (handle.status.remote(), handle.info.remote())
    return [_status_row(name, nodes.get(name), pending.get(name), timeout_s) for name in names]


def _status_row(name: str, node: HostNode | None, refs: Any, timeout_s: float) -> dict:
    row: dict = {
        "host": name,
        "kind": node.kind if node else "?",
        "node_alive": bool(node and node.alive),
    }
    if refs is None:
        return {**row, "health": DEAD, "reason": "no worker actor"}
    try:
        status, info = ray.get(list(refs), timeout=timeout_s)
    except GetTimeoutError:
        return {**row, **_not_answering(node, f"no answer within {timeout_s:g} s")}
    except ActorUnavailableError as err:
        return {**row, **_not_answering(node, _first_line(err))}
    except ActorDiedError as err:
        return {**row, "health": DEAD, "reason": _first_line(err)}
    return {
        **row,
        "health": HEALTHY,
        "busy": status["busy"],
        "run_key": status["run_key"],
        "machine_id": info["machine_id"],
        "chip": info["chip"],
        "memory_gb": info["memory_gb"],
        "targets": info["targets"],
        "selftest": info.get("selftest", {}),
        "default_policies": info["default_policies"],
        "loaded_models": status["loaded_models"],
        "quiet": status["quiet"]["quiet"],
        "conditions": status.get("conditions"),  # power, thermal, clocks, memory now
        "versions": info["versions"],
    }


def _not_answering(node: HostNode | None, why: str) -> dict:
    """A worker that does not answer: unreachable when its node takes no TCP connection
    either (the network, or the host itself, is gone), else suspect (restarting, busy, or
    its node down: Ray lists it dead)."""
    if node is not None and node.node_port:
        cut = probe_node(node.node_ip, node.node_port)
        if cut is not None:  # Ray's own words add nothing here
            return {"health": UNREACHABLE, "reason": f"its worker does not answer and its node "
                                                     f"{node.node_ip}:{node.node_port} {cut}"}
    if node is not None and not node.alive:  # Ray's words would say only "restarting"
        return {"health": SUSPECT, "reason": NODE_DOWN}
    return {"health": SUSPECT, "reason": why}


# A connect that ends so means no packet came back from the host; refused means it answered.
_NO_ROUTE = {errno.ETIMEDOUT, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN}


def probe_node(ip: str, port: int, timeout_s: float = 2.0) -> str | None:
    """Whether a node can be reached at all: a fresh TCP connection to its raylet's port.

    A fresh connection is answered within milliseconds once the link is up, where Ray's own
    connection may sit in TCP's retransmission back-off for many seconds after it returns.

    Returns:
        None when the host answered (connected, or refused: the node is down, not the
        network), else why not (`is unreachable: timed out after 2 s`).
    """
    try:
        socket.create_connection((ip, port), timeout=timeout_s).close()
    except TimeoutError:
        return f"is unreachable: no answer to a connection within {timeout_s:g} s"
    except OSError as err:
        if err.errno in _NO_ROUTE:
            return f"is unreachable: {os.strerror(err.errno).lower()}"
    return None


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else type(err).__name__
