"""What a matrix looks like to a reader: one frozen `CellView` per (target, model, prompt, arm).

The renderers (`tables.py`, `record.py`) read only these dataclasses; `build_view` fills them
from the store's rows and `jobs/summarize.py`'s statistics, so the numbers are computed in one
place and every output format shows the same ones.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from specfleet.jobs.rows import Counters  # one definition of the counters and their ratios
from specfleet.jobs.summarize import LOOP_SHARE_FLAG, SPREAD_FLAG, Headline

__all__ = ["LOOP_SHARE_FLAG", "SPREAD_FLAG", "CellView", "Counters", "MatrixView", "PLAIN"]
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
        noise_floor: plain's spread on the same target, model and prompt.
        within_noise: the speed-up lies inside the noise floor (neither gain nor loss).
        no_floor_n: the repeats of the smaller side (arm or plain) when under 3: no noise
            floor, no verdict (`n=1, no noise floor`); None otherwise.
        spread_flag: spread above `SPREAD_FLAG`.
        loop: replies loop (loop share above the threshold); kept out of headlines.
        parity: "identical", "diverged" or None (plain, or nothing to compare).
        diverge_token / diverge_char: first differing token / character against plain.
        noisy_runs: repetitions the worker flagged as run on a busy host.
        throttled_runs: repetitions the worker flagged as run on a throttled host.
        throttled: a run of this cell, or of its plain partner, ran throttled (marked
            THROTTLED like LOOP: the speed-up may not hold on a host at full speed).
    """

    target: str
    model: str
    prompt: str
    arm: str
    rates: tuple[float, ...]
    median_tok_per_s: float
    spread: float
    speedup: float | None = None
    noise_floor: float | None = None
    within_noise: bool = False
    no_floor_n: int | None = None
    spread_flag: bool = False
    loop: bool = False
    loop_share: float = 0.0
    parity: str | None = None
    diverge_token: int | None = None
    diverge_char: int | None = None
    counters: Counters = field(default_factory=Counters)
    noisy_runs: int = 0
    throttled_runs: int = 0
    throttled: bool = False

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

    def cell(self, target: str, model: str, prompt: str, arm: str) -> CellView | None:
        """The cell at these coordinates, or None when nothing was measured there."""
        return self._by_key.get((target, model, prompt, arm))

    @functools.cached_property
    def _by_key(self) -> dict[tuple[str, str, str, str], CellView]:
        # Tables look up every cell of every grid: a dict, not a scan (big matrices).
        return {(c.target, c.model, c.prompt, c.arm): c for c in self.cells}

    @property
    def lookup_arms(self) -> tuple[str, ...]:
        return tuple(arm for arm in self.arms if arm != PLAIN)


def ordered(values) -> tuple[str, ...]:
    """Distinct values in first-seen order."""
    return tuple(dict.fromkeys(values))
