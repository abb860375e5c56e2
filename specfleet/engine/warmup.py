"""Verify-width warm-up (spec 2.10): run every verify width once before timing.

The first forward at a new width builds or traces kernels; a reply timed without this
warm-up pays that inside its first drafted rounds. Also exported from `specfleet.engine.loop`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from specfleet.engine.runners.base import Runner


def warm_up_verify_widths(runner: Runner, prompt: Sequence[int], max_draft: int) -> float:
    """Run every verify width once and roll it back (spec 2.10).

    Args:
        runner: the model; its caches are reset and end at the prompt's length.
        prompt: the prompt to prefill (not empty).
        max_draft: widths 2..max_draft+1 are executed.

    Returns:
        Seconds spent.
    """
    if not prompt:
        raise ValueError("the warm-up prompt is empty")
    start = time.perf_counter()
    runner.reset()
    runner.read_tokens(runner.argmax(runner.prefill(prompt)))
    last = prompt[-1]
    for width in range(2, max_draft + 2):
        runner.read_tokens(runner.argmax(runner.forward([last] * width)))
        runner.trim(width)
    runner.clear_allocator_cache()
    return time.perf_counter() - start
