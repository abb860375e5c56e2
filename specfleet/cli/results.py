"""`specfleet results`, `history` and `compare`: what the store holds, read back."""

from __future__ import annotations

from typing import Annotated

import typer

from specfleet.report.coverage import compare_coverage
from specfleet.report.history import cell_history, compare, render_compare, render_history
from specfleet.report.results import render_results, run_filters
from specfleet.store.store import open_store

DB_HELP = ("Database URL (sqlite:///PATH, postgresql+psycopg://...) or SQLite file path; "
           "default $SPECFLEET_DB, else the user data dir.")
Db = Annotated[str | None, typer.Option("--db", help=DB_HELP)]
Many = list[str] | None
Format = Annotated[str, typer.Option("--format", help="table, json or csv.")]


def _many(flag: str, help_text: str):
    return Annotated[Many, typer.Option(flag, help=f"{help_text} (repeat for several).")]


def results(
    host: _many("--host", "Host name") = None,
    kind: _many("--kind", "Host kind, e.g. mac-mlx, gb10-cuda, linux-cpu") = None,
    engine: _many("--engine", "mlx, torch or toy") = None,
    device: _many("--device", "metal, cuda, mps or cpu") = None,
    model: _many("--model", "Model alias") = None,
    prompt: _many("--prompt", "Prompt name") = None,
    arm: _many("--arm", "plain, auto, graded, gated or fixed") = None,
    matrix: _many("--matrix", "Matrix id") = None,
    version: _many("--version", "specfleet version that ran it") = None,
    since: Annotated[str | None, typer.Option(help="Finished at or after (ISO, UTC).")] = None,
    until: Annotated[str | None, typer.Option(help="Finished before (ISO, UTC).")] = None,
    cells: Annotated[bool, typer.Option("--cells", help="Aggregate done runs per cell.")] = False,
    pivot: Annotated[str | None, typer.Option(help="'target': targets side by side.")] = None,
    fmt: Format = "table",
    db: Db = None,
) -> None:
    """Stored runs matching the filters (or, with --cells / --pivot, their cells)."""
    with open_store(db) as store:
        filters = run_filters(store, host=host, kind=kind, engine=engine, device=device,
                              model=model, prompt=prompt, arm=arm, matrix=matrix,
                              version=version, since=since, until=until)
        runs = store.runs(**filters)
        typer.echo(render_results(runs, fmt, cells, pivot), nl=False)


def history(
    model: Annotated[str, typer.Option("--model", help="Model alias.")],
    prompt: Annotated[str, typer.Option("--prompt", help="Prompt name.")],
    arm: Annotated[str, typer.Option("--arm", help="Arm (plain, graded, gated, ...).")],
    target: Annotated[str | None, typer.Option(
        "--target", help="HOST, HOST/ENGINE or HOST/ENGINE/DEVICE.")] = None,
    fmt: Format = "table",
    db: Db = None,
) -> None:
    """One cell over time, every change beyond noise flagged (the test is named)."""
    with open_store(db) as store:
        rows = cell_history(store, model, prompt, arm, target)
    title = f"History of {model} / {prompt} / {arm}" + (f" on {target}" if target else "")
    typer.echo(render_history(rows, title, fmt), nl=False)


def compare_cmd(
    a: Annotated[str, typer.Argument(help="Baseline matrix id.")],
    b: Annotated[str, typer.Argument(help="Matrix id compared with the baseline.")],
    allow_mixed: Annotated[bool, typer.Option(
        "--allow-mixed", help="Call slow-downs regressions even when weights, prompt, engine "
        "config, host or library versions differ.")] = False,
    fmt: Format = "table",
    db: Db = None,
) -> None:
    """Two matrices side by side per cell: ratio B/A, significance, regressions."""
    with open_store(db) as store:
        rows = compare(store, a, b, allow_mixed)
        coverage = compare_coverage(store.runs(matrix=a), store.runs(matrix=b), len(rows))
    typer.echo(render_compare(rows, a, b, fmt), nl=False)
    if not coverage.complete:  # no evidence is a failed check, never a pass
        typer.echo(f"compare: {coverage.text()} (measured in both {a} and {b})", err=True)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add `results`, `history` and `compare` to the root app."""
    app.command("results")(results)
    app.command("history")(history)
    app.command("compare")(compare_cmd)
