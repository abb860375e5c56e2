"""One cell over time (`specfleet history`) and two matrices side by side (`specfleet compare`).

Changes are judged by `jobs/changes.py` (named in every table): a two-sided Mann-Whitney U
test over the repeats' tok/s when both sides have at least 3 repeats, with asv's `--factor`;
with fewer repeats there is no noise floor and no verdict. `compare` calls a significant slow-down a regression only when
the two cells differ in nothing but code version (see `provenance.py`).
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass

from specfleet.errors import UserError
from specfleet.jobs.changes import (
    CHANGE_ALPHA,
    DEFAULT_FACTOR,
    MIN_REPEATS,
    ChangeTest,
    history_changes,
    no_floor_text,
)
from specfleet.jobs.summarize import LOOP_SHARE_FLAG, compare_matrices, relative_spread
from specfleet.report.build import load_matrix, target_label
from specfleet.report.grid import Grid, check_format, to_csv, to_markdown, to_rich
from specfleet.report.provenance import differences, memo
from specfleet.report.tables import DASH, pct


def test_note(factor: float = DEFAULT_FACTOR) -> str:
    """The change test in words, under every history and compare table."""
    beyond = f" and the ratio is beyond {factor:g}x either way" if factor > 1.0 else ""
    return (f"Change test: two-sided Mann-Whitney U over the repeats' tok/s, changed when "
            f"p <= {CHANGE_ALPHA}{beyond} (with >= {MIN_REPEATS} repeats a side); with fewer "
            f"repeats there is no noise floor and no verdict.")


@dataclass(frozen=True)
class HistoryRow:
    target: str
    matrix_id: str
    submitted_at: str
    values: tuple[float, ...]
    median_tok_per_s: float
    spread: float
    speedup: float | None
    loop: bool
    change: ChangeTest | None  # against the previous point on the same target
    differs: tuple[str, ...] = ()  # provenance that differs from the previous point
    throttled: bool = False  # a run of this point ran on a throttled host


def _target_filters(target: str | None) -> dict:
    if not target:
        return {}
    parts = target.split("/")
    if len(parts) > 3 or not all(parts):
        raise UserError(f"--target: expected HOST, HOST/ENGINE or HOST/ENGINE/DEVICE, got "
                        f"{target!r}")
    return dict(zip(("host", "engine", "device"), parts, strict=False))


def cell_history(store, model: str, prompt: str, arm: str, target: str | None = None,
                 factor: float = DEFAULT_FACTOR, last: int | None = None) -> list[HistoryRow]:
    """Every matrix's measurement of one cell, per target in time order, with the change
    from the previous point.

    Args:
        last: only the newest `last` matrices that measured the cell (None: all); the first
            point shown then has no previous one.

    Raises:
        UserError: a malformed target, or no done run of this cell.
    """
    where = dict(model=model, prompt=prompt, arm=sorted({arm, "plain"}), status="done",
                 **_target_filters(target))
    if last is not None:
        where["matrix"] = store.newest_matrices(last, **{**where, "arm": arm})
    runs = store.runs(**where)
    groups: dict[tuple[str, str], dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if run.matrix_id is not None:
            groups[(target_label(run), run.matrix_id)][run.arm].append(run)
    groups = {k: v for k, v in groups.items() if v.get(arm)}
    if not groups:
        where = f" on {target}" if target else ""
        raise UserError(f"no done runs of model {model!r}, prompt {prompt!r}, arm {arm!r}{where}")
    when = store.submitted_times(sorted({mid for _, mid in groups}))
    out: list[HistoryRow] = []
    for label in dict.fromkeys(t for t, _ in groups):
        keys = sorted((k for k in groups if k[0] == label), key=lambda k: (when[k[1]], k[1]))
        points = [(k[1], [r.tok_per_s for r in groups[k][arm]]) for k in keys]
        changes = [None] + [step.change for step in history_changes(points, factor)]
        previous, of = None, memo()
        for key, change in zip(keys, changes, strict=True):
            differs = (tuple(differences(groups[previous][arm], groups[key][arm], of))
                       if previous else ())
            out.append(_history_row(label, key[1], when[key[1]], groups[key], arm, change,
                                    differs))
            previous = key
    return out


def _history_row(label, matrix_id, submitted_at, arms, arm, change, differs) -> HistoryRow:
    values = tuple(r.tok_per_s for r in arms[arm])
    median = statistics.median(values)
    plain = [r.tok_per_s for r in arms.get("plain", [])]
    loop = statistics.median(r.loop_share or 0.0 for r in arms[arm]) > LOOP_SHARE_FLAG
    return HistoryRow(
        target=label, matrix_id=matrix_id, submitted_at=submitted_at.strftime("%Y-%m-%d %H:%M"),
        values=values, median_tok_per_s=median, spread=relative_spread(values),
        speedup=median / statistics.median(plain) if plain and arm != "plain" else None,
        loop=loop, change=change, differs=differs,
        throttled=any(getattr(r, "throttled", False) for r in arms[arm]),
    )


def change_text(change: ChangeTest | None) -> str:
    """`CHANGED 0.80x (mann-whitney p=0.100)`, `same ...`, or `n=1, no noise floor 1.54x`."""
    if change is None:
        return DASH
    if not change.judged:
        n = min(change.n_before, change.n_after)
        return f"{no_floor_text(n)} {change.ratio:.2f}x"
    p_value = f" p={change.p_value:.3f}" if change.p_value is not None else ""
    verdict = "CHANGED" if change.changed else "same"
    return f"{verdict} {change.ratio:.2f}x ({change.test}{p_value})"


def _differs_text(row: HistoryRow) -> str:
    """What else changed since the previous point (provenance, e.g. power mode or clocks),
    and THROTTLED when a run of this point ran on a throttled host."""
    text = f"; differs in {', '.join(row.differs)}" if row.differs else ""
    return text + ("; THROTTLED" if row.throttled else "")


def history_grid(rows: list[HistoryRow], title: str, factor: float = DEFAULT_FACTOR) -> Grid:
    """The history table: one line per point, the change from the previous one, the test."""
    lines = tuple(
        (r.target, r.matrix_id, r.submitted_at, str(len(r.values)),
         f"{r.median_tok_per_s:.2f} {pct(r.spread)}",
         DASH if r.speedup is None else f"{r.speedup:.2f}x" + (" LOOP" if r.loop else ""),
         change_text(r.change) + _differs_text(r))
        for r in rows
    )
    headers = ("target", "matrix", "submitted (UTC)", "n", "median tok/s", "speed-up",
               "change vs previous")
    return Grid(title, headers, lines, (test_note(factor),), left_cols=3)


def render_history(rows: list[HistoryRow], title: str, fmt: str = "table",
                   factor: float = DEFAULT_FACTOR) -> str:
    """History rows as a table (change flags and the test named), markdown, JSON or CSV."""
    check_format(fmt)
    if fmt in ("json", "csv"):
        return _dump([{**asdict(r), "n": len(r.values)} for r in rows], fmt)
    grid = history_grid(rows, title, factor)
    return to_rich([grid]) if fmt == "table" else to_markdown([grid], f"## {title}")


def history_regressions(rows: list[HistoryRow]) -> list[HistoryRow]:
    """The newest point of each target when it is a significant slow-down from the point
    before and differs from it in nothing but code version (an older dip, since recovered,
    does not fail a check forever)."""
    newest = {row.target: row for row in rows}
    return [row for row in newest.values() if row.change is not None and row.change.changed
            and row.change.ratio < 1.0 and not row.differs]


def changed_only(rows: list[HistoryRow]) -> list[HistoryRow]:
    """The points whose change from the previous one is beyond noise."""
    return [row for row in rows if row.change is not None and row.change.changed]


@dataclass(frozen=True)
class CompareRow:
    target: str
    model: str
    prompt: str
    arm: str
    median_a: float
    median_b: float
    ratio: float
    change: ChangeTest
    verdict: str  # regression | slower | faster | same | no noise floor
    differs: tuple[str, ...]  # provenance that differs besides the code version


def compare(store, a: str, b: str, allow_mixed: bool = False,
            factor: float = DEFAULT_FACTOR) -> list[CompareRow]:
    """Every cell measured in both matrices: B against baseline A.

    A significant slow-down is a "regression" only when the cells' provenance matches (or
    `allow_mixed`); otherwise "slower", with what differs.
    """
    load_matrix(store, a)
    load_matrix(store, b)
    runs_a = store.runs(matrix=a, status="done")
    runs_b = store.runs(matrix=b, status="done")
    by_cell = _by_cell(runs_a), _by_cell(runs_b)
    out = []
    for comp in compare_matrices(runs_a, runs_b, factor):
        key = (comp.key.target, comp.key.model, comp.key.prompt, comp.key.arm)
        differs = tuple(differences(by_cell[0][key], by_cell[1][key]))
        verdict = comp.verdict
        if verdict == "slower" and (allow_mixed or not differs):
            verdict = "regression"
        out.append(CompareRow(*key, comp.change.median_before, comp.change.median_after,
                              comp.ratio, comp.change, verdict, differs))
    return out


def _by_cell(runs) -> dict[tuple, list]:
    cells: dict[tuple, list] = defaultdict(list)
    for run in runs:
        cells[(target_label(run), run.model, run.prompt_name, run.arm)].append(run)
    return cells


def compare_verdict_text(row: CompareRow) -> str:
    if row.verdict == "slower" and row.differs:
        return f"slower; not called a regression, the cells differ in {', '.join(row.differs)}"
    if row.verdict == "regression" and row.differs:
        return f"REGRESSION (--allow-mixed; the cells differ in {', '.join(row.differs)})"
    return row.verdict.upper() if row.verdict == "regression" else row.verdict


def compare_grid(rows: list[CompareRow], a: str, b: str,
                 factor: float = DEFAULT_FACTOR) -> Grid:
    """The compare table: ratio B/A per cell, the test, the verdict (mixed provenance named)."""
    lines = tuple(
        (r.target, r.model, r.prompt, r.arm, f"{r.median_a:.2f}", f"{r.median_b:.2f}",
         f"{r.ratio:.3f}", change_text(r.change), compare_verdict_text(r))
        for r in rows
    )
    headers = ("target", "model", "prompt", "arm", f"{a} tok/s", f"{b} tok/s", "B/A", "test",
               "verdict")
    regressions = sum(r.verdict == "regression" for r in rows)
    notes = (f"{regressions} regressions in {len(rows)} cells measured in both.", test_note(factor),
             "A slow-down is a regression only when the cells differ in nothing but code "
             "version (weights, prompt, engine config, host, library versions, power mode, "
             "clocks); "
             "--allow-mixed lifts that.")
    return Grid(f"{b} against {a}", headers, lines, notes, left_cols=4)


def render_compare(rows: list[CompareRow], a: str, b: str, fmt: str = "table",
                   factor: float = DEFAULT_FACTOR) -> str:
    """Comparison rows as a table (ratio B/A, test, verdict), markdown, JSON or CSV."""
    check_format(fmt)
    if fmt in ("json", "csv"):
        return _dump([asdict(r) for r in rows], fmt)
    grid = compare_grid(rows, a, b, factor)
    return to_rich([grid]) if fmt == "table" else to_markdown([grid], f"## {grid.title}")


CHANGED_VERDICTS = ("regression", "slower", "faster")


def _flat(value):
    return json.dumps(value, default=str) if isinstance(value, dict | list | tuple) else value


def _dump(records: list[dict], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(records, indent=2, default=str) + "\n"
    headers = list(records[0]) if records else []
    return to_csv(headers, [[_flat(r[h]) for h in headers] for r in records])
