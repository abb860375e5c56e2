"""The local model path shared by `generate` and `calibrate`: the default engine, loading a
model the way a worker does with one-line refusals naming their flag (the choices of
`--engine` and `--device` are Typer's to check: `options.EngineOption`, `DeviceOption`), and the calibrated
policy's width-cost table for this host (the newest stored one, else measured and stored).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import typer

from specfleet.cli.options import writing_store
from specfleet.engine.kinds import ENGINE_DEVICES, DeviceChoice, ModelEngine, choices_text
from specfleet.errors import UserError
from specfleet.settings import THREADS, names_a_setting
from specfleet.workers.loaded import LoadedModel


def default_engine() -> ModelEngine:
    """MLX on macOS (Metal), torch elsewhere."""
    return "mlx" if sys.platform == "darwin" else "torch"


# `--engine`'s default, read once at import as a default argument would be.
DEFAULT_ENGINE = default_engine()


def load_model(model: str, engine: ModelEngine, device: DeviceChoice) -> LoadedModel:
    """Resolve `model` (alias or path) for `engine` and load it on `device`, the way a
    worker does (`workers.loaded.load_model`); every refusal is one line naming its flag.

    Args:
        model: an alias of the model registry (`specfleet models list`) or a local folder.
        engine: the `--engine` flag (Typer checked the choice).
        device: the `--device` flag (Typer checked the choice).

    Returns:
        The loaded runner with the model's provenance.
    """
    from specfleet.engine.runners.base import UnsupportedModelError
    from specfleet.engine.runners.folders import folder_problem
    from specfleet.models.registry import bundled_source, measured, resolve_model
    from specfleet.workers import loaded

    try:
        resolved = resolve_model(model, engine, measure=False)  # hashed once it is usable
    except UserError as err:
        message = str(err)
        # A message naming its own flag or setting (`SPECFLEET_HOME: ...`) stands as it is.
        named = message.startswith("--") or names_a_setting(message)
        raise UserError(message if named else f"--model: {message}") from None
    if resolved.path is None or not Path(resolved.path).exists():
        raise UserError(
            f"--model {model}: not on disk; fetch it with `specfleet models fetch` "
            "or pass a model folder"
        )
    # As `matrix validate` asks (`loaded.check_model`): the library's own refusal of a folder
    # without a tokenizer read "Couldn't instantiate the backend tokenizer from one of: ".
    if bundled_source(resolved.source) is None and \
            (problem := folder_problem(Path(resolved.path), engine)) is not None:
        raise UserError(f"--model {model}: {problem}")
    resolved = measured(resolved)  # its hash file is written beside the weights
    if THREADS.read() is not None:  # as a worker's engine computes (a stored table's threads)
        loaded.use_every_core(engine)
    try:
        check_device(engine, device)
        return loaded.load_model(resolved, engine, device)
    except loaded.EngineNotInstalled as err:
        raise UserError(f"--engine {engine}: {err}") from None
    except UnsupportedModelError as err:
        if (bundled := bundled_source(resolved.source)) is not None:  # its files are damaged
            raise UserError(f"--model {model}: {err}; fetch it again with `specfleet models "
                            f"fetch {bundled[0].alias} --force`") from None
        raise UserError(f"--model {model}: {err}") from None


def check_device(engine: ModelEngine, device: DeviceChoice) -> None:
    """Refuse a device `engine` cannot use on this host, naming the ones it can (its runner's
    own `resolve_device` decides each; "auto" always works).

    Raises:
        EngineNotInstalled: the engine is not installed.
    """
    from specfleet.workers.loaded import runner_class

    resolve = sys.modules[runner_class(engine).__module__].resolve_device
    try:
        resolve(device)
    except UserError as err:
        # The runner says why, except for another engine's device (it lists them all).
        why = str(err) if device in ENGINE_DEVICES[engine] else \
            f"--device {device}: the {engine} engine cannot use it"
        here = ["auto", *(d for d in ENGINE_DEVICES[engine] if usable(resolve, d))]
        raise UserError(f"{why}; expected {choices_text(tuple(here))} here") from None


def usable(resolve: Any, device: str) -> bool:
    try:
        resolve(device)
    except UserError:
        return False
    return True


def say(line: str) -> None:
    """One status line on stderr (stdout carries the reply or the JSON)."""
    typer.echo(line, err=True)


def store_table(store: Any, loaded: LoadedModel, costs: Any, settings: Any,
                measure_s: float) -> str:
    """Store a measured table for this host in the open `store`, retried while the store is
    unreachable as a driver's writes are (`StoreWriter`: each wait said, `StoreOutage` past
    `SPECFLEET_STORE_RETRY_S`); returns where (for the message)."""
    from specfleet.cluster.storewriter import table_writer
    from specfleet.jobs.run import Target
    from specfleet.workers.hardware import detect_host

    info = detect_host()
    calibration = {
        "costs": dataclasses.asdict(costs), "host_fingerprint": info.fingerprint,
        "weights_hash": loaded.weights_hash, "settings": dataclasses.asdict(settings),
        "versions": dict(info.versions), "measure_s": round(measure_s, 2),
    }
    target = Target(host=info.name, engine=costs.engine, device=costs.device)
    writer = table_writer(store, lambda reason: say(f"store: {reason}"))
    writer.retry("store the measured width-cost table", store.record_calibration, target,
                 loaded.alias, calibration)
    return str(store.display_url)


def stored_or_measured_costs(loaded: LoadedModel, db: str | None = None) -> tuple[float, ...]:
    """The newest stored table of this host, engine, device, model and weights; when there
    is none, one measured with the quick settings, stored, and said so on stderr."""
    from specfleet.engine.widthcosts import QUICK, measure_width_costs
    from specfleet.settings import STORE_RETRY_S
    from specfleet.workers.hardware import detect_host
    from specfleet.workers.machinelock import holding_this_machine

    STORE_RETRY_S.read()  # the table's write retries this long: a malformed value before measuring
    runner = loaded.runner
    fingerprint = detect_host().fingerprint
    with writing_store(db) as store:
        rows = store.latest_calibration(runner.engine, runner.device, loaded.alias,
                                        host_fingerprint=fingerprint,
                                        weights_hash=loaded.weights_hash)
    ratios = tuple(r.ratio for r in rows if r.ratio is not None)
    if rows and len(ratios) == len(rows):
        say(f"[Calibrated] width-cost table of {rows[0].measured_at:%Y-%m-%d %H:%M} UTC "
             f"(n={rows[0].n}, widths 1..{len(rows)})")
        return ratios
    say(f"[Calibrated] no stored width-cost table for {loaded.alias} on this host's "
         f"{runner.engine}/{runner.device}; measuring one (quick)")
    with holding_this_machine("specfleet generate", say):  # timed as a run is, alone
        start_s = time.perf_counter()
        costs = measure_width_costs(runner, QUICK, progress=say)
    with writing_store(db) as store:
        where = store_table(store, loaded, costs, QUICK, time.perf_counter() - start_s)
    say(f"[Calibrated] measured in {time.perf_counter() - start_s:.1f} s; stored in {where}")
    runner.reset()
    return costs.ratio
