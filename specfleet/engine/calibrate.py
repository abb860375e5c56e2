"""Per-width verify cost of one runner (docs/engine.md, "Verify cost per width"): how many pipelined steps a verify costs.

Widths are measured interleaved in rotating rounds rather than one width after another, so
warm-up, allocator growth and background load fall on every width alike: each round starts
from a fresh prefill, times half of its pipelined steps, one sample of every width in an
order rotated by one per round, then the other half of the steps. A width's cost is the
median over rounds of (its sync time / that round's pipelined step), reported with the
lowest and highest per-round ratio and n. A table in which a width's whole range lies below
the previous width's is re-measured once with as many rounds again; a width that still does
so is flagged (kernel switches make some real tables fall, spec 7.6 at width 8).

Backend-neutral: everything goes through the `Runner` protocol, so the same function
measures MLX, torch and the toy runners, and the fleet can store the table per host.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specfleet.engine.runners.base import Runner

START_TOKEN = 1234
METHOD = "interleaved-rotating-rounds"


@dataclass(frozen=True)
class CalibrationSettings:
    """How long to measure.

    Attributes:
        max_width: widest verify block (33 covers the calibrated policy's 32 proposals).
        prompt_len: positions prefilled at the start of every round.
        rounds: rotating rounds; each gives one ratio per width.
        steps: pipelined steps per round (half before the widths, half after).
        reps: synchronous verifies per width per round (their upper median is the sample).
        remeasure: extra passes of `rounds` rounds while the table is not monotone.
    """

    max_width: int = 33
    prompt_len: int = 300
    rounds: int = 7
    steps: int = 32
    reps: int = 3
    remeasure: int = 1

    def validate(self) -> CalibrationSettings:
        for name in ("max_width", "prompt_len", "rounds", "steps", "reps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.steps < 2:
            raise ValueError(f"steps must be >= 2 (half before, half after), got {self.steps}")
        if self.remeasure < 0:
            raise ValueError(f"remeasure must be >= 0, got {self.remeasure}")
        return self


# `calibrate --quick` and a worker's on-demand table: under 20 s on the bundled model here.
QUICK = CalibrationSettings(prompt_len=128, rounds=3, steps=12, reps=1, remeasure=1)


@dataclass(frozen=True)
class WidthCosts:
    """The per-width cost table of one runner.

    Attributes:
        engine: the runner's engine ("mlx", "torch", "toy").
        device: the runner's device.
        prompt_len: cached positions at the start of each round.
        pipelined_ms: one pipelined one-token step (median over rounds).
        sync_ms: synchronous verify time for widths 1..max_width (index 0 = width 1).
        ratio: median per-round sync / pipelined per width (the cost in pipelined steps).
        ratio_lo: lowest per-round ratio per width.
        ratio_hi: highest per-round ratio per width.
        n: rounds behind each ratio.
        flagged: widths whose whole range lies below the previous width's after re-measuring.
        method: how it was measured.
    """

    engine: str
    device: str
    prompt_len: int
    pipelined_ms: float
    sync_ms: tuple[float, ...]
    ratio: tuple[float, ...]
    ratio_lo: tuple[float, ...] = ()
    ratio_hi: tuple[float, ...] = ()
    n: int = 1
    flagged: tuple[int, ...] = ()
    method: str = METHOD

    @property
    def widths(self) -> range:
        return range(1, len(self.sync_ms) + 1)

    def format_table(self) -> str:
        """The table as text: the pipelined step, then one line per width with its spread."""
        lines = [
            f"engine={self.engine} device={self.device} prompt_len={self.prompt_len} "
            f"n={self.n} method={self.method}",
            f"pipelined step: {self.pipelined_ms:.3f} ms",
            f"{'width':>5} {'sync ms':>10} {'ratio':>7} {'low':>7} {'high':>7}",
        ]
        for i, width in enumerate(self.widths):
            flag = "  not monotone" if width in self.flagged else ""
            lines.append(
                f"{width:>5} {self.sync_ms[i]:>10.3f} {self.ratio[i]:>7.2f} "
                f"{self.ratio_lo[i]:>7.2f} {self.ratio_hi[i]:>7.2f}{flag}"
            )
        return "\n".join(lines)


def calibration_prompt(prompt_len: int, vocab_size: int) -> list[int]:
    """The fixed prompt `1000 + (37 i mod 5000)`, folded into the vocabulary."""
    return [(1000 + (37 * i) % 5000) % vocab_size for i in range(prompt_len)]


def synthetic_block(round_index: int, width: int, vocab_size: int) -> list[int]:
    """The `width` tokens of synchronous round `round_index`: `2000 + ((7 i + 13 j) mod 3000)`."""
    return [(2000 + (7 * round_index + 13 * j) % 3000) % vocab_size for j in range(width)]


def upper_median(values: Sequence[float]) -> float:
    """The sorted element at index len // 2 (the upper median for even counts)."""
    if not values:
        raise ValueError("upper_median of no values")
    return sorted(values)[len(values) // 2]


def rotated(widths: Sequence[int], round_index: int) -> list[int]:
    """The widths in the order round `round_index` measures them (rotated by one per round)."""
    shift = round_index % len(widths)
    return [*widths[shift:], *widths[:shift]]


def non_monotone(lo: Sequence[float], hi: Sequence[float]) -> tuple[int, ...]:
    """Widths (from 2) whose highest ratio is below the previous width's lowest."""
    return tuple(i + 1 for i in range(1, len(lo)) if hi[i] < lo[i - 1])


def _pipelined_s(runner: Runner, steps: int, clock: Callable[[], float]) -> float:
    """Seconds of `steps` pipelined steps: each submitted before the previous token is read."""
    current = [START_TOKEN % runner.vocab_size]
    previous = None
    start_s = clock()
    for _ in range(steps):
        token = runner.argmax(runner.forward(current))
        runner.submit(token)
        if previous is not None:
            runner.read_tokens(previous)
        previous = current = token
    runner.read_tokens(previous)  # the last step completes inside the timing
    return clock() - start_s


def _sync_s(runner: Runner, block: list[int], clock: Callable[[], float]) -> float:
    """One synchronous verify; trimming all but the head grows the cache by one."""
    start_s = clock()
    runner.read_tokens(runner.argmax(runner.forward(block)))  # the one host read
    runner.trim(len(block) - 1)
    return clock() - start_s


def _round(
    runner: Runner, prompt: Sequence[int], settings: CalibrationSettings, round_index: int,
    clock: Callable[[], float],
) -> tuple[float, dict[int, float]]:
    """(seconds per pipelined step, {width: upper-median sync seconds}) of one round."""
    runner.reset()
    runner.read_tokens(runner.argmax(runner.prefill(prompt)))
    first_half = settings.steps // 2
    step_s = _pipelined_s(runner, first_half, clock)
    sync_s: dict[int, float] = {}
    widths = list(range(1, settings.max_width + 1))
    for width in rotated(widths, round_index):
        samples = [
            _sync_s(runner, synthetic_block(round_index * settings.reps + r, width,
                                            runner.vocab_size), clock)
            for r in range(settings.reps)
        ]
        sync_s[width] = upper_median(samples)
    step_s += _pipelined_s(runner, settings.steps - first_half, clock)
    return step_s / settings.steps, sync_s


def _table(
    runner: Runner, settings: CalibrationSettings, rounds: list[tuple[float, dict[int, float]]]
) -> WidthCosts:
    widths = range(1, settings.max_width + 1)
    per_round = [[sync[w] / step if step > 0 else 0.0 for w in widths] for step, sync in rounds]
    columns = list(zip(*per_round, strict=True))
    lo = tuple(min(c) for c in columns)
    hi = tuple(max(c) for c in columns)
    return WidthCosts(
        engine=runner.engine,
        device=runner.device,
        prompt_len=settings.prompt_len,
        pipelined_ms=statistics.median(step for step, _ in rounds) * 1000.0,
        sync_ms=tuple(statistics.median(s[w] for _, s in rounds) * 1000.0 for w in widths),
        ratio=tuple(statistics.median(c) for c in columns),
        ratio_lo=lo,
        ratio_hi=hi,
        n=len(rounds),
        flagged=non_monotone(lo, hi),
    )


def measure_width_costs(
    runner: Runner,
    settings: CalibrationSettings = CalibrationSettings(),  # noqa: B008 - frozen
    *,
    warm_up: bool = True,
    clock: Callable[[], float] = time.perf_counter,
    progress: Callable[[str], None] | None = None,
) -> WidthCosts:
    """Measure the pipelined step and the synchronous verify of widths 1..max_width.

    Args:
        runner: a loaded runner; its caches are reset (and left at an arbitrary length).
        settings: widths, rounds, steps and repetitions.
        warm_up: run one untimed round first (every width's first-use cost).
        clock: seconds clock (injectable so tests can run on a virtual clock).
        progress: called with one line after every round.

    Returns:
        The `WidthCosts` table in milliseconds, with each ratio's spread and n.
    """
    settings.validate()
    prompt = calibration_prompt(settings.prompt_len, runner.vocab_size)
    started_s = time.perf_counter()
    if warm_up:
        _round(runner, prompt, settings, 0, clock)
    rounds: list[tuple[float, dict[int, float]]] = []
    passes = 1
    while True:
        for _ in range(settings.rounds):
            rounds.append(_round(runner, prompt, settings, len(rounds), clock))
            if progress is not None:
                progress(f"calibrate: round {len(rounds)}/{settings.rounds * passes} "
                         f"(widths 1..{settings.max_width}), "
                         f"{time.perf_counter() - started_s:.1f} s")
        table = _table(runner, settings, rounds)
        if not table.flagged or passes > settings.remeasure:
            break
        passes += 1
        if progress is not None:
            progress(f"calibrate: widths {list(table.flagged)} not monotone; re-measuring")
    runner.clear_allocator_cache()
    return table
