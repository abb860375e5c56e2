"""`specfleet parity MATRIX_ID` and `specfleet parity run FILE`: greedy parity with forensics.

Exit status 0 when every reply is identical to plain or a near-tie flip; 1 when a suspect
divergence or a regression against `--baseline` is found (or a divergence could not be
replayed, unless `--allow-unverified`); 2 for a user mistake.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated, Any

import typer

from specfleet.engine.forensics import NEAR_TIE_LOGIT_MARGIN
from specfleet.errors import UserError
from specfleet.report.parity import check_parity
from specfleet.report.parity_tables import render_parity
from specfleet.report.replay import worker_replayer
from specfleet.store.store import open_store

DB_HELP = ("Database URL (sqlite:///PATH, postgresql+psycopg://...) or SQLite file path; "
           "default $SPECFLEET_DB, else the user data dir.")


class _LocalWorkers(dict):
    """Host name -> worker; makes this machine's HostWorker only when a replay needs it."""

    def __init__(self) -> None:
        super().__init__()
        self._local: Any = None
        from specfleet.workers.hardware import detect_host

        self.host = detect_host().name

    @property
    def local(self) -> Any:
        if self._local is None:
            from specfleet.workers.host import HostWorker

            self._local = HostWorker(self.host)
        return self._local

    def get(self, host, default=None):
        return self.local if host == self.host else super().get(host, default)

    def close(self) -> None:
        if self._local is not None:
            self._local.close()


@contextlib.contextmanager
def replay_workers(address: str | None, replay: bool) -> Iterator[tuple[dict, Any]]:
    """(host -> worker, a worker for toy runs): fleet actors with `--address`, else this
    machine's own HostWorker (runs of other hosts then stay unverified)."""
    if not replay:
        yield {}, None
        return
    local = _LocalWorkers()
    try:
        if address is None:
            yield local, _Lazy(local)
            return
        from specfleet.cluster import fleet
        from specfleet.workers.actor import get_worker, list_workers

        fleet.connect(address)
        try:
            yield {h: get_worker(h) for h in list_workers()}, _Lazy(local)
        finally:
            fleet.disconnect()
    finally:
        local.close()


class _Lazy:
    """Forwards `replay_divergence` to the local worker, creating it on first use."""

    def __init__(self, local: _LocalWorkers) -> None:
        self._local = local

    def replay_divergence(self, *args):
        return self._local.local.replay_divergence(*args)


def report_parity(store, matrix_id: str, *, baseline: str | None, near_tie: float,
                  fmt: str, address: str | None, replay: bool,
                  allow_unverified: bool) -> None:
    """Check, print, and exit 1 when CI should fail."""
    if near_tie <= 0:
        raise UserError(f"--near-tie: expected a positive logit margin, got {near_tie}")
    with replay_workers(address, replay) as (workers, any_host):
        replayer = worker_replayer(store, workers, any_host) if replay else None
        report = check_parity(store, matrix_id, replayer, baseline, near_tie)
    typer.echo(render_parity(report, fmt), nl=False)
    if report.failed(allow_unverified):
        raise typer.Exit(1)


def parity(
    what: Annotated[str, typer.Argument(help="A matrix id, or `run` followed by a file.")],
    file: Annotated[str | None, typer.Argument(help="With `run`: a parity spec YAML.")] = None,
    baseline: Annotated[str | None, typer.Option(
        "--baseline", help="Matrix whose identical replies must stay identical.")] = None,
    near_tie: Annotated[float, typer.Option(
        "--near-tie", help="Logit gap below which a divergence is a near-tie flip.")
    ] = NEAR_TIE_LOGIT_MARGIN,
    fmt: Annotated[str, typer.Option("--format", help="table, markdown or json.")] = "table",
    address: Annotated[str | None, typer.Option(
        "--address", help="Fleet head (HOST:PORT) whose workers replay divergences.")] = None,
    replay: Annotated[bool, typer.Option(
        "--replay/--no-replay", help="Replay divergences on their target.")] = True,
    allow_unverified: Annotated[bool, typer.Option(
        "--allow-unverified", help="Do not fail on divergences nobody could replay.")] = False,
    db: Annotated[str | None, typer.Option("--db", help=DB_HELP)] = None,
) -> None:
    """Greedy parity: every arm against plain on its target, plain across targets, and
    regressions against a baseline. Exit 1 on a suspect divergence or a regression."""
    if what == "run":
        if file is None:
            raise UserError("parity run: missing FILE (a parity spec YAML)")
        matrix_id = run_parity_file(file, address, db)
    elif file is not None:
        raise UserError(f"parity: unexpected extra argument {file!r} (use `parity run FILE`)")
    else:
        matrix_id = what
    with open_store(db) as store:
        report_parity(store, matrix_id, baseline=baseline, near_tie=near_tie, fmt=fmt,
                      address=address, replay=replay, allow_unverified=allow_unverified)


def run_parity_file(file: str, address: str | None, db: str | None) -> str:
    """Run a greedy one-repeat parity matrix through the scheduler; return its id."""
    from specfleet.cli import matrix as matrix_cli

    runner = getattr(matrix_cli, "run_parity_spec", None)
    if runner is None:
        raise UserError("parity run: this build cannot run matrices yet (matrix run missing)")
    return runner(file, address=address, db=db)


def register(app: typer.Typer) -> None:
    """Add `parity` to the root app."""
    app.command("parity")(parity)
