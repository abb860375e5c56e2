"""specfleet's statistics: every figure a table, record, page or comparison shows.

Pure Python over runs already read from the store (no SQL, no I/O), so SQLite and PostgreSQL
give identical answers and every output format shows the same numbers. The public API:

* `view_of_runs(matrix_id, name, runs) -> MatrixView`: one `CellView` per (target, model,
  prompt, arm) with median tok/s, spread, speed-up over plain, its verdict, loop flag,
  parity against plain and counters; plus per-target `Headline`s. What `matrix show`,
  `report`, `results --cells` and the web view render.
* `history_rows(runs, arm, submitted) -> list[HistoryRow]`: one cell over time, each point's
  change from the previous one (`specfleet history`).
* `compare_rows(runs_a, runs_b, allow_mixed) -> list[CompareRow]`: two matrices cell by
  cell, ratio B/A, change test and regression verdict (`specfleet compare`).
* `ratio_interval(base, other) -> RatioInterval | None`: the one rule behind every verdict
  (gain, loss, within noise, changed), at `CONFIDENCE` from `MIN_REPEATS` repeats a side;
  `detect_change(before, after) -> ChangeTest` applies it to two sets of repeats.
* `SPREAD_FLAG`, `LOOP_SHARE_FLAG`: the thresholds behind `!` and `LOOP`.

Modules: `runs.py` (any run shape -> `Row`, the one `Counters` type), `interval.py` (the
verdict rule), `cells.py` (cell statistics, speed-ups, parity, headlines), `changes.py`
(changes over time, by the same rule), `history.py`, `provenance.py` (what must match before
a slow-down is a regression), `view.py`.
"""

from specfleet.stats.cells import LOOP_SHARE_FLAG, SPREAD_FLAG, Headline
from specfleet.stats.changes import ChangeTest, detect_change
from specfleet.stats.history import CompareRow, HistoryRow, compare_rows, history_rows
from specfleet.stats.interval import CONFIDENCE, MIN_REPEATS, RatioInterval, ratio_interval
from specfleet.stats.runs import CellKey, Counters
from specfleet.stats.view import PLAIN, CellView, MatrixView, view_of_runs

__all__ = [
    "CONFIDENCE",
    "LOOP_SHARE_FLAG",
    "MIN_REPEATS",
    "PLAIN",
    "SPREAD_FLAG",
    "CellKey",
    "CellView",
    "ChangeTest",
    "CompareRow",
    "Counters",
    "Headline",
    "HistoryRow",
    "MatrixView",
    "RatioInterval",
    "compare_rows",
    "detect_change",
    "history_rows",
    "ratio_interval",
    "view_of_runs",
]
