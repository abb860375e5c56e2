"""The round loop (docs/engine.md, "The round loop"): prefill, then plain, pipelined and drafted rounds.

Plain decoding (`lookup=None`) runs through the same loop with no governor and an always
empty draft, so both share one prefill and one one-token step. Only the
greedy batched-argmax sampler pipelines; every other sampler reads rows on the host and
runs synchronously (see `specfleet.engine.sampling`).

Optional runner attributes read here (the `Runner` protocol's defaults when absent):
`trimmable` (True), `state_layout` ("external"), `rollback_kind` ("trim") and
`lookup_refusal` (None: a runner's own one-line reason); prompt lookup refuses a runner that
cannot roll back exactly or keeps its state internally.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from specfleet.engine.config import PromptLookupConfig, make_governor
from specfleet.engine.governor import SHADOW_CONFIRM, DraftGovernor
from specfleet.engine.lookup import NgramIndex, ShadowProbe
from specfleet.engine.reference import sequential_reference
from specfleet.engine.runners.base import CacheRollbackError, Runner, UnsupportedModelError
from specfleet.engine.sampling import HostSampler, SamplerConfig
from specfleet.engine.stats import (
    LoopGuardConfig,
    PromptLookupStats,
    RoundKind,
    RoundTrace,
    Timings,
    loop_guard_fires,
)
from specfleet.engine.warmup import warm_up_verify_widths

PLAIN_ROUNDS_BEFORE_PIPELINE = 2  # lookup pipelines on the third consecutive empty round
ALLOCATOR_CLEAR_EVERY = 256  # generated tokens between allocator-cache clears (non-semantic)
FORCE_SYNC_ENV = "SPECFLEET_FORCE_SYNC"  # presence (any value) disables pipelining

StopReason = Literal["eos", "max_tokens", "loop_guard", "cancelled"]
TokensCallback = Callable[[Sequence[int]], None]  # every token emitted so far

__all__ = [
    "Generation", "generate", "sequential_reference", "unsupported_reason",
    "warm_up_verify_widths",
]


@dataclass(frozen=True)
class Generation:
    """One reply and what it cost.

    Attributes:
        tokens: emitted tokens (the prefill token first; EOS never included).
        stats: loop counters.
        timings: prefill / decode / total seconds.
        stop_reason: "eos", "max_tokens", "loop_guard" or "cancelled".
        trace: one `RoundTrace` per loop iteration when asked for, else empty.
    """

    tokens: list[int]
    stats: PromptLookupStats
    timings: Timings
    stop_reason: StopReason
    trace: list[RoundTrace]


@dataclass
class _Loop:
    """Mutable state of one generation."""

    runner: Runner
    sampler: HostSampler
    batched: bool
    max_tokens: int
    context: list[int]
    config: PromptLookupConfig | None
    governor: DraftGovernor | None
    guard: tuple[int, int, int] | None
    pipeline: bool
    streak_before_pipeline: int
    generated: list[int] = field(default_factory=list)
    stats: PromptLookupStats = field(default_factory=PromptLookupStats)
    index: NgramIndex | None = None
    current: int = -1
    in_flight: Any = None  # lazy sample of the token after `current`; cache holds `current`
    shadow: ShadowProbe | None = None
    plain_streak: int = 0
    stop_reason: StopReason | None = None
    next_clear: int = ALLOCATOR_CLEAR_EVERY
    trace: list[RoundTrace] | None = None
    round_refed: int = 0  # tokens this round's rollback fed again


def unsupported_reason(runner: Runner) -> str | None:
    """Why prompt lookup cannot drive `runner` (the runner's own `lookup_refusal`, untrimmable
    or model-owned caches), or None when it can."""
    own = getattr(runner, "lookup_refusal", None)
    if own:
        return own
    if getattr(runner, "state_layout", "external") != "external":
        return (
            "the model keeps its sequence state internally; prompt lookup needs trimmable "
            "external KV caches"
        )
    if not getattr(runner, "trimmable", True):
        return "prompt lookup needs trimmable external KV caches; this model's cannot be trimmed"
    return None


def _refeeds(runner: Runner) -> bool:
    """Whether a rollback on `runner` feeds kept tokens again (a cost the calibrated policy prices)."""
    return getattr(runner, "rollback_kind", "trim") == "refeed"


def _resolve_pipeline(pipeline: bool | None, sampler: SamplerConfig) -> bool:
    if pipeline is None:
        return FORCE_SYNC_ENV not in os.environ and sampler.batched_argmax
    if pipeline and not sampler.batched_argmax:
        raise ValueError("pipeline=True needs a greedy sampler without history or token bias")
    return pipeline


def _check_request(
    runner: Runner,
    prompt: Sequence[int],
    max_tokens: int,
    lookup: PromptLookupConfig | None,
    sampler: SamplerConfig,
    loop_guard: tuple[int, int, int] | None,
) -> None:
    if not prompt:
        raise ValueError("the prompt is empty: prompt lookup needs at least one prompt token")
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    sampler.validate()
    if loop_guard is not None:
        LoopGuardConfig(*loop_guard).validate()
    if lookup is not None:
        lookup.validate()
        reason = unsupported_reason(runner)
        if reason is not None:
            raise UnsupportedModelError(reason)


def _emit(s: _Loop, token: int) -> None:
    """Append a target token; stop at max_tokens or when the loop guard fires."""
    s.context.append(token)
    s.generated.append(token)
    s.current = token
    if len(s.generated) >= s.max_tokens:
        s.stop_reason = "max_tokens"
    elif s.guard is not None and loop_guard_fires(s.generated, *s.guard):
        s.stop_reason = "loop_guard"


def _prefill(s: _Loop, prompt: Sequence[int]) -> int:
    """Plain decoding's prefill; the index is built while the first token computes."""
    logits = s.runner.prefill(prompt)
    s.runner.clear_allocator_cache()
    if s.batched:
        first = s.runner.argmax(logits)
        s.runner.submit(first)
        _build_index(s)
        return s.runner.read_tokens(first)[0]
    _build_index(s)
    return s.sampler.sample(s.runner.read_row(logits, 0), s.context)


def _build_index(s: _Loop) -> None:
    if s.config is not None:
        s.index = NgramIndex(s.config.ngram_min, s.config.ngram_max)
        s.index.extend(s.context)


def _settle_probe(s: _Loop) -> None:
    """(a) A decided probe is dropped; a true one resumes a paused Gated governor."""
    if s.shadow is None:
        return
    verdict = s.shadow.settle(s.context)
    if verdict is None:
        return
    s.shadow = None
    if verdict and s.governor is not None:  # probes are only recorded under a governor
        s.governor.shadow_confirmed()
        s.stats.shadow_confirmations += 1


def _budget(s: _Loop, remaining: int) -> int:
    """(b) The governor's budget (asked once per round), capped so the bonus row fits."""
    if s.governor is None:
        return 0
    return min(s.governor.budget(), max(remaining - 1, 0))


def _look_up(s: _Loop, budget: int) -> list[int]:
    """(c) The round's draft; a paused Gated round records a shadow probe instead."""
    governor, index = s.governor, s.index  # both exist exactly when lookup is on
    if governor is None or index is None:
        return []
    if budget == 0:
        if s.shadow is None and governor.probes_while_paused():
            index.extend(s.context)
            proposal = index.find(s.context, SHADOW_CONFIRM)
            if len(proposal) >= SHADOW_CONFIRM:
                s.shadow = ShadowProbe(start=len(s.context), proposal=tuple(proposal))
        return []
    index.extend(s.context)
    return index.find(s.context, budget)


def _count_plain_round(s: _Loop, budget: int) -> None:
    s.stats.rounds += 1
    if budget == 0 and s.governor is not None:
        s.stats.paused_rounds += 1


def _submit_step(s: _Loop, token: Any) -> None:
    """Pipelined plain step: forward a token the host may not have read, sample lazily."""
    sample = s.runner.argmax(s.runner.forward(token))
    s.runner.submit(sample)
    s.in_flight = sample


def _in_flight_round(s: _Loop, draft: list[int], budget: int, remaining: int) -> RoundKind:
    """(e) Read the in-flight token, after submitting the next step unless a draft (which
    is dropped) or the end of the budget stops the pipeline."""
    pending, s.in_flight = s.in_flight, None
    kind: RoundKind = "drain"
    if not draft and remaining > 1:
        _submit_step(s, pending)
        _count_plain_round(s, budget)
        kind = "pipelined"
    token = s.runner.read_tokens(pending)[0]
    if token in s.runner.eos_ids:
        s.stop_reason = "eos"
    else:
        _emit(s, token)
    return kind


def _may_start_pipeline(s: _Loop, remaining: int) -> bool:
    """(f) Third empty round in a row (at once for plain decoding or a paused Gated loop)."""
    if not s.pipeline or remaining <= 1:
        return False
    if s.plain_streak > s.streak_before_pipeline:
        return True
    return s.governor is not None and s.governor.probes_while_paused()


def _start_pipeline(s: _Loop, budget: int) -> RoundKind:
    _submit_step(s, [s.current])
    _count_plain_round(s, budget)
    return "pipelined"


def _target(s: _Loop, logits: Any, targets: list[int] | None, row: int) -> int:
    if targets is not None:
        return targets[row]
    # History already holds the tokens accepted earlier in this block.
    return s.sampler.sample(s.runner.read_row(logits, row), s.context)


def _verify_round(s: _Loop, draft: list[int], budget: int) -> tuple[RoundKind, int]:
    """(g) Forward [current] + draft; emit targets while they match the draft; trim."""
    k = len(draft)
    logits = s.runner.forward([s.current, *draft])
    # One host read per verify: every row's argmax at once.
    targets = s.runner.read_tokens(s.runner.argmax(logits)) if s.batched else None
    accepted = 0
    for i in range(k + 1):
        token = _target(s, logits, targets, i)
        if token in s.runner.eos_ids:
            s.stop_reason = "eos"
            break
        _emit(s, token)
        if s.stop_reason is not None or i == k or token != draft[i]:
            break
        accepted += 1
    _account(s, k, accepted, budget)
    _roll_back(s, k, accepted)
    return ("verify" if k else "sync"), accepted


def _account(s: _Loop, k: int, accepted: int, budget: int) -> None:
    if k == 0:
        _count_plain_round(s, budget)
    else:
        s.stats.rounds += 1
        s.stats.drafted_rounds += 1
        if s.governor is not None:  # always: only a governor's budget lets a draft be proposed
            s.governor.record(accepted, k)
    s.stats.proposed += k
    s.stats.accepted += accepted


def _roll_back(s: _Loop, k: int, accepted: int) -> None:
    """Undo the rejected proposals: the caches end at the last accepted draft token, which
    the runner checks layer by layer; the loop checks the total, so no runner corrupts silently."""
    if k == accepted:
        return
    refed = s.runner.rollback(k - accepted)
    s.stats.refed_tokens += refed
    s.round_refed = refed
    expected = len(s.context) - 1  # every emitted token but the bonus one is cached
    if s.stop_reason is None and s.runner.cache_len() != expected:
        raise CacheRollbackError(
            f"after rolling back {k - accepted} rejected proposals the {s.runner.engine} caches "
            f"hold {s.runner.cache_len()} positions, expected {expected}")


def _after_round(s: _Loop) -> None:
    if len(s.generated) >= s.next_clear:
        s.runner.clear_allocator_cache()
        s.next_clear += ALLOCATOR_CLEAR_EVERY


def _decode(
    s: _Loop, should_stop: Callable[[], bool] | None, on_tokens: TokensCallback | None
) -> None:
    """The round loop, one round per iteration."""
    while s.stop_reason is None:
        if on_tokens is not None:
            on_tokens(s.generated)
        if should_stop is not None and should_stop():
            s.stop_reason = "cancelled"
            break
        _settle_probe(s)
        remaining = s.max_tokens - len(s.generated)
        budget = _budget(s, remaining)
        draft = _look_up(s, budget)
        s.plain_streak = 0 if draft else s.plain_streak + 1
        before, accepted, s.round_refed = len(s.context), 0, 0
        if s.in_flight is not None:
            kind = _in_flight_round(s, draft, budget, remaining)
        elif not draft and _may_start_pipeline(s, remaining):
            kind = _start_pipeline(s, budget)
        else:
            kind, accepted = _verify_round(s, draft, budget)
        _after_round(s)
        if s.trace is not None:
            _record(s, s.trace, kind, budget, len(draft), accepted, len(s.context) - before)


def _record(s: _Loop, trace: list[RoundTrace], kind: RoundKind, budget: int, k: int,
            accepted: int, emitted: int) -> None:
    width = {"pipelined": 1, "sync": 1, "verify": k + 1, "drain": 0}[kind]
    proposed = k if kind == "verify" else 0
    policy = s.governor.state() if s.governor is not None else None
    trace.append(
        RoundTrace(
            index=len(trace), kind=kind, width=width, budget=budget, proposed=proposed,
            accepted=accepted, emitted=emitted, policy=policy, cache_len=s.runner.cache_len(),
            context_len=len(s.context), in_flight=s.in_flight is not None, refed=s.round_refed,
        )
    )


def generate(
    runner: Runner,
    prompt: Sequence[int],
    *,
    max_tokens: int,
    lookup: PromptLookupConfig | None = None,
    sampler: SamplerConfig = SamplerConfig(),  # noqa: B008 - frozen, shared safely
    loop_guard: tuple[int, int, int] | None = None,
    trace: bool = False,
    should_stop: Callable[[], bool] | None = None,
    pipeline: bool | None = None,
    on_tokens: TokensCallback | None = None,
) -> Generation:
    """Generate a reply with prompt lookup (or plain decoding when `lookup` is None).

    Args:
        runner: the model and its caches; reset first.
        prompt: prompt token ids (not empty).
        max_tokens: most tokens to emit (the prefill token included).
        lookup: prompt-lookup config (validated here); None decodes plainly.
        sampler: how targets are picked; greedy by default.
        loop_guard: (min_period, max_period, repeats), checked after every emitted token.
        trace: record one `RoundTrace` per round.
        should_stop: polled between rounds; True ends the reply as "cancelled".
        pipeline: None allows pipelining unless `SPECFLEET_FORCE_SYNC` is set or the
            sampler needs host rows; False forbids it; True forces it (greedy
            batched-argmax samplers only).
        on_tokens: called between rounds and at the end with every token emitted so far
            (streaming); its time counts in `decode_s`.

    Returns:
        The `Generation`.

    Raises:
        ValueError: empty prompt, negative max_tokens, pipeline=True with a host sampler.
        ConfigError: an invalid lookup, sampler or loop-guard setting.
        UnsupportedModelError: lookup on a model without trimmable external KV caches.
        CacheRollbackError: a rollback left the caches holding other than the kept tokens.
    """
    _check_request(runner, prompt, max_tokens, lookup, sampler, loop_guard)
    s = _Loop(
        runner=runner, sampler=HostSampler(sampler), batched=sampler.batched_argmax,
        max_tokens=max_tokens, context=list(prompt), config=lookup,
        governor=make_governor(lookup, _refeeds(runner)) if lookup is not None else None,
        guard=(*loop_guard,) if loop_guard is not None else None,
        pipeline=_resolve_pipeline(pipeline, sampler),
        streak_before_pipeline=PLAIN_ROUNDS_BEFORE_PIPELINE if lookup is not None else 0,
        trace=[] if trace else None,
    )
    start = time.perf_counter()
    runner.reset()
    first = _prefill(s, prompt)
    prefill_end = time.perf_counter()
    if first in runner.eos_ids:
        s.stop_reason = "eos"
    elif max_tokens == 0:
        s.stop_reason = "max_tokens"
    else:
        _emit(s, first)
        _decode(s, should_stop, on_tokens)
        if on_tokens is not None:
            on_tokens(s.generated)
    end = time.perf_counter()
    timings = Timings(prefill_end - start, end - prefill_end, end - start)
    assert s.stop_reason is not None  # set above, or `_decode` ran until it was
    return Generation(s.generated, s.stats, timings, s.stop_reason, s.trace or [])
