"""`specfleet calibrate`: the per-width verify cost table (docs/engine.md, "Verify cost per width") for one model.

The measuring itself is `specfleet.engine.calibrate.measure_width_costs`, reusable by the
fleet. `--store` keeps the table keyed by this host's fingerprint, engine, device, model and
weights hash; `generate --prompt-lookup-policy calibrated` reads it back
(`stored_or_measured_costs`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import replace
from typing import Annotated, Any

import typer

from specfleet.cli.generate import DEFAULT_ENGINE, check_choice, load_model
from specfleet.engine.kinds import (
    DEVICE_CHOICES,
    MODEL_ENGINES,
    DeviceChoice,
    ModelEngine,
    choices_text,
)
from specfleet.errors import UserError
from specfleet.workers.loaded import LoadedModel

# A verify block is at most max-draft (64) proposals plus the bonus row.
MAX_WIDTH_LIMIT = 65


def _say(line: str) -> None:
    typer.echo(line, err=True)


def store_table(loaded: LoadedModel, costs: Any, settings: Any, measure_s: float,
                db: str | None) -> str:
    """Store a measured table for this host; returns where (for the message)."""
    from specfleet.jobs.run import Target
    from specfleet.store.store import open_store
    from specfleet.workers.hardware import detect_host

    info = detect_host()
    calibration = {
        "costs": dataclasses.asdict(costs), "host_fingerprint": info.fingerprint,
        "weights_hash": loaded.weights_hash, "settings": dataclasses.asdict(settings),
        "versions": dict(info.versions), "measure_s": round(measure_s, 2),
    }
    target = Target(host=info.name, engine=costs.engine, device=costs.device)
    with open_store(db) as store:
        store.record_calibration(target, loaded.alias, calibration)
        return store.display_url


def stored_or_measured_costs(loaded: LoadedModel, db: str | None = None) -> tuple[float, ...]:
    """The newest stored table of this host, engine, device, model and weights; when there
    is none, one measured with the quick settings, stored, and said so on stderr."""
    from specfleet.engine.calibrate import QUICK, measure_width_costs
    from specfleet.store.store import open_store
    from specfleet.workers.hardware import detect_host

    runner = loaded.runner
    fingerprint = detect_host().fingerprint
    with open_store(db) as store:
        rows = store.latest_calibration(runner.engine, runner.device, loaded.alias,
                                        host_fingerprint=fingerprint,
                                        weights_hash=loaded.weights_hash)
    ratios = tuple(r.ratio for r in rows if r.ratio is not None)
    if rows and len(ratios) == len(rows):
        _say(f"[Calibrated] width-cost table of {rows[0].measured_at:%Y-%m-%d %H:%M} "
             f"(n={rows[0].n}, widths 1..{len(rows)})")
        return ratios
    _say(f"[Calibrated] no stored width-cost table for {loaded.alias} on this host's "
         f"{runner.engine}/{runner.device}; measuring one (quick)")
    start_s = time.perf_counter()
    costs = measure_width_costs(runner, QUICK, progress=_say)
    where = store_table(loaded, costs, QUICK, time.perf_counter() - start_s, db)
    _say(f"[Calibrated] measured in {time.perf_counter() - start_s:.1f} s; stored in {where}")
    runner.reset()
    return costs.ratio


def calibrate_command(
    model: Annotated[str, typer.Option("--model", "-m", help="Alias or local model folder.")],
    engine: Annotated[ModelEngine, typer.Option("--engine", help=f"{choices_text(MODEL_ENGINES)}.")] = DEFAULT_ENGINE,
    device: Annotated[
        DeviceChoice, typer.Option("--device", help=f"{choices_text(DEVICE_CHOICES)}.")
    ] = "auto",
    max_width: Annotated[
        int, typer.Option("--max-width", help="Widest verify block measured.")
    ] = 33,
    prompt_len: Annotated[
        int | None, typer.Option("--prompt-len", help="Cached positions at each round's start.")
    ] = None,
    rounds: Annotated[
        int | None, typer.Option("--rounds", help="Rotating rounds (each ratio's n).")
    ] = None,
    steps: Annotated[int | None, typer.Option("--steps", help="Pipelined steps per round.")] = None,
    reps: Annotated[
        int | None, typer.Option("--reps", help="Verifies per width per round.")
    ] = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="Few short rounds (under 30 s on the bundled model).")
    ] = False,
    warm_up: Annotated[
        bool, typer.Option("--warm-up/--no-warm-up", help="One untimed round first.")
    ] = True,
    store: Annotated[
        bool, typer.Option("--store", help="Keep the table for this host in the store.")
    ] = False,
    db: Annotated[str | None, typer.Option("--db", help="Store URL or SQLite file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Print the per-width verify cost table: sync ms and multiples of a pipelined step,
    each ratio with its lowest and highest round and n; progress goes to stderr."""
    from specfleet.engine.calibrate import QUICK, CalibrationSettings, measure_width_costs

    given = {"prompt_len": prompt_len, "rounds": rounds, "steps": steps, "reps": reps}
    for name, value in given.items():
        if value is not None and value < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1; got {value}")
    if steps is not None and steps < 2:
        raise UserError(f"--steps must be at least 2; got {steps}")
    if max_width < 1:
        raise UserError(f"--max-width must be at least 1; got {max_width}")
    if max_width > MAX_WIDTH_LIMIT:
        raise UserError(f"--max-width must be at most {MAX_WIDTH_LIMIT}; got {max_width}")
    check_choice("--device", device, DEVICE_CHOICES)
    base = QUICK if quick else CalibrationSettings()
    overrides: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    settings = replace(base, max_width=max_width, **overrides)
    loaded = load_model(model, engine, device)
    start_s = time.perf_counter()
    costs = measure_width_costs(loaded.runner, settings, warm_up=warm_up, progress=_say)
    measure_s = time.perf_counter() - start_s
    if store:
        where = store_table(loaded, costs, settings, measure_s, db)
        _say(f"calibrate: stored in {where}")
    if as_json:
        typer.echo(json.dumps({"model": loaded.alias, **dataclasses.asdict(costs)}))
        return
    typer.echo(f"model={loaded.alias} path={loaded.path} measured in {measure_s:.1f} s")
    typer.echo(costs.format_table())
    if costs.flagged:
        typer.echo(f"not monotone within its spread after re-measuring: widths "
                   f"{', '.join(map(str, costs.flagged))}")


def register(app: typer.Typer) -> None:
    """Add the top-level `calibrate` command to the root app."""
    app.command("calibrate")(calibrate_command)
