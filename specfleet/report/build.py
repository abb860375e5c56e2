"""Fill a `MatrixView` from the store: rates and counters from the runs, speed-ups and noise
floors from the store's aggregates, parity against plain's first repetition."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable

from specfleet.engine.forensics import first_divergence
from specfleet.errors import UserError
from specfleet.report.view import PLAIN, SPREAD_FLAG, CellView, Counters, MatrixView, ordered

# A reply whose trailing repeated cycle covers more than this share of its tokens loops
# (issue 7); such cells are marked and kept out of headline speed-ups.
LOOP_SHARE_THRESHOLD = 0.2

Key = tuple[str, str, str, str]  # target label, model, prompt, arm


def target_label(row) -> str:
    return f"{row.host}/{row.engine}/{row.device}"


def load_matrix(store, matrix_id: str):
    """The matrix row, or a one-line UserError naming the unknown id."""
    try:
        matrix = store.get_matrix(matrix_id)
    except UserError:
        raise
    except (KeyError, LookupError):
        matrix = None
    if matrix is None:
        raise UserError(f"matrix {matrix_id!r}: no such matrix in the store (see `matrix list`)")
    return matrix


def done_runs(store, matrix_id: str) -> list:
    """The matrix's `done` runs in plan order."""
    runs = [r for r in store.runs(matrix_id=matrix_id) if r.status == "done"]
    return sorted(runs, key=lambda r: r.plan_order)


def group_runs(runs: Iterable) -> dict[Key, list]:
    """Runs by cell, each cell's runs ordered by repeat."""
    cells: dict[Key, list] = defaultdict(list)
    for run in runs:
        cells[(target_label(run), run.model, run.prompt_name, run.arm)].append(run)
    for group in cells.values():
        group.sort(key=lambda r: r.repeat)
    return dict(cells)


def counters_of(run) -> Counters:
    """Counters of one run with the derived ratios of spec 5 / 10."""
    generated = run.generated_tokens or 0
    rounds, proposed, accepted = run.rounds or 0, run.proposed or 0, run.accepted or 0
    return Counters(
        generated_tokens=generated,
        rounds=rounds,
        drafted_rounds=run.drafted_rounds or 0,
        paused_rounds=run.paused_rounds or 0,
        proposed=proposed,
        accepted=accepted,
        shadow_confirmations=run.shadow_confirmations or 0,
        acceptance_rate=accepted / proposed if proposed else 0.0,
        tokens_per_forward=max(generated - 1, 0) / rounds if rounds else 0.0,
    )


def first_char_divergence(text_a: str, text_b: str) -> int | None:
    """First differing character (or the shorter length); None when equal."""
    return first_divergence(text_a, text_b)


def parity_of(run, plain) -> tuple[str | None, int | None, int | None]:
    """(verdict, token index, char index) of one arm run against plain's."""
    if plain is None or run.arm == PLAIN:
        return None, None, None
    token = first_divergence(run.token_ids or [], plain.token_ids or [])
    char = first_char_divergence(run.output_text or "", plain.output_text or "")
    if token is None and char is None:
        return "identical", None, None
    return "diverged", token, char


def spread_of(rates: list[float]) -> tuple[float, float]:
    """(median, (max - min) / median)."""
    median = statistics.median(rates)
    return median, (max(rates) - min(rates)) / median if median > 0 else 0.0


def cell_view(key: Key, runs: list, plain_runs: list | None) -> CellView:
    """One cell from its runs and plain's runs on the same target, model and prompt."""
    rates = [r.tok_per_s or 0.0 for r in runs]
    median, spread = spread_of(rates)
    loop_share = statistics.median(r.loop_share or 0.0 for r in runs)
    speedup = noise_floor = None
    within = loop = False
    plain_loop = 0.0
    if plain_runs:
        plain_median, noise_floor = spread_of([r.tok_per_s or 0.0 for r in plain_runs])
        plain_loop = statistics.median(r.loop_share or 0.0 for r in plain_runs)
        if key[3] != PLAIN and plain_median > 0:
            speedup = median / plain_median
            within = abs(speedup - 1.0) <= noise_floor
    loop = max(loop_share, plain_loop if key[3] != PLAIN else 0.0) > LOOP_SHARE_THRESHOLD
    parity, token, char = parity_of(runs[0], plain_runs[0] if plain_runs else None)
    return CellView(
        target=key[0], model=key[1], prompt=key[2], arm=key[3], rates=tuple(rates),
        median_tok_per_s=median, spread=spread, speedup=speedup, noise_floor=noise_floor,
        within_noise=within, spread_flag=spread > SPREAD_FLAG, loop=loop, loop_share=loop_share,
        parity=parity, diverge_token=token, diverge_char=char, counters=counters_of(runs[0]),
        noisy_runs=sum(bool(r.noisy) for r in runs),
    )


def view_of_runs(matrix_id: str, name: str, runs: list) -> MatrixView:
    """A `MatrixView` of done runs (plan order gives the order of the axes)."""
    groups = group_runs(runs)
    cells = []
    for key, group in groups.items():
        cells.append(cell_view(key, group, groups.get((*key[:3], PLAIN))))
    arms = ordered(r.arm for r in runs)
    if PLAIN in arms:
        arms = (PLAIN, *(a for a in arms if a != PLAIN))
    return MatrixView(
        matrix_id=matrix_id,
        name=name,
        targets=ordered(target_label(r) for r in runs),
        models=ordered(r.model for r in runs),
        prompts=ordered(r.prompt_name for r in runs),
        arms=arms,
        cells=tuple(cells),
    )


def build_view(store, matrix_id: str) -> MatrixView:
    """The `MatrixView` of a stored matrix (its `done` runs).

    Raises:
        UserError: no matrix with this id.
    """
    matrix = load_matrix(store, matrix_id)
    return view_of_runs(matrix_id, matrix.name, done_runs(store, matrix_id))
