"""`specfleet job calibrate`: the per-width verify cost table (docs/engine.md, "Verify cost
per width") measured on every target of the fleet and stored per host, one host at a time
and never beside a timed run (its machine lease: `MachineTurns`)."""

from __future__ import annotations

import time
from collections import defaultdict, deque
from typing import Annotated, Any

import typer

from specfleet.cli.calibrate import check_stored_width
from specfleet.cli.options import (
    AddressOption,
    DbOption,
    EmbeddedOption,
    MaxWidthOption,
    ModelAliasOption,
    check_driver_settings,
    refuse_hosts_outside_embedded,
    writing_store,
)
from specfleet.cluster.modelcheck import refuse_model
from specfleet.cluster.reach import choose_fleet, open_fleet
from specfleet.engine.kinds import ENGINES, MODEL_ENGINES, Engine, choices_text
from specfleet.errors import UserError, describe_value
from specfleet.jobs.run import Target
from specfleet.settings import host_name_problem
from specfleet.store.store import check_store_before_fleet
from specfleet.userfiles import MAX_MODEL_LEN

CALIBRATE_TIMEOUT_S = 1800.0


def calibrate(
    model: ModelAliasOption,
    engine: Annotated[Engine | None, typer.Option(
        "--engine", help=f"Only this engine ({choices_text(ENGINES)}).")] = None,
    host: Annotated[str | None, typer.Option("--host", help="Only this host.")] = None,
    max_width: MaxWidthOption = 33,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer, shorter rounds.")] = False,
    address: AddressOption = None,
    embedded: EmbeddedOption = False,
    db: DbOption = None,
) -> None:
    """Measure the per-width verify cost table on every target and store it per host.

    One host runs one calibration at a time, never beside a timed run (machine lease).
    Exit status 0 when every target was measured, 1 otherwise.
    """
    if host is not None and (problem := host_name_problem(host)):  # --target's: TargetRef
        raise UserError(f"--host: {problem}")
    if len(model) > MAX_MODEL_LEN:  # as `job generate` refuses it: the store keeps no more
        raise UserError(f"--model: must be at most {MAX_MODEL_LEN} characters, got "
                        f"{describe_value(model)} ({len(model)} characters)")
    # Every table it measures is stored: one too narrow failed each later calibrated run.
    check_stored_width(max_width, " (each table is stored)")
    check_driver_settings()  # its tables' writes retry as a driver's results do
    if choose_fleet(address, embedded).embedded:  # this machine alone: before Ray starts
        if host is not None:
            refuse_hosts_outside_embedded([host], "--host")
        if engine is not None:
            refuse_model(model, engine, "--model")
        _refuse_long_rounds(model, engine, max_width, quick)
        if engine is None:
            _refuse_model_on_every_engine(model)
    check_store_before_fleet(db)
    view = open_fleet(address, with_toy=engine == "toy",
                      hosts=[host] if host is not None else None, embedded=embedded)
    targets = [t for t in view.targets if engine is None or t.engine == engine]
    if not targets:
        raise UserError(f"no target to calibrate (engine {engine or 'any'}, "
                        f"host {host or 'any'}); see `specfleet fleet status`")
    for target in targets:  # each host resolves the model as its calibration would
        refuse_model(model, target.engine, "--model", view, target.host)
    with writing_store(db) as store:  # after the fleet: one that is not there makes no store
        view.record_hosts(store)
        failures = _calibrate_all(store, view, targets, model, max_width, quick)
    if failures:
        raise typer.Exit(1)


def _refuse_model_on_every_engine(model: str) -> None:
    """A model that runs on no engine of this machine (an unknown alias), said before the
    embedded fleet starts (tens of seconds) rather than by its workers after."""
    problems: list[UserError] = []
    for name in MODEL_ENGINES:
        try:
            refuse_model(model, name, "--model")
            return
        except UserError as err:
            problems.append(err)
    raise problems[0]


def _refuse_long_rounds(model: str, engine: str | None, max_width: int, quick: bool) -> None:
    """A round past the model's context on this machine: its calibration failed once the fleet
    started ('index out of range in self' where positions are learned), as `calibrate`
    refuses it before loading."""
    from dataclasses import replace

    from specfleet.cli.calibrate import round_positions
    from specfleet.engine.widthcosts import QUICK, CalibrationSettings
    from specfleet.workers.loaded import model_context

    settings = replace(QUICK if quick else CalibrationSettings(), max_width=max_width)
    for name in [engine] if engine is not None else MODEL_ENGINES:
        context, _ = model_context(model, name)
        if context is not None and round_positions(settings) > context:
            fits = round_positions(settings, max_width=1) <= context
            raise UserError(f"--model {model}: a calibration round{' (--quick)' * quick} needs "
                            f"{round_positions(settings)} positions (prompt, steps, verify "
                            f"blocks), past its context of {context} tokens; expected "
                            + ("a smaller --max-width" if fits else "a model of a longer "
                               "context (`specfleet calibrate` takes a shorter --prompt-len)"))


def _calibrate_all(
    store, view, targets: list[Target], model: str, max_width: int, quick: bool
) -> int:
    """One calibration per host at a time, hosts in parallel; returns how many failed."""
    import ray

    from specfleet.cluster.locks import Leases
    from specfleet.cluster.progress import store_waiting
    from specfleet.cluster.storewriter import table_writer

    queues: dict[str, deque[Target]] = {}
    for target in targets:
        queues.setdefault(target.host, deque()).append(target)
    leases = Leases("calibrate", CALIBRATE_TIMEOUT_S, 10.0, "specfleet job calibrate")
    turns = MachineTurns(leases, view.machines)
    # A table measured for minutes is not lost to a store outage at its write.
    writer = table_writer(store, store_waiting(turns.say))
    inflight: dict[Any, tuple[Target, float]] = {}
    failures = 0
    try:
        while any(queues.values()) or inflight:
            busy = {t.host for t, _ in inflight.values()}
            for name, queue in queues.items():
                if name in busy or not queue or not turns.take(name):
                    continue  # one at a time per host; a running matrix holds the machine
                target = queue.popleft()
                ref = view.workers[name].calibrate.remote(
                    model, target.engine, target.device, max_width, quick)
                inflight[ref] = (target, time.monotonic())
            ready = ray.wait(list(inflight), num_returns=1, timeout=1.0)[0] if inflight else []
            for ref in ready:
                target, _ = inflight.pop(ref)
                failures += not _store_costs(writer, _measured(ref, target), target, model)
                if not queues[target.host]:
                    leases.release(view.machines[target.host])
            failures += _drop_overdue(inflight)
            if not inflight:
                time.sleep(0.2)  # waiting for a machine another driver holds
    finally:
        leases.release_all()
    return failures


class MachineTurns:
    """A host's machine taken for a calibration (`Leases`), and while another driver holds it,
    the wait said on stderr as `matrix run` says it (`h1: waiting for the machine: leased to
    matrix bench-77aa01, pid 4242 on ws-3 (another driver); waited 12 s`, at once, then at
    most every 10 s): the command sat silent for as long as a matrix held the machine."""

    def __init__(self, leases, machines: dict[str, str], say=None) -> None:
        from specfleet.cluster.progress import LeaseWait, WaitingLines

        self.leases, self.machines = leases, machines
        self.say = say or WaitingLines()
        self.waits: dict[str, LeaseWait] = defaultdict(LeaseWait)

    def take(self, host: str) -> bool:
        """Whether `host`'s machine is ours now; a refusal is said."""
        from specfleet.cluster.progress import ProgressEvent

        machine = self.machines[host]
        if self.leases.acquire(machine):
            self.waits[host].granted()
            return True
        reason = self.waits[host].refused(self.leases.refused.get(machine, ""), time.monotonic())
        if reason:
            self.say(ProgressEvent(host, "", "leased", 0, 0, 0, "healthy", reason))
        return False


def _drop_overdue(inflight: dict[Any, tuple[Target, float]]) -> int:
    overdue = [ref for ref, (_, sent) in inflight.items()
               if time.monotonic() - sent > CALIBRATE_TIMEOUT_S]
    for ref in overdue:
        target, _ = inflight.pop(ref)
        typer.echo(f"{target.label}: calibration timed out", err=True)
    return len(overdue)


def _measured(ref: Any, target: Target) -> dict | None:
    """The worker's calibration, or None when it failed (said)."""
    import ray

    try:
        return ray.get(ref, timeout=60)
    except Exception as err:  # noqa: BLE001 - one target's failure does not stop the rest
        message = " ".join(str(getattr(err, "cause", None) or err).split())[:300]
        typer.echo(f"{target.label}: calibration failed: {message}", err=True)
        return None


def _store_costs(writer: Any, costs: dict | None, target: Target, model: str) -> bool:
    """Store a measured table (retried while the store is unreachable, `StoreWriter`) and
    print it; False when there was none or the store stayed away (said)."""
    if costs is None:
        return False
    lost = writer.record_calibration(target, model, costs)
    if lost is not None:
        typer.echo(f"{target.label} {model}: measured, but could not store it: {lost}", err=True)
        return False
    table = costs["costs"]
    flagged = f"; not monotone at widths {table['flagged']}" if table["flagged"] else ""
    typer.echo(f"{target.label} {model}: pipelined step {table['pipelined_ms']:.3f} ms; "
               f"verify cost by width (n={table['n']}) " + " ".join(
                   f"{w}:{r:.2f}" for w, r in enumerate(table["ratio"], start=1)) + flagged)
    return True
