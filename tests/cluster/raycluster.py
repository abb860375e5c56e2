"""Helpers for tests on a multi-node Ray cluster on one machine (`LocalFleet`).

One cluster per test module (head + one labelled node per host, token auth on, loopback,
fast health checks: a removed node is noticed in about a second). Every wait has a timeout.
"""

from __future__ import annotations

import time
from typing import Any

from ray.exceptions import GetTimeoutError, RayActorError

from specfleet.cluster.localfleet import LocalFleet
from specfleet.jobs.run import Target
from specfleet.workers import actor

# Small model budget (toy models, one bundled model); a load sample at least every second.
WORKER_KWARGS = {"memory_budget_gb": 2.0, "sample_period_s": 1.0}


def start_fleet(hosts: tuple[str, ...] = ("alpha", "beta")) -> LocalFleet:
    """Start the cluster and connect this process (in namespace `specfleet`)."""
    return LocalFleet(list(hosts), worker_kwargs=WORKER_KWARGS).start()


def workers(fleet: LocalFleet, timeout_s: float = 90.0) -> dict[str, Any]:
    """Start (or find) every host's worker and wait until each answers a ping.

    A worker whose node just rejoined is restarting and refuses pings for a while, so this
    retries instead of failing on the first `ActorUnavailableError`.
    """
    handles = {h: actor.start_worker(h, WORKER_KWARGS) for h in fleet.hosts}
    for handle in handles.values():
        assert wait_until(lambda h=handle: _answers(h), timeout_s=timeout_s, every_s=0.2)
    return handles


def _answers(handle: Any) -> bool:
    try:
        actor.wait_ready(handle, timeout_s=5)
        return True
    except (RayActorError, GetTimeoutError):
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
