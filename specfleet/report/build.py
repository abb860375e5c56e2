"""Read a matrix's runs from the store and turn them into a `MatrixView` (`stats.view`), its
axes and cells in the order the matrix's plan lists them."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from specfleet.stats.runs import CELL_FIELDS, ROW_FIELDS, CellKey, Rate, target_label
from specfleet.stats.view import PLAIN, MatrixView, ordered, view_of_runs
from specfleet.store.rows import MatrixRow, RunRow


@dataclass(frozen=True)
class PlanOrder:
    """Each axis of a plan in the order its runs first list a value, whatever their status
    (a failed first repeat moves no arm), plain first among the arms as every table has it."""

    targets: tuple[str, ...]
    models: tuple[str, ...]
    prompts: tuple[str, ...]
    arms: tuple[str, ...]

    def cell_rank(self, key: CellKey) -> tuple[int, ...]:
        """Where a cell sorts: by target, model, prompt and arm as the plan lists them (a
        value the plan does not list after those it does)."""
        return tuple(rank(value) for rank, value in zip(self._ranks, key, strict=True))

    @functools.cached_property
    def _ranks(self) -> tuple[Callable[[str], int], ...]:
        # Tables sort every cell of a big listing: each axis's index built once.
        return tuple(_rank(axis) for axis in (self.targets, self.models, self.prompts,
                                              self.arms))


def _rank(planned: tuple[str, ...]) -> Callable[[str], int]:
    index = {value: i for i, value in enumerate(planned)}
    return lambda value: index.get(value, len(index))


def plan_order(runs: Iterable) -> PlanOrder:
    """The `PlanOrder` of runs listed in plan order (as `Store.runs` returns them), of any
    status."""
    runs = list(runs)
    arms = ordered(r.arm for r in runs)
    return PlanOrder(
        targets=ordered(target_label(r) for r in runs), models=ordered(r.model for r in runs),
        prompts=ordered(r.prompt_name for r in runs),
        arms=(PLAIN, *(a for a in arms if a != PLAIN)) if PLAIN in arms else arms,
    )


def stored_plan_order(store, matrix_id: str) -> PlanOrder:
    """The `PlanOrder` of a stored matrix, read from all its runs."""
    return plan_order(store.runs(matrix=matrix_id, columns=CELL_FIELDS))


def in_order(values: Iterable[str], planned: tuple[str, ...]) -> tuple[str, ...]:
    """The distinct `values` in `planned` order, any `planned` lacks after them as first seen."""
    return tuple(sorted(ordered(values), key=_rank(planned)))  # a stable sort


def in_plan_order(view: MatrixView, order: PlanOrder) -> MatrixView:
    """`view` with its axes, cells and headlines in `order` (`view_of_runs` orders them by
    the done runs and by name: a failed first repeat put an arm last, `plain` after `graded`)."""
    target_rank, arm_rank = _rank(order.targets), _rank(order.arms)
    return replace(
        view, targets=in_order(view.targets, order.targets),
        models=in_order(view.models, order.models),
        prompts=in_order(view.prompts, order.prompts), arms=in_order(view.arms, order.arms),
        cells=tuple(sorted(view.cells, key=lambda c: order.cell_rank(
            CellKey(c.target, c.model, c.prompt, c.arm)))),
        headlines=tuple(sorted(view.headlines,
                               key=lambda h: (target_rank(h.target), arm_rank(h.arm)))),
    )


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


def matrix_view(store, matrix: MatrixRow, runs: list, rate: Rate = "whole") -> MatrixView:
    """The `MatrixView` of a stored matrix's `done` runs (`runs`, from `done_runs`), in
    the matrix's plan order (`stored_plan_order`)."""
    return in_plan_order(view_of_runs(matrix.id, matrix.name, runs, rate),
                         stored_plan_order(store, matrix.id))


def build_view(store, matrix_id: str, rate: Rate = "whole") -> MatrixView:
    """The `MatrixView` of a stored matrix (its `done` runs), in plan order.

    Raises:
        UserError: no matrix with this id.
    """
    matrix = load_matrix(store, matrix_id)
    return matrix_view(store, matrix, done_runs(store, matrix_id, ROW_FIELDS), rate)
