"""`specfleet calibrate`: the per-width verify cost table (docs/engine.md, "Verify cost per width") for one model.

The measuring itself is `specfleet.engine.widthcosts.measure_width_costs`, reusable by the
fleet. `--store` keeps the table keyed by this host's fingerprint, engine, device, model and
weights hash; `generate --prompt-lookup-policy calibrated` reads it back
(`stored_or_measured_costs`).
"""

from __future__ import annotations

import dataclasses
import time
from contextlib import nullcontext
from dataclasses import replace
from typing import Annotated, Any

import typer

from specfleet import jsontext
from specfleet.cli.localmodel import DEFAULT_ENGINE, load_model, say, store_table
from specfleet.cli.options import (
    MAX_WIDTH_LIMIT,
    DbOption,
    DeviceOption,
    EngineOption,
    LocalModelOption,
    MaxWidthOption,
    writing_store,
)
from specfleet.engine.widthcosts import MAX_REPS, MAX_ROUNDS, MAX_STEPS
from specfleet.errors import UserError
from specfleet.jobs.spec import MAX_TOKENS_LIMIT
from specfleet.workers.quiet import ForeignCpuMeter


def calibrate_command(
    model: LocalModelOption,
    engine: EngineOption = DEFAULT_ENGINE,
    device: DeviceOption = "auto",
    max_width: MaxWidthOption = 33,
    prompt_len: Annotated[int | None, typer.Option(
        "--prompt-len", min=1, max=MAX_TOKENS_LIMIT,
        help="Cached positions at each round's start.")] = None,
    rounds: Annotated[int | None, typer.Option(
        "--rounds", min=1, max=MAX_ROUNDS, help="Rotating rounds (each ratio's n).")] = None,
    steps: Annotated[int | None, typer.Option(
        "--steps", min=2, max=MAX_STEPS, help="Pipelined steps per round.")] = None,
    reps: Annotated[int | None, typer.Option(
        "--reps", min=1, max=MAX_REPS, help="Verifies per width per round.")] = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="Few short rounds (under 30 s on the bundled model on a quiet 2-core box).")
    ] = False,
    warm_up: Annotated[
        bool, typer.Option("--warm-up/--no-warm-up", help="One untimed round first.")
    ] = True,
    store: Annotated[
        bool, typer.Option("--store", help="Keep the table for this host in the store.")
    ] = False,
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Print the per-width verify cost table: sync ms and multiples of a pipelined step,
    each ratio with its lowest and highest round and n; progress goes to stderr."""
    settings = _settings(quick, max_width, prompt_len=prompt_len, rounds=rounds, steps=steps,
                         reps=reps)
    if db is not None and not store:  # minutes of measuring, then nothing where it was asked
        raise UserError(f"--db {db} is where --store keeps the table, and --store is not "
                        "given; expected --store beside --db (without it nothing is stored)")
    if store:  # a store that cannot take the table is said before minutes of measuring
        _check_store(db, max_width)
    check_context(settings, model, engine)
    from specfleet.workers.hardware import default_host_name

    # Named in the JSON, so `replay --costs FILE` checks this host's runs against it; a
    # host name that is none is said before minutes of measuring.
    host = default_host_name() if as_json else ""
    loaded = load_model(model, engine, device)
    # Opened (a server reached) before minutes of measuring for it.
    with writing_store(db) if store else nullcontext() as kept:
        costs, measure_s = _measure(loaded, settings, warm_up)
        try:
            print_table(loaded, costs, measure_s, as_json, host)  # first: a failed store loses nothing
        finally:  # and a closed or full stdout (`| less` quit early) loses no stored table
            if kept is not None:
                say(f"calibrate: stored in {store_table(kept, loaded, costs, settings, measure_s)}")


def _settings(quick: bool, max_width: int, **given: int | None) -> Any:
    """The defaults (or `--quick`'s) with the flags given."""
    from specfleet.engine.widthcosts import QUICK, CalibrationSettings

    base = QUICK if quick else CalibrationSettings()
    overrides: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    return replace(base, max_width=max_width, **overrides)


def _check_store(db: str | None, max_width: int) -> None:
    from specfleet.settings import HOST, STORE_RETRY_S
    from specfleet.store.engine import resolve_url, store_source
    from specfleet.store.store import check_writable_store

    check_stored_width(max_width)
    STORE_RETRY_S.read()  # how long the table's write retries: a malformed value said first
    HOST.read()  # the table is stored under this host's name
    check_writable_store(resolve_url(db), store_source(db))


def _measure(loaded: Any, settings: Any, warm_up: bool) -> tuple[Any, float]:
    """The table and its seconds, under the machine lock (never beside a timed run); a busy
    host is said, as ratios of busy steps misprice widths and runs read a stored table."""
    from specfleet.engine.widthcosts import measure_width_costs
    from specfleet.workers.machinelock import holding_this_machine

    with holding_this_machine("specfleet calibrate", say):
        start_s, others = time.perf_counter(), ForeignCpuMeter()
        costs = measure_width_costs(loaded.runner, settings, warm_up=warm_up, progress=say)
        measure_s = time.perf_counter() - start_s
        busy = others.check(fresh=True)  # over the whole measurement
    if not busy.quiet:
        say(f"calibrate: warning: measured on a busy host ({busy.reason}); measure again "
            "when it is quiet")
    return costs, measure_s


def print_table(loaded: Any, costs: Any, measure_s: float, as_json: bool, host: str = "") -> None:
    """The table as text, or with `as_json` one JSON object naming the model and `host` (a
    file `replay --costs` reads as measured there)."""
    if as_json:
        typer.echo(jsontext.dumps({"model": loaded.alias, "host": host,
                                   **dataclasses.asdict(costs)}))
        return
    typer.echo(f"model={loaded.alias} path={loaded.path} measured in {measure_s:.1f} s")
    typer.echo(costs.format_table())
    if costs.flagged:  # judged on the re-measure's rounds alone (`widthcosts.falling`)
        typer.echo(f"not monotone: widths {', '.join(map(str, costs.flagged))} (in the "
                   "re-measure's own rounds each one's highest ratio lay below the previous "
                   f"measured width's lowest; min and max above are over all {costs.n} rounds)")


def narrowest_stored_width() -> int:
    """The fewest widths a table needs for every policy that reads one (their own check,
    `PromptLookupConfig.validate`, decides)."""
    from specfleet.engine.config import POLICY_NAMES, needs_costs
    from specfleet.workers.costs import takes_costs

    return next(width for width in range(1, MAX_WIDTH_LIMIT + 1)
                if all(takes_costs(policy, (1.0,) * width)
                       for policy in filter(needs_costs, POLICY_NAMES)))


def check_stored_width(max_width: int, storing: str = " with --store") -> None:
    """Refuse to store a table the calibrated policy would refuse for good (`storing`: what
    makes this command store it, for the message)."""
    least = narrowest_stored_width()
    if max_width < least:
        raise UserError(f"--max-width {max_width}: a stored table needs at least widths "
                        f"1-{least} (the calibrated policy refuses a narrower one); expected "
                        f"--max-width {least} or more{storing}")


def check_context(settings: Any, model: str, engine: str) -> None:
    """Refuse a round longer than the model's context before the model loads (a huge
    --prompt-len would fill memory while it prefills); a model that does not resolve is
    `load_model`'s to say."""
    from specfleet.models.registry import context_tokens, resolve_model

    try:
        context = context_tokens(resolve_model(model, engine, measure=False).path)
    except UserError:
        return
    if context is None:
        return
    needed, flag = round_positions(settings), _blamed_flag(settings, context)
    if needed > context:
        raise UserError(f"{flag} {getattr(settings, flag[2:].replace('-', '_'))}: a round needs "
                        f"{needed} positions (prompt, steps, verify blocks) but {model} has a "
                        f"context of {context} tokens; expected a smaller {flag}")


def round_positions(settings: Any, **lowered: int) -> int:
    """Positions a round fills: the prompt, the pipelined steps, then each verify block and
    the one token it keeps (`lowered`: settings taken at another value)."""
    value = {**dataclasses.asdict(settings), **lowered}
    return (value["prompt_len"] + value["steps"]
            + value["max_width"] * (value["reps"] + 1))


def _blamed_flag(settings: Any, context: int) -> str:
    """The flag a round too long for the context is said against: of those that alone, at
    their least, would make it fit, the one taking the most positions; else the one taking
    the most. The verify blocks are --reps's while it is above 1 (a tie goes to it)."""
    blocks = settings.max_width * (settings.reps + 1)
    taken = {"--prompt-len": settings.prompt_len, "--steps": settings.steps,
             "--reps": blocks if settings.reps > 1 else 0, "--max-width": blocks}
    least = {"--prompt-len": round_positions(settings, prompt_len=1),
             "--steps": round_positions(settings, steps=2),
             "--reps": round_positions(settings, reps=1),
             "--max-width": round_positions(settings, max_width=1)}
    fixing = [flag for flag in taken if taken[flag] and least[flag] <= context]
    return max(fixing or list(taken), key=lambda flag: (taken[flag], flag == "--reps"))


def register(app: typer.Typer) -> None:
    """Add the top-level `calibrate` command to the root app."""
    app.command("calibrate")(calibrate_command)
