"""The strictly sequential reference decoder (docs/engine.md, "Proof").

One forward per prompt token, then one per generated token, each token sampled on the host
against the full history. Tests and parity forensics compare `generate` against it; it is
also exported from `specfleet.engine.loop`.
"""

from __future__ import annotations

from collections.abc import Sequence

from specfleet.engine.runners.base import Runner
from specfleet.engine.sampling import HostSampler, SamplerConfig
from specfleet.engine.stats import loop_guard_fires


def sequential_reference(
    runner: Runner,
    prompt: Sequence[int],
    max_tokens: int,
    sampler: SamplerConfig,
    loop_guard: tuple[int, int, int] | None = None,
) -> list[int]:
    """Strictly sequential decoding: one forward per prompt token, then one per token.

    Every token is sampled on the host against the full history (prompt + emitted).

    Args:
        runner: the model; reset first.
        prompt: prompt token ids (not empty).
        max_tokens: most tokens to emit.
        sampler: the sampler (its seed gives the same draws as `generate`).
        loop_guard: (min_period, max_period, repeats), as in `generate`.

    Returns:
        The emitted tokens (EOS excluded).
    """
    if not prompt:
        raise ValueError("the prompt is empty")
    host = HostSampler(sampler)
    runner.reset()
    history = list(prompt)
    generated: list[int] = []
    for token in prompt:
        logits = runner.forward([token])
    while len(generated) < max_tokens:
        token = host.sample(runner.read_row(logits, 0), history)
        if token in runner.eos_ids:
            break
        history.append(token)
        generated.append(token)
        if loop_guard is not None and loop_guard_fires(generated, *loop_guard):
            break
        if len(generated) < max_tokens:
            logits = runner.forward([token])
    return generated
