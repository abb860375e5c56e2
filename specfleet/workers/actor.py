"""The thin Ray wrapper of `HostWorker`, and every Ray option of a worker, in one place.

One detached, named actor per host, pinned to that host's node by its label. Calls:

- `run(spec: RunSpec) -> RunResult`, `calibrate(...)`, `replay_divergence(...)`
                                                  group "run" (one at a time)
- `ping() -> dict`, `info() -> dict`, `status() -> dict`, `quiet() -> dict`, `conditions() -> dict`,
  `cancel(run_key=None) -> bool`, `result(run_key) -> RunResult | None`,
  `check_models(asks) -> list[ModelCheck]`, `drain_load_samples() -> list[dict]`
                                                  group "control" (never wait behind a run)

Everything returned is a small dict or pydantic model, never a tensor.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

import ray

from specfleet.jobs.run import RunResult, RunSpec
from specfleet.workers.host import HostWorker
from specfleet.workers.loaded import ModelCheck

NAMESPACE = "specfleet"
# How every driver joins Ray: our namespace, worker logs left in Ray's session dir, and only
# Ray's warnings on the CLI (its INFO "Started a local Ray instance" is not ours to print).
DRIVER_OPTIONS: dict[str, Any] = {"namespace": NAMESPACE, "log_to_driver": False,
                                  "logging_level": logging.WARNING}
# Ray starts idle Python workers for tasks at a node's start and a first driver's connect; a
# fleet runs only its worker actors, so they only cost CPU while runs are timed (~0.7
# CPU-seconds each on 2 cores, then their share of the idle background).
NO_IDLE_WORKERS = {"enable_worker_prestart": False, "prestart_worker_first_driver": False}
HOST_LABEL = "specfleet.host"
KIND_LABEL = "specfleet.kind"
SLOT_RESOURCE = "specfleet_slot"
ACTOR_PREFIX = "specfleet-worker-"
CONTROL_THREADS = 4


def actor_name(host: str) -> str:
    """The Ray name of a host's worker actor."""
    return f"{ACTOR_PREFIX}{host}"


def worker_options(host: str) -> dict[str, Any]:
    """Every Ray option of a host's worker actor, each with its reason."""
    return {
        # Found by name from any driver (scheduler, CLI) without passing handles around.
        "name": actor_name(host),
        # Our names never collide with another Ray application's.
        "namespace": NAMESPACE,
        # Outlives the driver that started it: a closed laptop does not stop the hosts.
        "lifetime": "detached",
        # Starting twice (join, then connect) yields the same actor, never two workers.
        "get_if_exists": True,
        # Comes back whenever its host rejoins, however often that happens.
        "max_restarts": -1,
        # A benchmark is not idempotent: a run lost with its worker is never replayed.
        "max_task_retries": 0,
        # Pinned by label, never by node id: node ids change when a host rejoins.
        "label_selector": {HOST_LABEL: host},
        # Holds no CPU: the engine's threads need every core Ray would account for.
        "num_cpus": 0,
        # Each host's node offers one slot: at most one worker per host.
        "resources": {SLOT_RESOURCE: 1},
        # No runtime_env: nothing from the driver's environment is shipped to the host.
    }


@ray.remote(concurrency_groups={"control": CONTROL_THREADS, "run": 1})
class WorkerActor:
    """Ray actor around one `HostWorker` (see module docstring for the call groups)."""

    def __init__(self, host: str, worker_kwargs: dict | None = None) -> None:
        self._worker = HostWorker(host, **(worker_kwargs or {}))

    @ray.method(concurrency_group="run")
    def run(self, spec: RunSpec) -> RunResult:
        return self._worker.run(spec)

    @ray.method(concurrency_group="run")  # never beside a timed run
    def calibrate(
        self, model: str, engine: str, device: str, max_width: int = 33, quick: bool = False
    ) -> dict:
        return self._worker.calibrate(model, engine, device, max_width, quick)

    @ray.method(concurrency_group="run")  # shares the runner's caches with timed runs
    def replay_divergence(
        self, spec: RunSpec, tokens_a: list[int], tokens_b: list[int], row: int
    ) -> dict:
        return self._worker.replay_divergence(spec, tokens_a, tokens_b, row)

    @ray.method(concurrency_group="control")
    def ping(self) -> dict:
        context = ray.get_runtime_context()
        return {
            **self._worker.ping(),
            "node_id": context.get_node_id(),
            "node_host_label": context.get_node_labels().get(HOST_LABEL),
        }

    @ray.method(concurrency_group="control")
    def info(self) -> dict:
        return self._worker.info()

    @ray.method(concurrency_group="control")
    def status(self) -> dict:
        return self._worker.status()

    @ray.method(concurrency_group="control")
    def quiet(self) -> dict:
        return asdict(self._worker.quiet_check())

    @ray.method(concurrency_group="control")
    def conditions(self) -> dict:
        return self._worker.conditions()

    @ray.method(concurrency_group="control")
    def cancel(self, run_key: str | None = None) -> bool:
        return self._worker.cancel(run_key)

    @ray.method(concurrency_group="control")
    def result(self, run_key: str) -> RunResult | None:
        return self._worker.result(run_key)

    @ray.method(concurrency_group="control")  # resolves only: never waits behind a run
    def check_models(self, asks: list[tuple[str, str, int]]) -> list[ModelCheck]:
        return self._worker.check_models(asks)

    @ray.method(concurrency_group="control")
    def drain_load_samples(self) -> list[dict]:
        return self._worker.drain_load_samples()


def start_worker(host: str, worker_kwargs: dict | None = None) -> Any:
    """Start the worker actor of `host` (or return the running one).

    Needs a Ray connection and, for the actor to be placed, a node labelled
    `specfleet.host=<host>` offering one `specfleet_slot`.

    Args:
        host: the host's fleet name.
        worker_kwargs: keyword arguments of `HostWorker` (e.g. memory_budget_gb).

    Returns:
        The actor handle (creation is asynchronous: `wait_ready` waits for it).
    """
    # @ray.remote made it an ActorClass (with .options); mypy still sees the plain class.
    return WorkerActor.options(**worker_options(host)).remote(  # type: ignore[attr-defined]
        host, worker_kwargs)


def get_worker(host: str) -> Any | None:
    """The worker actor handle of `host`, or None when there is none."""
    try:
        return ray.get_actor(actor_name(host), namespace=NAMESPACE)
    except ValueError:
        return None


def wait_ready(handle: Any, timeout_s: float = 60.0) -> dict:
    """Wait until the worker answers `ping`; return the ping.

    Raises:
        ray.exceptions.GetTimeoutError: no answer within `timeout_s`.
    """
    return ray.get(handle.ping.remote(), timeout=timeout_s)


def stop_worker(host: str) -> bool:
    """Kill the worker of `host` for good (no restart). True when there was one."""
    handle = get_worker(host)
    if handle is None:
        return False
    ray.kill(handle, no_restart=True)
    return True


def list_workers() -> list[str]:
    """Host names of every worker actor known to the cluster, alive or restarting."""
    from ray.util import list_named_actors

    names = list_named_actors(all_namespaces=True)
    return sorted(
        a["name"][len(ACTOR_PREFIX) :]
        for a in names
        if a.get("namespace") == NAMESPACE and a["name"].startswith(ACTOR_PREFIX)
    )
