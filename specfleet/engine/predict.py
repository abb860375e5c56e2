"""Replay a greedy reply under any policy and price its rounds with a width-cost table.

For a greedy run the emitted tokens are fixed, so the real round loop can be driven by a
runner that predicts exactly the known reply (`ScriptModel` over prompt + reply, an EOS
after it when the run stopped on one). The loop then makes the same lookups, budgets,
pipelining decisions and trims as the live run did, and its counters are exact. The cost
of a trace in pipelined steps: a pipelined step 1, a synchronous one-token step
`cost(1)`, a verify of width w `cost(w)`, a drain 0 (its step was counted when submitted),
and a rollback that fed r tokens again `cost(r)` (models with recurrent layers: replay them
with `refeeds=True`). On a host whose steps do not overlap it (`pipeline=False`: torch on a
CPU) the loop never pipelines, and a one-token step there is the table's unit itself, so it
costs the cheaper of 1 and `cost(1)`, as the oracle prices it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specfleet.engine.calibrated import width_cost
from specfleet.engine.config import PromptLookupConfig
from specfleet.engine.loop import Generation, generate
from specfleet.engine.runners.toy import ScriptModel
from specfleet.engine.stats import RoundTrace


@dataclass(frozen=True)
class Replayed:
    """One policy replayed on one reply.

    Attributes:
        generation: the loop's result (tokens, counters, trace).
        cost_steps: the decode loop's cost in pipelined plain steps under the table.
    """

    generation: Generation
    cost_steps: float


class ReplayDiffers(ValueError):
    """The loop over a stored reply emitted another one: the reply, its stop reason and its
    token limit do not belong together (not a greedy run, or a stored value edited)."""


def replay_runner(
    prompt: Sequence[int], reply: Sequence[int], ended_on_eos: bool, refeeds: bool = False
) -> ScriptModel:
    """A runner whose greedy output is `reply` (then EOS when the run ended on one); with
    `refeeds`, its rollbacks re-feed the kept tokens as a recurrent model's do."""
    eos = max([*prompt, *reply, 0]) + 1
    runner = ScriptModel([*prompt, *reply, eos], vocab=eos + 1)
    runner.eos_ids = frozenset({eos}) if ended_on_eos else frozenset()
    runner.rollback_kind = "refeed" if refeeds else "trim"
    return runner


def trace_cost(trace: Sequence[RoundTrace], costs: Sequence[float], pipeline: bool = True
               ) -> float:
    """Pipelined steps a trace costs under `costs` (width w at index w - 1); with `pipeline`
    False (a host whose steps do not overlap it) a one-token step costs min(1, cost(1))."""
    total = 0.0
    for t in trace:
        if t.kind == "pipelined":
            total += 1.0
        elif t.kind == "sync" and not pipeline:
            total += min(1.0, width_cost(costs, 1))
        elif t.kind in ("sync", "verify"):
            total += width_cost(costs, t.width)
        if t.refed:
            total += width_cost(costs, t.refed)
    return total


def replay(
    prompt: Sequence[int],
    reply: Sequence[int],
    *,
    stop_reason: str,
    max_tokens: int,
    lookup: PromptLookupConfig | None,
    costs: Sequence[float],
    loop_guard: tuple[int, int, int] | None = None,
    refeeds: bool = False,
    pipeline: bool = True,
) -> Replayed:
    """Drive the real loop over a known greedy reply.

    Args:
        prompt: the run's prompt token ids.
        reply: its emitted token ids (the prefill token first).
        stop_reason: the run's stop reason ("eos" puts an EOS after the reply).
        max_tokens: the run's token limit.
        lookup: the policy's config (None: plain decoding).
        costs: width-cost table (widths 1..n) to price the trace with.
        loop_guard: the run's loop guard, if it had one.
        refeeds: the model's rollbacks re-feed kept tokens (its runner's `rollback_kind`
            was "refeed"); each re-feed is priced as a forward of its width.
        pipeline: the host's loop pipelines plain steps (False: its steps do not overlap
            the host, or the run was forced synchronous; `loop.may_pipeline`).

    Returns:
        The replayed generation and its cost in pipelined steps.
    """
    runner = replay_runner(prompt, reply, stop_reason == "eos", refeeds)
    generation = generate(
        runner, prompt, max_tokens=max_tokens, lookup=lookup, loop_guard=loop_guard,
        trace=True, pipeline=pipeline,
    )
    if generation.tokens != list(reply):
        raise ReplayDiffers("the replayed reply differs from the stored one (not a greedy run?)")
    return Replayed(generation, trace_cost(generation.trace, costs, pipeline))


def predicted_speedup(plain_steps: float, policy_steps: float, prefill_steps: float) -> float:
    """Whole-call speed-up over plain: both emit the same tokens after the same prefill (1.0
    where neither costs a step: a reply of the prefill token alone gains nothing, loses
    nothing)."""
    denominator = prefill_steps + policy_steps
    return (prefill_steps + plain_steps) / denominator if denominator > 0 else 1.0
