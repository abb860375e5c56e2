"""`specfleet matrix ...`: submit, resume and read benchmark matrices.

The scheduler developer owns `run`, `resume`, `status`, `list`, `validate` and `schema`;
`show` (the speed-up tables) calls `report.tables.render_matrix`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from specfleet.report.tables import render_matrix
from specfleet.store.store import open_store

app = typer.Typer(help="Benchmark matrices: run, resume, status, list, show.",
                  no_args_is_help=True)

DB_HELP = ("Database URL (sqlite:///PATH, postgresql+psycopg://...) or SQLite file path; "
           "default $SPECFLEET_DB, else the user data dir.")


@app.command("show")
def show(
    matrix_id: Annotated[str, typer.Argument(help="Matrix id (see `matrix list`).")],
    fmt: Annotated[str, typer.Option("--format", help="table, json, csv or markdown.")] = "table",
    pivot: Annotated[str | None, typer.Option(
        "--pivot", help="'target': each model, prompt and arm on every target side by side.")
    ] = None,
    db: Annotated[str | None, typer.Option("--db", help=DB_HELP)] = None,
) -> None:
    """The speed-up tables of a matrix: plain tok/s, speed-ups over plain, counters, parity."""
    with open_store(db) as store:
        typer.echo(render_matrix(store, matrix_id, fmt, pivot), nl=False)
