"""Verify-width warm-up: run each verify width once before timing, once per loaded model.

The first forward at a new width builds or traces kernels; a reply timed without this
warm-up pays that inside its first drafted rounds. Kernels depend on the width, not on what
is cached, so the warm-up runs on a few prompt tokens: a full-prompt prefill here cost as much
as the reply's own prefill (63 s of a `generate -n 40` on MLX's CPU backend, where prefill
runs at ~4-10 tok/s). Also exported from `specfleet.engine.loop`.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence

from specfleet.engine.runners.base import Runner

# Tokens of context the widths run over: enough for a real attention pass, cheap everywhere.
WARM_CONTEXT_TOKENS = 4

# Widths already run per loaded model in this process (a cache of loaded models' state).
_warm_widths: weakref.WeakKeyDictionary[Runner, set[int]] = weakref.WeakKeyDictionary()


def verify_widths(max_draft: int) -> range:
    """The verify widths prompt lookup uses with `max_draft`: 2..max_draft+1."""
    return range(2, max_draft + 2)


def cold_widths(runner: Runner, max_draft: int) -> list[int]:
    """The widths of `max_draft` this loaded model has not run yet in this process."""
    done = _warm_widths.get(runner, set())
    return [width for width in verify_widths(max_draft) if width not in done]


def fitting_draft(max_draft: int, context_tokens: int | None) -> int:
    """`max_draft`, or less where its warm-up would run past a model context of
    `context_tokens` (learned positions, as GPT-2's, fail there): each width keeps one token
    cached, so width w ends at position WARM_CONTEXT_TOKENS + 2w - 3."""
    if context_tokens is None:
        return max_draft
    return max(1, min(max_draft, (context_tokens - WARM_CONTEXT_TOKENS) // 2))


def warm_up_verify_widths(runner: Runner, prompt: Sequence[int], max_draft: int) -> float:
    """Run each cold verify width once over a short prefix of `prompt` and roll it back.

    Args:
        runner: the model; its caches are reset and left empty (`generate` prefills anew).
        prompt: the prompt (not empty); its first `WARM_CONTEXT_TOKENS` tokens are prefilled.
        max_draft: widths 2..max_draft+1 are executed, each once per runner per process
            (`fitting_draft` gives the widest a short context holds).

    Returns:
        Seconds spent; 0.0 when every width was already warm.
    """
    if not prompt:
        raise ValueError("the warm-up prompt is empty")
    runner.reset()
    widths = cold_widths(runner, max_draft)
    if not widths:
        return 0.0
    start = time.perf_counter()
    context = list(prompt[:WARM_CONTEXT_TOKENS])
    runner.read_tokens(runner.argmax(runner.prefill(context)))
    last = context[-1]
    for width in widths:
        runner.read_tokens(runner.argmax(runner.forward([last] * width)))
        runner.rollback(width - 1)  # a verify keeps its first token (Runner.rollback)
    runner.reset()
    runner.clear_allocator_cache()
    _warm_widths.setdefault(runner, set()).update(widths)
    return time.perf_counter() - start
