"""Parity forensics on the fleet: ask the worker of a run's target to replay a divergence.

A worker is a plain `HostWorker` (in this process) or its Ray actor handle; both expose
`replay_divergence(spec, tokens_a, tokens_b, row) -> dict` (see `engine/forensics.py`).
"""

from __future__ import annotations

from typing import Any

from specfleet.engine.forensics import Replay, Replayer, margins_from_dict

REPLAY_TIMEOUT_S = 600.0


def _call(worker: Any, *args) -> dict:
    method = worker.replay_divergence
    if hasattr(method, "remote"):  # a Ray actor handle
        import ray

        return ray.get(method.remote(*args), timeout=REPLAY_TIMEOUT_S)
    return method(*args)


def worker_replayer(store, workers: dict[str, Any], any_host: Any | None = None) -> Replayer:
    """A `Replayer` that sends each divergence to the worker of the run's host.

    Args:
        store: the open store the runs come from (for the prompt text and lookup options).
        workers: host name -> HostWorker or its actor handle.
        any_host: a worker that may replay runs of the exact, host-independent "toy" engine
            whatever host they ran on (None: only `workers`).

    Returns:
        The replayer; it returns None for a run whose host has no worker here.
    """

    def replay(plain, run, row: int) -> Replay | None:
        worker = workers.get(run.host)
        if worker is None and run.engine == "toy":
            worker = any_host
        if worker is None:
            return None
        spec = store.run_spec(run.run_key)
        data = _call(worker, spec, list(plain.token_ids or []), list(run.token_ids or []), row)
        return Replay(margins_from_dict(data["margins"]), data["text_a"], data["text_b"])

    return replay
