"""`specfleet matrix ...`: submit, resume and read benchmark matrices.

The scheduler developer owns `run`, `resume`, `status`, `list`, `validate` and `schema`;
`show` (the speed-up tables) calls `report.results.render_matrix`.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from specfleet.cli.matrix_output import partial_note, print_outcome
from specfleet.cli.options import (
    UTC_MINUTE,
    WAIT_DEFAULT,
    AddressOption,
    DbOption,
    EmbeddedOption,
    FormatOption,
    ListLimitOption,
    MatrixIdArgument,
    NoProgressOption,
    RateOption,
    RequireQuietOption,
    WaitOption,
    check_driver_settings,
    counts_text,
    echo_rows,
    parse_wait,
    refuse_hosts_outside_embedded,
    say_suspects,
    scheduler_options,
    writing_store,
)
from specfleet.cluster.progress import WaitingLines
from specfleet.cluster.reach import FleetView, choose_fleet, open_fleet
from specfleet.configs import matrices_dir, packaged_names
from specfleet.errors import UserError, one_line
from specfleet.jobs.plan import drop_sourceless, peer_skips, plan_runs, select_targets
from specfleet.jobs.resolve import counted
from specfleet.jobs.spec import MatrixSpec, matrix_json_schema
from specfleet.jobs.spec_files import MatrixProblems, check_matrix_file, load_matrix_spec
from specfleet.jobs.userinput import Problems
from specfleet.report.results import render_matrix
from specfleet.report.sessions import sessions_note
from specfleet.stats.runs import Rate
from specfleet.store.store import check_store_before_fleet, new_matrix_id, open_store
from specfleet.store.values import utcnow
from specfleet.userfiles import output_folder

MATRIX_FILE_HELP = ("A matrix YAML file, or a packaged matrix's name "
                    f"({', '.join(packaged_names(matrices_dir()))}).")

app = typer.Typer(help="Benchmark matrices: run, resume, status, list, show, validate, schema.",
                  no_args_is_help=True)


@app.command("show")
def show(
    matrix_id: MatrixIdArgument,
    fmt: FormatOption = "table",
    pivot: Annotated[str | None, typer.Option(
        "--pivot", help="'target': each model, prompt and arm on every target side by side.")
    ] = None,
    rate: RateOption = "whole",
    db: DbOption = None,
) -> None:
    """The speed-up tables of a matrix: plain tok/s, speed-ups over plain, counters, parity."""
    with open_store(db, read_only=True) as store:
        matrix = store.get_matrix(matrix_id)
        typer.echo(render_matrix(store, matrix_id, fmt, pivot, rate), nl=False)
        mixed = sessions_note(store, matrix_id)
    for note in (partial_note(matrix), mixed):
        if note is not None:
            typer.echo(note, err=True)


# ---- run, resume, status, list, validate, schema (scheduler developer) -------------------


def say_absent(rows: list, view: FleetView) -> None:
    """A host that owns runs not done but is not in this fleet at all (not one whose worker
    went quiet, which `say_suspects` names): its runs stay pending; say why."""
    left = Counter(row.host for row in rows if row.status != "done")
    for host in sorted(set(left) - set(view.fleet_hosts)):
        stay = "stays" if left[host] == 1 else "stay"
        typer.echo(f"{host}: not in this fleet (hosts: {', '.join(view.fleet_hosts) or 'none'}); "
                   f"its {counted(left[host], 'run')} not done {stay} pending until a resume "
                   f"in a fleet that has {host}", err=True)


def _refuse_live_owner(store, matrix) -> None:
    """A second resume beside a live driver: say so and stop before starting the fleet."""
    if matrix.status == "running" and matrix.driver_id and matrix.lease_until \
            and matrix.lease_until > utcnow():
        left = sum(n for status, n in matrix.counts.items() if status != "done")
        typer.echo(f"matrix {matrix.id}: driver {matrix.driver_id} still runs it (heartbeat "
                   f"lease until {matrix.lease_until:%H:%M:%S} UTC); took 0 runs, skipped {left}",
                   err=True)
        raise typer.Exit(1)


@app.command("run")
def run(
    file: Annotated[str, typer.Argument(metavar="FILE", help=MATRIX_FILE_HELP)],
    address: AddressOption = None,
    embedded: EmbeddedOption = False,
    db: DbOption = None,
    require_quiet: RequireQuietOption = False,
    no_progress: NoProgressOption = False,
    wait: WaitOption = WAIT_DEFAULT,
    report_dir: Annotated[str | None, typer.Option(
        "--report-dir", help="Also write the record (markdown, plots, CSV) to DIR/MATRIX_ID.")
    ] = None,
    fmt: FormatOption = "table",
    rate: RateOption = "whole",
) -> None:
    """Plan a matrix, run it on the fleet, store every run, print the speed-up tables.

    Exit status 0 when every run is done, 1 when some failed or were interrupted.
    """
    spec = load_matrix_spec(file)  # the file's mistakes in one line, before anything else
    reports = None if report_dir is None else output_folder(
        report_dir, "--report-dir", "a folder to write the records in")
    check_driver_settings(reports)
    outcome = run_spec(spec, address=address, embedded=embedded, db=db,
                       options=scheduler_options(no_progress, require_quiet or spec.require_quiet, wait),
                       report_dir=reports, fmt=fmt, rate=rate)
    if outcome.status != "done":
        raise typer.Exit(1)


def run_spec(spec: MatrixSpec, *, address: str | None, embedded: bool, db: str | None,
             options, report_dir: Path | None = None, fmt: str = "table",
             rate: Rate = "whole"):
    """Plan `spec` on the fleet, store it, run it, print the outcome and its tables.

    Args:
        spec: the checked matrix.
        address, embedded, db, report_dir: as `matrix run`.
        options: the scheduler's options (`scheduler_options`).
        fmt: the tables' format; only the tables go to stdout, the words to stderr.
        rate: the tok/s the tables' medians and speed-ups read ("whole" or "decode").

    Returns:
        The scheduler's `MatrixOutcome`.
    """
    checked = check_before_fleet(spec, address, embedded)
    check_store_before_fleet(db)
    view = open_fleet(address, with_toy="toy" in spec.targets.engines, embedded=embedded)
    matrix_id = new_matrix_id(spec.name)
    runs, said = checked_plan(spec, view, matrix_id, checked)
    # After the fleet and the plan: a fleet not there or a plan refused makes no store.
    with writing_store(db) as store:
        for line in said:
            typer.echo(line, err=True)
        view.record_hosts(store)
        store.create_matrix(spec.name, spec.model_dump(mode="json"), runs, matrix_id=matrix_id)
        typer.echo(planned_line(matrix_id, runs), err=True)
        from specfleet.cluster.scheduler import run_matrix

        waiting = WaitingLines() if not options.progress else None
        outcome = run_matrix(store, matrix_id, view.workers, waiting, options=options,
                             machines=view.machines)
        print_outcome(store, outcome, fmt, rate)
        if report_dir is not None:
            _write_report(store, outcome.matrix_id, report_dir)
    return outcome


@dataclass(frozen=True)
class CheckedHere:
    """What `check_before_fleet` found: whether the fleet is this machine's own, and the
    (model, engine) pairs without a source, whose runs are dropped."""

    embedded: bool
    no_source: list[tuple[str, str]]


def check_before_fleet(spec: MatrixSpec, address: str | None, embedded: bool) -> CheckedHere:
    """On the embedded fleet, every model checked on this machine before Ray starts or a store
    is made (`matrix run` and `parity run` alike): a model no run could load is one line."""
    from specfleet.cluster.modelcheck import check_here

    if not choose_fleet(address, embedded).embedded:
        return CheckedHere(False, [])
    refuse_hosts_outside_embedded(spec.targets.hosts, f"{spec.label}: targets.hosts")
    found = check_here(spec, spec.label)
    refuse_unrunnable_models(found.errors + found.missing)
    return CheckedHere(True, found.no_source)


def checked_plan(spec: MatrixSpec, view: FleetView, matrix_id: str,
                 checked: CheckedHere) -> tuple[list, list[str]]:
    """`spec` planned on the fleet `view`, each model checked on its hosts (a real fleet),
    the runs of a model without a source dropped; with the lines saying what was left out."""
    from specfleet.cluster.modelcheck import check_on_hosts

    runs = plan_runs(spec, view.targets, matrix_id, host_kinds=view.kinds)
    if not checked.embedded:
        refuse_unrunnable_models(check_on_hosts(spec, spec.label, view).errors)
    skips = peer_skips(spec, select_targets(spec, view.targets, view.kinds))
    runs, sourceless = drop_sourceless(runs, checked.no_source, spec.label)
    return runs, [*skips, *sourceless]


def planned_line(matrix_id: str, runs) -> str:
    """`matrix ID: 6 runs on 1 target`: what a matrix was planned into."""
    targets = len({run.target.label for run in runs})
    return f"matrix {matrix_id}: {counted(len(runs), 'run')} on {counted(targets, 'target')}"


def refuse_unrunnable_models(errors: list[str]) -> None:
    """A model a host cannot run (no such alias or folder, not fetched there, a context too
    short) is one line before anything is stored: each of its runs would only fail. Hosts
    that do not answer are left to the runs."""
    if errors:
        more = f" (and {counted(len(errors) - 1, 'more problem')})"
        raise UserError(errors[0] + (more if len(errors) > 1 else ""))


def _write_report(store, matrix_id: str, report_dir: Path) -> None:
    from specfleet.report.record import write_record  # matplotlib: only when asked

    files = write_record(store, matrix_id, report_dir / matrix_id)
    typer.echo(f"report: {files.markdown}", err=True)
    if note := files.glyphs_note():  # one line, not matplotlib's warning per glyph and draw
        typer.echo(note, err=True)


@app.command("resume")
def resume_cmd(
    matrix_id: MatrixIdArgument,
    address: AddressOption = None,
    embedded: EmbeddedOption = False,
    db: DbOption = None,
    require_quiet: RequireQuietOption = False,
    no_progress: NoProgressOption = False,
    wait: WaitOption = WAIT_DEFAULT,
    fmt: FormatOption = "table",
    rate: RateOption = "whole",
) -> None:
    """Re-queue every run of a matrix that is not done and that no live driver runs, and
    run them; done runs are kept. A host that owns runs but is not in the fleet now is
    waited for, up to --wait. The tables as `matrix run` prints them (-o, --rate). Exit 1
    unless every run ends done; a matrix whose runs are all done says so and exits 0
    without a fleet (`matrix show` prints its tables)."""
    parse_wait(wait)  # a bad duration is one line, before the fleet
    check_driver_settings()
    # Both flags, or a malformed address, even when every run is done and no fleet starts.
    choose_fleet(address, embedded, joined=False)
    with writing_store(db, existing=True) as store:  # a mistyped --db: not a new empty store
        matrix = store.get_matrix(matrix_id)  # unknown id: one line, before the fleet
        _refuse_live_owner(store, matrix)
        rows = store.runs(matrix=matrix_id, columns=("host", "status", "model", "engine"))
        if rows and all(row.status == "done" for row in rows):  # no fleet to start for nothing
            _finish_all_done(store, matrix, len(rows))
            return
        here = choose_fleet(address, embedded).embedded
        if here:  # before Ray starts, as `run` checks its models
            refuse_vanished_models(matrix_id, rows)
        hosts = sorted({row.host for row in rows})
        view = open_fleet(address, hosts=hosts, embedded=embedded)
        if not here:
            refuse_vanished_models(matrix_id, rows, view)
        quiet = require_quiet or bool(matrix.spec.get("require_quiet"))
        view.record_hosts(store)
        typer.echo(resuming_line(matrix_id, rows), err=True)
        say_suspects(view, wait)
        say_absent(rows, view)
        from specfleet.cluster.scheduler import run_matrix

        outcome = run_matrix(store, matrix_id, view.workers,
                             WaitingLines() if no_progress else None,
                             options=scheduler_options(no_progress, quiet, wait),
                             machines=view.machines, suspect=view.suspects, requeue=True)
        print_outcome(store, outcome, fmt, rate)
    if outcome.status != "done":
        raise typer.Exit(1)


def resuming_line(matrix_id: str, rows) -> str:
    """`matrix ID: resuming 3 of 6 runs (2 pending, 1 interrupted); 3 done kept`."""
    left = Counter(row.status for row in rows if row.status != "done")
    done = len(rows) - sum(left.values())
    return (f"matrix {matrix_id}: resuming {sum(left.values())} of {counted(len(rows), 'run')} "
            f"({counts_text(left)}); {done} done kept")


def refuse_vanished_models(matrix_id: str, rows, view: FleetView | None = None) -> None:
    """A model that the runs not done need and that their host cannot load now (its folder
    moved or deleted since the matrix was planned) is one line, the runs left as they are:
    else each would be sent, fail and be stored failed. Without `view` (the embedded fleet,
    before Ray starts) this machine's runs are checked here; with it, each host that
    answered is asked. Hosts that do not answer are left to the runs."""
    from specfleet.cluster.modelcheck import refuse_model
    from specfleet.workers.hardware import default_host_name

    here = default_host_name() if view is None else None
    wanted = sorted({(row.host, row.model, row.engine) for row in rows if row.status != "done"})
    for host, model, engine in wanted:
        if host != here and (view is None or host not in view.infos):
            continue
        try:
            refuse_model(model, engine, f"matrix {matrix_id}", view, host)
        except UserError as err:
            raise UserError(f"{err}; its runs not done are left as they are: expected the "
                            f"model back, then `specfleet matrix resume {matrix_id}`") from None


def _finish_all_done(store, matrix, runs: int) -> None:
    """Every run done: nothing to resume. A matrix whose driver stopped after its last result
    but before finishing it (killed, or a Ctrl-C then) read `interrupted` with every run done,
    and `status` sent the user to this resume: it is finished `done` here."""
    every = "its one run is" if runs == 1 else f"all {runs} runs are"
    if matrix.status == "done":
        typer.echo(f"matrix {matrix.id}: {every} done; nothing to resume", err=True)
        return
    store.finish_matrix(matrix.id, "done")  # no live driver holds it: `_refuse_live_owner`
    typer.echo(f"matrix {matrix.id}: {every} done; it read {matrix.status} (its driver "
               "stopped before finishing it), now done", err=True)


@app.command("status")
def status(
    matrix_id: MatrixIdArgument,
    db: DbOption = None,
) -> None:
    """A matrix's status, its runs per host and status, and the errors of unfinished runs."""
    with open_store(db, read_only=True) as store:
        matrix = store.get_matrix(matrix_id)
        rows = store.runs(matrix=matrix_id)
    typer.echo(f"matrix {matrix.id} ({matrix.name}): {matrix.status}; "
               f"{counts_text(matrix.counts)}; submitted {matrix.submitted_at:{UTC_MINUTE}}")
    per_host: dict[str, Counter] = defaultdict(Counter)
    for row in rows:
        per_host[f"{row.host}/{row.engine}/{row.device}"][row.status] += 1
    if matrix.status == "running" and matrix.driver_id:
        typer.echo(f"  driver {matrix.driver_id}, heartbeat lease until "
                   f"{matrix.lease_until:%H:%M:%S} UTC")
    for target, counts in sorted(per_host.items()):
        typer.echo(f"  {target}: {counts_text(counts)}")
    for row in rows:
        if row.status in ("failed", "interrupted") and row.error:
            typer.echo(f"  {row.status} {row.run_key[:12]} {row.model} {row.prompt_name} "
                       f"{row.arm} rep {row.repeat}: {row.error}")
    if matrix.status in ("interrupted", "failed"):
        typer.echo(f"resume with: specfleet matrix resume {matrix.id}")



@app.command("list")
def list_cmd(
    db: DbOption = None,
    limit: ListLimitOption = 20,
) -> None:
    """Matrices, newest first: id, name, status, runs done of total, submitted."""
    with open_store(db, read_only=True) as store:
        matrices = store.list_matrices(limit=limit)
    echo_rows([(m.id, m.name, m.status, f"{m.counts.get('done', 0)}/{m.total_runs} done",
                f"{m.submitted_at:{UTC_MINUTE}}") for m in matrices], "no matrices yet")


@app.command("validate")
def validate(
    file: Annotated[str, typer.Argument(metavar="FILE", help=MATRIX_FILE_HELP)],
    address: AddressOption = None,
    local: Annotated[bool, typer.Option(
        "--local", help="Resolve the models on this machine only, even in a fleet; a model "
        "missing here is then an error.")] = False,
) -> None:
    """Check a matrix file and resolve what its runs need (prompts, models fetched, token
    limits within each model's context) without running it: every mistake, one line each,
    exit 2. In a fleet each host a run would go to resolves its own models; without one
    they are resolved here, and a model missing here is a warning (an error with --local)."""
    from specfleet.jobs.resolve import describe

    if local and address is not None:
        raise UserError("--local and --address: give one of them; expected --local (this "
                        "machine alone) or --address (a fleet), not both")
    try:
        spec = check_matrix_file(file)  # every mistake in the file, one line each
    except MatrixProblems as err:  # ... and those of the models it could read
        if err.readable is None:
            raise
        report, _ = _check_models(err.readable, file, address, local)
        raise Problems(file, err.with_model_lines(_model_errors(report, local))) from None
    report, where = _check_models(spec, file, address, local)
    errors = _model_errors(report, local)
    if errors:
        raise Problems(file, errors)
    typer.echo(describe(spec, file, where, report.no_source))


def _model_errors(report, local: bool) -> list[str]:
    """The model checks' errors; their warnings said on stderr (a model missing here is an
    error with --local)."""
    for line in report.unanswered + ([] if local else report.missing):
        typer.echo(f"warning: {one_line(line)}", err=True)
    return report.errors + (report.missing if local else [])


def _check_models(spec: MatrixSpec, file: str, address: str | None, local: bool):
    """The model checks of `validate` and the words saying where they were made."""
    from specfleet.cluster.modelcheck import check_here, check_on_hosts

    choose_fleet(address, joined=False)  # a malformed --address, whatever the matrix checks
    if set(spec.targets.engines) == {"toy"}:  # toy names read the same on every host
        return check_here(spec, file), "every model resolved"
    if local:
        return check_here(spec, file), "every model resolved on this machine (--local)"
    if choose_fleet(address).embedded:
        report = check_here(spec, file)
        found = (f"{len(report.missing)} not here (warnings above; --local makes that an "
                 "error)" if report.missing else "every model resolved")
        return report, ("models and their context lengths checked on this machine only "
                        f"(no fleet joined); {found}")
    view = open_fleet(address, with_toy="toy" in spec.targets.engines)
    report = check_on_hosts(spec, file, view)
    asked = ", ".join(report.hosts) or "none"
    return report, f"every model resolved on the hosts its runs go to ({asked})"


@app.command("schema")
def schema() -> None:
    """The JSON schema of a matrix file."""
    typer.echo(json.dumps(matrix_json_schema(), indent=2))
