"""What a matrix looks like to a reader: one frozen `CellView` per (target, model, prompt, arm),
and `view_of_runs`, which fills them from stored runs with `cells.py`'s statistics.

Every renderer (terminal tables, markdown record, plots, `results --cells`, the web view)
reads only these dataclasses, so the numbers are computed in one place and every output
format shows the same ones.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from specfleet.stats import cells as cellstats
from specfleet.stats.cells import Headline, PeerHeadline
from specfleet.stats.interval import MIN_REPEATS
from specfleet.stats.runs import (
    CellKey,
    CellValues,
    Counters,
    Rate,
    target_label,
    to_rows,
)

PLAIN = "plain"


@dataclass(frozen=True)
class CellView:
    """One cell of a matrix on one target, ready to print.

    Attributes:
        target: "host/engine/device".
        rates: whole-call tok/s of each done repetition, in repeat order.
        median_tok_per_s: median of `rates`.
        spread: (max - min) / median of `rates`.
        speedup: median arm tok/s over median plain tok/s (None for plain or no plain).
        verdict: "gain", "loss", "within noise" or "no verdict" (`stats/interval.py`: the
            90% interval on the speed-up against 1); None for plain or without plain.
        speedup_low / speedup_high: that interval; speedup_coverage: its exact coverage
            (None under 3 repeats a side).
        no_verdict_n: the repeats of the smaller side (arm or plain) when under 3: no
            verdict (`n=1, no verdict`); None otherwise.
        spread_flag: spread above `SPREAD_FLAG`.
        loop: replies loop (loop share above the threshold); kept out of headlines.
        parity: "identical", "diverged" or None (nothing to compare): an arm's every
            repetition against plain's first, plain's against its own first
            (`cells.parity_verdicts`); a diverged arm, a peer's aside, is kept out of headlines.
        diverge_token / diverge_char / diverge_repeat: where the first repetition that
            differs diverges (token, character) and which repetition it is.
        parity_replies: the replies of this cell compared.
        noisy_runs: repetitions the worker flagged as run on a busy host.
        throttled_runs: repetitions the worker flagged as run on a throttled host.
        throttled: a run of this cell, or of its plain partner, ran throttled (marked
            THROTTLED like LOOP: the speed-up may not hold on a host at full speed).
        shown: the first done repetition's values a cell shows as they are (the `RunResult`
            fields marked `jobs.run.CELL_VALUE`; its records list them after `throttled`).
    """

    target: str
    model: str
    prompt: str
    arm: str
    rates: tuple[float, ...]
    median_tok_per_s: float
    spread: float
    speedup: float | None = None
    verdict: str | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    speedup_coverage: float | None = None
    no_verdict_n: int | None = None
    spread_flag: bool = False
    loop: bool = False
    loop_share: float = 0.0
    parity: str | None = None
    diverge_token: int | None = None
    diverge_char: int | None = None
    diverge_repeat: int | None = None
    parity_replies: int = 0
    counters: Counters = field(default_factory=Counters)
    noisy_runs: int = 0
    median_decode_tok_per_s: float = 0.0  # generation after the first token
    median_prompt_tok_per_s: float = 0.0  # prefill
    throttled_runs: int = 0
    throttled: bool = False
    shown: CellValues = field(default_factory=CellValues)

    @property
    def n(self) -> int:
        return len(self.rates)


@dataclass(frozen=True)
class MatrixView:
    """All cells of one matrix, with the axes in the order the spec listed them."""

    matrix_id: str
    name: str
    targets: tuple[str, ...]
    models: tuple[str, ...]
    prompts: tuple[str, ...]
    arms: tuple[str, ...]
    cells: tuple[CellView, ...]
    headlines: tuple[Headline, ...] = ()
    rate: str = "whole"  # which tok/s `rates`, medians and speed-ups read: whole or decode
    versus_peers: tuple[PeerHeadline, ...] = ()  # per target: our best arm over the best peer

    def cell(self, target: str, model: str, prompt: str, arm: str) -> CellView | None:
        """The cell at these coordinates, or None when nothing was measured there."""
        return self._by_key.get(CellKey(target, model, prompt, arm))

    @functools.cached_property
    def _by_key(self) -> dict[CellKey, CellView]:
        # Tables look up every cell of every grid: a dict, not a scan (big matrices).
        return {CellKey(c.target, c.model, c.prompt, c.arm): c for c in self.cells}

    @property
    def lookup_arms(self) -> tuple[str, ...]:
        return tuple(arm for arm in self.arms if arm != PLAIN)


def ordered(values) -> tuple[str, ...]:
    """Distinct values in first-seen order."""
    return tuple(dict.fromkeys(values))


def group_runs(runs: Iterable) -> dict[CellKey, list]:
    """Runs as they came (not `Row`s) by cell, cells in first-seen order, each cell's runs
    ordered by repeat."""
    cells: dict[CellKey, list] = defaultdict(list)
    for run in runs:
        cells[CellKey(target_label(run), run.model, run.prompt_name, run.arm)].append(run)
    for group in cells.values():
        group.sort(key=lambda r: r.repeat)
    return dict(cells)


def counters_of(counters: Counters | None) -> Counters:
    """The counters of the first done repetition (empty when there is none)."""
    return counters if counters is not None else Counters()


def cell_view(stats, speedup, parity, plain=None) -> CellView:
    """One cell from `cells.py`'s statistics, speed-up and parity verdict (None: none), and
    its plain partner's statistics (a throttled plain run marks the speed-up too)."""
    key = stats.key
    diverged = parity is not None and parity.status == "diverged"
    interval = speedup.interval if speedup else None
    return CellView(
        target=key.target, model=key.model, prompt=key.prompt, arm=key.arm,
        rates=stats.values, median_tok_per_s=stats.median_tok_per_s or 0.0,
        spread=stats.spread or 0.0,
        speedup=speedup.ratio if speedup else None,
        verdict=speedup.verdict if speedup else None,
        speedup_low=interval.low if interval else None,
        speedup_high=interval.high if interval else None,
        speedup_coverage=interval.coverage if interval else None,
        no_verdict_n=_no_verdict_n(speedup),
        spread_flag=stats.spread_flag,
        loop=speedup.looping if speedup else stats.looping,
        loop_share=stats.loop_share,
        parity=None if parity is None or parity.status == "missing" else
        ("diverged" if diverged else "identical"),
        diverge_token=parity.token_index if diverged else None,
        diverge_char=parity.char_index if diverged else None,
        diverge_repeat=parity.repeat if diverged else None,
        parity_replies=parity.replies if parity is not None else 0,
        counters=counters_of(stats.counters),
        noisy_runs=stats.noisy_runs,
        median_decode_tok_per_s=stats.median_decode_tok_per_s or 0.0,
        median_prompt_tok_per_s=stats.median_prompt_tok_per_s or 0.0,
        throttled_runs=stats.throttled_runs,
        throttled=bool(stats.throttled_runs or (plain is not None and plain.throttled_runs)),
        shown=stats.shown,
    )


def _no_verdict_n(speedup) -> int | None:
    # No speed-up (plain, the baseline, or an arm without plain): no verdict to withhold.
    if speedup is None:
        return None
    return speedup.n if speedup.n < MIN_REPEATS else None


def view_of_runs(matrix_id: str, name: str, runs: list, rate: Rate = "whole") -> MatrixView:
    """A `MatrixView` of a matrix's runs (plan order gives the order of the axes); `rate`
    picks the tok/s its medians and speed-ups read (see `cells.cell_stats`)."""
    rows = to_rows(runs)
    stats = [s for s in cellstats.cell_stats(rows, rate) if s.n]
    verdicts = cellstats.parity_verdicts(rows)
    ups = cellstats.speedups(stats, verdicts)
    by_up = {u.key: u for u in ups}
    by_parity = {v.key: v for v in verdicts}
    by_key = {s.key: s for s in stats}
    cells = tuple(cell_view(s, by_up.get(s.key), by_parity.get(s.key),
                            by_key.get(s.key.with_arm(PLAIN))) for s in stats)
    headlines = cellstats.headline(ups)
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
        headlines=tuple(headlines),
        rate=rate,
        versus_peers=tuple(cellstats.versus_peers(headlines)),
    )
