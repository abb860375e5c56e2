"""A multi-node Ray cluster on one machine: a head and labelled worker nodes, one per host.

Shared by the scheduler and CLI tests (one cluster per test module). Fast health checks so
a removed node is noticed in about a second; every call that waits has a timeout.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

# Before `import ray`: the test cluster stays on loopback with auth off (ENVIRONMENT.md).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402
from ray.exceptions import GetTimeoutError, RayActorError  # noqa: E402

from specfleet.jobs.run import Target  # noqa: E402
from specfleet.workers import actor  # noqa: E402

FAST_HEALTH = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 200,
    "health_check_timeout_ms": 200,
    "health_check_failure_threshold": 3,
}
WORKER_KWARGS = {"memory_budget_gb": 2.0, "sample_period_s": 3600.0}


@dataclass
class FleetCluster:
    """The test cluster: Ray's `Cluster` plus the node of each host."""

    cluster: Cluster
    nodes: dict[str, Any] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return self.cluster.address

    def add_host(self, host: str, kind: str = "linux-cpu") -> None:
        labels = {actor.HOST_LABEL: host, actor.KIND_LABEL: kind}
        self.nodes[host] = self.cluster.add_node(
            num_cpus=1, resources={actor.SLOT_RESOURCE: 1}, labels=labels
        )

    def remove_host(self, host: str) -> None:
        self.cluster.remove_node(self.nodes.pop(host), allow_graceful=False)

    def workers(self) -> dict[str, Any]:
        """Start (or find) every host's worker actor and wait until each answers."""
        handles = {h: actor.start_worker(h, WORKER_KWARGS) for h in self.nodes}
        for handle in handles.values():
            assert wait_until(lambda h=handle: _answers(h), timeout_s=60, every_s=0.2)
        return handles

    def shutdown(self) -> None:
        ray.shutdown()
        self.cluster.shutdown()


def start_fleet(hosts: tuple[str, ...] = ("alpha", "beta")) -> FleetCluster:
    """Head (no CPUs: nothing runs there but the lock actor) plus one node per host."""
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "include_dashboard": False, "_system_config": FAST_HEALTH},
    )
    fleet = FleetCluster(cluster)
    for host in hosts:
        fleet.add_host(host)
    ray.init(address=cluster.address, namespace=actor.NAMESPACE, log_to_driver=False)
    return fleet


def _answers(handle: Any) -> bool:
    try:
        actor.wait_ready(handle, timeout_s=5)
        return True
    except (RayActorError, GetTimeoutError):  # restarting after its node rejoined
        return False


def toy_targets(hosts: tuple[str, ...] = ("alpha", "beta")) -> list[Target]:
    return [Target(host=h, engine="toy", device="cpu") for h in hosts]


def wait_until(predicate, timeout_s: float = 30.0, every_s: float = 0.05) -> bool:
    """Poll `predicate` until it is true or `timeout_s` passes; return the last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every_s)
    return bool(predicate())
