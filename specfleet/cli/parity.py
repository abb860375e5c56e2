"""`specfleet parity MATRIX_ID` and `specfleet parity run FILE`: greedy parity with forensics.

Exit status 0 when every reply is identical to plain or a near-tie flip; 1 when a suspect
divergence or a regression against `--baseline` is found, a planned pair was not compared
or is missing from the baseline (or a divergence could not be replayed, unless
`--allow-unverified`); 2 for a user mistake.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Annotated, Any

import typer

from specfleet.cli.options import (
    MATRIX_ID,
    DbOption,
    EmbeddedOption,
    FormatOption,
    check_driver_settings,
    not_blank,
    scheduler_options,
    writing_store,
)
from specfleet.cluster.forensics import worker_replayer
from specfleet.engine.forensics import BF16_STEPS, NEAR_TIE_LOGIT_MARGIN
from specfleet.errors import UserError
from specfleet.jobs.resolve import counted
from specfleet.jobs.spec_files import load_parity_spec
from specfleet.report.history import same_matrix
from specfleet.report.parity import check_parity
from specfleet.report.parity_tables import (
    baseline_gap_text,
    coverage_gap_text,
    plain_repeats_text,
    render_parity,
)
from specfleet.store.store import check_store_before_fleet, open_store


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
def replay_workers(
    address: str | None, replay: bool, embedded: bool = False
) -> Iterator[tuple[dict, Any]]:
    """(host -> worker, a worker for toy runs): the fleet's actors when a fleet applies
    (`cluster.reach`), else this machine's own HostWorker (other hosts' runs stay unverified)."""
    from specfleet.cluster.reach import choose_fleet

    if not replay:
        yield {}, None
        return
    local = _LocalWorkers()
    try:
        if choose_fleet(address, embedded).embedded:
            yield local, _Lazy(local)
            return
        with fleet_view(address) as view:
            yield view.workers, _Lazy(local)
    finally:
        local.close()


@contextlib.contextmanager
def fleet_view(
    address: str | None, with_toy: bool = False, embedded: bool = False
) -> Iterator[Any]:
    """The fleet's workers and targets (`cluster/reach.open_fleet`), disconnected after."""
    from specfleet.cluster import fleet
    from specfleet.cluster.reach import open_fleet

    try:
        yield open_fleet(address, with_toy=with_toy, embedded=embedded)
    finally:
        fleet.disconnect()


class _Lazy:
    """Forwards `replay_divergence` to the local worker, creating it on first use."""

    def __init__(self, local: _LocalWorkers) -> None:
        self._local = local

    def replay_divergence(self, *args):
        return self._local.local.replay_divergence(*args)


def report_parity(store, matrix_id: str, workers: dict | None, any_host: Any, *,
                  baseline: str | None, near_tie: float, fmt: str,
                  allow_unverified: bool) -> None:
    """Check, print, and exit 1 when CI should fail (`workers` None: no replay)."""
    replayer = worker_replayer(store, workers, any_host) if workers is not None else None
    report = check_parity(store, matrix_id, replayer, baseline, near_tie)
    typer.echo(render_parity(report, fmt), nl=False)
    if report.coverage is not None and not report.coverage.complete:
        typer.echo(coverage_gap_text(report), err=True)
    if report.baseline_coverage is not None and not report.baseline_coverage.complete:
        typer.echo(baseline_gap_text(report), err=True)
    if reasons := verdict_failures(report, allow_unverified):  # exit 1 says why, as compare
        typer.echo(f"parity: exit 1: {'; '.join(reasons)}", err=True)
    if report.failed(allow_unverified):
        raise typer.Exit(1)


def verdict_failures(report, allow_unverified: bool) -> list[str]:
    """The verdicts that fail the check (`ParityReport.failed`), each as a phrase; the
    coverage gaps say theirs apart."""
    reasons = []
    if suspect := report.count("suspect"):
        reasons.append(f"{counted(suspect, 'suspect divergence')} from plain")
    if report.regressions:
        reasons.append(f"{counted(len(report.regressions), 'regression')} against "
                       f"{report.baseline_id}")
    if (unverified := report.count("unverified")) and not allow_unverified:
        reasons.append(f"{counted(unverified, 'divergence')} from plain not replayed "
                       "(unverified; --allow-unverified passes it)")
    if report.plain_differs:  # no reply to hold the arms to
        reasons.append(f"{plain_repeats_text(report.plain_differs[0])} (greedy plain decoding "
                       "is not deterministic on that target)")
    return reasons


def parity(
    what: Annotated[str, typer.Argument(
        metavar="MATRIX_ID|run", callback=not_blank(f"{MATRIX_ID} or `run FILE`"),
        help="A matrix id, or `run` followed by a file.")],
    file: Annotated[str | None, typer.Argument(
        metavar="FILE", help="With `run`: a matrix YAML, run greedy with one repeat.")] = None,
    baseline: Annotated[str | None, typer.Option(
        "--baseline", callback=not_blank(MATRIX_ID),
        help="Matrix whose identical replies must stay identical; it must hold every pair.")] = None,
    near_tie: Annotated[float, typer.Option(
        "--near-tie", help="Logit gap below which a divergence is a near-tie flip (on "
        f"bfloat16 logits at least {BF16_STEPS} bf16 steps at their magnitude).")
    ] = NEAR_TIE_LOGIT_MARGIN,
    fmt: FormatOption = "table",
    address: Annotated[str | None, typer.Option(
        "--address", help="Fleet head HOST:PORT (its workers run and replay); default "
        "$SPECFLEET_ADDRESS, $RAY_ADDRESS, the fleet this machine joined, else the embedded "
        "fleet (for an id with no fleet: replay on this machine only).")] = None,
    embedded: EmbeddedOption = False,
    replay: Annotated[bool, typer.Option(
        "--replay/--no-replay", help="Replay divergences on their target.")] = True,
    allow_unverified: Annotated[bool, typer.Option(
        "--allow-unverified", help="Do not fail on divergences nobody could replay.")] = False,
    progress: Annotated[bool, typer.Option("--progress/--no-progress",
                                           help="Progress bars while `run` runs.")] = True,
    db: DbOption = None,
) -> None:
    """Greedy parity vs plain, across targets and a baseline; exit 1 if suspect or regressed.

    `parity ID` checks a stored matrix; `parity run FILE` runs FILE greedy with one repeat
    first. Each divergence is replayed on its target and called near-tie or suspect.
    """
    _check_arguments(what, file, near_tie)
    report = functools.partial(report_parity, baseline=baseline, near_tie=near_tie, fmt=fmt,
                               allow_unverified=allow_unverified)
    if what != "run":
        _check_stored(what, report, baseline=baseline, address=address, embedded=embedded,
                      replay=replay, db=db)
        return
    assert file is not None  # `parity run` without FILE was refused above
    _run_then_check(file, report, baseline=baseline, address=address, embedded=embedded,
                    replay=replay, progress=progress, db=db)


def _check_arguments(what: str, file: str | None, near_tie: float) -> None:
    """Refuse a near-tie margin that is no positive number and a FILE without `run` (or
    `run` without one)."""
    if not 0 < near_tie < float("inf"):  # also refuses nan
        raise UserError(f"--near-tie: expected a positive logit margin, got {near_tie}")
    if what != "run" and file is not None:
        raise UserError(f"parity: unexpected extra argument {file!r} (use `parity run FILE`)")
    if what == "run" and file is None:
        raise UserError("parity run: missing FILE (a matrix YAML)")


def _check_stored(matrix_id: str, report, *, baseline: str | None, address: str | None,
                  embedded: bool, replay: bool, db: str | None) -> None:
    """`parity ID`: the verdicts of a stored matrix, its divergences replayed on a fleet."""
    if not replay and (address is not None or embedded):  # the fleet only replays here
        flag = "--address" if address is not None else "--embedded"
        raise UserError(f"{flag} picks the fleet that replays divergences, and --no-replay "
                        "replays none; expected one of them")
    if baseline is not None and (same := same_matrix(baseline, matrix_id,
                                                     names="--baseline and ID")):
        raise UserError(same)  # no divergence can be new against itself
    with open_store(db, read_only=True) as store:
        if baseline is not None:
            store.get_matrix(baseline)  # an unknown baseline fails before any replay
        with replay_workers(address, replay, embedded) as (workers, any_host):
            report(store, matrix_id, workers if replay else None, any_host)


def _run_then_check(file: str, report, *, baseline: str | None, address: str | None,
                    embedded: bool, replay: bool, progress: bool, db: str | None) -> None:
    """`parity run FILE`: run the file greedy with one repeat, then its verdicts."""
    from specfleet.cli.matrix import check_before_fleet

    spec = load_parity_spec(file)  # before a store is made
    check_driver_settings()
    checked = check_before_fleet(spec, address, embedded)  # as `matrix run` checks it
    check_store_before_fleet(db)
    if baseline is not None:  # an unknown baseline (or store) fails before anything runs
        with open_store(db, read_only=True) as store:
            store.get_matrix(baseline)
    with fleet_view(address, "toy" in spec.targets.engines, embedded) as view:
        matrix_id, runs = plan_parity(spec, view, checked)
        # The store after the fleet and the plan: a fleet not there or a plan refused makes
        # no store.
        with writing_store(db) as store:
            run_parity_matrix(store, spec, view, matrix_id, runs, progress)
            report(store, matrix_id, view.workers if replay else None, None)


def plan_parity(spec, view, checked) -> tuple[str, list]:
    """The parity spec's matrix id and runs on the fleet `view` shows, checked as `matrix
    run`'s (`checked`: from `check_before_fleet`); what was left out is said."""
    from specfleet.cli.matrix import checked_plan
    from specfleet.store.store import new_matrix_id

    matrix_id = new_matrix_id(spec.name)
    runs, said = checked_plan(spec, view, matrix_id, checked)
    for line in said:
        typer.echo(line, err=True)
    if not runs:
        raise UserError(f"{spec.label}: no target of the fleet matches its targets")
    return matrix_id, runs


def run_parity_matrix(store, spec, view, matrix_id: str, runs: list,
                      progress: bool = True) -> None:
    """Store the planned parity matrix and run it."""
    from specfleet.cluster.scheduler import run_matrix

    for change in getattr(spec, "overridden", []):
        typer.echo(f"parity: {change}", err=True)
    store.create_matrix(spec.name, spec.model_dump(mode="json"), runs, matrix_id)
    typer.echo(f"parity matrix {matrix_id}: {counted(len(runs), 'run')}", err=True)
    run_matrix(store, matrix_id, view.workers, options=scheduler_options(not progress),
               machines=view.machines)


def register(app: typer.Typer) -> None:
    """Add `parity` to the root app."""
    app.command("parity")(parity)
