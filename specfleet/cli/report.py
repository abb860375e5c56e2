"""`specfleet report ID [--out DIR]`: the markdown record, PNG plots and raw CSV of a matrix."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specfleet.cli.matrix_output import partial_note
from specfleet.cli.options import DbOption, MatrixIdArgument
from specfleet.report.record import write_record
from specfleet.store.store import open_store
from specfleet.userfiles import check_writable_dir, output_folder


def report(
    matrix_id: MatrixIdArgument,
    out: Annotated[str | None, typer.Option(
        "--out", help="Folder for the record, made if missing inside an existing one "
        "(default: reports/MATRIX_ID).")] = None,
    db: DbOption = None,
) -> None:
    """Write the benchmark record of a matrix: markdown, PNG plots, raw runs as CSV."""
    target = Path("reports") / matrix_id if out is None else \
        output_folder(out, "--out", "a folder to write the record in")
    check_writable_dir(target, "--out")
    with open_store(db, read_only=True) as store:
        files = write_record(store, matrix_id, target)
        matrix = store.get_matrix(matrix_id)
    typer.echo(f"record: {files.markdown}")
    if not matrix.counts.get("done", 0):  # a record of failures: its tables are no result
        typer.echo(f"warning: matrix {matrix_id} has no done runs: the record's tables are "
                   "empty; runs.csv holds each run's status and error", err=True)
    elif (note := partial_note(matrix)) is not None:  # as `matrix show` says it
        typer.echo(note, err=True)
    for path in (*files.plots, files.csv):
        typer.echo(f"  {path}")
    if note := files.glyphs_note():
        typer.echo(note, err=True)


def register(app: typer.Typer) -> None:
    """Add `report` to the root app."""
    app.command("report")(report)
