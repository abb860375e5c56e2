"""Fill a `MatrixView` from the store's runs with `jobs/summarize.py`'s statistics (cell
medians and spreads, speed-ups and noise verdicts, loop flags, parity, headlines)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from specfleet.jobs import summarize
from specfleet.jobs.rows import to_row
from specfleet.report.view import PLAIN, CellView, Counters, MatrixView, ordered

Key = tuple[str, str, str, str]  # target label, model, prompt, arm


def target_label(row) -> str:
    return f"{row.host}/{row.engine}/{row.device}"


def load_matrix(store, matrix_id: str):
    """The matrix row; an unknown id raises the store's one-line `UnknownMatrix` (a
    `UserError`)."""
    return store.get_matrix(matrix_id)


def done_runs(store, matrix_id: str) -> list:
    """The matrix's `done` runs in plan order."""
    return sorted(store.runs(matrix=matrix_id, status="done"), key=lambda r: r.plan_order)


def group_runs(runs: Iterable) -> dict[Key, list]:
    """Runs by cell, each cell's runs ordered by repeat."""
    cells: dict[Key, list] = defaultdict(list)
    for run in runs:
        cells[(target_label(run), run.model, run.prompt_name, run.arm)].append(run)
    for group in cells.values():
        group.sort(key=lambda r: r.repeat)
    return dict(cells)


def counters_of(counters: Counters | None) -> Counters:
    """summarize's counters of the first done repetition (empty when there is none)."""
    return counters if counters is not None else Counters()


def parity_of(run, plain) -> tuple[str | None, int | None, int | None]:
    """(verdict, token index, char index) of one arm run against plain's."""
    if plain is None or run.arm == PLAIN:
        return None, None, None
    verdict = summarize.compare_replies(to_row(plain), to_row(run))
    if verdict.status == "identical":
        return "identical", None, None
    return "diverged", verdict.token_index, verdict.char_index


def cell_view(stats, speedup, parity, plain=None) -> CellView:
    """One cell from summarize's statistics, speed-up and parity verdict (None: none), and
    its plain partner's statistics (a throttled plain run marks the speed-up too)."""
    key = stats.key
    diverged = parity is not None and parity.status == "diverged"
    return CellView(
        target=key.target, model=key.model, prompt=key.prompt, arm=key.arm,
        rates=stats.values, median_tok_per_s=stats.median_tok_per_s or 0.0,
        spread=stats.spread or 0.0,
        speedup=speedup.ratio if speedup else None,
        noise_floor=speedup.noise_floor if speedup else None,
        within_noise=bool(speedup and speedup.verdict == "within noise"),
        no_floor_n=_no_floor_n(stats, speedup),
        spread_flag=stats.spread_flag,
        loop=speedup.looping if speedup else stats.looping,
        loop_share=stats.loop_share,
        parity=None if parity is None or parity.status == "missing" else
        ("diverged" if diverged else "identical"),
        diverge_token=parity.token_index if diverged else None,
        diverge_char=parity.char_index if diverged else None,
        counters=counters_of(stats.counters),
        noisy_runs=stats.noisy_runs,
        throttled_runs=stats.throttled_runs,
        throttled=bool(stats.throttled_runs or (plain is not None and plain.throttled_runs)),
    )


def _no_floor_n(stats, speedup) -> int | None:
    n = speedup.n if speedup is not None else stats.n
    return n if n < summarize.MIN_REPEATS else None


def view_of_runs(matrix_id: str, name: str, runs: list) -> MatrixView:
    """A `MatrixView` of a matrix's runs (plan order gives the order of the axes)."""
    rows = summarize.to_rows(runs)
    stats = [s for s in summarize.cell_stats(rows) if s.n]
    ups = summarize.speedups(stats)
    by_up = {u.key: u for u in ups}
    by_parity = {v.key: v for v in summarize.parity_verdicts(rows)}
    by_key = {s.key: s for s in stats}
    cells = tuple(cell_view(s, by_up.get(s.key), by_parity.get(s.key),
                            by_key.get(s.key.with_arm(PLAIN))) for s in stats)
    done = [r for r in runs if r.status == "done"]
    arms = ordered(r.arm for r in done)
    if PLAIN in arms:
        arms = (PLAIN, *(a for a in arms if a != PLAIN))
    return MatrixView(
        matrix_id=matrix_id,
        name=name,
        targets=ordered(target_label(r) for r in done),
        models=ordered(r.model for r in done),
        prompts=ordered(r.prompt_name for r in done),
        arms=arms,
        cells=cells,
        headlines=tuple(summarize.headline(ups)),
    )


def build_view(store, matrix_id: str) -> MatrixView:
    """The `MatrixView` of a stored matrix (its `done` runs).

    Raises:
        UserError: no matrix with this id.
    """
    matrix = load_matrix(store, matrix_id)
    return view_of_runs(matrix_id, matrix.name, done_runs(store, matrix_id))
