"""HostWorker without Ray: toy-engine runs, arms, failures, cancel, control calls, load series."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from specfleet.engine.config import LookupOptions
from specfleet.jobs.run import LoopGuard, RunSpec, Target
from specfleet.workers.hardware import detect_host
from specfleet.workers.host import HostWorker
from specfleet.workers.loaded import LoadedModel, LoadedModels
from specfleet.workers.machinelock import MachineLock
from specfleet.workers.runsetup import prompt_hash, run_policy

PROMPT = "def add(a, b):\n    return a + b\n"


def spec(
    key: str = "k1",
    *,
    model: str = "script",
    arm: str = "graded",
    device: str = "cpu",
    max_tokens: int = 40,
    **kw,
) -> RunSpec:
    return RunSpec(
        run_key=key,
        target=Target(host="box1", engine="toy", device=device),
        model=model,
        prompt_name="p",
        prompt_text=PROMPT,
        arm=arm,
        max_tokens=max_tokens,
        **kw,
    )


@pytest.fixture(scope="module")
def run_lock(tmp_path_factory) -> str:
    # Not the machine-wide default: other test sessions on this machine would flag our runs.
    return str(tmp_path_factory.mktemp("lock") / "active-run.lock")


@pytest.fixture(scope="module")
def worker(run_lock: str):
    w = HostWorker(info=detect_host("box1"), sample_period_s=0.05, run_lock_path=run_lock)
    yield w
    w.close()


def test_plain_and_lookup_runs_agree_and_fill_every_field(worker: HostWorker) -> None:
    plain = worker.run(spec("p", arm="plain"))
    graded = worker.run(spec("g", arm="graded"))
    assert plain.status == graded.status == "done", (plain.error, graded.error)
    # ScriptModel continues the prompt: the reply is the prompt's bytes again.
    assert plain.output_text == (PROMPT * 3)[: len(PROMPT) + 40][len(PROMPT) :]
    assert graded.token_ids == plain.token_ids and graded.output_text == plain.output_text
    assert plain.resolved_policy == "plain" and plain.proposed == 0
    assert graded.resolved_policy == "graded" and graded.accepted > 20
    assert graded.rounds < plain.rounds
    for r in (plain, graded):
        assert r.generated_tokens == 40 and r.prompt_tokens == len(PROMPT.encode())
        assert r.stop_reason == "max_tokens"
        assert r.total_s > 0 and r.tok_per_s == pytest.approx(40 / r.total_s)
        assert r.load_before is not None and r.load_after is not None
        assert r.prompt_hash == prompt_hash(PROMPT) and r.weights_hash
        assert r.host_fingerprint == worker.info()["fingerprint"]
        assert r.versions["python"] and r.engine_config["model"] == "script"
        assert r.started_at <= r.finished_at
        assert r.loop_share < 0.2
    assert graded.engine_config["lookup"]["policy"] == "graded"


def test_arms_resolve_by_device() -> None:
    assert run_policy(spec(arm="plain")) == (None, "plain")
    assert run_policy(spec(arm="auto", device="cuda"))[1] == "gated"
    assert run_policy(spec(arm="auto", device="metal"))[1] == "graded"
    cfg, name = run_policy(spec(arm="fixed"))
    assert name == "fixed" and cfg.adaptive is False
    cfg, name = run_policy(spec(arm="gated", lookup=LookupOptions(adaptive=False)))
    assert name == "fixed" and cfg.max_draft == 7


def test_a_looping_reply_has_a_high_loop_share_and_the_guard_stops_it(worker: HostWorker) -> None:
    looping = worker.run(spec("c1", model="constant", arm="plain", max_tokens=64))
    assert looping.loop_share > 0.9 and looping.generated_tokens == 64
    guarded = worker.run(
        spec(
            "c2",
            model="constant",
            arm="graded",
            max_tokens=64,
            loop_guard=LoopGuard(min_period=1, max_period=1, repeats=8),
        )
    )
    assert guarded.stop_reason == "loop_guard" and guarded.generated_tokens == 8


def test_an_exception_inside_a_run_is_a_failed_result(worker: HostWorker) -> None:
    result = worker.run(spec("f", model="fail"))
    assert result.status == "failed"
    assert result.error == "RuntimeError: toy model failed on purpose"
    assert worker.run(spec("after")).status == "done"  # the worker goes on
    bad = worker.run(spec("bad", model="nosuchkind"))
    assert bad.status == "failed" and "toy model is <kind>" in bad.error


def test_control_calls_answer_during_a_run_and_cancel_stops_it(worker: HostWorker) -> None:
    slow = spec("slow", model="script:20ms", arm="plain", max_tokens=400)  # ~8 s uncancelled
    time.sleep(0.06)  # one sample period (fixture: 0.05 s) since the last run's sample
    worker.drain_load_samples()
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(r=worker.run(slow)))
    thread.start()
    deadline = time.monotonic() + 5
    while not worker.ping()["busy"] and time.monotonic() < deadline:
        time.sleep(0.01)
    start = time.monotonic()
    assert worker.ping()["run_key"] == "slow"
    assert worker.status()["busy"] and worker.info()["name"] == "box1"
    assert time.monotonic() - start < 0.5
    time.sleep(0.2)
    assert worker.cancel("another-run") is False
    assert worker.cancel("slow") is True
    thread.join(timeout=5)
    result = box["r"]
    assert result.status == "interrupted" and result.stop_reason == "cancelled"
    assert 0 < result.generated_tokens < 100
    assert worker.ping()["busy"] is False and worker.cancel() is False
    samples = worker.drain_load_samples()
    assert samples and samples[0]["run_key"] == "slow" and "load_1m" in samples[0]
    assert worker.drain_load_samples() == []


def test_a_finished_result_is_kept_for_a_driver_that_lost_its_reply(run_lock, tmp_path) -> None:
    from specfleet.workers.kept import KEPT_RESULTS

    worker = HostWorker(info=detect_host("box1"), sample_period_s=3600.0, run_lock_path=run_lock,
                        kept_dir=tmp_path / "kept")
    try:
        first = worker.run(spec("r0", model="script", max_tokens=4)).model_dump(mode="json")
        assert worker.result("r0").model_dump(mode="json") == first  # what the store hashes
        assert worker.result("never-ran") is None
        assert oct((tmp_path / "kept").stat().st_mode & 0o777) == "0o700"
        restarted = HostWorker(info=detect_host("box1"), kept_dir=tmp_path / "kept")
        assert restarted.result("r0").model_dump(mode="json") == first  # after a restart too
        restarted.close()
        for i in range(1, KEPT_RESULTS + 1):
            worker.run(spec(f"r{i}", model="script", max_tokens=4))
        assert worker.result("r0") is None  # the oldest let go
        assert worker.result(f"r{KEPT_RESULTS}").run_key == f"r{KEPT_RESULTS}"
        assert len(list((tmp_path / "kept").iterdir())) == KEPT_RESULTS
    finally:
        worker.close()


def test_runs_are_one_at_a_time(worker: HostWorker) -> None:
    specs = [spec(f"s{i}", model="script:5ms", arm="plain", max_tokens=10) for i in range(3)]
    results: list = []
    threads = [threading.Thread(target=lambda s=s: results.append(worker.run(s))) for s in specs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    spans = sorted((r.started_at, r.finished_at) for r in results)
    assert len(spans) == 3
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))


def test_a_run_waits_for_the_machine_lock_and_is_noisy_when_the_host_is_busy(
        run_lock: str) -> None:
    info = detect_host("box1")
    # Threshold 1000 busy cores per core: always quiet; 0: never quiet.
    calm = HostWorker(info=info, quiet_threshold_per_core=1000.0, run_lock_path=run_lock)
    strict = HostWorker(info=info, quiet_threshold_per_core=0.0, run_lock_path=run_lock)
    try:
        assert calm.run(spec("n0")).noisy is False
        other = MachineLock(run_lock)
        assert other.acquire()
        released_at: list[datetime] = []

        def release_later() -> None:
            time.sleep(0.5)
            released_at.append(datetime.now(UTC))
            other.release()

        threading.Thread(target=release_later).start()
        waited = calm.run(spec("n1"))  # another process's timed run holds the machine
        assert waited.status == "done" and waited.noisy is False
        assert waited.started_at >= released_at[0]
        assert other.acquire()
        threading.Timer(0.3, calm.cancel).start()
        cancelled = calm.run(spec("n2"))
        other.release()
        assert (cancelled.status, cancelled.stop_reason) == ("interrupted", "cancelled")
        assert strict.run(spec("n3")).noisy is True
        assert strict.quiet_check().reason.startswith("other processes keep")
    finally:
        calm.close()
        strict.close()


def test_a_run_waiting_for_the_machine_lock_says_so_and_who_holds_it(
        worker: HostWorker, run_lock: str) -> None:
    other = MachineLock(run_lock, "matrix other-1")
    assert other.acquire()
    try:
        waiting = threading.Thread(target=worker.run, args=(spec("w1", matrix_id="mine-1"),))
        waiting.start()
        deadline = time.monotonic() + 10
        while "machine_wait" not in worker.ping() and time.monotonic() < deadline:
            time.sleep(0.02)
        answer = worker.ping()
        assert answer["run_key"] == "w1", answer
        assert answer["machine_wait"]["held_by"] == f"matrix other-1, pid {os.getpid()}"
    finally:
        other.release()
    waiting.join(timeout=30)
    assert "machine_wait" not in worker.ping()
    # The worker wrote itself in while it held the lock (the file keeps it after).
    assert MachineLock(run_lock).held_by() == f"matrix mine-1, pid {os.getpid()}"


def test_a_calibration_waits_for_the_machine_lock_as_a_run_does(
        worker: HostWorker, run_lock: str) -> None:
    # `specfleet job calibrate` measured widths beside another driver's timed run.
    other = MachineLock(run_lock, "matrix other-1")
    assert other.acquire()
    measured: list[dict] = []
    try:
        calibrating = threading.Thread(target=lambda: measured.append(
            worker.calibrate("script", "toy", "cpu", max_width=2, quick=True)))
        calibrating.start()
        calibrating.join(timeout=1.0)
        assert calibrating.is_alive() and not measured  # waiting: nothing measured yet
    finally:
        other.release()
    calibrating.join(timeout=60)
    assert len(measured) == 1 and measured[0]["costs"]["ratio"]
    assert MachineLock(run_lock).held_by().startswith("specfleet job calibrate, pid ")


def test_loaded_models_evict_the_least_recently_used() -> None:
    models = LoadedModels(budget_bytes=100)
    loads: list[str] = []

    def loader(name: str, size: int):
        def load() -> LoadedModel:
            loads.append(name)
            return LoadedModel(("toy", "cpu", name), object(), size, None, 0.0)

        return load

    models.get_or_load(("toy", "cpu", "a"), 40, loader("a", 40))
    models.get_or_load(("toy", "cpu", "b"), 40, loader("b", 40))
    models.get_or_load(("toy", "cpu", "a"), 40, loader("a", 40))  # hit: a is now newest
    models.get_or_load(("toy", "cpu", "c"), 40, loader("c", 40))  # evicts b
    assert loads == ["a", "b", "c"]
    assert [k[2] for k in models.lru_keys()] == ["a", "c"] and models.used_bytes() == 80


@pytest.fixture(scope="module")
def bundled_torch_model() -> str:
    from specfleet.models.bundled import fetch_bundled
    from specfleet.models.registry import resolve_model

    fetch_bundled()
    return resolve_model("smollm2-135m", "torch")


@pytest.mark.slow
@pytest.mark.torch
def test_a_real_torch_run_is_warmed_once_and_matches_plain(
    worker: HostWorker, bundled_torch_model
) -> None:
    def torch_spec(key: str, arm: str) -> RunSpec:
        return RunSpec(
            run_key=key,
            target=Target(host="box1", engine="torch", device="cpu"),
            model="smollm2-135m",
            prompt_name="story",
            prompt_text="Write one sentence about a red kite.",
            arm=arm,
            lookup=LookupOptions(max_draft=2),  # warm-up widths 2..3 only: keep it short
            max_tokens=12,
        )

    plain = worker.run(torch_spec("t-plain", "plain"))
    auto = worker.run(torch_spec("t-auto", "auto"))
    assert plain.status == auto.status == "done", (plain.error, auto.error)
    assert plain.warmup_s > 0 and auto.warmup_s == 0.0  # warmed once per (model, max draft)
    assert auto.token_ids == plain.token_ids and plain.output_text.strip()
    assert auto.resolved_policy == "graded" and plain.generated_tokens == len(plain.token_ids)
    assert plain.weights_hash == bundled_torch_model.weights_hash
    assert plain.engine_config["model_path"] == str(bundled_torch_model.path)
    (loaded,) = [m for m in worker.status()["loaded_models"] if m["engine"] == "torch"]
    assert loaded["runs"] == 2 and loaded["warmed_max_drafts"] == [2]
    # fp32, tied embedding once: 134,515,008 parameters x 4, stored for the bandwidth ceiling
    assert plain.engine_config["weight_bytes"] == loaded["weight_bytes"] == 538_060_032
    # A prompt past the context failed nothing: it ran and was stored as done.
    long = worker.run(torch_spec("t-long", "plain").model_copy(
        update={"prompt_text": "hello world " * 4200}))
    assert long.status == "failed" and "together they exceed smollm2-135m's context of 8192 " \
        "tokens; expected a shorter prompt or a smaller max_tokens" in long.error, long.error


def test_a_simulated_host_can_stand_in_its_machine_id() -> None:
    sim = HostWorker(info=detect_host("sim"), machine_id="sim-box", sample_period_s=3600.0)
    try:
        assert sim.info()["machine_id"] == "sim-box" and sim.info()["name"] == "sim"
    finally:
        sim.close()


def test_a_host_can_offer_a_subset_of_its_engines() -> None:
    info = detect_host("sub")
    both = HostWorker("sub", info=replace(info, engines={"mlx": ("cpu",), "torch": ("cpu",)}))
    torch_only = HostWorker("sub", info=both._info, engines=["torch"])
    try:
        assert both.info()["targets"] == ["sub/mlx/cpu", "sub/torch/cpu"]
        assert torch_only.info()["targets"] == ["sub/torch/cpu"]
        assert list(torch_only.info()["default_policies"]) == ["sub/torch/cpu"]
    finally:
        both.close()
        torch_only.close()


def test_calibrated_arm_measures_a_table_once_then_uses_a_matching_stored_one(run_lock) -> None:
    from specfleet.workers.costs import costs_key

    fresh = HostWorker(info=detect_host("box1"), sample_period_s=0.05, run_lock_path=run_lock)
    try:
        plain = fresh.run(spec("p", arm="plain"))
        first = fresh.run(spec("c1", arm="calibrated"))
        again = fresh.run(spec("c2", arm="calibrated"))
        assert first.status == again.status == "done", (first.error, again.error)
        assert first.token_ids == plain.token_ids  # only the budget differs
        table = first.calibration["costs"]
        assert len(table["ratio"]) == 33 and table["n"] >= 3
        assert first.engine_config["costs_source"] == "measured"
        assert again.calibration is None  # measured once per worker, then kept
        key = costs_key(first.calibration["host_fingerprint"], first.weights_hash)
        stored = fresh.run(spec("c3", arm="calibrated", costs=(1.0, 9.0, 9.0), costs_key=key))
        assert stored.calibration is None and stored.engine_config["costs_source"] == "stored"
        assert list(stored.engine_config["lookup"]["costs"]) == [1.0, 9.0, 9.0]
        assert stored.drafted_rounds == 0  # a width-2 block costing 9 steps never pays
        other = fresh.run(spec("c4", arm="calibrated", costs=(1.0, 9.0), costs_key="x:y"))
        assert list(other.engine_config["lookup"]["costs"]) != [1.0, 9.0]  # not this host's table
    finally:
        fresh.close()


def test_a_worker_gives_its_engine_the_cores_ray_would_not(monkeypatch) -> None:
    import ctypes

    import psutil
    import torch

    from specfleet import openblas
    from specfleet.settings import THREADS
    from specfleet.workers.loaded import use_every_core

    before = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # what Ray sets in an actor holding no CPU
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")  # restored after the test
    monkeypatch.setenv(THREADS.name, "3")
    try:
        assert use_every_core("torch") == 3 and torch.get_num_threads() == 3
        assert use_every_core("mlx") == 3
        if openblas._loaded:  # this process's MLX already loaded it: set in the library
            assert ctypes.CDLL(str(openblas.LIBRARY)).openblas_get_num_threads() == 3
        else:
            assert os.environ["OPENBLAS_NUM_THREADS"] == "3"
        monkeypatch.delenv(THREADS.name)
        cores = max(1, (psutil.cpu_count(logical=False) or os.cpu_count() or 1) - 1)
        assert use_every_core("torch") == cores and torch.get_num_threads() == cores
    finally:
        torch.set_num_threads(before)
        if openblas._loaded:
            openblas.set_threads(1)
