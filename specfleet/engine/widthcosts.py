"""Per-width verify cost of one runner (docs/engine.md, "Verify cost per width"): how many pipelined steps a verify costs.

Widths are measured interleaved in rotating rounds rather than one width after another, so
warm-up, allocator growth and background load fall on every width alike: each round starts
from a fresh prefill, times half of its pipelined steps, one sample of every width in an
order rotated by one per round, then the other half of the steps. A width's cost is the
median over rounds of (its sync time / that round's pipelined step), reported with the
lowest and highest per-round ratio and n: a range over rounds, not an interval (it holds the
width's true median with probability 1 - 2 / 2^n: 75% at the quick settings' 3 rounds, 98% at 7).

A width falls when, in one pass of `rounds` rounds, its highest ratio lies below the previous
measured width's lowest. A pass in which some width falls is followed by another pass of as
many rounds (`remeasure` of them at most), judged on its own rounds alone: the flags are the
widths the last pass finds falling, so a re-measure confirms a fall, clears one, or finds one
the first pass missed (kernel switches make some real tables fall, spec 7.6 at width 8). The
table itself is over every round of every pass. Judging the pooled rounds instead would only
widen each range: a re-measure could clear a flag but never confirm one, and more rounds
would make the check less sensitive; a pass of fixed size keeps one level throughout.

Backend-neutral: everything goes through the `Runner` protocol, so the same function
measures MLX, torch and the toy runners, and the fleet can store the table per host.
"""

from __future__ import annotations

import bisect
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specfleet.engine.runners.base import Runner

START_TOKEN = 1234
METHOD = "interleaved-rotating-rounds"


# Upper bounds of the settings (each well past any useful table: the defaults are 7, 32, 3):
# a mistyped value is refused, not measured for hours.
MAX_ROUNDS = 1000
MAX_STEPS = 10000
MAX_REPS = 100


@dataclass(frozen=True)
class CalibrationSettings:
    """How long to measure.

    Attributes:
        max_width: widest verify block (33 covers the calibrated policy's 32 proposals).
        prompt_len: positions prefilled at the start of every round.
        rounds: rotating rounds; each gives one ratio per width.
        steps: pipelined steps per round (half before the widths, half after).
        reps: synchronous verifies per width per round (their upper median is the sample).
        remeasure: extra passes of `rounds` rounds while the latest pass finds a width
            falling; each pass is judged on its own rounds.
        every_width: measure every width; False measures widths 1..DENSE_WIDTHS and a sparse
            grid above them (`measured_widths`) and interpolates the widths between.
    """

    max_width: int = 33
    prompt_len: int = 300
    rounds: int = 7
    steps: int = 32
    reps: int = 3
    remeasure: int = 1
    every_width: bool = True

    def validate(self) -> CalibrationSettings:
        for name in ("max_width", "prompt_len", "rounds", "steps", "reps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.steps < 2:
            raise ValueError(f"steps must be >= 2 (half before, half after), got {self.steps}")
        for name, most in (("rounds", MAX_ROUNDS), ("steps", MAX_STEPS), ("reps", MAX_REPS)):
            if getattr(self, name) > most:
                raise ValueError(f"{name} must be <= {most}, got {getattr(self, name)}")
        if self.remeasure < 0:
            raise ValueError(f"remeasure must be >= 0, got {self.remeasure}")
        return self


# `calibrate --quick` and a worker's on-demand table: the sparse grid keeps it near 20 s on
# the bundled model here (measuring all 33 widths took 23-39 s on torch).
QUICK = CalibrationSettings(prompt_len=128, rounds=3, steps=12, reps=1, remeasure=1,
                            every_width=False)

# Every width up to this is measured; above it a grid 1.5x apart (the widest always), with
# the widths between interpolated: a verify's cost grows smoothly with its width there.
DENSE_WIDTHS = 8
GRID_FACTOR = 1.5


def measured_widths(max_width: int, every_width: bool = True) -> list[int]:
    """The widths a calibration times: all of 1..max_width, or 1..DENSE_WIDTHS then a grid
    GRID_FACTOR apart ending at max_width (33 -> 1..8, 12, 18, 27, 33)."""
    if every_width or max_width <= DENSE_WIDTHS:
        return list(range(1, max_width + 1))
    widths = list(range(1, DENSE_WIDTHS + 1))
    width = DENSE_WIDTHS
    while (width := math.ceil(width * GRID_FACTOR)) < max_width:
        widths.append(width)
    return [*widths, max_width]


def interpolated(widths: Sequence[int], values: Sequence[float], max_width: int
                 ) -> tuple[float, ...]:
    """`values` at the measured `widths`, linearly interpolated to every width 1..max_width."""
    out = []
    for width in range(1, max_width + 1):
        j = bisect.bisect_left(widths, width)
        if widths[j] == width:
            out.append(values[j])
            continue
        w0, w1, v0, v1 = widths[j - 1], widths[j], values[j - 1], values[j]
        out.append(v0 + (v1 - v0) * (width - w0) / (w1 - w0))
    return tuple(out)


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
        ratio_lo: lowest per-round ratio per width (a range over rounds, not an interval).
        ratio_hi: highest per-round ratio per width.
        n: rounds behind each ratio (every pass's).
        flagged: widths the last pass found falling on its own rounds (`falling`).
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
            f"{'width':>5} {'sync ms':>10} {'ratio':>7} {'min':>7} {'max':>7}",
        ]
        for i, width in enumerate(self.widths):
            flag = "  not monotone" if width in self.flagged else ""
            lines.append(
                f"{width:>5} {self.sync_ms[i]:>10.3f} {self.ratio[i]:>7.2f} "
                f"{self.ratio_lo[i]:>7.2f} {self.ratio_hi[i]:>7.2f}{flag}"
            )
        lines.append(f"ratio: median over the {self.n} rounds; min, max: its lowest and highest "
                     "round (a range, not an interval)")
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


def non_monotone(
    lo: Sequence[float], hi: Sequence[float], widths: Sequence[int] | None = None
) -> tuple[int, ...]:
    """Widths whose highest ratio is below the previous measured width's lowest (`widths`:
    the measured widths `lo` and `hi` belong to; default 1..len(lo))."""
    named = widths if widths is not None else range(1, len(lo) + 1)
    return tuple(named[i] for i in range(1, len(lo)) if hi[i] < lo[i - 1])


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
    """One synchronous verify; rolling back all but the head grows the cache by one.

    The rollback is outside the timing: a trim costs nothing measurable, and a re-feed (a
    model with recurrent layers) is a forward priced by the table itself."""
    start_s = clock()
    runner.read_tokens(runner.argmax(runner.forward(block)))  # the one host read
    elapsed = clock() - start_s
    runner.rollback(len(block) - 1)
    return elapsed


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
    widths = measured_widths(settings.max_width, settings.every_width)
    for width in rotated(widths, round_index):
        samples = [
            _sync_s(runner, synthetic_block(round_index * settings.reps + r, width,
                                            runner.vocab_size), clock)
            for r in range(settings.reps)
        ]
        sync_s[width] = upper_median(samples)
    step_s += _pipelined_s(runner, settings.steps - first_half, clock)
    return step_s / settings.steps, sync_s


Rounds = list[tuple[float, dict[int, float]]]  # (seconds per pipelined step, {width: sync s})


def _columns(settings: CalibrationSettings, rounds: Rounds) -> list[tuple[float, ...]]:
    """Per measured width, its ratio in each of `rounds`."""
    widths = measured_widths(settings.max_width, settings.every_width)
    per_round = [[sync[w] / step if step > 0 else 0.0 for w in widths] for step, sync in rounds]
    return list(zip(*per_round, strict=True))


def falling(settings: CalibrationSettings, rounds: Rounds) -> tuple[int, ...]:
    """The measured widths `non_monotone` over `rounds` alone: each one's highest ratio in
    them below the previous measured width's lowest. Called on one pass's rounds, never on
    rounds pooled over passes (whose ranges only widen: a flag could never be confirmed)."""
    columns = _columns(settings, rounds)
    return non_monotone([min(c) for c in columns], [max(c) for c in columns],
                        measured_widths(settings.max_width, settings.every_width))


def _table(
    runner: Runner, settings: CalibrationSettings, rounds: Rounds, flagged: tuple[int, ...]
) -> WidthCosts:
    widths = measured_widths(settings.max_width, settings.every_width)
    columns = _columns(settings, rounds)
    lo = [min(c) for c in columns]
    hi = [max(c) for c in columns]

    def every(values: Sequence[float]) -> tuple[float, ...]:
        return interpolated(widths, values, settings.max_width)

    dense = len(widths) == settings.max_width
    return WidthCosts(
        engine=runner.engine,
        device=runner.device,
        prompt_len=settings.prompt_len,
        pipelined_ms=statistics.median(step for step, _ in rounds) * 1000.0,
        sync_ms=every([statistics.median(s[w] for _, s in rounds) * 1000.0 for w in widths]),
        ratio=every([statistics.median(c) for c in columns]),
        ratio_lo=every(lo),
        ratio_hi=every(hi),
        n=len(rounds),
        flagged=flagged,
        method=METHOD if dense else f"{METHOD}, widths {_ranges(settings)} measured, the rest "
                                     "interpolated",
    )


def _ranges(settings: CalibrationSettings) -> str:
    """The measured widths as text: `1..33`, or `1..8, 12, 18, 27, 33` on the sparse grid."""
    widths = measured_widths(settings.max_width, settings.every_width)
    if len(widths) == settings.max_width:
        return f"1..{settings.max_width}"
    return ", ".join([f"1..{DENSE_WIDTHS}", *(str(w) for w in widths[DENSE_WIDTHS:])])


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
    rounds: Rounds = []
    flagged: tuple[int, ...] = ()
    for passes in range(1, settings.remeasure + 2):
        fresh: Rounds = []
        for _ in range(settings.rounds):
            fresh.append(_round(runner, prompt, settings, len(rounds) + len(fresh), clock))
            if progress is not None:
                progress(f"calibrate: round {len(rounds) + len(fresh)}/"
                         f"{settings.rounds * passes} (widths {_ranges(settings)}), "
                         f"{time.perf_counter() - started_s:.1f} s")
        rounds += fresh
        flagged = falling(settings, fresh)  # this pass's own rounds (module docstring)
        if not flagged or passes > settings.remeasure:
            break
        if progress is not None:
            progress(f"calibrate: widths {list(flagged)} not monotone in this pass; "
                     "re-measuring (the next pass is judged on its own)")
    runner.clear_allocator_cache()
    return _table(runner, settings, rounds, flagged)
