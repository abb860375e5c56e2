"""The round loop (docs/engine.md, "The round loop"): prefill, then plain, pipelined and drafted rounds.

`rounds` is the loop itself, a generator over explicit local state that yields one `Round`
after the prefill and after every round; `generate` iterates it to stream, trace and cancel.
Plain decoding (`lookup=None`) runs through the same loop with no governor and an always
empty draft, so both share one prefill and one one-token step. Only the
greedy batched-argmax sampler pipelines, and only where the device's steps overlap the host
(`may_pipeline`); every other sampler reads rows on the host and runs synchronously (see
`specfleet.engine.sampling`).

Optional runner attributes read here (the `Runner` protocol's defaults when absent):
`trimmable` (True), `state_layout` ("external"), `rollback_kind` ("trim") and
`lookup_refusal` (None: a runner's own one-line reason); prompt lookup refuses a runner that
cannot roll back exactly or keeps its state internally.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, Literal, NamedTuple

from specfleet.engine.config import PromptLookupConfig, make_governor
from specfleet.engine.governor import SHADOW_CONFIRM, DraftGovernor
from specfleet.engine.kinds import steps_overlap_host
from specfleet.engine.lookup import NgramIndex, ShadowProbe
from specfleet.engine.reference import sequential_reference
from specfleet.engine.runners.base import CacheRollbackError, Runner, UnsupportedModelError
from specfleet.engine.sampling import HostSampler, SamplerConfig
from specfleet.engine.stats import (
    LoopGuardConfig,
    PromptLookupStats,
    RoundKind,
    RoundTrace,
    StopReason,
    Timings,
    loop_guard_fires,
)
from specfleet.engine.warmup import warm_up_verify_widths
from specfleet.settings import FORCE_SYNC

ALLOCATOR_CLEAR_EVERY = 256  # generated tokens between allocator-cache clears (non-semantic)
NO_DRAFT: tuple[int, ...] = ()  # a round without proposals (shared: drafts are only read)

StepKind = Literal["prefill"] | RoundKind  # what a `Round` reports: the prefill or a round
TokensCallback = Callable[[Sequence[int]], None]  # every token emitted so far

__all__ = [
    "Generation", "Round", "generate", "may_pipeline", "rounds", "sequential_reference",
    "unsupported_reason", "warm_up_verify_widths",
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


class Round(NamedTuple):
    """What one step of `rounds` did: the prefill first, then one round of the loop each.

    A named tuple, not a frozen dataclass: one is built per round (rounds of one shape in a
    row share it), and a frozen dataclass's `__init__` costs more than a plain round.
    `tokens`, `stats` and `governor` are the loop's own objects, which later steps update:
    read them before asking for the next step, and never write them.

    Attributes:
        kind: "prefill", or the round's `RoundKind` ("pipelined", "sync", "verify", "drain").
        budget: the governor's budget this round, after the remaining-1 cap (0 for plain).
        proposed: proposals verified (0 unless "verify").
        accepted: proposals that landed.
        emitted: tokens emitted by this step.
        refed: tokens this round's rollback fed again.
        in_flight: whether a pipelined step is in flight after this step.
        tokens: every token emitted so far.
        stats: the counters so far.
        governor: the draft policy (None for plain decoding); `governor.state()` is its state
            after this step.
        stop_reason: why the reply ends after this step, None while it goes on; the
            generator stops after the step that carries one.
    """

    kind: StepKind
    budget: int
    proposed: int
    accepted: int
    emitted: int
    refed: int
    in_flight: bool
    tokens: list[int]
    stats: PromptLookupStats
    governor: DraftGovernor | None
    stop_reason: StopReason | None

    def trace(self, index: int, cache_len: int, context_len: int) -> RoundTrace:
        """This round as the `index`-th `RoundTrace` (not for the prefill step)."""
        assert self.kind != "prefill"  # the trace records rounds only
        width = {"pipelined": 1, "sync": 1, "verify": self.proposed + 1, "drain": 0}[self.kind]
        policy = self.governor.state() if self.governor is not None else None
        return RoundTrace(
            index=index, kind=self.kind, width=width, budget=self.budget,
            proposed=self.proposed, accepted=self.accepted, emitted=self.emitted, policy=policy,
            cache_len=cache_len, context_len=context_len, in_flight=self.in_flight,
            refed=self.refed,
        )


@dataclass(frozen=True, slots=True)
class _Ends:
    """What ends a reply: an EOS token, `max_tokens` emitted, or the loop guard firing."""

    eos_ids: frozenset[int]
    max_tokens: int
    guard: tuple[int, int, int] | None


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


def may_pipeline(runner: Runner, sampler: SamplerConfig, pipeline: bool | None = None) -> bool:
    """Whether the loop may pipeline plain steps (spec 2.8): a greedy batched-argmax sampler,
    `SPECFLEET_FORCE_SYNC` unset and steps that overlap the host (`steps_overlap_host`);
    `pipeline` True forces it (greedy batched-argmax samplers only), False forbids it."""
    if pipeline is None:
        return (not FORCE_SYNC.read() and sampler.batched_argmax
                and steps_overlap_host(runner.engine, runner.device))
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


def _emit(token: int, context: list[int], generated: list[int], ends: _Ends) -> StopReason | None:
    """Append a target token unless it is EOS; why the reply ends with it, or None."""
    if token in ends.eos_ids:
        return "eos"
    context.append(token)
    generated.append(token)
    if len(generated) >= ends.max_tokens:
        return "max_tokens"
    if ends.guard is not None and loop_guard_fires(generated, *ends.guard):
        return "loop_guard"
    return None


def _prefill(
    runner: Runner, host: HostSampler | None, context: list[int],
    lookup: PromptLookupConfig | None,
) -> tuple[int, NgramIndex | None]:
    """Plain decoding's prefill; the index is built while the first token computes.
    Returns (the first token, the index or None when lookup is off)."""
    logits = runner.prefill(context)
    runner.clear_allocator_cache()
    if host is None:
        first = runner.argmax(logits)
        runner.submit(first)
        index = _build_index(lookup, context)
        return runner.read_tokens(first)[0], index
    index = _build_index(lookup, context)
    return host.sample(runner.read_row(logits, 0), context), index


def _build_index(lookup: PromptLookupConfig | None, context: list[int]) -> NgramIndex | None:
    if lookup is None:
        return None
    index = NgramIndex(lookup.ngram_min, lookup.ngram_max)
    index.extend(context)
    return index


def _settle_probe(
    shadow: ShadowProbe, context: list[int], governor: DraftGovernor | None,
    stats: PromptLookupStats,
) -> ShadowProbe | None:
    """(a) The probe while undecided; a true one resumes a paused Gated governor."""
    verdict = shadow.settle(context)
    if verdict is None:
        return shadow
    if verdict and governor is not None:  # probes are only recorded under a governor
        governor.shadow_confirmed()
        stats.shadow_confirmations += 1
    return None


def _budget(governor: DraftGovernor, remaining: int) -> int:
    """(b) The governor's budget (asked once per round), capped so the bonus row fits."""
    return min(governor.budget(), max(remaining - 1, 0))


def _look_up(
    governor: DraftGovernor, index: NgramIndex | None, context: list[int], budget: int,
    shadow: ShadowProbe | None,
) -> tuple[Sequence[int], ShadowProbe | None]:
    """(c) The round's draft and pending probe; a paused Gated round records a shadow probe
    instead of drafting. The governor sizes the draft after the lookup (`DraftGovernor.size`:
    the whole proposal for the spec's policies)."""
    if index is None:  # never: the index exists exactly when a governor does
        return NO_DRAFT, shadow
    if budget == 0:
        if shadow is None and governor.probes_while_paused():
            index.extend(context)
            proposal = index.find(context, SHADOW_CONFIRM)
            if len(proposal) >= SHADOW_CONFIRM:
                shadow = ShadowProbe(start=len(context), proposal=tuple(proposal))
        return NO_DRAFT, shadow
    index.extend(context)
    proposal, ngram = index.match(context, budget, governor.cycles)
    return proposal[: governor.size(proposal, ngram)], shadow


def _submit_step(runner: Runner, token: Any) -> Any:
    """Pipelined plain step: forward a token the host may not have read; the lazy sample."""
    sample = runner.argmax(runner.forward(token))
    runner.submit(sample)
    return sample


def _may_start_pipeline(
    pipeline: bool, remaining: int, plain_streak: int, governor: DraftGovernor | None
) -> bool:
    """(f) Third empty round in a row, or as the governor says (`empty_rounds_before_pipeline`;
    at once for plain decoding or a paused Gated loop)."""
    if not pipeline or remaining <= 1:
        return False
    if governor is None or plain_streak > governor.empty_rounds_before_pipeline:
        return True
    return governor.probes_while_paused()


def _verify_round(
    runner: Runner, host: HostSampler | None, governor: DraftGovernor | None,
    draft: Sequence[int], context: list[int], generated: list[int], ends: _Ends,
) -> tuple[int, int, StopReason | None]:
    """(g) Forward [current] + draft; emit targets while they match the draft; roll back,
    except on a re-feeding runner once the reply has ended.
    Returns (accepted, tokens the rollback fed again, why the reply ends or None)."""
    k = len(draft)
    logits = runner.forward([context[-1], *draft])
    # One host read per verify: every row's argmax at once.
    targets = runner.read_tokens(runner.argmax(logits)) if host is None else []
    accepted, stop = k, None
    for i in range(k + 1):
        # History already holds the tokens accepted earlier in this block.
        token = targets[i] if host is None else host.sample(runner.read_row(logits, i), context)
        stop = _emit(token, context, generated, ends)
        if stop is not None or i == k or token != draft[i]:
            accepted = i
            break
    if governor is not None and k:  # always: only a governor's budget lets a draft be proposed
        governor.record(accepted, k)
    if stop is not None and _refeeds(runner):
        # The next reply resets these caches unread: a re-feed would be a wasted forward.
        return accepted, 0, stop
    # Every emitted token but the bonus one stays cached (unchecked once the reply has ended).
    refed = _roll_back(runner, k - accepted, len(context) - 1 if stop is None else None)
    return accepted, refed, stop


def _roll_back(runner: Runner, rejected: int, expected: int | None) -> int:
    """Undo the rejected proposals; the tokens fed again. The runner checks layer by layer;
    the loop checks the total (`expected` positions; None skips it), so no runner corrupts
    silently."""
    if rejected == 0:
        return 0
    refed = runner.rollback(rejected)
    if expected is not None and runner.cache_len() != expected:
        raise CacheRollbackError(
            f"after rolling back {rejected} rejected proposal{'s' * (rejected != 1)} the {runner.engine} caches "
            f"hold {runner.cache_len()} positions, expected {expected}")
    return refed


def _count(
    stats: PromptLookupStats, kind: RoundKind, budget: int, proposed: int, accepted: int,
    refed: int, lookup_on: bool,
) -> None:
    if kind == "drain":
        return
    stats.rounds += 1
    if kind == "verify":
        stats.drafted_rounds += 1
    elif budget == 0 and lookup_on:
        stats.paused_rounds += 1
    stats.proposed += proposed
    stats.accepted += accepted
    stats.refed_tokens += refed


def rounds(
    runner: Runner,
    prompt: Sequence[int],
    *,
    max_tokens: int,
    lookup: PromptLookupConfig | None = None,
    sampler: SamplerConfig = SamplerConfig(),  # noqa: B008 - frozen, shared safely
    loop_guard: tuple[int, int, int] | None = None,
    pipeline: bool | None = None,
) -> Iterator[Round]:
    """The round loop as a generator: one `Round` after the prefill, then one per round.

    The request is checked here, at the call; the runner is reset and prefilled on the
    first `next`. The last `Round` carries the stop reason; a consumer that stops
    iterating earlier has cancelled the reply (a pipelined step may be left in flight).

    Args:
        runner: the model and its caches; reset first.
        prompt: prompt token ids (not empty).
        max_tokens: most tokens to emit (the prefill token included).
        lookup: prompt-lookup config (validated here); None decodes plainly.
        sampler: how targets are picked; greedy by default.
        loop_guard: (min_period, max_period, repeats), checked after every emitted token.
        pipeline: None allows pipelining as `may_pipeline` says (not where
            `SPECFLEET_FORCE_SYNC` is set, the sampler needs host rows or the device's
            steps do not overlap the host); False forbids it; True forces it (greedy
            batched-argmax samplers only).

    Returns:
        An iterator of `Round`s.

    Raises:
        ValueError: empty prompt, negative max_tokens, pipeline=True with a host sampler.
        ConfigError: an invalid lookup, sampler or loop-guard setting.
        UnsupportedModelError: lookup on a model without trimmable external KV caches.
        CacheRollbackError (while iterating): a rollback left the caches holding other
            than the kept tokens.
    """
    _check_request(runner, prompt, max_tokens, lookup, sampler, loop_guard)
    host = None if sampler.batched_argmax else HostSampler(sampler)
    governor = make_governor(lookup, _refeeds(runner)) if lookup is not None else None
    pipelines = may_pipeline(runner, sampler, pipeline)
    ends = _Ends(runner.eos_ids, max_tokens, (*loop_guard,) if loop_guard is not None else None)
    return _rounds(runner, prompt, lookup, governor, host, ends, pipelines)


def _rounds(
    runner: Runner, prompt: Sequence[int], lookup: PromptLookupConfig | None,
    governor: DraftGovernor | None, host: HostSampler | None, ends: _Ends, pipeline: bool,
) -> Iterator[Round]:
    """`rounds` after its checks; the generation's state is these locals. `host` is None
    when rows are decided on the device (one batched argmax)."""
    context, generated, stats = list(prompt), list[int](), PromptLookupStats()
    runner.reset()
    first, index = _prefill(runner, host, context, lookup)
    stop: StopReason | None = _emit(first, context, generated, ends) if ends.max_tokens else (
        "eos" if first in ends.eos_ids else "max_tokens")
    yield Round("prefill", 0, 0, 0, len(generated), 0, False, generated, stats, governor, stop)
    draft: Sequence[int]
    in_flight: Any = None  # lazy sample of the token after context[-1]; the cache holds that one
    shadow: ShadowProbe | None = None
    plain_streak, next_clear = 0, ALLOCATOR_CLEAR_EVERY
    # A round shaped like the one before shares its record: building one costs a plain round.
    last_shape: tuple[Any, ...] = ()
    while stop is None:
        if shadow is not None:
            shadow = _settle_probe(shadow, context, governor, stats)
        remaining = ends.max_tokens - len(generated)
        budget, draft = 0, NO_DRAFT  # what plain decoding keeps
        if governor is not None:
            budget = _budget(governor, remaining)
            draft, shadow = _look_up(governor, index, context, budget, shadow)
        plain_streak = 0 if draft else plain_streak + 1
        before, proposed, accepted, refed = len(context), 0, 0, 0
        kind: RoundKind
        if in_flight is not None:
            # (e) Submit the next step unless a draft (dropped) or the budget's end stops it.
            pending, in_flight = in_flight, None
            if not draft and remaining > 1:
                in_flight = _submit_step(runner, pending)
            kind = "pipelined" if in_flight is not None else "drain"
            stop = _emit(runner.read_tokens(pending)[0], context, generated, ends)
        elif not draft and _may_start_pipeline(pipeline, remaining, plain_streak, governor):
            kind, in_flight = "pipelined", _submit_step(runner, [context[-1]])
        else:  # (g) a synchronous verify, of a draft or of the current token alone
            kind, proposed = ("verify" if draft else "sync"), len(draft)
            accepted, refed, stop = _verify_round(runner, host, governor, draft, context,
                                                  generated, ends)
        _count(stats, kind, budget, proposed, accepted, refed, governor is not None)
        if len(generated) >= next_clear:
            runner.clear_allocator_cache()
            next_clear += ALLOCATOR_CLEAR_EVERY
        shape = (kind, budget, proposed, accepted, len(context) - before, refed,
                 in_flight is not None)
        if shape != last_shape or stop is not None:
            last, last_shape = Round(*shape, generated, stats, governor, stop), shape
        yield last


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

    Iterates `rounds` to the end: streaming, tracing and cancelling happen between rounds.

    Args:
        runner, prompt, max_tokens, lookup, sampler, loop_guard, pipeline: as for `rounds`.
        trace: record one `RoundTrace` per round.
        should_stop: polled between rounds; True ends the reply as "cancelled".
        on_tokens: called between rounds and at the end with every token emitted so far
            (streaming; never with none); its time counts in `decode_s`.

    Returns:
        The `Generation`.

    Raises:
        What `rounds` raises (ValueError, ConfigError, UnsupportedModelError,
        CacheRollbackError).
    """
    steps = rounds(runner, prompt, max_tokens=max_tokens, lookup=lookup, sampler=sampler,
                   loop_guard=loop_guard, pipeline=pipeline)
    records: list[RoundTrace] = []
    start = time.perf_counter()
    prefill = next(steps)
    prefill_end = time.perf_counter()
    for step in chain((prefill,), steps):
        if trace and step is not prefill:
            records.append(step.trace(len(records), runner.cache_len(),
                                      len(prompt) + len(step.tokens)))
        if on_tokens is not None and step.tokens:
            on_tokens(step.tokens)
        if step.stop_reason is not None:
            break
        if should_stop is not None and should_stop():
            if on_tokens is not None:
                on_tokens(step.tokens)
            break
    end = time.perf_counter()
    timings = Timings(prefill_end - start, end - prefill_end, end - start)
    # The generator yields until a step carries its stop reason: one without was cancelled.
    return Generation(step.tokens, step.stats, timings, step.stop_reason or "cancelled", records)
