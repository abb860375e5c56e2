"""The worker actor on a real multi-node Ray cluster (one head + two labelled host nodes)."""

from __future__ import annotations

import time

import pytest
import ray

from specfleet.cluster.localfleet import LocalFleet
from specfleet.jobs.run import RunResult, RunSpec, Target
from specfleet.workers.actor import (
    NAMESPACE,
    actor_name,
    get_worker,
    list_workers,
    start_worker,
    worker_options,
)

pytestmark = pytest.mark.slow
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def fleet():
    with LocalFleet(["h1", "h2"], worker_kwargs={"sample_period_s": 3600.0}) as local:
        local.start_workers()
        yield local


def spec(host: str, key: str, model: str = "script", max_tokens: int = 30) -> RunSpec:
    return RunSpec(
        run_key=key,
        target=Target(host=host, engine="toy", device="cpu"),
        model=model,
        prompt_name="p",
        prompt_text="the cat sat on the mat. ",
        arm="graded",
        max_tokens=max_tokens,
    )


def node_of(host: str) -> str:
    (node,) = [
        n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Labels"].get("specfleet.host") == host
    ]
    return node


def test_every_option_is_set_in_one_place() -> None:
    opts = worker_options("h9")
    assert opts["name"] == actor_name("h9") == "specfleet-worker-h9"
    assert opts["namespace"] == NAMESPACE and opts["lifetime"] == "detached"
    assert opts["max_restarts"] == -1 and opts["max_task_retries"] == 0
    assert opts["label_selector"] == {"specfleet.host": "h9"} and opts["num_cpus"] == 0
    assert opts["resources"] == {"specfleet_slot": 1} and "runtime_env" not in opts


def test_workers_land_on_their_labelled_node(fleet: LocalFleet) -> None:
    for host in ("h1", "h2"):
        ping = ray.get(get_worker(host).ping.remote(), timeout=TIMEOUT_S)
        assert ping["host"] == host and ping["node_host_label"] == host
        assert ping["node_id"] == node_of(host)
    assert list_workers() == ["h1", "h2"]


def test_starting_again_returns_the_same_actor(fleet: LocalFleet) -> None:
    first = ray.get(get_worker("h1").ping.remote(), timeout=TIMEOUT_S)
    again = ray.get(start_worker("h1").ping.remote(), timeout=TIMEOUT_S)
    assert again["pid"] == first["pid"]


def test_a_run_returns_its_result_and_a_failure_is_a_result(fleet: LocalFleet) -> None:
    worker = get_worker("h2")
    result = ray.get(worker.run.remote(spec("h2", "r1")), timeout=TIMEOUT_S)
    assert isinstance(result, RunResult) and result.status == "done"
    assert result.output_text == ("the cat sat on the mat. " * 3)[24:54]
    assert result.generated_tokens == 30 and result.accepted > 10
    failed = ray.get(worker.run.remote(spec("h2", "r2", model="fail")), timeout=TIMEOUT_S)
    assert failed.status == "failed" and "failed on purpose" in failed.error


def test_control_calls_answer_while_a_run_is_busy(fleet: LocalFleet) -> None:
    worker = get_worker("h1")
    long_run = worker.run.remote(spec("h1", "long", model="script:20ms", max_tokens=500))
    queued = worker.run.remote(spec("h1", "queued", max_tokens=5))
    deadline = time.monotonic() + TIMEOUT_S
    while not ray.get(worker.ping.remote(), timeout=TIMEOUT_S)["busy"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    start = time.monotonic()
    status = ray.get(worker.status.remote(), timeout=TIMEOUT_S)
    info = ray.get(worker.info.remote(), timeout=TIMEOUT_S)
    quiet = ray.get(worker.quiet.remote(), timeout=TIMEOUT_S)
    assert time.monotonic() - start < 2.0  # a run of ~10 s is in progress meanwhile
    assert status["busy"] and status["run_key"] == "long"
    assert info["name"] == "h1" and "quiet" in quiet
    assert ray.get(worker.cancel.remote("long"), timeout=TIMEOUT_S) is True
    cancelled = ray.get(long_run, timeout=TIMEOUT_S)
    assert cancelled.status == "interrupted" and cancelled.stop_reason == "cancelled"
    after = ray.get(queued, timeout=TIMEOUT_S)  # waited behind the long run, then ran
    assert after.status == "done" and after.started_at >= cancelled.finished_at
