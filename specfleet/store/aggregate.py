"""Medians, spreads, speed-ups and comparisons over fetched rows (plain Python, exact).

The store fetches the tok/s and counters of each cell with one indexed query and does the
arithmetic here, so SQLite and PostgreSQL give identical answers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from specfleet.jobs.run import ARMS
from specfleet.store.rows import CellKey, CellRow, CompareRow, SpeedupRow

ARM_ORDER = {arm: i for i, arm in enumerate(ARMS)}
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


def group_cells(rows: Iterable[Sequence[Any]]) -> dict[CellKey, list[Sequence[Any]]]:
    """Group fetched tuples `(host, engine, device, model, prompt, arm, tok_per_s, noisy,
    *COUNTERS)` by cell."""
    groups: dict[tuple, list[Sequence[Any]]] = defaultdict(list)
    for row in rows:
        groups[tuple(row[:6])].append(row)
    return {CellKey(*key): group for key, group in groups.items()}


def _median_at(rows: list[Sequence[Any]], index: int) -> float:
    present = [r[index] for r in rows if r[index] is not None]
    return float(median(present)) if present else 0.0


@dataclass(frozen=True)
class Rates:
    """The tok/s side of a cell: enough for speed-ups and comparisons."""

    host: str
    engine: str
    device: str
    model: str
    prompt: str
    arm: str
    n: int
    median_tok_per_s: float
    min_tok_per_s: float
    max_tok_per_s: float
    spread: float
    noisy_count: int


def cell_rates(rows: Iterable[Sequence[Any]]) -> list[Rates]:
    """Rates per cell from `(host, engine, device, model, prompt, arm, tok_per_s, noisy)`
    tuples (more columns may follow), sorted like `cell_rows`."""
    out = []
    for key, group in sorted(group_cells(rows).items(), key=lambda kv: cell_sort_key(kv[0])):
        tps = [r[6] for r in group]
        mid = float(median(tps))
        out.append(Rates(
            *vars(key).values(), n=len(tps), median_tok_per_s=mid, min_tok_per_s=min(tps),
            max_tok_per_s=max(tps), spread=(max(tps) - min(tps)) / mid if mid else 0.0,
            noisy_count=sum(1 for r in group if r[7]),
        ))
    return out


def cell_rows(rows: Iterable[Sequence[Any]]) -> list[CellRow]:
    """One CellRow per cell, sorted by target, model, prompt and arm (plain first)."""
    rows = list(rows)
    groups = group_cells(rows)
    out = []
    for rates in cell_rates(rows):
        group = groups[CellKey(rates.host, rates.engine, rates.device, rates.model, rates.prompt,
                               rates.arm)]
        counters = {f"median_{name}": _median_at(group, 8 + i) for i, name in enumerate(COUNTERS)}
        out.append(CellRow(**vars(rates), **counters))
    return out


def speedup_rows(cells: Sequence[Rates | CellRow]) -> list[SpeedupRow]:
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


def _base(cell: Rates | CellRow) -> tuple:
    return (cell.host, cell.engine, cell.device, cell.model, cell.prompt)


def compare_rows(
    cells_a: Sequence[Rates | CellRow], cells_b: Sequence[Rates | CellRow]
) -> list[CompareRow]:
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


def _key(cell: Rates | CellRow) -> CellKey:
    return CellKey(cell.host, cell.engine, cell.device, cell.model, cell.prompt, cell.arm)
