"""`specfleet results`, `history` and `compare`: what the store holds, read back."""

from __future__ import annotations

import json
from typing import Annotated, Literal

import typer

from specfleet import jsontext
from specfleet.cli.options import (
    LIST_LIMIT,
    MATRIX_ID,
    DbOption,
    FormatOption,
    ModelAliasOption,
    RateOption,
    not_blank,
    split_list,
)
from specfleet.engine.kinds import DEVICES, ENGINES, choices_text
from specfleet.errors import UserError
from specfleet.jobs.run import ARMS
from specfleet.report.coverage import compare_coverage
from specfleet.report.grid import check_format
from specfleet.report.history import (
    cell_history,
    compare,
    compare_gap_text,
    newest_points,
    render_compare,
    render_history,
    same_matrix,
)
from specfleet.report.results import (
    CELLS_FIELDS,
    RUNS_SHOWN,
    RUNS_TABLE_FIELDS,
    check_stored_values,
    render_results,
    run_filters,
)
from specfleet.report.tables import check_pivot
from specfleet.stats.changes import DEFAULT_FACTOR
from specfleet.stats.history import changed_only, history_regressions
from specfleet.stats.runs import CELL_FIELDS, Rate
from specfleet.store.export import with_job_prompts
from specfleet.store.store import open_store

Many = list[str] | None
FailOn = Literal["regression", "none"]
FailOnOption = Annotated[FailOn, typer.Option(
    "--fail-on", help="Exit 1 when a regression is found (regression), or not for one (none).")]


def _factor(value: float) -> float:
    # By hand: Typer's min/max would call nan "not less than or equal to 100".
    if not 1.0 <= value <= 100.0:
        raise typer.BadParameter(f"expected a ratio from 1 to 100 (1.1 = 10%), got {value}")
    return value


FactorOption = Annotated[float, typer.Option(
    "--factor", callback=_factor, help="Like asv: a significant change counts only beyond this "
    "ratio either way (1.1 = 10%); 1.0 = any significant change; at most 100.")]
OnlyChangedOption = Annotated[bool, typer.Option(
    "--only-changed", help="Show only the cells (points) that changed beyond noise.")]


def _split(ctx, param, values: list[str] | None) -> list[str] | None:
    """`--arm plain,auto` as `--arm plain --arm auto` (`split_list`, as `bench` reads its
    lists); a value without a comma as given, so a blank one is refused as blank."""
    if values is None:
        return None
    flag = f"--{param.name}"
    return [item for value in values
            for item in (split_list(flag, [value]) if "," in value else [value])]


def _many(flag: str, help_text: str) -> typer.models.OptionInfo:
    return typer.Option(flag, callback=_split,
                        help=f"{help_text} (comma-separated or repeated for several).")


def results(
    host: Annotated[Many, _many("--host", "Host name")] = None,
    kind: Annotated[Many, _many("--kind", "Host kind, e.g. mac-mlx, gb10-cuda, linux-cpu")] = None,
    engine: Annotated[Many, _many("--engine", choices_text(ENGINES))] = None,
    device: Annotated[Many, _many("--device", choices_text(DEVICES))] = None,
    model: Annotated[Many, _many("--model", "Model alias")] = None,
    prompt: Annotated[Many, _many("--prompt", "Prompt name")] = None,
    arm: Annotated[Many, _many("--arm", choices_text(ARMS))] = None,
    matrix: Annotated[Many, _many("--matrix", "Matrix id")] = None,
    job: Annotated[Many, _many("--job", "Generation job id (`specfleet job list`)")] = None,
    version: Annotated[Many, _many("--version", "specfleet version that ran it")] = None,
    since: Annotated[str | None, typer.Option(help="Finished at or after (ISO, UTC).")] = None,
    until: Annotated[str | None, typer.Option(help="Finished before (ISO, UTC).")] = None,
    cells: Annotated[bool, typer.Option("--cells", help=(
        "Aggregate done runs per cell: a row per cell and token limit, in plan order (targets, "
        "models, prompts, then arms, plain first, as the matrices list them)."))] = False,
    pivot: Annotated[str | None, typer.Option(help="'target': targets side by side.")] = None,
    limit: Annotated[int | None, typer.Option(
        "--limit", min=1, max=LIST_LIMIT, help=f"The N runs planned last, in matrix and plan "
        f"order; default {RUNS_SHOWN} in a table or markdown (a note says how many matched), "
        "every run in json and csv.")] = None,
    fmt: FormatOption = "table",
    rate: RateOption = "whole",
    db: DbOption = None,
) -> None:
    """Stored runs matching the filters (or, with --cells / --pivot, their cells), in matrix
    and plan order; a table lists the runs planned last (--limit), saying how many matched."""
    check_format(fmt)  # the flags' own mistakes first, then what the store holds
    check_pivot(pivot)
    aggregated = cells or pivot is not None
    if aggregated and limit is not None:  # a cell of some of its runs would read as all
        raise UserError("--limit: --cells and --pivot aggregate every matching run; expected "
                        "--limit without them, or filters (--matrix, --since) to narrow them")
    with open_store(db, read_only=True) as store:
        filters = run_filters(store, host=host, kind=kind, engine=engine, device=device,
                              model=model, prompt=prompt, arm=arm, matrix=matrix, job=job,
                              version=version, since=since, until=until)
        # A typo reads as "0 runs" alone, and beside a stored value it is dropped unsaid.
        check_stored_values(store, filters)
        if aggregated:
            typer.echo(_cells_text(store, filters, fmt, cells, pivot, rate), nl=False)
            return
        shown = RUNS_SHOWN if limit is None and fmt in ("table", "markdown") else limit
        columns = RUNS_TABLE_FIELDS if fmt in ("table", "markdown") else None
        runs = store.runs(columns=columns, newest=shown, **filters)
        total = store.count_runs(**filters) if len(runs) == shown else len(runs)
        if columns is None:  # json, csv: every field
            runs = with_job_prompts(store, runs)
        typer.echo(render_results(runs, fmt, rate=rate, of_total=total), nl=False)


def _cells_text(store, filters: dict, fmt: str, cells: bool, pivot: str | None,
                rate: Rate) -> str:
    """`results --cells` / `--pivot` of the runs matching `filters`."""
    runs = store.runs(columns=CELLS_FIELDS, **filters)
    wanted = set(filters.get("arm", []))
    if wanted and "plain" not in wanted:
        # A speed-up is over plain on the same target, model and prompt: keep those too.
        runs += store.runs(columns=CELLS_FIELDS, **{**filters, "arm": ["plain"]})
    return render_results(runs, fmt, cells, pivot, rate, wanted or None)


def history(
    model: ModelAliasOption,
    prompt: Annotated[str, typer.Option("--prompt", help="Prompt name.")],
    arm: Annotated[str, typer.Option("--arm", help=f"Arm ({choices_text(ARMS)}).")],
    target: Annotated[str | None, typer.Option(
        "--target", help="HOST, HOST/ENGINE or HOST/ENGINE/DEVICE.")] = None,
    factor: FactorOption = DEFAULT_FACTOR,
    only_changed: OnlyChangedOption = False,
    last: Annotated[int | None, typer.Option(
        "--last", min=1, max=LIST_LIMIT, help="Only the points of the newest N matrices that "
        "measured the cell, each still compared with the point before it (default: all).")
    ] = None,
    fail_on: FailOnOption = "regression",
    fmt: FormatOption = "table",
    db: DbOption = None,
) -> None:
    """One cell over time, every change beyond noise flagged (the test is named).

    Exit status 1 when the newest point of a target is a regression (a significant slow-down
    from the point before, nothing but the code version changed), unless --fail-on none.
    """
    with open_store(db, read_only=True) as store:
        rows = cell_history(store, model, prompt, arm, target, factor)
        rows, left_out = newest_points(store, rows, last) if last else (rows, "")
    title = f"History of {model} / {prompt} / {arm}" + (f" on {target}" if target else "")
    shown = changed_only(rows) if only_changed else rows
    typer.echo(render_history(shown, title, fmt, factor, len(rows) if only_changed else None,
                              left_out), nl=False)
    regressions = history_regressions(rows)
    if regressions and fail_on == "regression":
        # A regression always has a change; the filter only narrows it for the type checker.
        where = ", ".join(f"{r.target} ({r.max_tokens} tokens) {r.matrix_id} "
                          f"{r.change.ratio:.2f}x" for r in regressions if r.change is not None)
        typer.echo(f"history: regression at {where}", err=True)
        raise typer.Exit(1)


def compare_cmd(
    a: Annotated[str, typer.Argument(metavar="A", callback=not_blank(MATRIX_ID),
                                     help="Baseline matrix id.")],
    b: Annotated[str, typer.Argument(metavar="B", callback=not_blank(MATRIX_ID),
                                     help="Matrix id compared with the baseline.")],
    allow_mixed: Annotated[bool, typer.Option(
        "--allow-mixed", help="Call slow-downs regressions even when weights, prompt, engine "
        "config, host or library versions differ.")] = False,
    factor: FactorOption = DEFAULT_FACTOR,
    only_changed: OnlyChangedOption = False,
    fail_on: FailOnOption = "regression",
    fmt: FormatOption = "table",
    db: DbOption = None,
) -> None:
    """Two matrices side by side per cell: ratio B/A, significance, regressions.

    Exit status 1 when a cell regressed (unless --fail-on none) or a cell was not compared.
    """
    refusal = same_matrix(a, b)
    if refusal:
        raise UserError(refusal)
    with open_store(db, read_only=True) as store:
        rows = compare(store, a, b, allow_mixed, factor)
        runs_a, runs_b = (store.runs(matrix=m, columns=(*CELL_FIELDS, "status")) for m in (a, b))
    coverage = compare_coverage(runs_a, runs_b, len(rows))
    text = render_compare(rows, a, b, fmt, factor, only_changed)
    if fmt == "json":  # the web API's body: the cells and how many were compared
        body = {"a": a, "b": b, "allow_mixed": allow_mixed, "coverage": coverage.counts(),
                "cells": json.loads(text)}
        text = jsontext.dumps(body, indent=2) + "\n"
    typer.echo(text, nl=False)
    regressions = sum(r.verdict == "regression" for r in rows)
    failed = bool(regressions) and fail_on == "regression"
    if failed:
        typer.echo(f"compare: {regressions} regressions ({b} against {a})", err=True)
    if not coverage.complete:  # no evidence is a failed check, never a pass
        typer.echo(compare_gap_text(runs_a, runs_b, a, b, coverage), err=True)
    if failed or not coverage.complete:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add `results`, `history` and `compare` to the root app."""
    app.command("results")(results)
    app.command("history")(history)
    app.command("compare")(compare_cmd)
