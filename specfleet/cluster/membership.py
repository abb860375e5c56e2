"""Hosts entering and leaving the fleet: `fleet up` (head), `fleet join`, `fleet leave`.

Each wraps `ray start` / `ray stop` with specfleet's settings: token auth, the dashboard on
127.0.0.1, labels `specfleet.host` / `specfleet.kind`, one `specfleet_slot`, and on macOS the
multi-node opt-in plus an explicit node IP. `join` first compares this host's Python and Ray
versions with the head's (read from the head's GCS, as Ray itself does) and says what to
install when they differ: Ray refuses mismatched nodes with a much longer message.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import ray

from specfleet.cluster.fleet import enable_token_auth, ensure_token
from specfleet.errors import UserError
from specfleet.workers.actor import (
    HOST_LABEL,
    KIND_LABEL,
    NAMESPACE,
    SLOT_RESOURCE,
    start_worker,
    stop_worker,
    wait_ready,
)
from specfleet.workers.hardware import detect_host

DEFAULT_PORT = 6379
DEFAULT_DASHBOARD_PORT = 8265
_READ_TIMEOUT_S = 10


@dataclass(frozen=True)
class Membership:
    """What `up` / `join` did: the head address, this host's name and kind."""

    address: str
    host: str
    kind: str


def local_versions() -> dict[str, str]:
    """This interpreter's Python (patch level) and Ray versions."""
    return {"python": platform.python_version(), "ray": ray.__version__}


def read_head_versions(address: str) -> dict[str, str]:
    """The head's Python and Ray versions, from the cluster metadata in its GCS.

    Raises:
        UserError: the head cannot be reached or read.
    """
    from ray._raylet import GcsClient

    _check_reachable(address)
    try:
        client = GcsClient(address=address)
        raw = client.internal_kv_get(
            b"CLUSTER_METADATA", namespace=b"cluster", timeout=_READ_TIMEOUT_S
        )
        meta = json.loads(raw.decode())
    except Exception as err:  # any failure here means: cannot read the head
        raise UserError(f"cannot read versions from head {address}: {_line(err)}") from None
    return {"python": meta["python_version"], "ray": meta["ray_version"]}


def _check_reachable(address: str, timeout_s: float = 3.0) -> None:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise UserError(f"cannot reach the head at {address}: {_line(err)}") from None


def check_versions(head: dict[str, str], local: dict[str, str]) -> None:
    """Raise one line naming what to install when Python or Ray differ from the head's."""
    fixes = []
    if head["python"] != local["python"]:
        fixes.append(f"Python {head['python']} (this host has {local['python']})")
    if head["ray"] != local["ray"]:
        fixes.append(f"ray[default]=={head['ray']} (this host has {local['ray']})")
    if fixes:
        raise UserError(
            "this host does not match the head: install "
            + " and ".join(fixes)
            + ", then run `specfleet fleet join` again"
        )


def up_command(
    name: str,
    kind: str,
    *,
    port: int = DEFAULT_PORT,
    dashboard_port: int = DEFAULT_DASHBOARD_PORT,
    num_cpus: int | None = None,
    node_ip: str | None = None,
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
    return cmd + _node_args(name, kind, num_cpus, node_ip)


def join_command(
    head: str, name: str, kind: str, *, num_cpus: int | None = None, node_ip: str | None = None
) -> list[str]:
    """The `ray start --address HEAD` command line of `fleet join`."""
    cmd = ["ray", "start", f"--address={head}", "--disable-usage-stats"]
    return cmd + _node_args(name, kind, num_cpus, node_ip)


def _node_args(name: str, kind: str, num_cpus: int | None, node_ip: str | None) -> list[str]:
    args = [
        f"--labels={HOST_LABEL}={name},{KIND_LABEL}={kind}",
        f"--resources={json.dumps({SLOT_RESOURCE: 1})}",
    ]
    if num_cpus is not None:
        args.append(f"--num-cpus={num_cpus}")
    if node_ip:
        args.append(f"--node-ip-address={node_ip}")
    return args


def start_env(os_name: str | None = None) -> dict[str, str]:
    """Environment of `ray start`: token auth, no usage stats, macOS multi-node opt-in."""
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_USAGE_STATS_ENABLED="0")
    if (os_name or sys.platform) == "darwin":
        env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "1"  # Ray's opt-in for macOS clusters
    return env


def node_ip_towards(head: str) -> str:
    """This host's address on the route to the head (no packet is sent)."""
    host = head.rsplit(":", 1)[0]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, DEFAULT_PORT))
        return probe.getsockname()[0]


def fleet_up(
    name: str | None = None,
    *,
    port: int = DEFAULT_PORT,
    num_cpus: int | None = None,
    node_ip: str | None = None,
) -> Membership:
    """Start the head (token auth, dashboard on loopback) and this host's worker on it."""
    info = detect_host(name)
    enable_token_auth()
    ensure_token(create=True)
    if node_ip is None and sys.platform == "darwin":
        node_ip = node_ip_towards("8.8.8.8")  # macOS binds loopback unless told otherwise
    _ray_start(up_command(info.name, info.kind, port=port, num_cpus=num_cpus, node_ip=node_ip))
    address = f"{node_ip or _this_ip()}:{port}"
    _start_own_worker(address, info.name)
    remember_fleet(address)
    return Membership(address, info.name, info.kind)


def fleet_join(
    head: str, name: str, *, num_cpus: int | None = None, node_ip: str | None = None
) -> Membership:
    """Join the fleet at `head` as host `name` and start this host's worker.

    Raises:
        UserError: no token, the head unreachable, or Python / Ray differ from the head's.
    """
    info = detect_host(name)
    enable_token_auth()
    ensure_token(create=False)
    check_versions(read_head_versions(head), local_versions())
    if node_ip is None and sys.platform == "darwin":
        node_ip = node_ip_towards(head)
    _ray_start(join_command(head, info.name, info.kind, num_cpus=num_cpus, node_ip=node_ip))
    _start_own_worker(head, info.name)
    remember_fleet(head)
    return Membership(head, info.name, info.kind)


def fleet_leave(name: str | None = None, address: str = "auto") -> str:
    """Stop this host's worker actor, then this machine's Ray node (`ray stop`)."""
    host = name or detect_host().name
    enable_token_auth()
    try:
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
        host = name or _local_host_label() or host
        stop_worker(host)
    except ConnectionError:
        pass  # no Ray running here: nothing to stop but the node processes, if any
    finally:
        ray.shutdown()
    subprocess.run(["ray", "stop"], env=start_env(), check=False, capture_output=True)
    _fleet_marker().unlink(missing_ok=True)
    return host


def _fleet_marker() -> Path:
    from specfleet.engine.models import specfleet_home

    return specfleet_home() / "fleet-address"


def remember_fleet(address: str) -> None:
    """Note the head this machine joined (`up`/`join`), until `leave`."""
    marker = _fleet_marker()
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(address + "\n")


def remembered_fleet() -> str | None:
    """The head this machine joined with `fleet up` / `fleet join`, if it has not left."""
    try:
        return _fleet_marker().read_text().strip() or None
    except OSError:
        return None


def _local_host_label() -> str | None:
    """The `specfleet.host` label this machine's node joined with (`up`/`join --name`)."""
    node_id = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node.get("NodeID") == node_id:
            return (node.get("Labels") or {}).get(HOST_LABEL)
    return None


def _start_own_worker(address: str, host: str) -> None:
    ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
    try:
        wait_ready(start_worker(host), timeout_s=120)
    finally:
        ray.shutdown()


def _ray_start(cmd: list[str]) -> None:
    ray_bin = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    if ray_bin is None:
        raise UserError("the `ray` command is not installed: pip install 'ray[default]'")
    done = subprocess.run([ray_bin, *cmd[1:]], env=start_env(), capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()
        raise UserError(f"`{' '.join(cmd[:3])}` failed: {tail[-1] if tail else done.returncode}")


def _this_ip() -> str:
    from ray._private.services import get_node_ip_address

    return get_node_ip_address()


def _line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else type(err).__name__
