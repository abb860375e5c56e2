"""HostWorker: what runs on one host, as a plain class (tested without Ray).

It answers `ping` / `info` / `status` at once from any thread, keeps loaded models (bounded
by memory), warms each model once per max draft (recorded apart as `warmup_s`), runs one
`RunSpec` at a time and returns a `RunResult` with every field filled. A run can be
cancelled between rounds. A sampler thread keeps the host's load series while it is busy.
The newest results are kept on the host's disk (`kept.py`): a driver whose reply was lost
to a cut link asks for its result again (`result`) instead of running the benchmark twice.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from specfleet.engine.config import PromptLookupConfig, resolve_policy
from specfleet.engine.peers import PeerCall
from specfleet.engine.stats import COUNTER_FIELDS
from specfleet.jobs.run import RunResult, RunSpec, Target
from specfleet.settings import SELFTEST
from specfleet.workers.bandwidth import ReadBandwidth
from specfleet.workers.conditions.probe import ConditionsProbe, run_fields
from specfleet.workers.costs import CostTables
from specfleet.workers.failedrun import cancelled_result, failed_result
from specfleet.workers.hardware import HostInfo, detect_host
from specfleet.workers.kept import KeptResults
from specfleet.workers.loaded import (
    LoadedModel,
    LoadedModels,
    ModelCheck,
    check_context,
    check_model,
    load_model,
    use_every_core,
    worker_threads,
)
from specfleet.workers.loadseries import LOAD_SAMPLE_PERIOD_S, LoadSeries, load_average
from specfleet.workers.machinelock import MachineLock, machine_lock_path
from specfleet.workers.quiet import QUIET_BUSY_PER_CORE, ForeignCpuMeter, QuietCheck
from specfleet.workers.runsetup import (
    engine_config,
    peer_call,
    prompt_hash,
    run_policy,
    sampler_config,
)
from specfleet.workers.selftest import self_test_once
from specfleet.workers.toy import build_toy_runner, log_toy_run, toy_weights_hash

# Share of host memory the loaded models may take together (the rest: KV caches, the OS).
MODEL_MEMORY_SHARE = 0.5


@dataclass(frozen=True)
class _Prepared:
    """A run made ready: runner, encoded prompt, resolved policy and provenance."""

    runner: Any
    prompt_ids: list[int]
    lookup: PromptLookupConfig | None
    policy: str
    warmup_s: float
    weights_hash: str | None
    model_path: str
    calibration: dict | None = None  # a width-cost table measured for this run
    peer: PeerCall | None = None  # a peer arm's call (`engine/peers.py`) instead of our loop
    weight_bytes: int | None = None  # the loaded weights' bytes on the runner's device


class HostWorker:
    """One host's worker. Thread-safe: control calls never wait for a run.

    Args:
        host: fleet name of the host (default: detected).
        info: a detected `HostInfo` to reuse (default: `detect_host(host)`).
        memory_budget_gb: loaded models' total size (default MODEL_MEMORY_SHARE of memory).
        sample_period_s: how often the load series is sampled while busy.
        quiet_threshold_per_core: see `quiet.QUIET_BUSY_PER_CORE`.
        machine_id: stand-in machine id (simulated hosts sharing one real machine).
        run_lock_path: the machine lock file (default: this machine id's lock in the
            private runtime directory, shared by every specfleet process of this user).
        quiet_pids: the quiet check counts only these processes (default: every process
            but the worker's own; see `quiet.ForeignCpuMeter`).
        engines: offer only these engines (`fleet join --engines torch`; default: all).
        conditions_root: where the Linux conditions sources read (default:
            $SPECFLEET_CONDITIONS_ROOT, else /; see `workers/conditions/sample.py`).
        self_test: prove each offered engine/device on the tiny cache-family models before
            taking runs (`workers/selftest.py`); default on unless $SPECFLEET_SELFTEST is "0".
        break_rollback: engines whose self-test runners drop their rollbacks (fault
            injection: proves a broken engine is kept out of matrices).
        kept_dir: where finished results are kept for `result` (default: the host's folder
            in the private runtime directory).
    """

    def __init__(
        self,
        host: str | None = None,
        *,
        info: HostInfo | None = None,
        memory_budget_gb: float | None = None,
        sample_period_s: float = LOAD_SAMPLE_PERIOD_S,
        quiet_threshold_per_core: float = QUIET_BUSY_PER_CORE,
        machine_id: str | None = None,
        run_lock_path: str | None = None,
        quiet_pids: list[int] | None = None,
        engines: list[str] | None = None,
        conditions_root: str | None = None,
        self_test: bool | None = None,
        break_rollback: tuple[str, ...] = (),
        kept_dir: Path | None = None,
    ) -> None:
        self._info = info or detect_host(host)
        if machine_id is not None:
            self._info = replace(self._info, machine_id=machine_id)
        if engines is not None:
            offered = {e: d for e, d in self._info.engines.items() if e in engines}
            self._info = replace(self._info, engines=offered)
        if self_test if self_test is not None else SELFTEST.read():
            self._info = replace(self._info, selftest=self._self_test(tuple(break_rollback)))
        # The ceiling plain decoding is measured against, probed before the first real run.
        self._bandwidth = ReadBandwidth()
        budget_gb = memory_budget_gb or self._info.memory_gb * MODEL_MEMORY_SHARE
        self._models = LoadedModels(int(budget_gb * 2**30))
        self._resolved: dict[tuple[str, str], Any] = {}
        self._run_lock = threading.Lock()
        self._cancel = threading.Event()
        self._current: str | None = None
        self._machine_lock: MachineLock | None = None  # the run's, while it waits for it
        self._runs_done = 0
        self._kept = KeptResults(self.host, kept_dir)
        self._quiet_threshold = quiet_threshold_per_core
        self._run_lock_path = run_lock_path
        self._meter = ForeignCpuMeter(quiet_pids)
        self._probe = ConditionsProbe(self.host, conditions_root)
        self._costs = CostTables()
        self._series = LoadSeries(self.host, lambda: self._current, self._meter, sample_period_s)

    def _self_test(self, break_rollback: tuple[str, ...]) -> dict[str, dict]:
        """Each offered target's self-test, as stored with the host."""
        results = {}
        for target in self._info.targets():
            policy = resolve_policy("auto", target.device)
            test = self_test_once(target.engine, target.device, policy,
                                  break_rollback=target.engine in break_rollback)
            results[test.target] = test.to_dict()
        return results

    # ---- control: answered at once, from any thread --------------------------------------

    @property
    def host(self) -> str:
        return self._info.name

    def info(self) -> dict:
        """The host's `HostInfo` as a dict (targets, default policies, fingerprint included)."""
        return self._info.to_dict()

    def ping(self) -> dict:
        """Liveness: host, pid, busy flag and the run in progress; while that run waits for
        the machine lock, `machine_wait`: {"waited_s", "held_by"} (`machinelock.py`)."""
        current, lock = self._current, self._machine_lock
        since = lock.waiting_since if lock is not None else None
        answer = {
            "host": self.host,
            "pid": os.getpid(),
            "at": time.time(),
            "busy": current is not None,
            "run_key": current,
        }
        if lock is not None and since is not None:
            answer["machine_wait"] = {"waited_s": round(time.monotonic() - since, 1),
                                      "held_by": lock.held_by()}
        return answer

    def status(self) -> dict:
        """`ping` plus loaded models, runs done, the quiet check and versions."""
        return {
            **self.ping(),
            "kind": self._info.kind,
            "runs_done": self._runs_done,
            "loaded_models": self._models.summaries(),
            "quiet": asdict(self.quiet_check()),
            "conditions": self.conditions(),
            "versions": dict(self._info.versions),
            "fingerprint": self._info.fingerprint,
        }

    def quiet_check(self) -> QuietCheck:
        """Whether the host is quiet now (foreign CPU use over the last second or so) and
        not throttled (`workers/conditions/judge.py`)."""
        return self._probe.gate(self._meter.check(self._quiet_threshold))

    def conditions(self) -> dict:
        """The host's conditions now: the reading, throttled or not, and why."""
        return self._probe.now()

    def cancel(self, run_key: str | None = None) -> bool:
        """Ask the run in progress (or only `run_key`) to stop at the next round.

        Returns:
            True when a matching run was in progress.
        """
        current = self._current
        if current is None or (run_key is not None and run_key != current):
            return False
        self._cancel.set()
        return True

    def result(self, run_key: str) -> RunResult | None:
        """The result of a run this host finished lately (its newest `kept.KEPT_RESULTS`,
        also from before a worker restart), or None: the run never finished here."""
        return self._kept.get(run_key)

    def check_models(self, asks: list[tuple[str, str, int]]) -> list[ModelCheck]:
        """Whether each (model, engine, longest max_tokens) would run here (`matrix validate`
        asks the hosts its runs would go to); resolved afresh, nothing loaded."""
        return [check_model(model, engine, max_tokens) for model, engine, max_tokens in asks]

    def drain_load_samples(self) -> list[dict]:
        """The load samples taken since the last drain (oldest first), then forgotten."""
        return self._series.drain()

    def close(self) -> None:
        """Stop the sampler thread and drop loaded models."""
        self._series.close()
        self._models.clear()

    # ---- the run --------------------------------------------------------------------------

    def run(self, spec: RunSpec) -> RunResult:
        """Run one spec (one at a time; a second caller waits) and return its result.

        The timed window holds the machine lock (`machinelock.py`): a run waits while any
        other specfleet process on this machine runs one. An exception inside the run
        becomes a result with status "failed" and the error. A run cancelled (also while it
        waits for the machine) returns status "interrupted", stop reason "cancelled".
        """
        with self._run_lock:
            self._cancel.clear()
            self._current = spec.run_key
            try:
                result = self._run_on_machine(spec)
                self._kept.put(result)  # before `_current` clears: never seen missing
                return result
            finally:
                self._current = None
                self._runs_done += 1

    def _run_on_machine(self, spec: RunSpec) -> RunResult:
        lock = MachineLock(self._run_lock_path or machine_lock_path(self._info.machine_id),
                           f"matrix {spec.matrix_id}" if spec.matrix_id else f"run {spec.run_key}")
        self._machine_lock = lock  # `ping` says while it waits, and who holds it
        try:
            acquired = lock.acquire(self._cancel.is_set)
        finally:
            self._machine_lock = None
        if not acquired:
            return cancelled_result(spec, self._info)
        try:
            return self._run_locked(spec)
        finally:
            lock.release()

    def replay_divergence(
        self, spec: RunSpec, tokens_a: list[int], tokens_b: list[int], row: int
    ) -> dict:
        """Parity forensics (docs/engine.md, "Parity and near-ties"): teacher-force plain's reply (`tokens_a`) and the arm
        run `spec`'s reply (`tokens_b`) to `row`; top-2 logits of both paths there.

        Returns:
            `engine.forensics.replay_divergence`'s dict (margins, both tokens decoded).
        """
        from specfleet.engine.forensics import replay_divergence

        with self._run_lock:  # the runner's caches are shared with timed runs
            prepared = self._prepare(spec)
            try:
                return replay_divergence(
                    prepared.runner,
                    prepared.prompt_ids,
                    tokens_a,
                    tokens_b,
                    row,
                    width_b=spec.lookup.max_draft + 1,
                )
            finally:
                prepared.runner.reset()

    def calibrate(
        self, model: str, engine: str, device: str, max_width: int = 33, quick: bool = False
    ) -> dict:
        """Per-width verify cost table (docs/engine.md, "Verify cost per width") of `model` on this host's engine and device.

        Holds the run lock and the machine lock like a timed run (`specfleet job calibrate`).

        Returns:
            {"costs": `engine.widthcosts.WidthCosts` as a dict, "host_fingerprint",
            "weights_hash", "settings", "versions", "measure_s"}.
        """
        from specfleet.engine.widthcosts import QUICK, CalibrationSettings, measure_width_costs

        target = Target(host=self.host, engine=engine, device=device)
        spec = RunSpec(
            run_key="calibrate",
            target=target,
            model=model,
            prompt_name="calibrate",
            prompt_text="calibrate",
            arm="plain",
            max_tokens=1,
        )
        settings = replace(QUICK if quick else CalibrationSettings(), max_width=max_width)
        lock = MachineLock(self._run_lock_path or machine_lock_path(self._info.machine_id),
                           "specfleet job calibrate")  # never measured beside a timed run
        with self._run_lock, lock:
            prepared = self._prepare(spec)
            start_s = time.perf_counter()
            try:
                costs = measure_width_costs(prepared.runner, settings)
            finally:
                prepared.runner.reset()
        return {
            "costs": asdict(costs),
            "host_fingerprint": self._info.fingerprint,
            "weights_hash": prepared.weights_hash,
            "settings": asdict(settings),
            "versions": dict(self._info.versions),
            "measure_s": round(time.perf_counter() - start_s, 2),
        }

    def _run_locked(self, spec: RunSpec) -> RunResult:
        started_at = datetime.now(UTC)
        self._series.maybe_sample(spec.run_key)
        try:
            prepared = self._prepare(spec)
            quiet = self._meter.check(self._quiet_threshold, fresh=True)
            if spec.target.engine != "toy":
                self._bandwidth.before_run(spec.target.engine, spec.target.device, quiet.quiet)
                self._info = replace(self._info, read_gb_per_s=self._bandwidth.host_gb_per_s)
            load_before = load_average()
            before = self._probe.sample()  # outside the timed window, like `after`
            generation = self._generate(spec, prepared)
            after = self._probe.sample()
        except Exception as err:  # a failed run is a result, not a crash of the worker
            return failed_result(spec, err, started_at, self._info)
        if spec.target.engine == "toy" and generation.stop_reason != "cancelled":
            log_toy_run(spec.run_key)  # a finished execution (fault tests count them)
        result = self._result(spec, prepared, generation, started_at)
        noisy = not quiet.quiet
        return result.model_copy(update={"load_before": load_before, "noisy": noisy,
                                         **run_fields(before, after)})

    def _prepare(self, spec: RunSpec) -> _Prepared:
        if spec.target.engine == "toy":
            runner = build_toy_runner(spec.model, spec.prompt_text)
            entry = LoadedModel(
                ("toy", "cpu", spec.model), runner, 0, toy_weights_hash(spec.model), 0.0
            )
            warmup_s = 0.0  # toy runners are exact and built per run: nothing to warm
        else:
            entry = self._load(spec)
            warmup_s = 0.0
        prompt_ids = entry.runner.encode_prompt(spec.prompt_text, spec.chat)
        if spec.target.engine != "toy":
            check_context(entry.key[2], spec, len(prompt_ids))
        costs, calibration = self._costs.for_run(spec, entry, self._info.fingerprint)
        lookup, policy = run_policy(spec, costs)
        peer = peer_call(spec, self._cancel.is_set, lambda: self._gguf(spec), worker_threads())
        if spec.target.engine != "toy":
            warmup_s = (entry.warm_peer(prompt_ids, peer) if peer else
                        entry.warm(prompt_ids, spec.lookup.max_draft))
        entry.runs += 1
        return _Prepared(
            entry.runner, prompt_ids, lookup, policy, warmup_s, entry.weights_hash, entry.key[2],
            calibration, peer, self._weight_bytes(entry, peer),
        )

    def _load(self, spec: RunSpec) -> LoadedModel:
        engine, device = spec.target.engine, spec.target.device
        resolved = self._resolve(spec.model, engine)
        size_bytes = int(resolved.size_bytes or 0)

        def load() -> LoadedModel:
            self._probe.refuse_if_too_big(spec.model, size_bytes, device)
            use_every_core(engine)
            return load_model(resolved, engine, device)

        return self._models.get_or_load((engine, device, str(resolved.path)), size_bytes, load)

    @staticmethod
    def _weight_bytes(entry: LoadedModel, peer: PeerCall | None) -> int | None:
        """What one plain step reads: the loaded weights, or a llama.cpp peer's GGUF tensors."""
        if peer is None or peer.gguf is None:
            return entry.weight_bytes
        from specfleet.models.registry import gguf_tensor_bytes

        return gguf_tensor_bytes(Path(peer.gguf))

    def _gguf(self, spec: RunSpec) -> str | None:
        gguf = self._resolve(spec.model, spec.target.engine).gguf_file()
        return None if gguf is None else str(gguf)

    def _resolve(self, model: str, engine: str) -> Any:
        if (model, engine) not in self._resolved:
            from specfleet.models.registry import resolve_model

            self._resolved[(model, engine)] = resolve_model(model, engine)
        return self._resolved[(model, engine)]

    def _generate(self, spec: RunSpec, prepared: _Prepared) -> Any:
        from specfleet.engine.loop import generate
        from specfleet.engine.peers import generate_peer

        if prepared.peer is not None:
            return generate_peer(prepared.runner, prepared.prompt_ids, prepared.peer)
        guard = spec.loop_guard
        return generate(
            prepared.runner,
            prepared.prompt_ids,
            max_tokens=spec.max_tokens,
            lookup=prepared.lookup,
            sampler=sampler_config(spec),
            loop_guard=(guard.min_period, guard.max_period, guard.repeats) if guard else None,
            should_stop=self._cancel.is_set,
        )

    def _result(
        self, spec: RunSpec, prepared: _Prepared, gen: Any, started_at: datetime
    ) -> RunResult:
        from specfleet.engine.stats import loop_share

        tokens = [int(t) for t in gen.tokens]
        timings = gen.timings
        # A peer counts no rounds or drafts: its counters stay None, never a faked 0.
        counters = gen.stats.as_dict() if prepared.peer is None else dict.fromkeys(COUNTER_FIELDS)
        peer = None if prepared.peer is None else {**prepared.peer.settings(),
                                                  "version": gen.library_version}
        cancelled = gen.stop_reason == "cancelled"
        return RunResult(
            **self._provenance(spec, prepared, started_at, peer),
            status="interrupted" if cancelled else "done",
            error="cancelled" if cancelled else None,
            output_text=prepared.runner.decode(tokens),
            token_ids=tokens,
            prompt_tokens=len(prepared.prompt_ids),
            prompt_token_ids=list(prepared.prompt_ids),
            calibration=prepared.calibration,
            generated_tokens=len(tokens),
            prefill_s=timings.prefill_s,
            decode_s=timings.decode_s,
            total_s=timings.total_s,
            tok_per_s=len(tokens) / timings.total_s if timings.total_s > 0 else 0.0,
            warmup_s=prepared.warmup_s,
            stop_reason=gen.stop_reason,
            **counters,
            loop_share=loop_share(tokens),
        )

    def _provenance(self, spec: RunSpec, prepared: _Prepared, started_at: datetime,
                    peer: dict | None = None) -> dict:
        from specfleet.engine.loop import may_pipeline

        return {
            "run_key": spec.run_key,
            "target": spec.target,
            "resolved_policy": prepared.policy,
            "weights_hash": prepared.weights_hash,
            "prompt_hash": prompt_hash(spec.prompt_text),
            "engine_config": engine_config(
                spec, prepared.lookup, prepared.policy, prepared.model_path, prepared.warmup_s,
                costs_source="measured" if prepared.calibration else "stored",
                rollback_kind=getattr(prepared.runner, "rollback_kind", "trim"), peer=peer,
                weight_bytes=prepared.weight_bytes, read_gb_per_s=self._bandwidth.of(
                    spec.target.engine, spec.target.device),
                pipelines=None if prepared.peer is not None else may_pipeline(
                    prepared.runner, sampler_config(spec)),
            ),
            "versions": dict(self._info.versions),
            "host_fingerprint": self._info.fingerprint,
            "load_after": load_average(),
            "started_at": started_at,
            "finished_at": datetime.now(UTC),
        }
