"""Medians, spreads, speed-ups and comparisons over fetched rows (plain Python, exact).

The store fetches the tok/s and counters of each cell with one indexed query and does the
arithmetic here, so SQLite and PostgreSQL give identical answers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from statistics import median
from typing import Any

from specfleet.store.rows import CellKey, CellRow, CompareRow, SpeedupRow

ARM_ORDER = {"plain": 0, "auto": 1, "graded": 2, "gated": 3, "fixed": 4}
COUNTERS = (
    "generated_tokens", "rounds", "drafted_rounds", "paused_rounds", "proposed", "accepted",
    "shadow_confirmations", "loop_share",
)


def spread(values: Sequence[float]) -> float:
    """(max - min) / median; 0 for one value or a zero median."""
    mid = median(values)
    return (max(values) - min(values)) / mid if mid else 0.0


def cell_sort_key(key: CellKey) -> tuple:
    return (key.host, key.engine, key.device, key.model, key.prompt,
            ARM_ORDER.get(key.arm, 99), key.arm)


def group_cells(rows: Iterable[Any]) -> dict[CellKey, list[Any]]:
    """Group fetched rows (with host..arm attributes, prompt as `prompt_name`) by cell."""
    groups: dict[CellKey, list[Any]] = defaultdict(list)
    for row in rows:
        key = CellKey(row.host, row.engine, row.device, row.model, row.prompt_name, row.arm)
        groups[key].append(row)
    return groups


def _median_of(rows: list[Any], name: str) -> float:
    present = [getattr(r, name) for r in rows if getattr(r, name) is not None]
    return float(median(present)) if present else 0.0


def cell_rows(rows: Iterable[Any]) -> list[CellRow]:
    """One CellRow per cell, sorted by target, model, prompt and arm (plain first)."""
    out = []
    for key, group in sorted(group_cells(rows).items(), key=lambda kv: cell_sort_key(kv[0])):
        tps = [r.tok_per_s for r in group]
        counters = {f"median_{name}": _median_of(group, name) for name in COUNTERS}
        out.append(CellRow(
            **vars(key), n=len(tps), median_tok_per_s=float(median(tps)),
            min_tok_per_s=min(tps), max_tok_per_s=max(tps), spread=spread(tps),
            noisy_count=sum(1 for r in group if r.noisy), **counters,
        ))
    return out


def speedup_rows(cells: list[CellRow]) -> list[SpeedupRow]:
    """Each arm's median over plain's median in the same (target, model, prompt)."""
    plain = {_base(c): c for c in cells if c.arm == "plain"}
    out = []
    for cell in cells:
        ref = plain.get(_base(cell))
        ratio = cell.median_tok_per_s / ref.median_tok_per_s if ref and ref.median_tok_per_s else None
        floor = ref.spread if ref else None
        out.append(SpeedupRow(
            host=cell.host, engine=cell.engine, device=cell.device, model=cell.model,
            prompt=cell.prompt, arm=cell.arm, n=cell.n, median_tok_per_s=cell.median_tok_per_s,
            spread=cell.spread, plain_n=ref.n if ref else 0,
            plain_median_tok_per_s=ref.median_tok_per_s if ref else None, speedup=ratio,
            noise_floor=floor,
            beyond_noise=None if ratio is None or floor is None else abs(ratio - 1.0) > floor,
            noisy_count=cell.noisy_count,
        ))
    return out


def _base(cell: CellRow) -> tuple:
    return (cell.host, cell.engine, cell.device, cell.model, cell.prompt)


def compare_rows(cells_a: list[CellRow], cells_b: list[CellRow]) -> list[CompareRow]:
    """Cells of two matrices side by side; a regression is b slower beyond either spread."""
    by_a = {_key(c): c for c in cells_a}
    by_b = {_key(c): c for c in cells_b}
    out = []
    for key in sorted(set(by_a) | set(by_b), key=cell_sort_key):
        a, b = by_a.get(key), by_b.get(key)
        ratio = b.median_tok_per_s / a.median_tok_per_s if a and b and a.median_tok_per_s else None
        tolerance = max(a.spread, b.spread) if a and b else 0.0
        out.append(CompareRow(
            **vars(key), n_a=a.n if a else 0, n_b=b.n if b else 0,
            median_a=a.median_tok_per_s if a else None,
            median_b=b.median_tok_per_s if b else None,
            spread_a=a.spread if a else None, spread_b=b.spread if b else None,
            ratio=ratio, regression=ratio is not None and ratio < 1.0 - tolerance,
        ))
    return out


def _key(cell: CellRow) -> CellKey:
    return CellKey(cell.host, cell.engine, cell.device, cell.model, cell.prompt, cell.arm)
