"""Per-width verify cost of one runner (docs/engine.md, "Verify cost per width"): how many pipelined steps a verify costs.

Backend-neutral: everything goes through the `Runner` protocol, so the same function
measures MLX, torch and the toy runners, and the fleet can store the table per host.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specfleet.engine.runners.base import Runner

START_TOKEN = 1234
DISCARDED_ROUNDS = 5
WARMUP_PASSES = 2
WARMUP_STEPS = 20
WARMUP_ROUNDS = 3


@dataclass(frozen=True)
class WidthCosts:
    """The per-width cost table of one runner.

    Attributes:
        engine: the runner's engine ("mlx", "torch", "toy").
        device: the runner's device.
        prompt_len: cached positions before the timed steps.
        pipelined_ms: one pipelined one-token step (median of runs).
        sync_ms: synchronous verify time for widths 1..max_width (index 0 = width 1).
        ratio: sync_ms / pipelined_ms per width (the cost in pipelined steps).
    """

    engine: str
    device: str
    prompt_len: int
    pipelined_ms: float
    sync_ms: tuple[float, ...]
    ratio: tuple[float, ...]

    @property
    def widths(self) -> range:
        return range(1, len(self.sync_ms) + 1)

    def format_table(self) -> str:
        """The table as text: the pipelined step, then one line per width."""
        lines = [
            f"engine={self.engine} device={self.device} prompt_len={self.prompt_len}",
            f"pipelined step: {self.pipelined_ms:.3f} ms",
            f"{'width':>5} {'sync ms':>10} {'ratio':>7}",
        ]
        for width, sync_ms, ratio in zip(self.widths, self.sync_ms, self.ratio, strict=True):
            lines.append(f"{width:>5} {sync_ms:>10.3f} {ratio:>7.2f}")
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


def _fresh_state(runner: Runner, prompt: Sequence[int]) -> None:
    runner.reset()
    runner.read_tokens(runner.argmax(runner.prefill(prompt)))


def time_pipelined_step(
    runner: Runner, prompt: Sequence[int], steps: int, clock: Callable[[], float]
) -> float:
    """Seconds per pipelined one-token step over `steps` steps from a fresh state.

    Each step is submitted from the previous step's still-unread token, then the previous
    token is read: the host read overlaps the device, as in plain decoding. The last
    token is read inside the timing so every step is complete.
    """
    _fresh_state(runner, prompt)
    current = [START_TOKEN % runner.vocab_size]
    previous = None
    start_s = clock()
    for _ in range(steps):
        token = runner.argmax(runner.forward(current))
        runner.submit(token)
        if previous is not None:
            runner.read_tokens(previous)
        previous = current = token
    if previous is not None:
        runner.read_tokens(previous)
    return (clock() - start_s) / max(steps, 1)


def time_sync_width(
    runner: Runner,
    prompt: Sequence[int],
    width: int,
    rounds: int,
    clock: Callable[[], float],
    discard: int = DISCARDED_ROUNDS,
) -> float:
    """Upper-median seconds of a synchronous width-`width` verify over `rounds` rounds.

    Each round forwards `width` synthetic tokens, reads their argmax to the host and trims
    `width - 1` positions, so the cache grows by one per round like a rejected verify.
    The first `discard` rounds are dropped.
    """
    _fresh_state(runner, prompt)
    times_s: list[float] = []
    for round_index in range(rounds + discard):
        block = synthetic_block(round_index, width, runner.vocab_size)
        start_s = clock()
        runner.read_tokens(runner.argmax(runner.forward(block)))  # the one host read
        runner.trim(width - 1)
        elapsed_s = clock() - start_s
        if round_index >= discard:
            times_s.append(elapsed_s)
    return upper_median(times_s)


def _warm_up(
    runner: Runner, prompt: Sequence[int], max_width: int, clock: Callable[[], float]
) -> None:
    for _ in range(WARMUP_PASSES):
        time_pipelined_step(runner, prompt, WARMUP_STEPS, clock)
        for width in range(1, max_width + 1):
            time_sync_width(runner, prompt, width, WARMUP_ROUNDS, clock, discard=0)


def measure_width_costs(
    runner: Runner,
    max_width: int = 10,
    prompt_len: int = 300,
    runs: int = 5,
    steps: int = 60,
    sync_rounds: int = 40,
    *,
    warm_up: bool = True,
    clock: Callable[[], float] = time.perf_counter,
) -> WidthCosts:
    """Measure the pipelined step and the synchronous verify of widths 1..max_width.

    Args:
        runner: a loaded runner; its caches are reset (and left at an arbitrary length).
        max_width: widest verify block measured.
        prompt_len: length of the fixed prompt prefilled before each measurement.
        runs: pipelined runs; the reported step time is their median.
        steps: pipelined steps per run.
        sync_rounds: timed synchronous rounds per width (5 more are run and discarded).
        warm_up: run two passes of (pipelined 20 steps, widths 1..max_width x 3) first.
        clock: seconds clock (injectable so tests can run on a virtual clock).

    Returns:
        The `WidthCosts` table in milliseconds.
    """
    if max_width < 1 or prompt_len < 1 or runs < 1 or steps < 1 or sync_rounds < 1:
        raise ValueError("max_width, prompt_len, runs, steps and sync_rounds must be >= 1")
    prompt = calibration_prompt(prompt_len, runner.vocab_size)
    if warm_up:
        _warm_up(runner, prompt, max_width, clock)
    step_s = [time_pipelined_step(runner, prompt, steps, clock) for _ in range(runs)]
    pipelined_ms = upper_median(step_s) * 1000.0
    sync_ms = tuple(
        time_sync_width(runner, prompt, width, sync_rounds, clock) * 1000.0
        for width in range(1, max_width + 1)
    )
    runner.clear_allocator_cache()
    return WidthCosts(
        engine=runner.engine,
        device=runner.device,
        prompt_len=prompt_len,
        pipelined_ms=pipelined_ms,
        sync_ms=sync_ms,
        ratio=tuple(ms / pipelined_ms if pipelined_ms > 0 else 0.0 for ms in sync_ms),
    )
