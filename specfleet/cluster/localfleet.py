"""A simulated fleet on one machine: a Ray head plus one labelled node per host name.

For tests and `bench/scheduler.py`: each "host" is a real raylet labelled
`specfleet.host=<name>` with one `specfleet_slot`, so worker actors land exactly as on a
real fleet, and removing / re-adding a node is a host leaving and rejoining (a fleet whose
first host sits on the head node, `first_host_on_head`, starts one node fewer). Token auth is
on (a throwaway token file), everything binds to 127.0.0.1, health checks are fast.

    with LocalFleet(["h1", "h2"]) as fleet:
        workers = fleet.start_workers()
        ...
        fleet.remove_host("h1"); fleet.add_host("h1")
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ray

from specfleet.cluster.raybind import MULTINODE_SWITCH, bind_loopback
from specfleet.cluster.raytoken import enable_token_auth, ensure_token, reload_auth
from specfleet.workers.actor import (
    DRIVER_OPTIONS,
    HOST_LABEL,
    KIND_LABEL,
    NO_IDLE_WORKERS,
    SLOT_RESOURCE,
    start_worker,
    wait_ready,
)

# A lost node is declared dead after ~3 missed 200 ms checks instead of ~30 s.
FAST_HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 200,
    "health_check_timeout_ms": 500,
    "health_check_failure_threshold": 3,
}
_AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", MULTINODE_SWITCH)


class LocalFleet:
    """Head + one labelled node per host, the driver connected in namespace `specfleet`.

    Args:
        hosts: host names, one node each.
        kind: the `specfleet.kind` label of every node.
        cpus_per_host: CPUs each host node accounts (the head has 1 and no slot).
        worker_kwargs: `HostWorker` keyword arguments for `start_workers`.
        distinct_machines: give each host's worker its own machine id (`sim-<host>`), so a
            scheduler treats the hosts as separate machines; by default they report this
            machine's real id (they do share its cores).
        first_host_on_head: the first host's label and slot go on the head node (one Ray
            node, its agents and their start fewer; that host cannot be removed).
    """

    def __init__(
        self,
        hosts: Sequence[str],
        *,
        kind: str = "linux-cpu",
        cpus_per_host: int = 1,
        worker_kwargs: dict | None = None,
        distinct_machines: bool = False,
        first_host_on_head: bool = False,
    ) -> None:
        self.hosts = list(hosts)
        self.first_host_on_head = first_host_on_head and bool(self.hosts)
        self.kind = kind
        self.cpus_per_host = cpus_per_host
        self.worker_kwargs = worker_kwargs
        self.distinct_machines = distinct_machines
        self.cluster: Any = None
        self._nodes: dict[str, Any] = {}
        self._saved_env: dict[str, str | None] = {}
        self._saved_multinode = True
        self._tmp = tempfile.TemporaryDirectory(prefix="specfleet-fleet-")

    @property
    def address(self) -> str:
        return self.cluster.address

    def start(self) -> LocalFleet:
        """Start the head and every host node, then connect this process."""
        from ray._private import ray_constants
        from ray.cluster_utils import Cluster

        self._saved_env = {k: os.environ.get(k) for k in _AUTH_ENV}
        self._saved_multinode = ray_constants.ENABLE_RAY_CLUSTER
        os.environ["RAY_AUTH_TOKEN_PATH"] = str(Path(self._tmp.name) / "auth_token")
        enable_token_auth()
        ensure_token(create=True)
        bind_loopback()
        head_args = {"num_cpus": 1, "include_dashboard": False,
                     "_system_config": {**FAST_HEALTH_CHECKS, **NO_IDLE_WORKERS}}
        if self.first_host_on_head:
            head_args |= self._host_node_args(self.hosts[0])
            head_args["num_cpus"] = 1 + self.cpus_per_host  # the head's own CPU kept
        self.cluster = Cluster(initialize_head=True, head_node_args=head_args)
        if self.first_host_on_head:
            self._nodes[self.hosts[0]] = self.cluster.head_node
        for host in self.hosts[1 if self.first_host_on_head else 0:]:
            self.add_host(host)
        ray.init(address=self.cluster.address, **DRIVER_OPTIONS)
        return self

    def _host_node_args(self, host: str) -> dict[str, Any]:
        return {"num_cpus": self.cpus_per_host,
                "labels": {HOST_LABEL: host, KIND_LABEL: self.kind},
                "resources": {SLOT_RESOURCE: 1}}

    def add_host(self, host: str) -> Any:
        """Add (or re-add) the node standing for `host`."""
        node = self.cluster.add_node(**self._host_node_args(host))
        self._nodes[host] = node
        return node

    def remove_host(self, host: str) -> None:
        """Kill the node of `host` at once (a host lost without notice)."""
        if self._nodes[host] is self.cluster.head_node:
            raise ValueError(f"{host} is on the head node (first_host_on_head): it cannot be "
                             "removed")
        self.cluster.remove_node(self._nodes.pop(host), allow_graceful=False)

    def start_workers(self, timeout_s: float = 120.0) -> dict[str, Any]:
        """Start every host's worker actor and wait until each answers a ping."""
        handles = {h: start_worker(h, self.worker_kwargs_for(h)) for h in self.hosts}
        for handle in handles.values():
            wait_ready(handle, timeout_s)
        return handles

    def worker_kwargs_for(self, host: str) -> dict:
        """The `HostWorker` keyword arguments of `host`'s worker."""
        kwargs = dict(self.worker_kwargs or {})
        if self.distinct_machines:
            kwargs.setdefault("machine_id", f"sim-{host}")
        return kwargs

    def shutdown(self) -> None:
        """Disconnect, stop every node and restore the auth environment."""
        try:
            ray.shutdown()
            if self.cluster is not None:
                self.cluster.shutdown()
        finally:
            self._restore_env()
            self._tmp.cleanup()

    def _restore_env(self) -> None:
        from ray._private import ray_constants

        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        ray_constants.ENABLE_RAY_CLUSTER = self._saved_multinode
        reload_auth()

    def __enter__(self) -> LocalFleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
