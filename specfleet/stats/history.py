"""A cell over time and two matrices side by side, from runs already read from the store.

`history_rows` is what `specfleet history` prints; `compare_rows` what `specfleet compare`
prints. Changes are judged by `changes.py` (named in every table); a significant slow-down
is a regression only when the two cells differ in nothing but code version
(`provenance.py`).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from specfleet.stats.cells import LOOP_SHARE_FLAG, relative_spread
from specfleet.stats.changes import DEFAULT_FACTOR, ChangeTest, compare_matrices, history_changes
from specfleet.stats.provenance import PROVENANCE_FIELDS, by_value, differences, host_state, memo
from specfleet.stats.runs import VALUE_FIELDS, target_label

# The stored run's fields `history_rows` and `compare_rows` read (store `RunRow` names).
HISTORY_FIELDS: tuple[str, ...] = (
    *VALUE_FIELDS, "matrix_id", "loop_share", "noisy", "throttled", "temperature",
    *PROVENANCE_FIELDS,
)
COMPARE_FIELDS: tuple[str, ...] = (*VALUE_FIELDS, "noisy", "throttled", *PROVENANCE_FIELDS)


@dataclass(frozen=True)
class HistoryRow:
    """One cell in one matrix on one target: its repeats, median, speed-up, the change."""

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
    max_tokens: int | None = None  # the runs' new-token limit: a series is one target and limit
    temperature: float = 0.0  # ... and one sampling temperature (0: greedy)


def history_rows(runs: Iterable, arm: str, submitted: Mapping[str, datetime],
                 factor: float = DEFAULT_FACTOR) -> list[HistoryRow]:
    """Every matrix's measurement of one cell, per target and new-token limit in time order,
    with the change from the previous point of that series (tok/s depends on the reply's
    length: a 48-token point between two 256-token ones hid their slow-down).

    Args:
        runs: the cell's done runs and its plain partner's (`arm` and "plain"), any matrix.
        arm: the arm followed over time.
        submitted: each matrix id's submission time (orders the points).
        factor: asv's `--factor`: a change must also be beyond this ratio either way.

    Returns:
        One row per (target, limit, matrix) that has runs of `arm`, a series' rows together
        (targets in the order met, each one's limits smallest first); empty when there are
        none.
    """
    Series = tuple[str, int | None, float]
    groups: dict[tuple[Series, str], dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if run.matrix_id is not None:
            series = (target_label(run), getattr(run, "max_tokens", None),
                      getattr(run, "temperature", 0.0) or 0.0)
            groups[(series, run.matrix_id)][run.arm].append(run)
    groups = {k: v for k, v in groups.items() if v.get(arm)}
    when = submitted
    out: list[HistoryRow] = []
    labels = list(dict.fromkeys(series[0] for series, _ in groups))
    ordered = sorted(dict.fromkeys(s for s, _ in groups),
                     key=lambda s: (labels.index(s[0]), s[1] is not None, s[1] or 0, s[2]))
    for series in ordered:
        keys = sorted((k for k in groups if k[0] == series), key=lambda k: (when[k[1]], k[1]))
        points = [(k[1], [r.tok_per_s for r in groups[k][arm]]) for k in keys]
        changes = [None] + [step.change for step in history_changes(points, factor)]
        previous, of = None, memo()
        for key, change in zip(keys, changes, strict=True):
            differs = (tuple(differences(groups[previous][arm], groups[key][arm], of)
                             + host_state(groups[previous][arm], groups[key][arm]))
                       if previous else ())
            out.append(_history_row(series, key[1], when[key[1]], groups[key], arm, change,
                                    differs))
            previous = key
    return out


def _history_row(series, matrix_id, submitted_at, arms, arm, change, differs) -> HistoryRow:
    values = tuple(r.tok_per_s for r in arms[arm])
    median = statistics.median(values)
    plain = statistics.median([r.tok_per_s for r in arms.get("plain", [])] or [0.0])
    # As in the matrix tables (`cells.speedups`): a speed-up loops when the arm's replies or
    # its plain partner's do (docs/trust.md, "Looping replies").
    loop = any(_loops(arms.get(side, [])) for side in {arm, "plain"})
    label, limit, temperature = series
    return HistoryRow(
        target=label, matrix_id=matrix_id, submitted_at=submitted_at.strftime("%Y-%m-%d %H:%M"),
        values=values, median_tok_per_s=median, spread=relative_spread(values),
        # No plain run, or one timed at 0 tok/s, gives no speed-up (a ZeroDivisionError).
        speedup=median / plain if plain and arm != "plain" else None,
        loop=loop, change=change, differs=differs,
        throttled=any(getattr(r, "throttled", False) for r in arms[arm]), max_tokens=limit,
        temperature=temperature,
    )


def _loops(runs: list) -> bool:
    return bool(runs) and statistics.median(r.loop_share or 0.0 for r in runs) > LOOP_SHARE_FLAG


def history_regressions(rows: list[HistoryRow]) -> list[HistoryRow]:
    """The newest point of each series (target and token limit) when it is a significant
    slow-down from the point before and differs from it in nothing but code version (an
    older dip, since recovered, does not fail a check forever)."""
    newest = {(row.target, row.max_tokens, row.temperature): row for row in rows}
    return [row for row in newest.values() if row.change is not None and row.change.changed
            and row.change.ratio < 1.0 and not row.differs]


def changed_only(rows: list[HistoryRow]) -> list[HistoryRow]:
    """The points whose change from the previous one is beyond noise."""
    return [row for row in rows if row.change is not None and row.change.changed]


@dataclass(frozen=True)
class CompareRow:
    """One cell in two matrices: medians, ratio B/A, the change test and the verdict."""

    target: str
    model: str
    prompt: str
    arm: str
    median_a: float
    median_b: float
    ratio: float
    change: ChangeTest
    verdict: str  # regression | slower | faster | within noise | no verdict
    differs: tuple[str, ...]  # provenance that differs besides the code version


def compare_rows(runs_a: Iterable, runs_b: Iterable, allow_mixed: bool = False,
                 factor: float = DEFAULT_FACTOR) -> list[CompareRow]:
    """Every cell measured in both matrices: B against baseline A.

    A significant slow-down is a "regression" only when the cells' provenance matches (or
    `allow_mixed`); otherwise "slower", with what differs.

    Args:
        runs_a: the baseline matrix's done runs.
        runs_b: the other matrix's done runs.
        allow_mixed: call slow-downs regressions even when provenance differs.
        factor: asv's `--factor` (see `changes.py`).
    """
    runs_a, runs_b = list(runs_a), list(runs_b)
    by_cell = _by_cell(runs_a), _by_cell(runs_b)
    of = by_value()
    out = []
    for comp in compare_matrices(runs_a, runs_b, factor):
        assert comp.key is not None  # compare_matrices names every cell it compares
        key = (comp.key.target, comp.key.model, comp.key.prompt, comp.key.arm)
        differs = tuple(differences(by_cell[0][key], by_cell[1][key], of)
                        + host_state(by_cell[0][key], by_cell[1][key]))
        verdict: str = comp.verdict
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
