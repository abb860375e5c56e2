"""`specfleet replay RUN_OR_MATRIX --policy ... --costs ... [--oracle]`: every policy's
counters and predicted speed-up from stored greedy replies, under a stored or packaged cost
table, and with `--oracle` the cheapest schedule and each policy's efficiency.

The work is `specfleet.report.predictions`, the tables `specfleet.report.predictions_tables`;
this module parses and prints.
"""

from __future__ import annotations

import os
from typing import Annotated, cast

import typer

from specfleet.cli.options import MATRIX_ID, DbOption, not_blank, refuse_twice, split_list
from specfleet.configs import costs_dir, packaged_names
from specfleet.engine.governor import POLICY_NAMES as POLICIES
from specfleet.engine.governor import Policy
from specfleet.errors import UserError, describe_value
from specfleet.jobs.resolve import counted

COSTS_EXPECTED = "expected a host, a YAML file or a packaged table name"
NAME_MAX_BYTES = 255  # a file name's most bytes (Linux, macOS)

# Listed once, at import: Typer rebuilds the command, and so its help, on every invocation.
COSTS_HELP = ("A host with a stored calibration, a YAML file (or what `calibrate --json` "
              "printed, as NAME.json), or a packaged table "
              f"({', '.join(packaged_names(costs_dir()))}); default: the host each run ran on.")


def replay_command(
    ident: Annotated[str, typer.Argument(
        metavar="RUN_OR_MATRIX", callback=not_blank(f"{MATRIX_ID}, a generation job id or a "
                                                     "run key"),
        help="A matrix id, a generation job id or a run key (or its first 8+ characters).")],
    policy: Annotated[list[str] | None, typer.Option(
        "--policy", help=f"Policies to replay ({', '.join(POLICIES)}); comma-separated or "
        "repeated. Default: all of them.")] = None,
    costs: Annotated[str | None, typer.Option("--costs", help=COSTS_HELP)] = None,
    db: DbOption = None,
    oracle: Annotated[bool, typer.Option(
        "--oracle", help="Also compute each cell's cheapest schedule over the same n-gram "
        "index under the table, and each policy's efficiency (oracle cost / its cost).")] = False,
) -> None:
    """Recompute each policy's rounds, proposals and acceptances from the stored greedy
    replies and predict its whole-call speed-up over plain under a width-cost table; also
    replay every stored lookup run and check its counters equal the stored ones (exit 1 if
    any differ). With --oracle, the best any drafting schedule could have done too."""
    from specfleet.report.predictions import (
        check_counters,
        predict,
        stored_lookup,
        stored_runs,
    )
    from specfleet.report.predictions_tables import format_bounds, format_predictions
    from specfleet.store.store import open_store

    policies = _policies(policy)
    _check_costs(costs)
    costs_for = _cost_source(costs)
    costs_name = costs or "each run's own host (its newest stored calibration)"
    with open_store(db, read_only=True) as store:  # replay reads, never writes
        runs = stored_runs(store, ident)
        # Every name was checked against POLICIES above.
        predictions = predict(store, runs, cast("list[Policy]", policies), costs_for, oracle)
        mismatches, earlier = check_counters(runs)
    lookup_runs = sum(1 for r in runs if stored_lookup(r) is not None)  # no plain, no peer
    if not predictions and not lookup_runs:
        raise UserError(f"RUN_OR_MATRIX {ident}: no cell has a done greedy plain run to replay "
                        "and no lookup run to check; expected a matrix or job with greedy "
                        "runs of plain and of a policy")
    if predictions:
        typer.echo(format_predictions(predictions, costs_name))
        if oracle:
            typer.echo("\n" + format_bounds(predictions, costs_name))
        say_cells_left_out(runs, predictions)
    else:  # a job of one policy: its counters are still checked
        typer.echo(f"replay: no prediction for {ident}: no cell has a done greedy plain run "
                   "keeping its token ids (a generation job runs one policy; a matrix with a "
                   "plain arm has them)", err=True)
    say_counters(lookup_runs - earlier, earlier, mismatches)
    if mismatches:
        raise typer.Exit(1)


def _policies(given: list[str] | None) -> list[str]:
    """`--policy` as a list of known policies, each once (all of them when not given);
    `--policy graded --policy gated` is both, as `bench` and `selftest` read their lists."""
    policies: list[str] = split_list("--policy", given) if given else list(POLICIES)
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise UserError(f"--policy must list some of {', '.join(POLICIES)}; got {unknown[0]!r}")
    refuse_twice("--policy", policies, "policy")
    return policies


def _check_costs(costs: str | None) -> None:
    """A blank `--costs` (a script's unset variable) or one with blanks around it is refused,
    not read as "not given"."""
    if costs is not None and not costs.strip():
        raise UserError(f"--costs {costs!r} is blank; {COSTS_EXPECTED}")
    if costs is not None and costs.strip() != costs:
        raise UserError(f"--costs {costs!r}: {COSTS_EXPECTED}, without blanks around it")


def _cost_source(costs: str | None):
    """`cost_source` of `--costs`; a bare name past a file name's bytes is one line at once
    (no host or packaged table has one; it read as no host only once a run needed it)."""
    from specfleet.report.predictions import cost_source

    if costs is not None and "/" not in costs and len(os.fsencode(costs)) > NAME_MAX_BYTES:
        raise UserError(f"--costs {describe_value(costs)}: a name of "
                        f"{len(os.fsencode(costs))} bytes, which no host or packaged table "
                        f"has; {COSTS_EXPECTED}")
    return cost_source(costs or "")


def say_counters(checked: int, earlier: int, mismatches: list[str]) -> None:
    """How many stored lookup runs were replayed and how many differ (each named on stderr)."""
    older = (f"; {earlier} made by an earlier revision of their policy, not compared"
             if earlier else "")
    typer.echo(f"\ncounters: {counted(checked, 'stored lookup run')} replayed, "
               f"{len(mismatches)} differ from the stored counters{older}")
    for line in mismatches:
        typer.echo(line, err=True)


def say_cells_left_out(runs: list, predictions: list) -> None:
    """Name on stderr the cells whose lookup runs got no row (their plain run failed or keeps
    no reply): a cell missing from the table without a word reads as never run."""
    predicted = {p.cell for p in predictions}
    left = sorted({(r.host, r.engine, r.device, r.model, r.prompt_name) for r in runs}
                  - predicted)
    if left:
        named = ", ".join(f"{h}/{e}/{d} {m} {p}" for h, e, d, m, p in left)
        typer.echo(f"replay: {counted(len(left), 'cell')} left out, without a done greedy plain "
                   f"run keeping its token ids: {named}", err=True)


def register(app: typer.Typer) -> None:
    """Add the top-level `replay` command."""
    app.command("replay")(replay_command)
