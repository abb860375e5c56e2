"""The `ray start` command lines of `fleet up` / `fleet join`, what a head's port must be
free of before one starts, and a failed start said in specfleet's terms."""

from __future__ import annotations

import json
import os
import re
import socket
import sys

from specfleet.cluster import noderecord
from specfleet.cluster.reach import host_port
from specfleet.errors import UserError
from specfleet.workers.actor import HOST_LABEL, KIND_LABEL, SLOT_RESOURCE

DEFAULT_PORT = 6379
DEFAULT_DASHBOARD_PORT = 8265


def up_command(
    name: str,
    kind: str,
    *,
    port: int = DEFAULT_PORT,
    dashboard_port: int = DEFAULT_DASHBOARD_PORT,
    num_cpus: int | None = None,
    node_ip: str | None = None,
    temp_dir: str | None = None,
) -> list[str]:
    """The `ray start --head` command line of `fleet up` (the head is also a host)."""
    cmd = [
        "ray",
        "start",
        "--head",
        f"--port={port}",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard_port}",
        "--disable-usage-stats",
    ]
    return cmd + _node_args(name, kind, num_cpus, node_ip, temp_dir)


def join_command(
    head: str,
    name: str,
    kind: str,
    *,
    num_cpus: int | None = None,
    node_ip: str | None = None,
    temp_dir: str | None = None,
) -> list[str]:
    """The `ray start --address HEAD` command line of `fleet join`."""
    cmd = ["ray", "start", f"--address={head}", "--disable-usage-stats"]
    return cmd + _node_args(name, kind, num_cpus, node_ip, temp_dir)


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


def start_env(os_name: str | None = None) -> dict[str, str]:
    """Environment of `ray start`: token auth, no usage stats, macOS multi-node opt-in."""
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_USAGE_STATS_ENABLED="0")
    if (os_name or sys.platform) == "darwin":
        env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "1"  # Ray's opt-in for macOS clusters
    return env


def node_ip_towards(head: str) -> str:
    """This host's address on the route to the head (no packet is sent)."""
    host = host_port(head)[0]
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((host, DEFAULT_PORT))
        return probe.getsockname()[0]


# The ports `ray start --head` gives its own parts (as this project starts it): a GCS port
# among them fails inside Ray, in a line that names no flag.
RAY_OWN_PORTS = (
    (range(10002, 20000), "one of Ray's worker ports (10002-19999)"),
    (range(10001, 10002), "Ray's client server port"),
    (range(DEFAULT_DASHBOARD_PORT, DEFAULT_DASHBOARD_PORT + 1), "the dashboard's port"),
    (range(52365, 52366), "the dashboard agent's port"),
)


def check_port_free(port: int) -> None:
    """Refuse a GCS port Ray's head gives one of its own parts, or one something here already
    listens on, before `ray start --head`: the head's GCS (every address, SO_REUSEADDR, as
    bound here) failed on it after ~40 s, in a line that named neither the port nor why."""
    for ports, what in RAY_OWN_PORTS:
        if port in ports:
            raise UserError(f"--port {port} is {what}, which the head uses itself; expected "
                            f"another port, e.g. {DEFAULT_PORT}")
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError as err:
            raise UserError(f"--port {port}: the head's GCS cannot listen there "
                            f"({err.strerror}); expected a port that no Ray head or other "
                            "program here listens on") from None


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


