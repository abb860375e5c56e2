"""Read a matrix's runs from the store and turn them into a `MatrixView` (`stats.view`)."""

from __future__ import annotations

from collections.abc import Sequence

from specfleet.stats.runs import ROW_FIELDS, Rate
from specfleet.stats.view import MatrixView, view_of_runs
from specfleet.store.rows import MatrixRow, RunRow


def load_matrix(store, matrix_id: str) -> MatrixRow:
    """The matrix row; an unknown id raises the store's one-line `UnknownMatrix` (a
    `UserError`)."""
    return store.get_matrix(matrix_id)


def done_runs(store, matrix_id: str, columns: Sequence[str] | None = None) -> list[RunRow]:
    """The matrix's `done` runs in plan order (`columns`: only these fields, see
    `Store.runs`)."""
    if columns is not None:
        columns = (*columns, "plan_order")
    return sorted(store.runs(matrix=matrix_id, status="done", columns=columns),
                  key=lambda r: r.plan_order)


def build_view(store, matrix_id: str, rate: Rate = "whole") -> MatrixView:
    """The `MatrixView` of a stored matrix (its `done` runs).

    Raises:
        UserError: no matrix with this id.
    """
    matrix = load_matrix(store, matrix_id)
    return view_of_runs(matrix_id, matrix.name, done_runs(store, matrix_id, ROW_FIELDS), rate)
