"""What a matrix command prints besides its tables' cells: the run's outcome (stderr), its
tables (stdout, alone in every format), the notes under them (runs not done, sessions that
mix) and each distinct failure once. `matrix run`, `resume`, `bench`, `show` and `report`
print them so."""

from __future__ import annotations

from collections import Counter

import typer

from specfleet.cli.options import counts_text
from specfleet.jobs.resolve import counted
from specfleet.report.results import render_matrix
from specfleet.report.sessions import sessions_note
from specfleet.stats.runs import Rate
from specfleet.store.rows import MatrixRow


def partial_note(matrix: MatrixRow) -> str | None:
    """Under the tables of a matrix not all done (running, failed, interrupted), on stderr:
    the tables read its done runs only, and where the others are listed."""
    done = matrix.counts.get("done", 0)
    if done == matrix.total_runs:
        return None
    rest = counts_text({status: n for status, n in matrix.counts.items() if status != "done"})
    return (f"matrix {matrix.id}: {matrix.status}; the tables read only its done runs, "
            f"{done} of {matrix.total_runs} ({rest}; `specfleet matrix status {matrix.id}` "
            "says more)")


def print_outcome(store, outcome, fmt: str = "table", rate: Rate = "whole") -> None:
    """The tables on stdout, alone in every format (`> x.md` holds markdown only); what the
    run says (its status, failures, how to resume, the matrix id) on stderr."""
    if outcome.owner is not None:
        typer.echo(f"matrix {outcome.matrix_id}: driver {outcome.owner} still runs it "
                   f"(its heartbeat lease is live); took 0 runs, skipped {outcome.skipped}",
                   err=True)
        return
    if outcome.skipped:
        typer.echo(f"skipped {counted(outcome.skipped, 'run')} a live driver still runs",
                   err=True)
    typer.echo(
        f"matrix {outcome.matrix_id}: {outcome.status} ({outcome.done} done, "
        f"{outcome.failed} failed, {outcome.interrupted} interrupted, {outcome.pending} "
        f"pending this call; {outcome.wall_s:.1f} s)", err=True,
    )
    echo_tables(store, outcome.matrix_id, fmt, rate)
    for line in failure_lines(store.runs(matrix=outcome.matrix_id)):
        typer.echo(line, err=True)
    if outcome.status != "done":
        typer.echo(f"resume with: specfleet matrix resume {outcome.matrix_id}", err=True)
    typer.echo(f"matrix id: {outcome.matrix_id}", err=True)


def echo_tables(store, matrix_id: str, fmt: str, rate: Rate) -> None:
    """A matrix's tables on stdout, once it has a done run, as `run`, `resume` and `bench`
    print them (`-o`, `--rate`); the note of cells that mix sessions on stderr. JSON and CSV
    are printed with no done run too (no cells, the header), as `matrix show` prints them:
    a script reading stdout gets a document, not nothing."""
    if not store.get_matrix(matrix_id).counts.get("done") and fmt not in ("json", "csv"):
        return
    if (note := sessions_note(store, matrix_id)) is not None:
        typer.echo(note, err=True)
    typer.echo(render_matrix(store, matrix_id, fmt, rate=rate), nl=False)


def failure_lines(rows) -> list[str]:
    """Each distinct reason a run failed or was interrupted, once, with how many runs it hit."""
    reasons = Counter((row.status, " ".join((row.error or "no reason stored").split()))
                      for row in rows if row.status in ("failed", "interrupted"))
    return [f"{n} run{'' if n == 1 else 's'} {status}: {reason}"
            for (status, reason), n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))]
