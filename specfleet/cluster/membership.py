"""Hosts entering and leaving the fleet: `fleet up` (head), `fleet join`, `fleet leave`.

`up` / `join` wrap `ray start` with specfleet's settings: token auth, the dashboard on
127.0.0.1, labels `specfleet.host` / `specfleet.kind`, one `specfleet_slot`, and on macOS the
multi-node opt-in plus an explicit node IP. `join` first compares this host's Python and Ray
versions with the head's (read from the head's GCS, as Ray itself does: `headversions.py`)
and says what to install when they differ: Ray refuses mismatched nodes with a much longer
message. Each node
gets its own Ray temp dir and is recorded (`noderecord.py`), so `leave` stops exactly this
host's node and every command follows the fleet this machine joined.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import ray
from ray.exceptions import (
    ActorUnavailableError,
    AuthenticationError,
    GetTimeoutError,
    RayActorError,
    RpcError,
)

from specfleet.cluster import noderecord
from specfleet.cluster.headversions import check_versions, local_versions, read_head_versions
from specfleet.cluster.loopback import keep_on_loopback, refuse_loopback_join, this_ip
from specfleet.cluster.rayinit import ray_connecting
from specfleet.cluster.raystart import (
    DEFAULT_PORT,
    check_port_free,
    choose_ports,
    join_command,
    node_ip_towards,
    running_node_line,
    start_env,
    start_failure,
    up_command,
)
from specfleet.cluster.raytoken import enable_token_auth, ensure_token
from specfleet.cluster.reach import (
    JOINED,
    RAY_CLUSTER_FILE,
    check_address,
    connect_error,
    head_client,
    join_host_port,
    not_a_head,
    token_refused,
)
from specfleet.dirs import runtime_dir
from specfleet.errors import UserError, one_line
from specfleet.settings import HOME, check_worker_settings
from specfleet.workers.actor import (
    DRIVER_OPTIONS,
    start_worker,
    stop_worker,
    wait_ready,
)
from specfleet.workers.hardware import detect_host

# A worker's start imports torch and MLX: ~7 s on a quiet 2-core box, minutes while it is loaded
# or compiling bytecode for the first time.
WORKER_READY_S = 300.0
UNAVAILABLE_RETRY_S = 0.5  # a restarting worker is placed again within seconds


@dataclass(frozen=True)
class Membership:
    """What `up` / `join` did: the head address, this host's name and kind, and the ports its
    node's fixed-port parts got (`raystart.choose_ports`)."""

    address: str
    host: str
    kind: str
    ports: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeOptions:
    """How this host's node starts (kept in the node record, so a rejoin is the same node).

    Attributes:
        num_cpus: CPUs Ray accounts here (default: Ray's count).
        node_ip: the address other hosts reach this one at (default: Ray's choice).
        engines: the engines this host offers (default: every engine it has).
        temp_dir: the node's own Ray temp dir (default `noderecord.default_temp_dir`).
    """

    num_cpus: int | None = None
    node_ip: str | None = None
    engines: list[str] | None = None
    temp_dir: str | None = None


def fleet_up(
    name: str | None = None,
    *,
    port: int = DEFAULT_PORT,
    options: NodeOptions | None = None,
    supervise: bool = True,
) -> Membership:
    """Start the head (token auth, dashboard on loopback) and this host's worker on it;
    `supervise`: leave a background supervisor (`supervisor.py`) watching the node."""
    refuse_running_node(noderecord.load())
    check_port_free(port)
    opts = options or NodeOptions()
    keep_on_loopback(opts.node_ip)
    check_worker_settings()  # this host's worker inherits them: said before the node starts
    runtime_dir()  # the worker's machine lock lives there: refused before the head starts
    noderecord.check_writable()
    info = detect_host(name)
    enable_token_auth()
    ensure_token(create=True)
    node_ip = opts.node_ip
    if node_ip is None and sys.platform == "darwin":
        node_ip = node_ip_towards("8.8.8.8")  # macOS binds loopback unless told otherwise
    temp_dir = opts.temp_dir or str(noderecord.default_temp_dir(info.name))
    refuse_foreign_node(temp_dir)
    _forget_stale_head_address(temp_dir)
    ports = choose_ports(head=True, gcs_port=port)
    cmd = up_command(info.name, info.kind, port=port, ports=ports, num_cpus=opts.num_cpus,
                     node_ip=node_ip, temp_dir=temp_dir)
    address = join_host_port(node_ip or this_ip(), port)
    starting = noderecord.NodeRecord(address, info.name, True, temp_dir)
    with _stopped_if_interrupted(starting):
        _ray_start_or_stop(cmd, ports, starting, noderecord.load())
        _remember(address, info.name, True, temp_dir, opts, port, ports)
        _start_supervised(address, info.name, opts.engines, "fleet up", temp_dir, supervise)
    return Membership(address, info.name, info.kind, ports)


def fleet_join(
    head: str, name: str, *, options: NodeOptions | None = None, supervise: bool = True
) -> Membership:
    """Join the fleet at `head` as host `name` and start this host's worker; `supervise`:
    leave a background supervisor (`supervisor.py`) that brings a lost node back.

    Raises:
        UserError: this machine runs the head or another host's node, no token, the head
            unreachable, or Python / Ray differ from the head's.
    """
    refuse_running_node(noderecord.load(), joining_as=name)
    opts = options or NodeOptions()
    refuse_loopback_join(head, opts.node_ip)
    check_worker_settings()
    runtime_dir()
    noderecord.check_writable()
    info = detect_host(name)
    enable_token_auth()
    ensure_token(create=False)
    check_versions(read_head_versions(head), local_versions())
    node_ip = opts.node_ip
    if node_ip is None and sys.platform == "darwin":
        node_ip = node_ip_towards(head)
    temp_dir = opts.temp_dir or str(noderecord.default_temp_dir(info.name))
    _stop_stale_node(info.name)
    refuse_foreign_node(temp_dir)
    ports = choose_ports(head=False)
    cmd = join_command(head, info.name, info.kind, num_cpus=opts.num_cpus, node_ip=node_ip,
                       temp_dir=temp_dir, ports=ports)
    starting = noderecord.NodeRecord(head, info.name, False, temp_dir)
    with _stopped_if_interrupted(starting):
        _ray_start_or_stop(cmd, ports, starting)
        _remember(head, info.name, False, temp_dir, opts, None, ports)
        _start_supervised(head, info.name, opts.engines, "fleet join", temp_dir, supervise)
    return Membership(head, info.name, info.kind, ports)


def _start_supervised(address: str, host: str, engines: list[str] | None, command: str,
                      temp_dir: str, supervise: bool) -> None:
    """This host's worker, then its supervisor; a worker that does not answer in time or dies
    starting leaves the node up and supervised all the same (`status` shows it later)."""
    try:
        _start_own_worker(address, host, engines, command, temp_dir)
    except KeyboardInterrupt:
        raise  # its node stops (`_stopped_if_interrupted`): nothing to supervise
    except BaseException:
        if supervise:
            keep_supervisor()
        raise
    if supervise:
        keep_supervisor()


@contextlib.contextmanager
def _stopped_if_interrupted(starting: noderecord.NodeRecord) -> Iterator[None]:
    """Ctrl-C or SIGTERM before `up` / `join` is done (while `ray start` runs, or while the
    worker starts: up to `WORKER_READY_S`): stop what it started so far, found as `leave`
    finds a node, and forget its record. A head left so held its port, and `fleet leave`
    said there was nothing to leave; one left after `ray start` ran on, supervised, after
    the user had read `interrupted`."""
    try:
        yield
    except KeyboardInterrupt:
        record = noderecord.load()
        if record is not None and record.temp_dir == starting.temp_dir:
            noderecord.stop_processes(noderecord.own_processes(record))  # its pids, recorded
            noderecord.forget()
        else:
            noderecord.stop_processes(noderecord.own_processes(starting))
        raise


def _forget_stale_head_address(temp_dir: str) -> None:
    """Remove the address a previous head left in the node's temp dir, as `ray stop` does. No
    head listens on the port (`check_port_free`), yet while that file names it and any process
    here still points at it (a survivor of a crashed head, another host's node), `ray start
    --head` refuses with "already running" and the user read that a head runs there."""
    (Path(temp_dir) / RAY_CLUSTER_FILE).unlink(missing_ok=True)


def keep_supervisor(pid: int | None = None) -> None:
    """One supervisor per host: the previous one stops, this one (`pid`, the caller's
    process) or a new background one is recorded."""
    record = noderecord.load()
    if record is None:
        return
    noderecord.stop_supervisor(record)
    noderecord.save(replace(record, supervisor_pid=pid or _spawn_supervisor()))


def _spawn_supervisor() -> int:
    """Start a background supervisor for this host (own session: outlives the shell)."""
    from specfleet.dirs import specfleet_home

    log = specfleet_home() / "supervisor.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "specfleet.cluster.supervisor"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=dict(os.environ),
        )
    return proc.pid


def _stop_stale_node(host: str) -> None:
    """A rejoin replaces this host's previous node: what is left of it (a raylet the head
    declared dead, its workers) is stopped first, so the host never runs two nodes."""
    record = noderecord.load()
    if record is not None and record.host == host and not record.head:
        noderecord.stop_processes(noderecord.own_processes(record))


def _remember(address: str, host: str, head: bool, temp_dir: str, opts: NodeOptions,
              port: int | None, ports: dict[str, int]) -> None:
    """Record the node just started: its processes (for `leave`), how to start it again."""
    previous = noderecord.load()
    noderecord.save(noderecord.NodeRecord(
        address=address,
        host=host,
        head=head,
        temp_dir=temp_dir,
        pids=noderecord.snapshot(temp_dir),
        join_args={**asdict(opts), "temp_dir": temp_dir, "port": port},
        supervisor_pid=previous.supervisor_pid if previous else None,
        ports=ports,
    ))


def fleet_leave(name: str | None = None, address: str | None = None) -> str:
    """Stop this host's worker actor, then exactly this host's own Ray node.

    Only the processes `fleet up` / `fleet join` started here (recorded then, found again by
    the node's own temp dir) are stopped; other Ray clusters of this user keep running.

    Raises:
        UserError: this machine has no node started by `fleet up` / `fleet join`, `name` is
            not the host it recorded, the head's address is malformed, or what answers there
            is no Ray head (`address`) or refuses this machine's token: before anything stops.
    """
    record = noderecord.load()
    if record is None:
        raise UserError(
            "this machine has not joined a fleet with `specfleet fleet up` / `fleet join` "
            "(nothing to leave)"
        )
    if name is not None and name != record.host:  # it would kill that host's worker
        raise UserError(f"--name {name}: this machine is host {record.host} of the fleet at "
                        f"{record.address}, and leave stops only this host's own worker and "
                        f"node; expected --name {record.host}, or no --name")
    head, source = (address, "--address") if address is not None else (record.address, JOINED)
    check_address(head, source)
    enable_token_auth()
    answers = _head_answers(head, source)  # asked before the supervisor or the node stops
    noderecord.stop_supervisor(record)
    try:
        if answers:
            _stop_own_worker(head, record.host)
    finally:
        noderecord.stop_processes(noderecord.own_processes(record))
        noderecord.forget()
    return record.host


def _head_answers(address: str, source: str) -> bool:
    """Whether a Ray head answers at `address` and takes this machine's token, so `leave` can
    stop this host's worker there. Nothing listening is a head gone, its worker with it
    (False). Anything else listening (a web server, the dashboard's port) held `ray.init`
    for ever with signals held. At `--address` either is a mistake, said in one line; at the
    recorded address the node is left all the same (best effort: False), as before.

    Raises:
        UserError: `--address` is no Ray head, or its head refuses this machine's token.
    """
    if connect_error(address, 2.0) is not None:
        return False
    try:
        head_client(address)
    except AuthenticationError:
        if source == JOINED:
            return False
        raise token_refused(address, source) from None
    except RpcError as err:
        if source == JOINED:
            return False
        raise not_a_head(address, source, one_line(str(err))) from None
    return True


def _stop_own_worker(address: str, host: str) -> None:
    """Kill this host's worker for good (best effort: a head gone since it answered is no
    error)."""
    try:
        with ray_connecting():
            ray.init(address=address, **DRIVER_OPTIONS)
        stop_worker(host)
    except (ConnectionError, UserError):
        pass  # the head is gone: its worker actor went with it
    finally:
        ray.shutdown()


def _start_own_worker(address: str, host: str, engines: list[str] | None, command: str,
                      temp_dir: str) -> None:
    """Start this host's worker and wait until it answers.

    Raises:
        UserError: one line when it does not answer within WORKER_READY_S or dies starting,
            naming `command`, the host and where its log is.
    """
    with ray_connecting():
        ray.init(address=address, **DRIVER_OPTIONS)
    logs = f"{temp_dir}/session_latest/logs"
    try:
        kwargs = {"engines": engines} if engines else None
        _wait_while_unavailable(start_worker(host, kwargs), WORKER_READY_S)
    except KeyboardInterrupt:  # its node stops (`_stopped_if_interrupted`): not left pending
        with contextlib.suppress(Exception):
            stop_worker(host)
        raise
    except GetTimeoutError:
        raise UserError(
            f"{command}: the worker of host {host} did not answer within {WORKER_READY_S:g} s; "
            f"the node is up and the worker may still be starting (a loaded machine, or a "
            f"first start compiling Python's bytecode): `specfleet fleet status` shows when it "
            f"is ready, its log is under {logs}") from None
    except RayActorError as err:
        cause = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise UserError(f"{command}: the worker of host {host} died while starting ({cause}); "
                        f"expected it to start: its log is under {logs}") from None
    finally:
        ray.shutdown()


def _wait_while_unavailable(handle, timeout_s: float) -> None:
    """`wait_ready`, waiting on through `ActorUnavailableError`: on a rejoin after a lost node
    the detached worker is restarting (its old address refuses) until Ray places it again.

    Raises:
        GetTimeoutError: no answer within `timeout_s`.
    """
    deadline = time.monotonic() + timeout_s
    remaining_s = timeout_s
    while True:
        try:
            wait_ready(handle, timeout_s=remaining_s)
            return
        except ActorUnavailableError:
            remaining_s = deadline - time.monotonic() - UNAVAILABLE_RETRY_S
            if remaining_s <= 0:
                raise GetTimeoutError("the worker stayed unavailable") from None
            time.sleep(UNAVAILABLE_RETRY_S)


def refuse_running_node(record: noderecord.NodeRecord | None,
                        joining_as: str | None = None) -> None:
    """Refuse a new node where this machine's recorded node still runs: any for `fleet up`
    (a second head would orphan the first); for `fleet join` as `joining_as`, one running as
    the head or as another host (its record replaced, that node left running with nothing to
    stop it). A rejoin as the same host replaces its node (`_stop_stale_node`); a lost node
    (no raylet) is started again, as the supervisor does."""
    if record is None or not noderecord.node_alive(record):
        return
    if joining_as is None:
        raise UserError(running_node_line(record))
    if record.head or record.host != joining_as:
        raise UserError(running_node_line(record, f"`fleet join` as {joining_as}",
                                          f"join as {joining_as}"))


def refuse_foreign_node(temp_dir: str) -> None:
    """Refuse a node in a Ray temp dir that a node this machine's record does not name still
    uses (another SPECFLEET_HOME's or a hand-started one: the same --name gives the same
    default dir). Ray started the second node there, and `leave` on either, finding a node's
    processes by its temp dir, stopped both. A lost node of this record's own is left to
    `refuse_running_node` and `_stop_stale_node`."""
    record = noderecord.load()
    own = ({proc.pid for proc in noderecord.own_processes(record)}
           if record is not None and record.temp_dir == temp_dir else set())
    foreign = [proc for proc in noderecord.node_processes(temp_dir) if proc.pid not in own]
    if foreign:
        raise UserError(
            f"the Ray temp dir {temp_dir} is in use by a Ray node this machine's fleet record "
            f"({noderecord.record_path()}) does not name (pid {foreign[0].pid}: another "
            f"{HOME.name}'s node of the same name?); expected another --name, or "
            "--temp-dir a folder of this node's own")


def _ray_start_or_stop(cmd: list[str], ports: dict[str, int], starting: noderecord.NodeRecord,
                       record: noderecord.NodeRecord | None = None) -> None:
    """`_ray_start`; when it fails, what it started before failing is stopped (found as
    `leave` finds a node): a start that timed out on a loaded machine left a GCS, a monitor
    and a dashboard running that no record named, and the next `up` was refused over them."""
    try:
        _ray_start(cmd, ports, record)
    except UserError:
        noderecord.stop_processes(noderecord.own_processes(starting))
        raise


def _ray_start(cmd: list[str], ports: dict[str, int],
               record: noderecord.NodeRecord | None = None) -> None:
    """Run `ray start` (`cmd`) with specfleet's environment (`start_env`: `ports` moves the
    parts no flag moves); one line when it fails (`start_failure`, `record`: this machine's
    node)."""
    ray_bin = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    if ray_bin is None:
        raise UserError("the `ray` command is not installed: pip install 'ray[default]'")
    done = subprocess.run([ray_bin, *cmd[1:]], env=start_env(ports=ports),
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise UserError(start_failure(cmd, done.stderr or done.stdout or
                                      f"exit status {done.returncode}", record))
