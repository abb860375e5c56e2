"""`specfleet results`: stored runs (or their cells) matching filters, as tables, JSON or CSV."""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from specfleet import jsontext
from specfleet.engine.kinds import DEVICES, ENGINES
from specfleet.engine.stats import decode_tok_per_s
from specfleet.errors import UserError
from specfleet.jobs.resolve import counted
from specfleet.jobs.run import ARMS
from specfleet.report.build import (
    PlanOrder,
    build_view,
    done_runs,
    in_order,
    in_plan_order,
    plan_order,
    stored_plan_order,
)
from specfleet.report.grid import Grid, check_format, to_csv, to_markdown, to_rich
from specfleet.report.parity import why_not_compared
from specfleet.report.tables import (
    DASH,
    PIVOT_NOTE,
    cell_record,
    cell_record_fields,
    check_pivot,
    csv_value,
    legend,
    pct,
    pivot_cols,
    pivot_csv,
    pivot_record,
    render_view,
    speedup_text,
)
from specfleet.stats.cells import LOOP_SHARE_FLAG
from specfleet.stats.runs import ROW_FIELDS, CellKey, Rate
from specfleet.stats.view import PLAIN, CellView, MatrixView, view_of_runs
from specfleet.store.export import export_runs


def parse_time(value: str | None, flag: str) -> datetime | None:
    """An ISO date or date-time (UTC when no zone is given), or None."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise UserError(
            f"{flag}: expected an ISO date or time like 2026-11-29 or 2026-11-29T10:00, "
            f"got {value!r}"
        ) from None
    if not moment.tzinfo:
        return moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)  # the store compares in UTC
    except OverflowError:  # 0001-01-01T00:00+05:00 is a moment before year 1 in UTC
        raise UserError(f"{flag}: {value!r} falls outside years 1-9999 in UTC; expected a "
                        "time within them") from None


def check_choices(values: list[str] | None, allowed: tuple[str, ...], flag: str) -> None:
    """Each of `values` is one of `allowed`, else one `UserError` line naming `flag`."""
    for value in values or []:
        if value not in allowed:
            raise UserError(f"{flag}: unknown value {value!r}; expected one of "
                            f"{', '.join(allowed)}")


def check_not_blank(values: list[str] | None, flag: str) -> None:
    """A blank filter value matched nothing and said nothing was found: one line instead."""
    if any(not value.strip() for value in values or []):
        raise UserError(f"{flag}: expected a value, got a blank one")


def run_filters(store, *, host=None, kind=None, engine=None, device=None, model=None,
                prompt=None, arm=None, matrix=None, job=None, version=None, since=None,
                until=None) -> dict:
    """Validate CLI filters (lists of values, ISO times) into `Store.runs` keyword filters.

    Raises:
        UserError: an unknown engine, device or arm, an unknown matrix or job id (or both
            given: no run is in both), a bad time.
    """
    check_choices(engine, ENGINES, "--engine")
    check_choices(device, DEVICES, "--device")
    check_choices(arm, ARMS, "--arm")
    for flag, values in (("--host", host), ("--kind", kind), ("--model", model),
                         ("--prompt", prompt), ("--matrix", matrix), ("--job", job),
                         ("--version", version)):
        check_not_blank(values, flag)
    for matrix_id in matrix or []:
        store.get_matrix(matrix_id)
    for job_id in job or []:
        store.get_generation_job(job_id)
    if matrix and job:  # the filters are ANDed: together they read as "0 runs"
        raise UserError("--matrix and --job: a run belongs to a matrix or to a generation job, "
                        "never both; expected one of them")
    start, end = parse_time(since, "--since"), parse_time(until, "--until")
    if start and end and start >= end:
        raise UserError(f"--since {since} is not before --until {until}; expected a --since "
                        "earlier than --until (the window holds the times from --since up to, "
                        "not including, --until)")
    given = dict(host=host, kind=kind, engine=engine, device=device, model=model,
                 prompt=prompt, arm=arm, matrix=matrix, job=job, specfleet_version=version)
    filters: dict[str, Any] = {name: list(value) for name, value in given.items() if value}
    if start:
        filters["since"] = start
    if end:
        filters["until"] = end
    return filters


# The filters whose values are free text (the others are checked against fixed choices).
_FREE_TEXT_FILTERS = {"host": "--host", "kind": "--kind", "model": "--model",
                      "prompt": "--prompt", "specfleet_version": "--version"}


def check_stored_values(store, filters: dict, flags: dict[str, str] | None = None) -> None:
    """Refuse a free-text filter value that no stored run holds: a typo (`--model
    smollm2-135M`) would otherwise read as "0 runs", a query that merely matched nothing,
    or beside a stored value (`--model a --model typo`) be dropped without a word.

    Args:
        filters: `Store.runs` keyword filters (`run_filters`).
        flags: what names a filter in messages where a command's flag is not `results`'
            (`{"host": "--target HOST"}`).

    Raises:
        UserError: naming the flag, the value and that nothing stored has it.
    """
    for name, flag in {**_FREE_TEXT_FILTERS, **(flags or {})}.items():
        wanted = filters.get(name) or []
        missing = sorted(set(wanted) - set(store.stored_values(name, wanted)))
        if missing:
            stored = store.stored_values(name)
            shown = ", ".join(stored[:8]) + (f" (+{len(stored) - 8} more)" if len(stored) > 8
                                             else "")
            raise UserError(f"{flag}: no stored run has {missing[0]!r}; expected one of the "
                            f"stored values: {shown or 'none yet'}")


# The runs' fields `runs_grid` reads: a table of many runs decodes none of the JSON columns.
RUNS_TABLE_FIELDS: tuple[str, ...] = (
    "matrix_id", "job_id", "host", "engine", "device", "model", "prompt_name", "arm", "repeat",
    "status", "tok_per_s", "decode_s", "generated_tokens", "proposed", "accepted", "loop_share",
    "noisy", "throttled", "finished_at",
)
# ... and what `limit_layers` reads (the cells table, the pivot).
CELLS_FIELDS: tuple[str, ...] = (*ROW_FIELDS, "max_tokens", "temperature")
# The runs a table or markdown lists unless --limit says: past this no terminal shows them.
RUNS_SHOWN = 1000


def runs_grid(runs: list, of_total: int | None = None) -> Grid:
    """One row per run; `of_total`: how many runs matched when `runs` are the newest of them
    (said under the table with how to list them all)."""
    rows = []
    for run in runs:
        # A run not done measured nothing: its stored 0.0 is no rate.
        tok_s = DASH if run.tok_per_s is None or run.status != "done" else f"{run.tok_per_s:.2f}"
        decode = decode_tok_per_s(run.generated_tokens or 0, run.decode_s or 0.0)
        acc = f"{run.accepted / run.proposed:.4f}" if run.proposed else DASH
        flags = " ".join(flag for flag, on in (
            ("LOOP", (run.loop_share or 0.0) > LOOP_SHARE_FLAG), ("noisy", bool(run.noisy)),
            ("throttled", bool(getattr(run, "throttled", False))),
        ) if on)
        finished = run.finished_at.strftime("%Y-%m-%d %H:%M") if run.finished_at else DASH
        rows.append((
            run.matrix_id or run.job_id or DASH, f"{run.host}/{run.engine}/{run.device}",
            run.model, run.prompt_name, run.arm, str(run.repeat), run.status, tok_s,
            f"{decode:.2f}" if run.status == "done" else DASH,
            str(run.generated_tokens or 0), acc, flags or DASH, finished,
        ))
    # A generation job's runs name their job where a matrix's name their matrix.
    owner = "matrix/job" if any(r.job_id for r in runs) else "matrix"
    headers = (owner, "target", "model", "prompt", "arm", "rep", "status", "tok/s",
               "decode tok/s", "tokens", "acc rate", "flags", "finished (UTC)")
    left_out = () if of_total is None or of_total <= len(runs) else (
        f"Showing the {counted(len(runs), 'run')} planned last of the {of_total} that match; "
        f"--limit {of_total} lists them all.",)
    return Grid(counted(len(runs), "run"), headers, tuple(rows), left_out, left_cols=7)


# Under every cells table: a cell is keyed by its token limit too.
LIMITS_NOTE = ("max tok = the runs' new-token limit (max_tokens): tok/s depends on the reply "
               "length, so runs of different limits are never pooled into one cell or row.")
SAMPLED_NOTE = ("T0.8 after it: runs sampled at temperature 0.8, never pooled with greedy runs "
                "or another temperature (drafts land otherwise).")


@dataclass(frozen=True)
class LimitLayer:
    """The done runs of one new-token limit and sampling temperature, as a view in `order`."""

    max_tokens: int
    view: MatrixView
    order: PlanOrder  # the plan order every layer of one listing shares
    temperature: float = 0.0  # 0: greedy

    @property
    def label(self) -> str:
        return limit_text(self.max_tokens, self.temperature)


def limit_text(max_tokens: int | None, temperature: float = 0.0) -> str:
    """The `max tok` column: `256`, or `256 T0.8` for runs sampled at temperature 0.8."""
    limit = DASH if max_tokens is None else str(max_tokens)
    return limit + (f" T{temperature:g}" if temperature else "")


def limits_notes(layers: list[LimitLayer]) -> tuple[str, ...]:
    """What the `max tok` column means, and its `T` where some layer was sampled."""
    return (LIMITS_NOTE, SAMPLED_NOTE) if any(lay.temperature for lay in layers) else (LIMITS_NOTE,)


def limit_layers(runs: list, rate: Rate = "whole", matrix_id: str = "results",
                 name: str = "filtered runs", order: PlanOrder | None = None
                 ) -> list[LimitLayer]:
    """The done runs split by `max_tokens` and sampling temperature, smallest first, so that
    no cell or pivot row pools two limits (tok/s grows with the reply: prefill spread over
    more tokens) or greedy with sampled runs, and an arm pairs with plain of its own layer;
    each layer's view is named `matrix_id` and `name`, its axes and cells in `order` (default:
    as `runs`, in store order and of any status, list them)."""
    order = plan_order(runs) if order is None else order
    by_layer: dict[tuple[int, float], list] = defaultdict(list)
    for run in runs:
        if run.status == "done":
            by_layer[(run.max_tokens, getattr(run, "temperature", 0.0) or 0.0)].append(run)
    return [LimitLayer(limit, in_plan_order(view_of_runs(matrix_id, name, by_layer[(limit, temp)],
                                                         rate), order), order, temp)
            for limit, temp in sorted(by_layer)]


def limit_cells(layers: list[LimitLayer],
                arms: Collection[str] | None = None) -> list[tuple[LimitLayer, CellView]]:
    """Every cell (of `arms`, when given) with its layer, in plan order (target, model,
    prompt, arm), a cell's layers next to each other."""
    cells = [(layer, c) for layer in layers for c in layer.view.cells
             if arms is None or c.arm in arms]
    return sorted(cells, key=lambda item: (
        item[0].order.cell_rank(CellKey(item[1].target, item[1].model, item[1].prompt,
                                        item[1].arm)),
        item[0].max_tokens, item[0].temperature))


def cells_grid(layers: list[LimitLayer], arms: Collection[str] | None = None) -> Grid:
    """One row per cell (of `arms`, when given) and token limit (done runs): n, median tok/s
    with spread, speed-up and markers."""
    rows = []
    for layer, c in limit_cells(layers, arms):
        # Beside n: one repeat has no spread (not ±0.0%).
        spread = DASH if c.n < 2 else pct(c.spread) + ("!" if c.spread_flag else "")
        median = f"{c.median_tok_per_s:.2f} {spread}"
        # Nothing proposed has no rate (as a run's own row says), not 0.0000.
        rate = c.counters.acceptance_rate if c.arm != "plain" and c.counters.proposed else None
        acc = DASH if rate is None else f"{rate:.4f}"
        rows.append((c.target, c.model, c.prompt, c.arm, layer.label, str(c.n), median,
                     speedup_text(c) if c.arm != "plain" else DASH, acc))
    headers = ("target", "model", "prompt", "arm", "max tok", "n", "median tok/s", "speed-up",
               "acc rate")
    return Grid(f"{counted(len(rows), 'cell')} (done runs)", headers, tuple(rows),
                limits_notes(layers), left_cols=4)


def cell_records(layers: list[LimitLayer], arms: Collection[str] | None = None) -> list[dict]:
    """The cells (of `arms`, when given) as flat dicts (json / csv), `max_tokens` and
    `temperature` after the cell's coordinates."""
    out = []
    for layer, cell in limit_cells(layers, arms):
        record = cell_record(cell)
        key = {name: record.pop(name) for name in ("target", "model", "prompt", "arm")}
        out.append({**key, "max_tokens": layer.max_tokens, "temperature": layer.temperature,
                    **record})
    return out


def pivot_layers_grid(layers: list[LimitLayer], targets: tuple[str, ...], rate: Rate) -> Grid:
    """`pivot_grid` over every layer: a model, prompt and arm gets a row per token limit."""
    rows = []
    for layer, model, prompt, arm in _pivot_keys(layers):
        cols = pivot_cols(layer.view, targets, model, prompt, arm)
        if cols is not None:
            rows.append((model, prompt, arm, layer.label, *cols))
    return Grid("Across targets", ("Model", "prompt", "arm", "max tok", *targets), tuple(rows),
                (PIVOT_NOTE, *limits_notes(layers), legend(rate)), left_cols=3)


def pivot_layer_records(layers: list[LimitLayer], targets: tuple[str, ...]) -> list[dict]:
    """`pivot_records` over every layer, each row with its `max_tokens`."""
    out = []
    for layer, model, prompt, arm in _pivot_keys(layers):
        record = pivot_record(layer.view, targets, model, prompt, arm)
        if record is not None:
            out.append({**record, "max_tokens": layer.max_tokens,
                        "temperature": layer.temperature})
    return out


def _pivot_keys(layers: list[LimitLayer]) -> Iterator[tuple[LimitLayer, str, str, str]]:
    for model in _axis(layers, "models"):
        for prompt in _axis(layers, "prompts"):
            for arm in _axis(layers, "lookup_arms", planned="arms"):
                for layer in layers:
                    yield layer, model, prompt, arm


def _axis(layers: list[LimitLayer], name: str, planned: str | None = None) -> tuple[str, ...]:
    """The views' axis `name` over every layer (one may lack what another has), in the
    order of their plan's axis `planned` (default: `name`)."""
    order = getattr(layers[0].order, planned or name) if layers else ()
    return in_order((v for layer in layers for v in getattr(layer.view, name)), order)


def render_cells(layers: list[LimitLayer], fmt: str, pivot: str | None, rate: Rate,
                 arms: Collection[str] | None = None,
                 named: tuple[str, str] = ("results", "filtered runs")) -> str:
    """The cells of `limit_layers` (of `arms`, when given; with `pivot`, targets side by
    side) in `fmt`; `named` is the (id, name) a pivot's heading and JSON body carry."""
    targets = _axis(layers, "targets")
    matrix_id, name = named
    if fmt in ("table", "markdown"):
        grid = (cells_grid(layers, arms) if pivot is None
                else pivot_layers_grid(layers, targets, rate))
        heading = f"Matrix {matrix_id} ({name})" if pivot is not None else ""
        return _grid_text(grid, fmt, heading)
    if pivot is not None:
        records = pivot_layer_records(layers, targets)
        if fmt == "csv":
            return pivot_csv(targets, records,
                             ("model", "prompt", "arm", "max_tokens", "temperature"))
        body = {"matrix_id": matrix_id, "name": name, "targets": list(targets),
                "rate": rate, "rows": records}
        return jsontext.dumps(body, indent=2, default=str) + "\n"
    records = cell_records(layers, arms)
    if fmt == "json":
        return jsontext.dumps(records, indent=2) + "\n"
    cell_keys = cell_record_fields()  # as `cell_records` orders them, none done or some
    headers = [*cell_keys[:4], "max_tokens", "temperature", *cell_keys[4:]]
    return to_csv(headers, [[csv_value(r[h]) for h in headers] for r in records])


def render_results(runs: list, fmt: str = "table", cells: bool = False,
                   pivot: str | None = None, rate: Rate = "whole",
                   arms: Collection[str] | None = None, of_total: int | None = None) -> str:
    """Runs (or, with `cells` or `pivot`, their cells) as text.

    Args:
        runs: `RunRow`s from `Store.runs`.
        fmt: one of `OUTPUT_FORMATS`: "table", "markdown", "json" or "csv".
        cells: aggregate the done runs per cell and token limit (`limit_layers`).
        pivot: "target" puts each model, prompt and arm on every target side by side.
        rate: the tok/s cells read: "whole" or "decode" (see `stats.cells.cell_stats`).
        arms: the arms asked for (`--arm`), None for all: the cells of plain, among `runs`
            for the speed-ups alone, are not listed.
        of_total: how many runs matched when `runs` are only the newest of them (a table
            says so under it).
    """
    check_format(fmt)
    check_pivot(pivot)  # with no cells to show, it would say only "no done runs"
    if pivot is not None or cells:
        layers = limit_layers(runs, rate)
        # The pivot's rows are the arms beside plain: plain's cells alone fill none.
        listed = [c for _, c in limit_cells(layers, arms) if pivot is None or c.arm != PLAIN]
        if not listed and fmt in ("table", "markdown"):
            if pivot is not None and any(c.arm == PLAIN for _, c in limit_cells(layers, arms)):
                # Plain's runs matched: "no done runs" was false of them.
                return ("the pivot's rows are the arms beside plain, and these filters leave "
                        "plain alone; expected --arm naming another arm too, or --cells\n")
            return "no done runs match these filters\n"  # no matrix to point at
        return render_cells(layers, fmt, pivot, rate, arms)
    if fmt in ("table", "markdown"):
        return _grid_text(runs_grid(runs, of_total), fmt)
    out = io.StringIO()
    export_runs(runs, fmt, out)
    return out.getvalue()


def _grid_text(grid: Grid, fmt: str, heading: str = "") -> str:
    if fmt == "table":
        return to_rich([grid], heading)
    return to_markdown([grid], f"## {heading}" if heading else "", level=2 if not heading else 3)


def render_matrix(store, matrix_id: str, fmt: str = "table", pivot: str | None = None,
                  rate: Rate = "whole") -> str:
    """The speed-up tables of a stored matrix.

    Args:
        store: an open `specfleet.store.Store`.
        matrix_id: the matrix to show (an unknown id raises `UserError`).
        fmt: "table" (rich, for a terminal), "json", "csv" or "markdown".
        pivot: None (one block of tables per target) or "target" (targets side by side, a
            row per token limit as `results --pivot` has it: a prompt may run 32 tokens on
            torch and 20 on MLX, and tok/s depends on the reply's length).
        rate: "whole" (the call, prefill included) or "decode" (after the first token): the
            tok/s the medians and speed-ups read; the other rates are printed beside.

    Returns:
        The rendered text, ending with a newline.
    """
    check_format(fmt)
    check_pivot(pivot)
    view = build_view(store, matrix_id, rate)
    if pivot is None or (not view.cells and fmt in ("table", "markdown")):  # "no done runs yet"
        why = why_not_compared(store, view) if fmt in ("table", "markdown") else ()
        return render_view(view, fmt, why)
    layers = limit_layers(done_runs(store, matrix_id, CELLS_FIELDS),
                          rate, view.matrix_id, view.name, stored_plan_order(store, matrix_id))
    return render_cells(layers, fmt, pivot, rate, named=(view.matrix_id, view.name))
