"""The `ray start` command lines of `fleet up` / `fleet join`, what a head's port must be
free of before one starts, and a failed start said in specfleet's terms."""

from __future__ import annotations

import json
import os
import re
import socket
import sys
from dataclasses import dataclass

from specfleet.cluster import noderecord
from specfleet.cluster.raybind import MULTINODE_SWITCH
from specfleet.cluster.reach import host_port
from specfleet.errors import UserError
from specfleet.workers.actor import HOST_LABEL, KIND_LABEL, NO_IDLE_WORKERS, SLOT_RESOURCE

DEFAULT_PORT = 6379
DEFAULT_DASHBOARD_PORT = 8265


@dataclass(frozen=True)
class NodePart:
    """A part of a Ray node that Ray gives a fixed port unless told another.

    Attributes:
        name: its key in `fleet-node.json`'s `ports`.
        default: Ray's port for it.
        flag: the `ray start` flag that moves it, or "".
        variable: where no flag moves it, the environment variable Ray's process reads it
            from (set in `start_env`), or "".
        head_only: started on the head alone.
    """

    name: str
    default: int
    flag: str = ""
    variable: str = ""
    head_only: bool = True


# A second node on this machine (another user, another SPECFLEET_HOME) cannot have these: Ray
# then started the head without its dashboard, its agent's HTTP server or its metrics
# exporters, said nothing (a traceback in the head's logs), and let two Ray Client servers
# share 10001 (gRPC's SO_REUSEPORT), each taking some of the other's connections.
NODE_PARTS = (
    NodePart("dashboard", DEFAULT_DASHBOARD_PORT, "--dashboard-port"),
    NodePart("client_server", 10001, "--ray-client-server-port"),
    NodePart("dashboard_agent", 52365, "--dashboard-agent-listen-port", head_only=False),
    NodePart("autoscaler_metrics", 44217, variable="AUTOSCALER_METRIC_PORT"),
    NodePart("dashboard_metrics", 44227, variable="DASHBOARD_METRIC_PORT"),
)


def choose_ports(head: bool, gcs_port: int | None = None) -> dict[str, int]:
    """A port for each fixed-port part of the node (`NODE_PARTS`): its own (Ray's, or the
    one its variable names here) where nothing here listens on it, else one the system
    says is free now.

    Returns:
        part name -> port, for the parts this node starts.
    """
    taken = {gcs_port}
    ports = {}
    for part in NODE_PARTS:
        if part.head_only and not head:
            continue
        port = _wanted_port(part)
        if port in taken or bind_error(port) is not None:
            port = _free_port(taken)
        ports[part.name] = port
        taken.add(port)
    return ports


def _wanted_port(part: NodePart) -> int:
    """Ray's port for `part`, or the one its variable names here (the way to move it before
    specfleet set the variable itself); a value that is no port leaves Ray's."""
    given = os.environ.get(part.variable, "") if part.variable else ""
    if given.isascii() and given.isdigit() and 0 < int(given) < 65536:
        return int(given)
    return part.default


def bind_error(port: int) -> OSError | None:
    """Why a TCP listener could not bind `port` on every address here (as Ray's parts bind
    it, SO_REUSEADDR; a listener on one address only takes it too), or None."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError as err:
            return err
    return None


def _free_port(taken: set[int | None]) -> int:
    while True:  # the system never hands out a port something listens on; ours are few
        with socket.socket() as sock:
            sock.bind(("0.0.0.0", 0))
            port = sock.getsockname()[1]
        if port not in taken:
            return port


def _port_args(ports: dict[str, int]) -> list[str]:
    return [f"{part.flag}={ports[part.name]}" for part in NODE_PARTS
            if part.flag and part.name in ports]


def up_command(
    name: str,
    kind: str,
    *,
    port: int = DEFAULT_PORT,
    ports: dict[str, int] | None = None,
    num_cpus: int | None = None,
    node_ip: str | None = None,
    temp_dir: str | None = None,
) -> list[str]:
    """The `ray start --head` command line of `fleet up` (the head is also a host); `ports`
    from `choose_ports` (default: Ray's own)."""
    cmd = [
        "ray",
        "start",
        "--head",
        f"--port={port}",
        "--dashboard-host=127.0.0.1",
        "--disable-usage-stats",
    ]
    return cmd + _port_args(ports or {}) + _node_args(name, kind, num_cpus, node_ip, temp_dir)


def join_command(
    head: str,
    name: str,
    kind: str,
    *,
    num_cpus: int | None = None,
    node_ip: str | None = None,
    temp_dir: str | None = None,
    ports: dict[str, int] | None = None,
) -> list[str]:
    """The `ray start --address HEAD` command line of `fleet join`; `ports` from
    `choose_ports` (default: Ray's own)."""
    cmd = ["ray", "start", f"--address={head}", "--disable-usage-stats"]
    return cmd + _port_args(ports or {}) + _node_args(name, kind, num_cpus, node_ip, temp_dir)


def _node_args(
    name: str, kind: str, num_cpus: int | None, node_ip: str | None, temp_dir: str | None
) -> list[str]:
    args = [
        f"--labels={HOST_LABEL}={name},{KIND_LABEL}={kind}",
        f"--resources={json.dumps({SLOT_RESOURCE: 1})}",
    ]
    if num_cpus is not None:
        args.append(f"--num-cpus={num_cpus}")
    if node_ip:
        args.append(f"--node-ip-address={node_ip}")
    if temp_dir:
        # The node's own temp dir: `leave` finds exactly this node's processes by it.
        args.append(f"--temp-dir={temp_dir}")
    return args


def start_env(os_name: str | None = None, ports: dict[str, int] | None = None) -> dict[str, str]:
    """Environment of `ray start`: this process's (its multi-node switch too: off for a
    loopback head), token auth, no usage stats, no idle workers (`NO_IDLE_WORKERS`, as Ray
    reads its settings from `RAY_` variables), the ports of the parts no flag moves (`ports`
    from `choose_ports`), macOS multi-node opt-in."""
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_USAGE_STATS_ENABLED="0",
               **{f"RAY_{name}": str(on).lower() for name, on in NO_IDLE_WORKERS.items()})
    chosen = ports or {}
    env.update({part.variable: str(chosen[part.name]) for part in NODE_PARTS
                if part.variable and part.name in chosen})
    # Ray's opt-in for macOS clusters, unless this process keeps Ray on loopback
    # (`raybind.bind_loopback`: a head whose node address is loopback).
    if (os_name or sys.platform) == "darwin" and env.get(MULTINODE_SWITCH) != "0":
        env[MULTINODE_SWITCH] = "1"
    return env


def node_ip_towards(head: str) -> str:
    """This host's address on the route to the head (no packet is sent)."""
    host = host_port(head)[0]
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((host, DEFAULT_PORT))
        return probe.getsockname()[0]


# The ports `ray start --head` gives its worker processes (as this project starts it): a GCS
# port among them fails inside Ray, in a line that names no flag. (The parts with a fixed
# port move out of the GCS's way: `choose_ports`.)
RAY_WORKER_PORTS = range(10002, 20000)


def check_port_free(port: int) -> None:
    """Refuse a GCS port Ray's head gives its worker processes, or one something here already
    listens on, before `ray start --head`: the head's GCS (every address, SO_REUSEADDR, as
    bound here) failed on it after ~40 s, in a line that named neither the port nor why."""
    if port in RAY_WORKER_PORTS:
        raise UserError(f"--port {port} is one of Ray's worker ports ({RAY_WORKER_PORTS.start}-"
                        f"{RAY_WORKER_PORTS.stop - 1}), which the head gives its worker "
                        f"processes; expected another port, e.g. {DEFAULT_PORT}")
    err = bind_error(port)
    if err is not None:
        raise UserError(f"--port {port}: the head's GCS cannot listen there "
                        f"({err.strerror}); expected a port that no Ray head or other "
                        "program here listens on")


def running_node_line(record: noderecord.NodeRecord, before: str = "a new `fleet up`",
                      to: str = "start a head here") -> str:
    """What this machine already runs, and that `fleet leave` comes first: `before` a new
    node where it runs the head, `to` start one where it is another fleet's host."""
    if record.head:
        return (f"this machine already runs the fleet head {record.host} ({record.address}); "
                "`specfleet fleet status` shows it, `specfleet fleet leave` stops it before "
                f"{before}")
    return (f"this machine is already host {record.host} of the fleet at {record.address}; "
            f"`specfleet fleet status` shows it, `specfleet fleet leave` first to {to}")


_ALREADY_RUNNING = re.compile(r"but is already running at (\S+?)\.?(?:\s|$)")


def start_failure(cmd: list[str], output: str, record: noderecord.NodeRecord | None) -> str:
    """One line for a `ray start` that failed: a head already running on this machine is said
    in specfleet's terms (the recorded head, or another Ray there), else Ray's last line."""
    running = _ALREADY_RUNNING.search(output)
    if running and record is not None and record.head:
        return running_node_line(record)
    if running:
        return (f"a Ray head already runs at {running[1]} on this machine, not one this "
                "machine's `specfleet fleet up` recorded; `specfleet fleet status --address "
                f"{running[1]}` shows it, or give --port another port")
    tail = output.strip().splitlines()
    return f"`{' '.join(cmd[:3])}` failed: {tail[-1] if tail else 'no output'}"


