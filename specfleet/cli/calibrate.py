"""`specfleet calibrate`: the per-width verify cost table (docs/engine.md, "Verify cost per width") for one model.

The measuring itself is `specfleet.engine.calibrate.measure_width_costs`, reusable by the
fleet.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Literal

import typer

from specfleet.cli.generate import check_choice, default_engine, load_model
from specfleet.engine.kinds import DEVICE_CHOICES, MODEL_ENGINES, choices_text
from specfleet.errors import UserError

# A verify block is at most max-draft (64) proposals plus the bonus row.
MAX_WIDTH_LIMIT = 65


def calibrate_command(
    model: Annotated[str, typer.Option("--model", "-m", help="Alias or local model folder.")],
    engine: Annotated[Literal[MODEL_ENGINES], typer.Option("--engine", help=f"{choices_text(MODEL_ENGINES)}.")] = default_engine(),
    device: Annotated[
        Literal[DEVICE_CHOICES], typer.Option("--device", help=f"{choices_text(DEVICE_CHOICES)}.")
    ] = "auto",
    max_width: Annotated[
        int, typer.Option("--max-width", help="Widest verify block measured.")
    ] = 10,
    prompt_len: Annotated[
        int, typer.Option("--prompt-len", help="Cached positions while timing.")
    ] = 300,
    runs: Annotated[int, typer.Option("--runs", help="Pipelined runs (median).")] = 5,
    steps: Annotated[int, typer.Option("--steps", help="Pipelined steps per run.")] = 60,
    sync_rounds: Annotated[int, typer.Option("--sync-rounds", help="Timed rounds per width.")] = 40,
    warm_up: Annotated[
        bool, typer.Option("--warm-up/--no-warm-up", help="Two untimed passes first.")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Print the per-width verify cost table: sync ms and multiples of a pipelined step."""
    for flag, value in (
        ("--max-width", max_width),
        ("--prompt-len", prompt_len),
        ("--runs", runs),
        ("--steps", steps),
        ("--sync-rounds", sync_rounds),
    ):
        if value < 1:
            raise UserError(f"{flag} must be at least 1; got {value}")
    if max_width > MAX_WIDTH_LIMIT:
        raise UserError(f"--max-width must be at most {MAX_WIDTH_LIMIT}; got {max_width}")
    check_choice("--device", device, DEVICE_CHOICES)
    from specfleet.engine.calibrate import measure_width_costs

    loaded = load_model(model, engine, device)
    costs = measure_width_costs(
        loaded.runner,
        max_width=max_width,
        prompt_len=prompt_len,
        runs=runs,
        steps=steps,
        sync_rounds=sync_rounds,
        warm_up=warm_up,
    )
    if as_json:
        typer.echo(json.dumps({"model": loaded.alias, **dataclasses.asdict(costs)}))
    else:
        typer.echo(f"model={loaded.alias} path={loaded.path}")
        typer.echo(costs.format_table())


def register(app: typer.Typer) -> None:
    """Add the top-level `calibrate` command to the root app."""
    app.command("calibrate")(calibrate_command)
