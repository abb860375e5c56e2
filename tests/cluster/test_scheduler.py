"""The scheduler on a real multi-node Ray cluster (head + two labelled nodes = two hosts).

Toy-engine runs keep it fast; one short real torch run when the bundled model is present.
Faults: a node removed mid-matrix, a run failing inside the worker, a worker gone silent
(SIGSTOP) mid-run: cut loose in seconds, its late result stored once, or given up.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC

import pytest
import ray

from specfleet.cluster.scheduler import SchedulerOptions, dispatch_runs, run_matrix
from specfleet.engine.config import LookupOptions
from specfleet.jobs.plan import run_key
from specfleet.jobs.run import RunSpec, Target
from specfleet.store import open_store
from specfleet.workers import actor
from tests.cluster.raycluster import WORKER_KWARGS, start_fleet, wait_until, workers
from tests.workers.conditions.conftest import FIXTURES as CONDITIONS_FIXTURES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

FAST = SchedulerOptions(progress=False, host_wait_s=0.5, call_timeout_s=10.0, poll_s=0.1)
READY_S = 120.0  # a worker's start on a loaded 2-core box (self-test included)
PROMPT = "def add(a, b):\n    return a + b\n" * 3


@pytest.fixture(scope="module")
def fleet():
    cluster = start_fleet(("alpha", "beta"))
    cluster.handles = workers(cluster)
    yield cluster
    cluster.shutdown()


@pytest.fixture
def store(tmp_path):
    with open_store(f"sqlite:///{tmp_path / 'store.db'}") as opened:
        yield opened


def make_runs(matrix_id: str, plan: dict[str, list[tuple[str, str, int]]]) -> list[RunSpec]:
    """RunSpecs for (model, arm, max_tokens) per host, on the toy engine."""
    runs = []
    for host, items in plan.items():
        target = Target(host=host, engine="toy", device="cpu")
        for i, (model, arm, max_tokens) in enumerate(items):
            runs.append(RunSpec(
                run_key=run_key(matrix_id, host, model, arm, i), matrix_id=matrix_id,
                target=target, model=model, prompt_name=f"p{i}", prompt_text=PROMPT,
                arm=arm, repeat=i, max_tokens=max_tokens,
            ))
    return runs


def new_matrix(store, name: str, plan) -> tuple[str, list[RunSpec]]:
    runs = make_runs(name, plan)
    return store.create_matrix(name, {"name": name}, runs, matrix_id=name), runs


def statuses(store, matrix_id: str) -> dict[str, str]:
    return {row.run_key: row.status for row in store.runs(matrix=matrix_id)}


def assert_no_overlap(rows, machine_of=lambda row: row.host) -> None:
    by_machine = defaultdict(list)
    for row in rows:
        by_machine[machine_of(row)].append((row.started_at, row.finished_at, row.run_key))
    for spans in by_machine.values():
        spans.sort()
        for (_, end, key), (start, _, nxt) in zip(spans, spans[1:], strict=False):
            assert start >= end, f"{nxt} started before {key} finished"


def test_every_run_is_stored_once_in_plan_order_per_host(fleet, store):
    quick = [("script:1ms", arm, 12) for arm in ("plain", "graded", "gated")] * 3
    matrix_id, runs = new_matrix(store, "basic", {"alpha": quick, "beta": quick[:4]})
    events = []
    outcome = run_matrix(store, matrix_id, fleet.handles, events.append, options=FAST)
    assert (outcome.status, outcome.done, outcome.failed, outcome.pending) == ("done", 13, 0, 0)
    assert outcome.hosts["alpha"].done == 9 and outcome.hosts["beta"].done == 4
    rows = store.runs(matrix=matrix_id)
    assert len(rows) == 13 and {r.status for r in rows} == {"done"}
    assert all(r.generated_tokens == 12 for r in rows)
    assert_no_overlap(rows)
    for host in ("alpha", "beta"):  # each host ran its queue in plan order
        started = [e.run_key for e in events if e.host == host and e.status == "running"]
        assert started == [r.run_key for r in runs if r.target.host == host]
    assert store.get_matrix(matrix_id).status == "done"
    samples = store.load_samples(matrix_id=matrix_id)  # drained from both workers at the end
    assert {s.host for s in samples} == {"alpha", "beta"}


def test_two_matrices_at_once_and_hosts_sharing_a_machine_never_overlap(fleet, tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    plan = {"alpha": [("script:5ms", "plain", 20)] * 5, "beta": [("script:5ms", "plain", 20)] * 5}
    one_machine = {"alpha": "box", "beta": "box"}
    outcomes = {}

    def submit(name: str) -> None:
        with open_store(url) as own:
            matrix_id, _ = new_matrix(own, name, plan)
            outcomes[name] = run_matrix(own, matrix_id, fleet.handles, options=FAST,
                                        machines=one_machine)

    threads = [threading.Thread(target=submit, args=(n,)) for n in ("first", "second")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert {o.status for o in outcomes.values()} == {"done"}
    with open_store(url) as check:
        rows = check.runs(status="done")
    assert len(rows) == 20
    assert_no_overlap(rows, machine_of=lambda row: "box")
    order = [row.matrix_id for row in sorted(rows, key=lambda row: row.started_at)]
    turns = sum(a != b for a, b in zip(order, order[1:], strict=False))
    assert turns >= 2, order  # the machine lease passes between the matrices, none starves


def test_a_run_failing_in_the_worker_is_failed_and_the_matrix_goes_on(fleet, store):
    plan = {"alpha": [("script:1ms", "plain", 8), ("fail", "graded", 8),
                      ("script:1ms", "gated", 8)],
            "beta": [("script:1ms", "plain", 8)] * 2}
    matrix_id, runs = new_matrix(store, "failing", plan)
    outcome = run_matrix(store, matrix_id, fleet.handles, options=FAST)
    assert (outcome.done, outcome.failed, outcome.status) == (4, 1, "failed")
    failed = store.runs(matrix=matrix_id, status="failed")
    assert [r.run_key for r in failed] == [runs[1].run_key]
    assert failed[0].error == "RuntimeError: toy model failed on purpose"
    assert outcome.hosts["alpha"].health == "healthy"


def test_runs_of_a_host_without_worker_stay_pending(fleet, store):
    matrix_id, _ = new_matrix(store, "orphan", {"alpha": [("script:1ms", "plain", 4)],
                                                "gamma": [("script:1ms", "plain", 4)] * 2})
    outcome = run_matrix(store, matrix_id, {"alpha": fleet.handles["alpha"]}, options=FAST)
    assert (outcome.done, outcome.pending, outcome.status) == (1, 2, "interrupted")
    assert store.get_matrix(matrix_id).counts == {"done": 1, "pending": 2}


def test_lost_node_interrupts_its_run_the_other_host_finishes_resume_completes(fleet, store):
    slow = [("script:40ms", "plain", 40)] * 3  # ~1.6 s each: the node goes mid-run
    quick = [("script:1ms", "plain", 8)] * 6
    matrix_id, runs = new_matrix(store, "lost", {"alpha": slow, "beta": quick})
    first_alpha = runs[0].run_key
    result = {}
    worker = threading.Thread(target=lambda: result.update(
        outcome=run_matrix(store, matrix_id, fleet.handles, options=FAST)))
    worker.start()
    assert wait_until(lambda: statuses(store, matrix_id)[first_alpha] == "running", 30)
    fleet.remove_host("alpha")
    worker.join(timeout=60)
    outcome = result["outcome"]
    assert outcome.hosts["alpha"].interrupted == 1 and outcome.hosts["alpha"].pending == 2
    assert outcome.hosts["beta"].done == 6 and outcome.status == "interrupted"
    after_loss = statuses(store, matrix_id)
    assert after_loss[first_alpha] == "interrupted"
    assert "worker lost" in store.runs(matrix=matrix_id, status="interrupted")[0].error

    fleet.add_host("alpha")  # the host rejoins with the same labels; its actor comes back
    fleet.handles = workers(fleet)
    again = run_matrix(store, matrix_id, fleet.handles, options=FAST)  # pending runs only
    assert (again.done, again.interrupted, again.status) == (2, 0, "interrupted")
    assert statuses(store, matrix_id)[first_alpha] == "interrupted"  # never replayed silently
    outcome = run_matrix(store, matrix_id, fleet.handles, options=FAST, requeue=True)
    assert (outcome.status, outcome.done, outcome.failed) == ("done", 1, 0)
    rows = store.runs(matrix=matrix_id)
    assert len(rows) == len(runs) and len({r.run_key for r in rows}) == len(runs)
    assert {r.status for r in rows} == {"done"}
    assert_no_overlap(rows)


def test_a_worker_process_lost_mid_run_is_interrupted_and_the_host_comes_back(fleet, store):
    plan = {"alpha": [("script:1ms", "plain", 6), ("exit", "plain", 6),
                      ("script:1ms", "plain", 6), ("script:1ms", "graded", 6)]}
    matrix_id, runs = new_matrix(store, "exit", plan)
    events: list = []
    outcome = run_matrix(store, matrix_id, fleet.handles, events.append,
                         options=replace(FAST, host_wait_s=60.0))
    assert (outcome.done, outcome.interrupted, outcome.pending) == (3, 1, 0)
    assert outcome.hosts["alpha"].health == "healthy"  # answered a ping again after restart
    assert statuses(store, matrix_id)[runs[1].run_key] == "interrupted"
    # Said as it went suspect, then back: the "back ... suspect" line stood alone before.
    news = [(e.status, e.reason) for e in events if e.status in ("suspect", "back")]
    assert [status for status, _ in news] == ["suspect", "back"], news
    assert news[0][1] == ("suspect: its worker was lost during a run, which is interrupted; "
                          "waiting up to 60 s for it (--wait)")


def test_require_quiet_waits_for_quiet_then_runs_anyway_flagged_noisy(fleet, store):
    # A real worker whose quiet check never passes (threshold 0 busy cores).
    loud = actor.WorkerActor.options(
        num_cpus=0, label_selector={actor.HOST_LABEL: "beta"}, max_restarts=0
    ).remote("beta", {**WORKER_KWARGS, "quiet_threshold_per_core": 0.0})
    try:
        # Started as a fleet starts its workers: a worker still in its constructor (self-test,
        # memory probe) answers no ping, and on a loaded box that outlasts unreachable_after_s.
        actor.wait_ready(loud, timeout_s=READY_S)
        matrix_id, _ = new_matrix(store, "quiet", {"beta": [("script:1ms", "plain", 4)] * 2})
        started = time.monotonic()
        outcome = run_matrix(store, matrix_id, {"beta": loud},
                             options=replace(FAST, require_quiet=True, quiet_wait_s=0.6))
        assert time.monotonic() - started >= 1.2  # each run waited its full quiet_wait_s
        assert outcome.done == 2
        assert [row.noisy for row in store.runs(matrix=matrix_id)] == [True, True]
    finally:
        ray.kill(loud)  # a second worker on beta left running would hold the machine's lock


def test_a_run_sent_behind_a_run_its_driver_left_says_what_it_waits_for(fleet, store):
    # A driver SIGKILLed mid-run: its machine lease went with it (Ray marks its job dead), its
    # run went on to its end on the worker, and the next driver's run, sent there at once,
    # waited behind it without a word (bars and --no-progress alike).
    (left,) = make_runs("left", {"alpha": [("script:100ms", "plain", 40)]})  # ~4 s
    left_ref = fleet.handles["alpha"].run.remote(left)  # no scheduler waits for it
    assert wait_until(lambda: ray.get(fleet.handles["alpha"].ping.remote(), timeout=10)["busy"],
                      timeout_s=60, every_s=0.1)
    matrix_id, (run,) = new_matrix(store, "after", {"alpha": [("script:1ms", "plain", 4)]})
    events = []
    outcome = run_matrix(store, matrix_id, fleet.handles, events.append, options=FAST)
    assert outcome.done == 1 and ray.get(left_ref, timeout=60).status == "done"
    said = [(e.status, e.reason) for e in events if e.run_key == run.run_key]
    behind = [reason for status, reason in said if status == "behind"]
    assert behind and behind[0].startswith(f"busy with run {left.run_key[:12]}, not this one"), said
    assert said[0][0] == "running" and said[-1][0] == "done", said  # sent, then ran


def test_dispatch_runs_with_nothing_to_do_returns_at_once(fleet, store):
    assert dispatch_runs(store, [], fleet.handles, options=FAST) == {}


def test_one_short_real_torch_run_on_the_bundled_model(fleet, store):
    from specfleet.models.bundled import fetch_bundled

    fetch_bundled()  # already in the user cache on a prepared machine
    spec = RunSpec(
        run_key=run_key("torch", "alpha"), matrix_id="torch", model="smollm2-135m",
        target=Target(host="alpha", engine="torch", device="cpu"), prompt_name="hi",
        prompt_text="Say hi.", arm="graded", lookup=LookupOptions(max_draft=2), max_tokens=6,
    )
    store.create_matrix("torch", {"name": "torch"}, [spec], matrix_id="torch")
    outcome = run_matrix(store, "torch", fleet.handles, options=FAST)
    assert (outcome.status, outcome.done) == ("done", 1)
    (row,) = store.runs(matrix="torch")
    assert 1 <= row.generated_tokens <= 6 and row.output_text and row.tok_per_s > 0
    assert row.resolved_policy == "graded" and row.weights_hash


def test_a_throttled_host_is_flagged_and_require_quiet_waits_for_it_to_cool(fleet, store,
                                                                            tmp_path):
    # A simulated throttle source: the worker reads its Linux conditions from a sysfs tree
    # this test writes (HostWorker(conditions_root=...)), and the test heats and cools a
    # thermal zone in it. quiet_pids=[]: other processes on this shared box never count.
    root = tmp_path / "root"
    shutil.copytree(CONDITIONS_FIXTURES / "sysfs", root)
    (root / "sys/devices/system/cpu/cpu1/cpufreq/scaling_max_freq").write_text("3400000\n")
    zone = root / "sys/class/thermal/thermal_zone0/temp"
    zone.write_text("99000\n")
    hot = actor.WorkerActor.options(
        num_cpus=0, label_selector={actor.HOST_LABEL: "beta"}, max_restarts=0
    ).remote("beta", {**WORKER_KWARGS, "quiet_pids": [], "conditions_root": str(root)})
    reason = "thermal zone x86_pkg_temp at 99.0 °C (passive trip 95.0 °C)"
    try:
        actor.wait_ready(hot, timeout_s=READY_S)
        flagged, _ = new_matrix(store, "hot", {"beta": [("script:1ms", "plain", 4)]})
        run_matrix(store, flagged, {"beta": hot}, options=FAST)
        (row,) = store.runs(matrix=flagged)
        assert (row.status, row.throttled, row.throttle_reason) == ("done", True, reason)
        assert row.conditions["before"]["thermal_zones"][0]["temp_c"] == 99.0

        cooled_at: list[float] = []

        def cool() -> None:
            time.sleep(2.0)
            zone.write_text("50000\n")
            cooled_at.append(time.time())

        threading.Thread(target=cool, daemon=True).start()
        events: list = []
        waited, _ = new_matrix(store, "cooled", {"beta": [("script:1ms", "plain", 4)]})
        run_matrix(store, waited, {"beta": hot}, events.append,
                   options=replace(FAST, require_quiet=True, quiet_wait_s=60.0))
        (row,) = store.runs(matrix=waited)
        assert row.status == "done" and row.throttled is False and row.throttle_reason is None
        assert row.started_at.replace(tzinfo=UTC).timestamp() >= cooled_at[0] - 0.5
        waiting = [e.reason for e in events if e.status == "waiting"]
        assert waiting == [f"host throttled: {reason}"], events

        zone.write_text("99000\n")
        events.clear()
        bounded, _ = new_matrix(store, "bounded", {"beta": [("script:1ms", "plain", 4)]})
        run_matrix(store, bounded, {"beta": hot}, events.append,
                   options=replace(FAST, require_quiet=True, quiet_wait_s=1.5))
        (row,) = store.runs(matrix=bounded)
        assert row.status == "done" and row.throttled is True
        gave_up = [e.reason for e in events if e.status == "gave up"]
        assert gave_up == [f"gave up waiting after 1.5 s (host throttled: {reason}); "
                           "running anyway, flagged"], events
    finally:
        ray.kill(hot)


# ---- a host gone silent, on the scheduler's own terms (its worker SIGSTOPped: no answer, no
# error, exactly what a cut link looks like from the driver) --------------------------------

SILENCE = replace(FAST, unreachable_after_s=1.5, ping_every_s=0.25, settle_max_s=0.5)


@contextmanager
def stopped(handle):
    """The worker process of `handle` stopped (SIGSTOP) until the block ends (SIGCONT)."""
    pid = ray.get(handle.ping.remote(), timeout=10)["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        yield time.monotonic()
    finally:
        os.kill(pid, signal.SIGCONT)


def run_in_thread(store, matrix_id, handles, options, events):
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(outcome=run_matrix(
        store, matrix_id, handles, events.append, options=options)), daemon=True)
    thread.start()
    return thread, result


def test_a_slow_step_is_not_cut_a_silent_host_is_and_its_late_result_is_stored_once(
        fleet, store):
    # Each forward of the first run sleeps 2 s, longer than the 1.5 s silence bound: the
    # worker still answers pings (control group), so only the SIGSTOP below cuts it loose.
    plan = {"alpha": [("script:2000ms", "plain", 2), ("script:100ms", "plain", 40),
                      ("script:1ms", "plain", 4), ("script:1ms", "graded", 4)]}
    matrix_id, runs = new_matrix(store, "silent", plan)
    events: list = []
    thread, result = run_in_thread(store, matrix_id, fleet.handles,
                                   replace(SILENCE, host_wait_s=60.0), events)
    assert wait_until(lambda: statuses(store, matrix_id)[runs[1].run_key] == "running", 60)
    assert statuses(store, matrix_id)[runs[0].run_key] == "done"  # 2 s steps: not cut
    with stopped(fleet.handles["alpha"]) as stopped_at:
        assert wait_until(lambda: statuses(store, matrix_id)[runs[1].run_key] == "interrupted",
                          30, 0.05)
        noticed_s = time.monotonic() - stopped_at
        time.sleep(1.0)
    thread.join(timeout=90)
    outcome = result["outcome"]
    print(f"\nsilent worker (SIGSTOP): run interrupted {noticed_s:.1f} s later (bound 1.5 s)")
    # Silence counts from the last answered ping, up to one ping period before the SIGSTOP.
    assert SILENCE.unreachable_after_s - SILENCE.ping_every_s <= noticed_s < 4.0, noticed_s
    cut = next(e for e in events if e.status == "interrupted")
    assert cut.reason.startswith("host unreachable for ") and cut.health == "unreachable"
    news = [(e.status, e.reason) for e in events if e.run_key == ""]
    assert news[0][0] == "unreachable" and news[0][1].startswith("unreachable: no answer to pings")
    assert news[1][0] == "back" and "unreachable" in news[1][1]
    late = [e for e in events if e.late]
    assert [(e.run_key, e.status) for e in late] == [(runs[1].run_key, "done")]
    assert (outcome.status, outcome.done, outcome.interrupted, outcome.pending) == (
        "done", 4, 0, 0)
    rows = store.runs(matrix=matrix_id)
    assert {r.status for r in rows} == {"done"} and len(rows) == 4
    assert rows[1].generated_tokens == 40  # the whole run, finished while its host was silent
    assert_no_overlap(rows)  # the next run waited for the one cut loose


def test_a_host_silent_past_the_wait_is_given_up_and_resume_finishes(fleet, store):
    plan = {"alpha": [("script:100ms", "plain", 30)] + [("script:1ms", "plain", 4)] * 2}
    matrix_id, runs = new_matrix(store, "gone", plan)
    events: list = []
    thread, result = run_in_thread(store, matrix_id, fleet.handles,
                                   replace(SILENCE, host_wait_s=2.0), events)
    assert wait_until(lambda: statuses(store, matrix_id)[runs[0].run_key] == "running", 30)
    with stopped(fleet.handles["alpha"]):
        thread.join(timeout=30)
        assert not thread.is_alive()
    outcome = result["outcome"]
    assert (outcome.status, outcome.interrupted, outcome.pending) == ("interrupted", 1, 2)
    assert outcome.hosts["alpha"].health == "unreachable"
    gave_up = [e.reason for e in events if e.status == "gave up"]
    assert len(gave_up) == 1 and gave_up[0].startswith("gave up: unreachable for "), gave_up
    assert "2 of its runs stay pending" in gave_up[0]
    assert wait_until(lambda: not ray.get(fleet.handles["alpha"].ping.remote(),
                                          timeout=10)["busy"], 30, 0.2)
    again = run_matrix(store, matrix_id, fleet.handles, options=SILENCE, requeue=True)
    assert (again.status, again.done) == ("done", 3)
    rows = store.runs(matrix=matrix_id)
    assert len(rows) == 3 and {r.status for r in rows} == {"done"}
