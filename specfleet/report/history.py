"""One cell over time (`specfleet history`) and two matrices side by side (`specfleet compare`).

This module reads the runs from the store and renders them; the figures come from
`stats.history` (changes judged by `stats/changes.py`, named in every table).
"""

from __future__ import annotations

from dataclasses import asdict, fields

from specfleet import jsontext
from specfleet.engine.kinds import DEVICES, ENGINES
from specfleet.errors import UserError
from specfleet.jobs.resolve import counted
from specfleet.jobs.run import ARMS
from specfleet.report.build import load_matrix, stored_plan_order
from specfleet.report.coverage import Coverage, cell_keys
from specfleet.report.grid import Grid, check_format, to_csv, to_markdown, to_rich
from specfleet.report.results import (
    check_choices,
    check_not_blank,
    check_stored_values,
    limit_text,
)
from specfleet.report.tables import DASH, interval_text, pct, ratio_places, ratio_text
from specfleet.settings import host_name_problem
from specfleet.stats.changes import DEFAULT_FACTOR, ChangeTest
from specfleet.stats.history import (
    COMPARE_FIELDS,
    HISTORY_FIELDS,
    CompareRow,
    HistoryRow,
    compare_rows,
    history_rows,
)
from specfleet.stats.interval import MIN_REPEATS, RULE, no_verdict_text, side
from specfleet.stats.provenance import HOST_STATES, THROTTLED_HOST
from specfleet.stats.runs import CellKey


def test_note(factor: float = DEFAULT_FACTOR) -> str:
    """The change test in words, under every history and compare table."""
    beyond = (f" Changed also needs the ratio beyond {factor:g}x either way (--factor)."
              if factor > 1.0 else "")
    return f"Change test, after over before: {RULE}.{beyond}"


def unstored_host_problem(store, host: str) -> str | None:
    """Why `host` names no host a run could have, or None; a host stored runs hold passes
    whatever it is (a store older than the host name rule, a hand-edited one): `results`
    lists its targets and the web view links to their history."""
    problem = host_name_problem(host)
    return problem if problem and not store.stored_values("host", [host]) else None


def _target_filters(store, target: str | None, flag: str) -> dict:
    if target is None:
        return {}
    parts = target.split("/")
    if len(parts) > 3 or not all(parts):
        raise UserError(f"--target: expected HOST, HOST/ENGINE or HOST/ENGINE/DEVICE, got "
                        f"{target!r}")
    if problem := unstored_host_problem(store, parts[0]):  # not "no done runs"
        raise UserError(f"{flag}: {problem}")
    check_choices(parts[1:2], ENGINES, "--target ENGINE")
    check_choices(parts[2:3], DEVICES, "--target DEVICE")
    return dict(zip(("host", "engine", "device"), parts, strict=False))


def cell_history(store, model: str, prompt: str, arm: str, target: str | None = None,
                 factor: float = DEFAULT_FACTOR, last: int | None = None,
                 flags: dict[str, str] | None = None) -> list[HistoryRow]:
    """Every matrix's measurement of one cell, per target in time order, with the change
    from the previous point.

    Args:
        last: only the newest `last` matrices that measured the cell (None: all); the first
            point shown then has no previous one.
        flags: what names the model, prompt and host filters in a refusal
            (`check_stored_values`; default: the `history` command's flags).

    Raises:
        UserError: an unknown arm, a malformed target, or no done run of this cell.
    """
    check_choices([arm], ARMS, "--arm")
    check_not_blank([model], "--model")
    check_not_blank([prompt], "--prompt")
    flags = {"host": "--target HOST", **(flags or {})}
    where = dict(model=model, prompt=prompt, arm=sorted({arm, "plain"}), status="done",
                 **_target_filters(store, target, flags["host"]))
    if last is not None:
        where["matrix"] = store.newest_matrices(last, **{**where, "arm": arm})
    runs = store.runs(columns=HISTORY_FIELDS, **where)
    if not any(run.arm == arm and run.matrix_id is not None for run in runs):
        # A model, prompt or host no run holds is a typo: say which, and what is stored.
        check_stored_values(store, {name: [where[name]] for name in ("model", "prompt", "host")
                                    if name in where}, flags=flags)
        on = f" on {target}" if target else ""
        cell = f"model {model!r}, prompt {prompt!r}, arm {arm!r}{on}"
        listed = f"`specfleet results --model {model} --prompt {prompt} --arm {arm}`"
        if last is not None:  # `where` kept the newest matrices' runs: a job's were left out
            runs = store.runs(columns=HISTORY_FIELDS,
                              **{k: v for k, v in where.items() if k != "matrix"})
        in_jobs = sum(1 for run in runs if run.arm == arm and run.matrix_id is None)
        if in_jobs:  # history follows matrices; a job's runs read "no done runs" before
            raise UserError(f"no matrix measured {cell}: its {in_jobs} done run(s) belong to "
                            f"generation jobs, which history does not follow ({listed} shows "
                            "them); expected a cell some matrix measured")
        raise UserError(f"no done runs of {cell}; expected a cell some matrix measured "
                        f"({listed} shows its runs in any status)")
    when = store.submitted_times(sorted({r.matrix_id for r in runs if r.matrix_id is not None}))
    return history_rows(runs, arm, when, factor)


def newest_points(store, rows: list[HistoryRow], last: int) -> tuple[list[HistoryRow], str]:
    """The points of the newest `last` matrices among `rows` (each still compared with the
    point before it, shown or not: the exit status reads the same), and the line that says
    what was left out ("" when nothing was)."""
    when = store.submitted_times(sorted({row.matrix_id for row in rows}))
    ordered = sorted(when, key=lambda matrix_id: (when[matrix_id], matrix_id))  # as the points
    if len(ordered) <= last:
        return rows, ""
    newest = set(ordered[-last:])
    note = (f"Showing the points of the newest {last} of the {len(ordered)} matrices that "
            f"measured this cell; --last {len(ordered)} shows them all.")
    return [row for row in rows if row.matrix_id in newest], note


def change_text(change: ChangeTest | None) -> str:
    """`CHANGED 0.80x (90% interval 0.78-0.82x)`, `within noise ...`, `within --factor ...`
    (beyond noise, inside the factor), or `n=1, no verdict 1.54x`."""
    if change is None:
        return DASH
    interval = change.interval
    if interval is None:
        n = min(change.n_before, change.n_after)
        if n >= MIN_REPEATS:
            # Enough repeats and still no interval: a repeat was not measured (0 tok/s),
            # which counts toward no n; `n=3, no verdict` would belie the rule.
            return "no verdict (a repeat not measured: 0 tok/s)"
        return f"{no_verdict_text(n)} {change.ratio:.2f}x"
    beyond_noise = side(interval) in ("above", "below")
    # Beyond noise but inside --factor: not "within noise", which its interval would belie.
    verdict = ("CHANGED" if change.changed else "within --factor" if beyond_noise
               else "within noise")
    return (f"{verdict} {ratio_text(change.ratio, beyond_noise)} "
            f"({interval_text(interval.low, interval.high, interval.coverage)})")


def history_speedup_text(speedup: float) -> str:
    """A point's speed-up over plain: its verdict is not stored with the point, and the
    matrix's tables may call it a gain, so it reads 1.00x only when it is exactly 1x."""
    return ratio_text(speedup, speedup != 1.0)


def _differs_text(row: HistoryRow) -> str:
    """What else changed since the previous point (provenance, e.g. power mode or clocks),
    and THROTTLED when a run of this point ran on a throttled host."""
    # A throttled host is said once, as THROTTLED, though it counts among the differences.
    said = [d for d in row.differs if not (row.throttled and d == THROTTLED_HOST)]
    text = f"; differs in {', '.join(said)}" if said else ""
    return text + ("; THROTTLED" if row.throttled else "")


def settings_changed(row: HistoryRow) -> tuple[str, ...]:
    """The settings `row` differs in from the previous point (token limit, engine config,
    library versions, weights, ...; the hosts' load and throttling aside): a plot does not
    join two points that measured different workloads."""
    return tuple(d for d in row.differs if d not in HOST_STATES)


def history_grid(rows: list[HistoryRow], title: str, factor: float = DEFAULT_FACTOR,
                 of_total: int | None = None, left_out: str = "") -> Grid:
    """The history table: one line per point, the change from the previous one, the test;
    `of_total`: the points before `--only-changed` kept `rows`, and `left_out`: what
    `newest_points` left out (both said under the table)."""
    lines = tuple(
        (r.target, limit_text(r.max_tokens, r.temperature), r.matrix_id,
         r.submitted_at, str(len(r.values)),
         f"{r.median_tok_per_s:.2f} {pct(r.spread)}",
         DASH if r.speedup is None else history_speedup_text(r.speedup)
         + (" LOOP" if r.loop else ""),
         change_text(r.change) + _differs_text(r))
        for r in rows
    )
    headers = ("target", "max tok", "matrix", "submitted (UTC)", "n", "median tok/s",
               "speed-up", "change vs previous")
    shown = () if of_total is None else (
        f"Showing the {len(rows)} of {counted(of_total, 'point')} that changed.",)
    return Grid(title, headers, lines, (*shown, *((left_out,) if left_out else ()),
                                        HISTORY_LIMITS_NOTE, test_note(factor)), left_cols=4)


# Under the history table: a series is a target and a token limit.
HISTORY_LIMITS_NOTE = ("max tok = the runs' new-token limit: each point is compared with the "
                       "previous one of its target and limit (tok/s depends on the reply's "
                       "length).")


def render_history(rows: list[HistoryRow], title: str, fmt: str = "table",
                   factor: float = DEFAULT_FACTOR, of_total: int | None = None,
                   left_out: str = "") -> str:
    """History rows as a table (change flags and the test named), markdown, JSON or CSV;
    `of_total` and `left_out` as `history_grid`'s (a table's notes alone)."""
    check_format(fmt)
    if fmt in ("json", "csv"):
        return _dump([{**asdict(r), "n": len(r.values)} for r in rows], fmt,
                     [*(f.name for f in fields(HistoryRow)), "n"])
    grid = history_grid(rows, title, factor, of_total, left_out)
    return to_rich([grid]) if fmt == "table" else to_markdown([grid], level=2)


def same_matrix(a: str, b: str, names: str = "A and B") -> str | None:
    """Why `compare` refuses matrices `a` and `b` (the same one: every ratio would read 1.0x,
    a mistyped id passing as a check), or None; `names` is how the caller's user named them.
    Ids that differ only in spaces are not the same: the store says which one it lacks."""
    if a != b:
        return None
    return (f"{names} are both {a!r}; expected two different matrix ids (the "
            "baseline, then the matrix to check against it)")


def compare(store, a: str, b: str, allow_mixed: bool = False,
            factor: float = DEFAULT_FACTOR) -> list[CompareRow]:
    """Every cell measured in both matrices: B against baseline A.

    A significant slow-down is a "regression" only when the cells' provenance matches (or
    `allow_mixed`); otherwise "slower", with what differs.
    """
    load_matrix(store, a)
    load_matrix(store, b)
    runs_a = store.runs(matrix=a, status="done", columns=COMPARE_FIELDS)
    runs_b = store.runs(matrix=b, status="done", columns=COMPARE_FIELDS)
    order = stored_plan_order(store, b)  # as every table lists cells: B's plan, plain first
    return sorted(compare_rows(runs_a, runs_b, allow_mixed, factor),
                  key=lambda row: order.cell_rank(CellKey(row.target, row.model, row.prompt,
                                                          row.arm)))


def compare_verdict_text(row: CompareRow) -> str:
    if row.verdict == "slower" and row.differs:
        return f"slower; not called a regression, the cells differ in {', '.join(row.differs)}"
    if row.verdict == "regression" and row.differs:
        return f"REGRESSION (--allow-mixed; the cells differ in {', '.join(row.differs)})"
    if row.verdict == "faster" and row.differs:  # a longer reply alone reads faster
        return f"faster; the cells differ in {', '.join(row.differs)}"
    return row.verdict.upper() if row.verdict == "regression" else row.verdict


CHANGED_VERDICTS = ("regression", "slower", "faster")


def changed_cells(rows: list[CompareRow]) -> list[CompareRow]:
    """The cells that changed beyond noise (`--only-changed`)."""
    return [r for r in rows if r.verdict in CHANGED_VERDICTS]


def _ratio_b_a(row: CompareRow) -> str:
    """`0.800`; beside a change beyond noise (a regression) never `1.000` (`0.9996`)."""
    beyond_noise = side(row.change.interval) in ("above", "below")
    return f"{row.ratio:.{ratio_places(row.ratio, off_one=beyond_noise, least=3)}f}"


def compare_grid(rows: list[CompareRow], a: str, b: str, factor: float = DEFAULT_FACTOR,
                 only_changed: bool = False) -> Grid:
    """The compare table: ratio B/A per cell, the test, the verdict (mixed provenance named);
    `only_changed` hides the other rows, never from the counts."""
    shown = changed_cells(rows) if only_changed else rows
    lines = tuple(
        (r.target, r.model, r.prompt, r.arm, f"{r.median_a:.2f}", f"{r.median_b:.2f}",
         _ratio_b_a(r), change_text(r.change), compare_verdict_text(r))
        for r in shown
    )
    headers = ("target", "model", "prompt", "arm", f"{a} tok/s", f"{b} tok/s", "B/A", "test",
               "verdict")
    regressions = sum(r.verdict == "regression" for r in rows)
    count = (f"{counted(regressions, 'regression')} in {counted(len(rows), 'cell')} measured "
             "in both")
    count += f"; showing the {len(shown)} that changed." if only_changed else "."
    notes = (count, test_note(factor),
             "A slow-down is a regression only when the cells differ in nothing but code "
             "version (weights, prompt, token limit, sampling, engine config, host, library "
             "versions, power mode, clocks) and no run was timed on a busy or throttled host; "
             "--allow-mixed lifts that.")
    return Grid(f"{b} against {a}", headers, lines, notes, left_cols=4)


def render_compare(rows: list[CompareRow], a: str, b: str, fmt: str = "table",
                   factor: float = DEFAULT_FACTOR, only_changed: bool = False) -> str:
    """Comparison rows as a table (ratio B/A, test, verdict), markdown, JSON or CSV;
    `only_changed`: only the rows that changed (the table's counts still cover every row)."""
    check_format(fmt)
    if fmt in ("json", "csv"):
        shown = changed_cells(rows) if only_changed else rows
        return _dump([asdict(r) for r in shown], fmt, [f.name for f in fields(CompareRow)])
    grid = compare_grid(rows, a, b, factor, only_changed)
    return to_rich([grid]) if fmt == "table" else to_markdown([grid], level=2)


def compare_gap_text(runs_a: list, runs_b: list, a: str, b: str, coverage: Coverage) -> str:
    """Why `compare` fails when a cell was not compared: the count, and how many of the
    cells planned in either matrix have no done run in each (any status in `runs_a`,
    `runs_b`)."""
    planned = cell_keys(runs_a) | cell_keys(runs_b)
    lack_a = len(planned - cell_keys(r for r in runs_a if r.status == "done"))
    lack_b = len(planned - cell_keys(r for r in runs_b if r.status == "done"))
    return (f"compare: {coverage.text()}; exit 1: a cell measured on one side only is no "
            f"evidence ({lack_a} not measured in {a}, {lack_b} not in {b})")


def _flat(value):
    return jsontext.dumps(value, default=str) if isinstance(value, dict | list | tuple) else value


def _dump(records: list[dict], fmt: str, headers: list[str]) -> str:
    """JSON or CSV of the rows; CSV has its header line even with no rows."""
    if fmt == "json":
        return jsontext.dumps(records, indent=2, default=str) + "\n"
    return to_csv(headers, [[_flat(r[h]) for h in headers] for r in records])
