"""Variants of `calibrated`'s draft rule replayed against the oracle: what each does to the
mean efficiency and to the worst decode speed-up over plain, copy-heavy and prose apart.

Replay only (seconds), over stored greedy plain replies and the seven tables of
`bench/policies_oracle.py`. Each variant patches one piece of the shipped policy for the
replay and puts it back (a variant of the length rule replaces the whole rule, the shipped
expected-loss term included); docs/benchmark_results/policy-variants-2026-12-03.md says
which was kept and why. The "knows ..." rows are no policy: they read the stored reply
to learn how many proposals will land, and bound what any causal rule over the same
evidence could reach in this loop; the last row is the oracle's program run in the loop's
two modes (`loop_aware_bound`). `--confidence` adds a row that reads the bundled model's
top-1 probability of each reply token (one torch forward per reply).

    .venv/bin/python bench/policy_variants.py --set tuning --db /tmp/or/oracle.db \
        --matrix bench-37cb77 --set tuning --db /tmp/or/own.db --matrix bench-afdc9d \
        --set heldout --db /tmp/or/heldout.db --matrix bench-b1603c [--confidence] \
        [--short 20,32,48] [--only LABEL-PART ...]
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import specfleet.engine.calibrated as cal  # noqa: E402
import specfleet.engine.loop as loop  # noqa: E402
from bench.cli_args import BenchParser, one_per, positive_int, run_main  # noqa: E402
from bench.policies_oracle import ORACLE_MAX_DRAFT, TABLES, load_replies, table_ratio  # noqa: E402
from bench.policies_prompts import kind_of  # noqa: E402
from specfleet.engine.config import PromptLookupConfig  # noqa: E402
from specfleet.engine.governor import SHADOW_CONFIRM  # noqa: E402
from specfleet.engine.lookup import NgramIndex, cycle_out  # noqa: E402
from specfleet.engine.oracle import landed_count, oracle, proposals  # noqa: E402
from specfleet.engine.predict import replay  # noqa: E402

Governor = cal.CalibratedGovernor


class Reply:
    """The reply being replayed, for the rows that read it: its proposals at every
    position, the bundled model's confidence in each token (with --confidence), and the
    loop's context (kept by a patched `loop._emit`)."""

    prompt: list[int] = []
    tokens: list[int] = []
    proposals: list[list[int]] = []
    confidence: list[float] | None = None
    context: list[int] = []

    @classmethod
    def position(cls) -> int:
        return len(cls.context) - len(cls.prompt)

    @classmethod
    def proposal(cls) -> list[int]:
        """The index's proposal at the loop's position ([] past the reply's end)."""
        at = cls.position()
        return cls.proposals[at] if at < len(cls.proposals) else []

    @classmethod
    def landing(cls) -> int:
        """How many tokens of the index's proposal at the loop's position will land."""
        return landed_count(cls.proposal(), cls.tokens, cls.position())


def _emit_keeping_context(token, context, generated, ends):
    Reply.context = context
    return _shipped_emit(token, context, generated, ends)


_shipped_emit = loop._emit


def reading_the_reply(hazards: Callable[[Governor, list[float]], list[float]] | None = None,
                      sizing: Callable[[Governor, int], int] | None = None,
                      ) -> contextlib.ExitStack:
    """Patch the governor's hazards or its whole sizing with a function of the reply."""
    stack = contextlib.ExitStack()
    stack.enter_context(patched(loop, "_emit", _emit_keeping_context))
    if hazards is not None:
        shipped = Governor.hazards
        stack.enter_context(patched(Governor, "hazards", lambda self: hazards(self, shipped(self))))
    if sizing is not None:
        stack.enter_context(patched(Governor, "_saving_draft", sizing))
    return stack


def knows_first(tokens: int) -> contextlib.AbstractContextManager[None]:
    """Knows whether the first `tokens` (1 or 2) proposals of a fresh match land."""

    def hazards(self: Governor, shipped: list[float]) -> list[float]:
        if self.run == 0 and Reply.proposal():
            landed = Reply.landing()
            shipped[0] = float(landed >= 1)
            if tokens >= 2 and landed >= 1:
                shipped[1] = float(landed >= 2)
        return shipped

    return reading_the_reply(hazards=hazards)


def knows_every_landing(pipeline_after: int | None = None) -> contextlib.AbstractContextManager[None]:
    """Sizes every draft knowing how many proposals land; with `pipeline_after`, pipelines
    only after that many empty rounds (paused or not)."""

    def sizing(self: Governor, most: int) -> int:
        landed = Reply.landing()
        return cal.saving_draft([float(j < landed) for j in range(most)], self.costs, self.refeeds)

    stack = reading_the_reply(sizing=sizing)
    if pipeline_after is not None:
        stack.enter_context(patched(
            loop, "_may_start_pipeline",
            lambda pipeline, remaining, streak, governor: pipeline and remaining > 1
            and streak > pipeline_after))
    return stack


def confidence_prior() -> contextlib.AbstractContextManager[None]:
    """A fresh match's first proposal lands with prior mean = the model's top-1 probability
    of the last emitted token (shipped: 1/2)."""

    def hazards(self: Governor, shipped: list[float]) -> list[float]:
        assert Reply.confidence is not None  # the row runs only with --confidence
        prior = Reply.confidence[Reply.position() - 1]
        shipped[0] = ((self.landed[0] + cal.PRIOR_WEIGHT * prior)
                      / (self.tried[0] + cal.PRIOR_WEIGHT))
        return shipped

    return reading_the_reply(hazards=hazards)


def refuted_probes_count() -> contextlib.AbstractContextManager[None]:
    """Every settled shadow probe counts as evidence at depths 0 and 1 (shipped: only a
    confirmed one moves the match to run 2, and refuted ones are never reported)."""

    def settle(shadow, context, governor, stats):
        landed = 0
        for position, claimed in enumerate(shadow.proposal[:SHADOW_CONFIRM], shadow.start):
            if position >= len(context):
                return shadow
            if context[position] != claimed:
                break
            landed += 1
        if governor is not None and governor.paused:
            for depth in range(landed + (landed < SHADOW_CONFIRM)):
                governor.tried[cal.depth_bucket(depth)] += 1.0
            for depth in range(landed):
                governor.landed[cal.depth_bucket(depth)] += 1.0
            if landed == SHADOW_CONFIRM:
                governor.run = SHADOW_CONFIRM
                stats.shadow_confirmations += 1
        return None

    return patched(loop, "_settle_probe", settle)


class LongestContextIndex(NgramIndex):
    """Among the last 8 occurrences of the longest matching suffix, the one that shares the
    most tokens before it (up to 64) with the context, the latest on a tie (shipped: the
    latest occurrence)."""

    def __init__(self, ngram_min: int, ngram_max: int) -> None:
        super().__init__(ngram_min, ngram_max)
        self._starts: dict[tuple[int, ...], list[int]] = {}

    def extend(self, context: Sequence[int]) -> None:
        for end in range(max(self.indexed_len - 1, 0), len(context) - 1):
            for n in range(self.ngram_min, min(self.ngram_max, end + 1) + 1):
                self._starts.setdefault(tuple(context[end - n + 1 : end + 1]), []).append(end - n + 1)
        super().extend(context)

    def match(self, context: Sequence[int], max_draft: int,
              cyclic: bool = False) -> tuple[list[int], int]:
        length = len(context)
        for n in range(min(self.ngram_max, max(length - 1, 0)), self.ngram_min - 1, -1):
            starts = self._starts.get(tuple(context[length - n :]))
            if starts:
                start = max(reversed(starts[-8:]),
                            key=lambda start, n=n: shared_before(context, start, length - n))
                proposal = list(context[start + n : min(start + n + max_draft, length)])
                return (cycle_out(context, proposal, max_draft) if cyclic else proposal), n
        return [], 0


def shared_before(context: Sequence[int], start: int, suffix: int) -> int:
    """Tokens (up to 64) right before `start` that equal those right before `suffix`."""
    back = 0
    while (back < 64 and start - 1 - back >= 0
           and context[start - 1 - back] == context[suffix - 1 - back]):
        back += 1
    return back


def longest_context_index() -> contextlib.AbstractContextManager[None]:
    return patched(loop, "NgramIndex", LongestContextIndex)


def model_confidence(replies: Sequence[tuple[str, dict]]) -> dict[tuple[int, ...], list[float]]:
    """Per reply: the bundled torch model's top-1 probability at each reply position."""
    import torch
    from transformers import AutoModelForCausalLM

    from specfleet.models.registry import resolve_model

    folder = resolve_model("smollm2-135m", "torch").path
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    out = {}
    for _, r in replies:
        with torch.inference_mode():
            logits = model(torch.tensor([r["prompt_ids"] + r["reply"]])).logits[0]
        first = len(r["prompt_ids"]) - 1
        out[tuple(r["reply"])] = (logits[first : first + len(r["reply"])].softmax(-1)
                                  .max(-1).values.tolist())
    return out


@contextlib.contextmanager
def patched(owner: object, name: str, value: object) -> Iterator[None]:
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


def depth0_prior(p0: float) -> contextlib.AbstractContextManager[None]:
    """A fresh match's first proposal lands with prior mean `p0` (shipped: 1/2)."""
    shipped = cal.prior_hazard
    return patched(cal, "prior_hazard", lambda bucket: p0 if bucket == 0 else shipped(bucket))


def confirm_fresh(behind_by: float | None) -> contextlib.AbstractContextManager[None]:
    """A fresh match is drafted only once a shadow probe confirmed it (run 2): always
    (`behind_by` None), or while the drafts so far saved less than -`behind_by` steps."""
    budget, record = Governor.budget, Governor.record

    def new_budget(self) -> int:
        realized = getattr(self, "realized", 0.0)
        if self.run == 0 and (behind_by is None or realized < -behind_by):
            self.paused = True
            return 0
        return budget(self)

    def new_record(self, accepted: int, proposed: int) -> None:
        self.realized = (getattr(self, "realized", 0.0) + accepted + 1
                         - cal.width_cost(self.costs, proposed + 1))
        record(self, accepted, proposed)

    stack = contextlib.ExitStack()
    stack.enter_context(patched(Governor, "budget", new_budget))
    stack.enter_context(patched(Governor, "record", new_record))
    return stack


def mean_variance(weight: float) -> contextlib.AbstractContextManager[None]:
    """The draft maximizing expected saving less `weight` x the variance of tokens landed."""

    def saving(alive: Sequence[float], costs: Sequence[float], refeeds: bool = False) -> int:
        best_k, best, landed, pairs = 0, 0.0, 0.0, 0.0
        for k in range(1, len(alive) + 1):
            landed += alive[k - 1]
            pairs += (k - 1) * alive[k - 1]  # sum over i < j of S(j)
            variance = landed + 2 * pairs - landed * landed
            cost = cal.width_cost(costs, k + 1)
            if refeeds:
                cost += cal.expected_refeed_cost(alive[:k], costs)
            score = 1.0 + landed - cost - weight * variance
            if score > best + 1e-12:
                best_k, best = k, score
        return best_k

    return patched(cal, "saving_draft", saving)


def expected_loss(weight: float) -> contextlib.AbstractContextManager[None]:
    """The draft maximizing expected saving less `weight` x its expected loss against plain
    decoding (E[max(0, cost(k + 1) - 1 - landed)]: only the rounds that cost more than the
    plain steps they replace)."""

    def saving(alive: Sequence[float], costs: Sequence[float], refeeds: bool = False) -> int:
        best_k, best, landed = 0, 0.0, 0.0
        for k in range(1, len(alive) + 1):
            landed += alive[k - 1]
            cost = cal.width_cost(costs, k + 1)
            if refeeds:
                cost += cal.expected_refeed_cost(alive[:k], costs)
            before = [1.0, *alive[:k], 0.0]
            loss = sum((before[a] - before[a + 1]) * max(0.0, cost - 1.0 - a)
                       for a in range(k + 1))
            score = 1.0 + landed - cost - weight * loss
            if score > best + 1e-12:
                best_k, best = k, score
        return best_k

    return patched(cal, "saving_draft", saving)


def fresh_short_ngram(prior: float | None) -> contextlib.AbstractContextManager[None]:
    """A fresh match found on the shortest n-gram (a 2-gram: the lookup tries 3 first) is
    skipped (`prior` None) or drafted with a first-proposal prior of `prior` (shipped: 1/2)."""
    size = Governor.size

    def new_size(self: Governor, proposal: Sequence[int], ngram: int) -> int:
        if self.run > 0 or ngram > PromptLookupConfig().ngram_min or not proposal:
            return size(self, proposal, ngram)
        if prior is None:
            return 0
        with depth0_prior(prior):
            return size(self, proposal, ngram)

    return patched(Governor, "size", new_size)


def growth_cap(base: int, factor: float) -> contextlib.AbstractContextManager[None]:
    """A draft of at most `base` + `factor` x the tokens the match has held (a doubling
    search over an unknown copy length), the shipped rule sizing it within that cap."""
    size = Governor.size

    def new_size(self: Governor, proposal: Sequence[int], ngram: int) -> int:
        cap = base + int(factor * self.run)
        return size(self, proposal[:cap], ngram)

    return patched(Governor, "size", new_size)


def one_gram_index(rule: Callable[[], contextlib.AbstractContextManager[None]] | None = None
                   ) -> contextlib.AbstractContextManager[None]:
    """The replayed policy's index also matches single tokens (ngram_min 1, as transformers'
    lookup falls back to), under the shipped rule or `rule`; the oracle and plain stay on
    the shipped index, so efficiencies keep their denominators."""
    shipped = replay

    def new_replay(*args, lookup=None, **kwargs):
        if lookup is not None:
            lookup = dataclasses.replace(lookup, ngram_min=1)
        return shipped(*args, lookup=lookup, **kwargs)

    stack = contextlib.ExitStack()
    stack.enter_context(patched(sys.modules[__name__], "replay", new_replay))
    if rule is not None:
        stack.enter_context(rule())
    return stack


def fresh_one_gram(prior: float | None = None, learned: float = 0.0,
                   recovery: int = 0) -> contextlib.AbstractContextManager[None]:
    """How a fresh match found on one token is drafted: skipped (`prior` None), at a
    first-proposal prior `prior`, with its own landing rate learned from this reply's
    one-token drafts over `learned` proposals' worth of that prior (0: not learned), or
    (`recovery` > 0) only within `recovery` lookups of a rejection that ended a match that
    had held 2+ tokens (an edit inside a copy), at the shipped prior."""
    size, record = Governor.size, Governor.record

    def new_size(self: Governor, proposal: Sequence[int], ngram: int) -> int:
        left = getattr(self, "recovering", 0)
        self.recovering = max(0, left - 1)
        self.one_gram = self.run == 0 and ngram == 1 and bool(proposal)
        if not self.one_gram:
            return size(self, proposal, ngram)
        if recovery:
            return size(self, proposal, ngram) if left > 0 else 0
        if prior is None:
            return 0
        tried, landed = getattr(self, "one_gram_counts", (0.0, 0.0))
        rate = (landed + learned * prior) / (tried + learned) if learned else prior
        hazards = self.hazards()
        hazards[0] = rate
        return cal.saving_draft(cal.survival(hazards, 0, len(proposal)), self.costs,
                                self.refeeds)

    def new_record(self: Governor, accepted: int, proposed: int) -> None:
        if getattr(self, "one_gram", False) and proposed:
            tried, landed = getattr(self, "one_gram_counts", (0.0, 0.0))
            self.one_gram_counts = (cal.DECAY * tried + 1, cal.DECAY * landed + (accepted > 0))
        if accepted < proposed and self.run + accepted >= 2:
            self.recovering = recovery
        self.one_gram = False
        record(self, accepted, proposed)

    stack = contextlib.ExitStack()
    stack.enter_context(patched(Governor, "size", new_size))
    stack.enter_context(patched(Governor, "record", new_record))
    return stack


def pipeline_after(empty: int, sync_cost_above: float = 0.0) -> contextlib.AbstractContextManager[None]:
    """Calibrated pipelines again after `empty` empty rounds in a row (shipped: 2, the
    spec's third empty round), only where a synchronous step costs more than
    `sync_cost_above` pipelined steps (the table's width 1); elsewhere the shipped rule."""
    shipped = loop._may_start_pipeline

    def rule(pipeline: bool, remaining: int, streak: int, governor) -> bool:
        if (isinstance(governor, Governor) and pipeline and remaining > 1
                and governor.costs[0] > sync_cost_above):
            return streak > empty or governor.probes_while_paused()
        return shipped(pipeline, remaining, streak, governor)

    return patched(loop, "_may_start_pipeline", rule)


def pipeline_when_sync_costs_more(scale: float = 1.0) -> contextlib.AbstractContextManager[None]:
    """Calibrated pipelines again after one empty round unless a synchronous round is worth
    its extra cost: the chance a fresh match's first proposal lands (hazard at depth 0) x
    what drafting it a step earlier saves (1 - the cost of one more row) x `scale` above
    cost(1) - 1; then the shipped rule (third empty round)."""
    shipped = loop._may_start_pipeline

    def rule(pipeline: bool, remaining: int, streak: int, governor) -> bool:
        if isinstance(governor, Governor) and pipeline and remaining > 1 and streak > 0:
            costs = governor.costs
            row = (costs[1] - costs[0]) if len(costs) > 1 else costs[0]
            if scale * governor.hazards()[0] * (1.0 - row) < costs[0] - 1.0:
                return True
        return shipped(pipeline, remaining, streak, governor)

    return patched(loop, "_may_start_pipeline", rule)


def sync_while_matches_land(decay: float, margin: float = 0.0) -> contextlib.AbstractContextManager[None]:
    """An empty round stays synchronous while fresh matches whose first proposal lands come
    often enough to pay for it: over this reply's positions outside a copy (the proposal
    before missed or was none), the decayed rate of those where the index's proposal landed
    its first token, x what drafting a step earlier saves (1 - a row's cost past width 8),
    above cost(1) - 1 + `margin`. A match seen while a step is in flight is verified a step
    late; one seen from a synchronous position is drafted at once."""
    shipped = loop._may_start_pipeline
    state: dict[str, Any] = {"reply": None}

    def rate() -> float:
        if state["reply"] is not Reply.tokens:
            state.update(reply=Reply.tokens, seen=1, landed=0.0, fresh=0.0)
        at, tokens = Reply.proposals, Reply.tokens
        for p in range(state["seen"], min(Reply.position(), len(tokens))):
            if not at[p - 1] or at[p - 1][0] != tokens[p - 1]:  # outside a copy
                state["landed"] = decay * state["landed"] + float(bool(at[p]) and at[p][0] == tokens[p])
                state["fresh"] = decay * state["fresh"] + 1.0
        state["seen"] = max(state["seen"], Reply.position())
        return state["landed"] / (state["fresh"] + 2.0)

    def rule(pipeline: bool, remaining: int, streak: int, governor) -> bool:
        if isinstance(governor, Governor) and pipeline and remaining > 1:
            costs = governor.costs
            row = cal.width_cost(costs, 9) - cal.width_cost(costs, 8)
            if rate() * (1.0 - row) > costs[0] - 1.0 + margin:
                return False
        return shipped(pipeline, remaining, streak, governor)

    stack = reading_the_reply()
    stack.enter_context(patched(loop, "_may_start_pipeline", rule))
    return stack


def _with_knowledge(rule: Callable[[], contextlib.AbstractContextManager[None]]
                    ) -> contextlib.AbstractContextManager[None]:
    """`rule` over a policy that knows every landing: what the rule is worth at best."""
    stack = contextlib.ExitStack()
    stack.enter_context(knows_every_landing())
    stack.enter_context(rule())
    return stack


def resync(gap: int, inherit: bool, prior: float = 0.5) -> contextlib.AbstractContextManager[None]:
    """A fresh match whose proposal starts at most `gap` tokens past where the last drafted
    match broke, in the same source (an edit inside a copy, the copy resuming), is told
    apart from a fresh match elsewhere: with `inherit` it resumes the broken match's run
    (its depth's hazards); else its first proposal lands at its own rate, learned from this
    reply's resyncs over two proposals' worth of `prior`."""
    match, size, record = NgramIndex.match, Governor.size, Governor.record
    seen: dict[str, int | None] = {"source": None}

    def new_match(self, context, max_draft, cyclic=False):
        proposal, n = match(self, context, max_draft, cyclic)
        start = self._maps[n].get(tuple(context[len(context) - n:])) if n else None
        seen["source"] = None if start is None else start + n
        return proposal, n

    def new_size(self: Governor, proposal: Sequence[int], ngram: int) -> int:
        source, broke = seen["source"], getattr(self, "broke_at", None)
        self.drafting_from = source
        self.resyncing = (self.run == 0 and bool(proposal) and source is not None
                          and broke is not None and 0 <= source - broke <= gap)
        if not self.resyncing:
            return size(self, proposal, ngram)
        if inherit:
            self.run = getattr(self, "broken_run", 0)
            return size(self, proposal, ngram)
        tried, landed = getattr(self, "resync_counts", (0.0, 0.0))
        hazards = self.hazards()
        hazards[0] = (landed + 2.0 * prior) / (tried + 2.0)
        return cal.saving_draft(cal.survival(hazards, 0, len(proposal)), self.costs,
                                self.refeeds)

    def new_record(self: Governor, accepted: int, proposed: int) -> None:
        if getattr(self, "resyncing", False) and not inherit:
            tried, landed = getattr(self, "resync_counts", (0.0, 0.0))
            self.resync_counts = (cal.DECAY * tried + 1, cal.DECAY * landed + (accepted > 0))
        source = getattr(self, "drafting_from", None)
        if accepted < proposed and source is not None:
            self.broke_at, self.broken_run = source + accepted, self.run + accepted
        self.resyncing = False
        record(self, accepted, proposed)

    stack = contextlib.ExitStack()
    stack.enter_context(patched(NgramIndex, "match", new_match))
    stack.enter_context(patched(Governor, "size", new_size))
    stack.enter_context(patched(Governor, "record", new_record))
    return stack


def paused_resync(gap: int, run: int | None) -> contextlib.AbstractContextManager[None]:
    """While paused, a match whose proposal starts at most `gap` tokens past where the last
    drafted match broke (the copy resuming after an edit) is drafted at once, without a
    shadow probe, as a match that has held `run` tokens (None: the broken match's run)."""
    look_up, record = loop._look_up, Governor.record

    def new_look_up(governor, index, context, budget, shadow):
        broke = getattr(governor, "broke_at", None)
        if (budget == 0 and isinstance(governor, Governor) and governor.paused
                and broke is not None and index is not None):
            index.extend(context)
            proposal, n = index.match(context, governor.max_draft, governor.cycles)
            start = index._maps[n].get(tuple(context[len(context) - n:])) if n else None
            if start is not None and 0 <= start + n - broke <= gap:
                governor.paused = False
                governor.run = governor.broken_run if run is None else run
                governor.drafting_from = start + n
                return proposal[: governor.size(proposal, n)], shadow
        governor.drafting_from = None
        draft, shadow = look_up(governor, index, context, budget, shadow)
        if draft and index is not None:
            n = next((m for m in range(index.ngram_max, index.ngram_min - 1, -1)
                      if tuple(context[len(context) - m:]) in index._maps[m]), 0)
            start = index._maps[n].get(tuple(context[len(context) - n:])) if n else None
            governor.drafting_from = None if start is None else start + n
        return draft, shadow

    def new_record(self: Governor, accepted: int, proposed: int) -> None:
        source = getattr(self, "drafting_from", None)
        if accepted < proposed and source is not None:
            self.broke_at, self.broken_run = source + accepted, self.run + accepted
        record(self, accepted, proposed)

    stack = contextlib.ExitStack()
    stack.enter_context(patched(loop, "_look_up", new_look_up))
    stack.enter_context(patched(Governor, "record", new_record))
    return stack


def prompt_evidence(prompt: Sequence[int], weight: float, depth0_only: bool = False
                    ) -> tuple[list[float], list[float]]:
    """Per depth bucket, (tried, landed) from drafting the prompt against itself: at each
    position the index over the tokens before it proposes, every proposal is verified whole
    against what follows, and the walk goes on after the first miss (as a rejected draft's
    bonus row). Each bucket's counts are scaled to at most `weight` proposals."""
    lookup = PromptLookupConfig(max_draft=32)
    index = NgramIndex(lookup.ngram_min, lookup.ngram_max)
    tried, landed = [0.0] * cal.BUCKETS, [0.0] * cal.BUCKETS
    i = 1
    while i < len(prompt):
        context = prompt[:i]
        index.extend(context)
        proposal = index.find(context, lookup.max_draft)
        held = landed_count(proposal, prompt, i)
        for depth in range(min(held + 1, len(proposal), len(prompt) - i)):
            bucket = cal.depth_bucket(depth)
            if depth0_only and bucket:
                break
            tried[bucket] += 1
            landed[bucket] += depth < held
        i += held + 1
    scale = [min(1.0, weight / t) if t else 0.0 for t in tried]
    return ([t * k for t, k in zip(tried, scale, strict=True)],
            [a * k for a, k in zip(landed, scale, strict=True)])


def prompt_prior(weight: float, depth0_only: bool = False
                 ) -> contextlib.AbstractContextManager[None]:
    """Hazards start from the prompt drafted against itself (`prompt_evidence`), worth at
    most `weight` proposals a bucket, beside the shipped prior; decayed like the rest."""
    init = Governor.__init__

    def new_init(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        self.tried, self.landed = prompt_evidence(Reply.prompt, weight, depth0_only)

    return patched(Governor, "__init__", new_init)


class AgreementIndex(NgramIndex):
    """The shipped index; each match also notes how many tokens before the matched n-gram
    agree with the context's (`shared_before`), in `agreement`."""

    agreement = 0

    def match(self, context: Sequence[int], max_draft: int,
              cyclic: bool = False) -> tuple[list[int], int]:
        proposal, ngram = super().match(context, max_draft, cyclic)
        AgreementIndex.agreement = 0
        if ngram:
            start = self._maps[ngram][tuple(context[len(context) - ngram :])]
            AgreementIndex.agreement = shared_before(context, start, len(context) - ngram)
        return proposal, ngram


def agreement_held(least: int) -> contextlib.AbstractContextManager[None]:
    """A match whose context agrees for `least` or more tokens before its n-gram counts
    that many tokens as held (its run), as if it had been drafted through them."""
    size = Governor.size

    def new_size(self, proposal: Sequence[int], ngram: int) -> int:
        if proposal and AgreementIndex.agreement >= least:
            self.run = max(self.run, AgreementIndex.agreement)
        return size(self, proposal, ngram)

    stack = contextlib.ExitStack()
    stack.enter_context(patched(loop, "NgramIndex", AgreementIndex))
    stack.enter_context(patched(Governor, "size", new_size))
    return stack


def decayed_when(per_round: Callable[[int, bool], float]) -> contextlib.AbstractContextManager[None]:
    """Evidence fades by `per_round(landed, missed)` per drafted round (shipped: DECAY each)."""

    def count(self, run: int, landed: int, missed: bool) -> None:
        factor = per_round(landed, missed)
        self.tried = [factor * n for n in self.tried]
        self.landed = [factor * n for n in self.landed]
        for depth in range(run, run + landed + missed):
            self.tried[cal.depth_bucket(depth)] += 1.0
        for depth in range(run, run + landed):
            self.landed[cal.depth_bucket(depth)] += 1.0

    return patched(Governor, "_count", count)


def line_tokens() -> frozenset[int]:
    """The bundled model's token ids whose text holds a newline."""
    from tokenizers import Tokenizer

    from specfleet.models.registry import resolve_model

    folder = resolve_model("smollm2-135m", "torch", measure=False).path
    tokenizer = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
    return frozenset(i for i in range(tokenizer.get_vocab_size()) if "\n" in tokenizer.decode([i]))


def line_boundary(factor: float, on_newline: bool, after_newline: bool
                  ) -> contextlib.AbstractContextManager[None]:
    """A proposal that is (`on_newline`) or follows (`after_newline`) a newline token misses
    `factor` times as often as its depth's hazard says: copies break at line ends."""
    newline = line_tokens()

    def size(self, proposal: Sequence[int], ngram: int) -> int:
        if not proposal:
            self.run = 0
            return 0
        hazards, alive, out = self.hazards(), 1.0, []
        before = Reply.context[-1] if Reply.context else -1
        for j, token in enumerate(proposal):
            hazard = hazards[cal.depth_bucket(self.run + j)]
            if (on_newline and token in newline) or (after_newline and before in newline):
                hazard = max(0.0, 1.0 - factor * (1.0 - hazard))
            alive *= hazard
            out.append(alive)
            before = token
        return cal.saving_draft(out, self.costs, self.refeeds)

    return patched(Governor, "size", size)


def token_breaks(weight: float, least_depth: int = 0) -> contextlib.AbstractContextManager[None]:
    """A proposal of a token this reply's drafts broke at before lands as often as that
    token did: per token id, its landings and misses (a miss counted only where the match
    had held `least_depth` tokens) update its depth's hazard as a Beta worth `weight`
    proposals. A renamed identifier, a separator the reply rewrites: an edit that recurs."""
    init, size, record = Governor.__init__, Governor.size, Governor.record
    tried: dict[int, float] = {}
    landed: dict[int, float] = {}
    last: list[int] = []

    def new_init(self: Governor, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        tried.clear(), landed.clear()  # one governor per replayed reply

    def new_size(self: Governor, proposal: Sequence[int], ngram: int) -> int:
        last[:] = proposal
        if not proposal:
            return size(self, proposal, ngram)
        hazards, alive, out = self.hazards(), 1.0, []
        for j, token in enumerate(proposal):
            hazard = hazards[cal.depth_bucket(self.run + j)]
            if token in tried:
                hazard = (landed.get(token, 0.0) + weight * hazard) / (tried[token] + weight)
            alive *= hazard
            out.append(alive)
        return cal.saving_draft(out, self.costs, self.refeeds)

    def new_record(self: Governor, accepted: int, proposed: int) -> None:
        for token in last[:accepted]:
            tried[token] = tried.get(token, 0.0) + 1.0
            landed[token] = landed.get(token, 0.0) + 1.0
        if accepted < proposed and self.run + accepted >= least_depth:
            tried[last[accepted]] = tried.get(last[accepted], 0.0) + 1.0
        record(self, accepted, proposed)

    stack = contextlib.ExitStack()
    stack.enter_context(patched(Governor, "__init__", new_init))
    stack.enter_context(patched(Governor, "size", new_size))
    stack.enter_context(patched(Governor, "record", new_record))
    return stack


VARIANTS: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "a token the drafts broke at (weight 2)": lambda: token_breaks(2.0),
    "a token the drafts broke at (weight 1)": lambda: token_breaks(1.0),
    "a token the drafts broke at past depth 2 (weight 2)": lambda: token_breaks(2.0, 2),
    "a token the drafts broke at past depth 8 (weight 2)": lambda: token_breaks(2.0, 8),
    "agreement before the n-gram counts as held (1 or more)": lambda: agreement_held(1),
    "agreement before the n-gram counts as held (3 or more)": lambda: agreement_held(3),
    "evidence decays only when a draft misses (0.8)": lambda: decayed_when(
        lambda landed, missed: 0.8 if missed else 1.0),
    "evidence decays only when a draft misses (0.6)": lambda: decayed_when(
        lambda landed, missed: 0.6 if missed else 1.0),
    "evidence decays per emitted token (0.9)": lambda: decayed_when(
        lambda landed, missed: 0.9 ** (landed + 1)),
    "evidence decays per emitted token (0.95)": lambda: decayed_when(
        lambda landed, missed: 0.95 ** (landed + 1)),
    "a newline proposal misses 2x as often": lambda: line_boundary(2.0, True, False),
    "a proposal after a newline misses 2x as often": lambda: line_boundary(2.0, False, True),
    "a proposal after a newline misses 4x as often": lambda: line_boundary(4.0, False, True),
    "a proposal after a newline misses 8x as often": lambda: line_boundary(8.0, False, True),
    "a newline proposal or the one after misses 4x as often": lambda: line_boundary(4.0, True, True),
    "prompt-learned hazards (weight 1)": lambda: prompt_prior(1.0),
    "prompt-learned hazards (weight 2)": lambda: prompt_prior(2.0),
    "prompt-learned hazards (weight 4)": lambda: prompt_prior(4.0),
    "prompt-learned fresh hazard (weight 2)": lambda: prompt_prior(2.0, True),
    "prompt-learned fresh hazard (weight 4)": lambda: prompt_prior(4.0, True),
    "paused: a resync within 4 drafts at once (run 2)": lambda: paused_resync(4, 2),
    "paused: a resync within 8 drafts at once (run 2)": lambda: paused_resync(8, 2),
    "paused: a resync within 4 drafts at once (the broken run)": lambda: paused_resync(4, None),
    "paused: a resync within 8 drafts at once (the broken run)": lambda: paused_resync(8, None),

    "resync within 2, learned from 1/2": lambda: resync(2, False),
    "resync within 4, learned from 1/2": lambda: resync(4, False),
    "resync within 4, learned from 3/4": lambda: resync(4, False, 0.75),
    "resync within 2, inherits the run": lambda: resync(2, True),
    "resync within 4, inherits the run": lambda: resync(4, True),

    "stays synchronous while fresh matches land (decay 0.8)": lambda: sync_while_matches_land(0.8),
    "stays synchronous while fresh matches land (decay 0.9)": lambda: sync_while_matches_land(0.9),
    "stays synchronous while fresh matches land (decay 0.97)": lambda: sync_while_matches_land(0.97),
    "stays synchronous while fresh matches land (decay 0.9, margin 0.1)": lambda: sync_while_matches_land(
        0.9, 0.1),
    "knows every landing, stays synchronous while fresh matches land (0.9)": lambda: _with_knowledge(
        lambda: sync_while_matches_land(0.9)),
    "pipelines when a sync round is not worth its cost": pipeline_when_sync_costs_more,
    "pipelines when a sync round is not worth its cost (x0.5)": lambda: pipeline_when_sync_costs_more(0.5),
    "pipelines when a sync round is not worth its cost (x2)": lambda: pipeline_when_sync_costs_more(2.0),

    "pipelines after 1 empty round": lambda: pipeline_after(0),
    "pipelines after 2 empty rounds": lambda: pipeline_after(1),
    "pipelines after 4 empty rounds": lambda: pipeline_after(3),
    "pipelines after 1 empty round where a sync step costs > 1.05": lambda: pipeline_after(0, 1.05),
    "pipelines after 1 empty round where a sync step costs > 1.1": lambda: pipeline_after(0, 1.1),

    "1-gram index, shipped rule": one_gram_index,
    "1-gram index, fresh 1-gram matches skipped": lambda: one_gram_index(
        lambda: fresh_one_gram(None)),
    "1-gram index, fresh 1-gram at prior 1/4": lambda: one_gram_index(
        lambda: fresh_one_gram(1 / 4)),
    "1-gram index, fresh 1-gram at prior 1/8": lambda: one_gram_index(
        lambda: fresh_one_gram(1 / 8)),
    "1-gram index, fresh 1-gram learned from 1/2 (weight 2)": lambda: one_gram_index(
        lambda: fresh_one_gram(1 / 2, learned=2.0)),
    "1-gram index, fresh 1-gram learned from 1/4 (weight 2)": lambda: one_gram_index(
        lambda: fresh_one_gram(1 / 4, learned=2.0)),
    "1-gram index, fresh 1-gram only within 2 lookups of an edit": lambda: one_gram_index(
        lambda: fresh_one_gram(recovery=2)),
    "1-gram index, fresh 1-gram only within 4 lookups of an edit": lambda: one_gram_index(
        lambda: fresh_one_gram(recovery=4)),

    "shipped (expected loss 0.5)": contextlib.nullcontext,
    "expected saving only (before)": lambda: expected_loss(0.0),
    "fresh prior 1/3": lambda: depth0_prior(1 / 3),
    "fresh prior 1/4": lambda: depth0_prior(1 / 4),
    "confirm every fresh match": lambda: confirm_fresh(None),
    "confirm when behind by 1 step": lambda: confirm_fresh(1.0),
    "confirm when behind by 0.5 step": lambda: confirm_fresh(0.5),
    "confirm when behind by 2 steps": lambda: confirm_fresh(2.0),
    "confirm when behind by 1.5 steps": lambda: confirm_fresh(1.5),
    "confirm when behind by 3 steps": lambda: confirm_fresh(3.0),
    "confirm when behind by 4 steps": lambda: confirm_fresh(4.0),
    "confirm until the drafts are ahead": lambda: confirm_fresh(-1e-9),
    "mean-variance 0.02": lambda: mean_variance(0.02),
    "mean-variance 0.05": lambda: mean_variance(0.05),
    "mean-variance 0.1": lambda: mean_variance(0.1),
    "expected loss 0.25": lambda: expected_loss(0.25),
    "expected loss 1": lambda: expected_loss(1.0),
    "refuted probes count": refuted_probes_count,
    "longest-context match": longest_context_index,
    "cap 2 + 2 x held": lambda: growth_cap(2, 2),
    "cap 4 + 2 x held": lambda: growth_cap(4, 2),
    "cap 8 + 2 x held": lambda: growth_cap(8, 2),
    "cap 4 + 4 x held": lambda: growth_cap(4, 4),
    "fresh 2-gram matches skipped": lambda: fresh_short_ngram(None),
    "fresh 2-gram matches at prior 1/4": lambda: fresh_short_ngram(1 / 4),
    "knows if a fresh match's 1st proposal lands": lambda: knows_first(1),
    "knows if its first 2 land": lambda: knows_first(2),
    "knows every landing": knows_every_landing,
    "knows every landing, pipelines after 4 empty rounds": lambda: knows_every_landing(4),
}


def loop_aware_bound(prompt: Sequence[int], reply: Sequence[int], stop_reason: str,
                     max_tokens: int, costs: Sequence[float]) -> float:
    """The cheapest schedule that knows the reply but runs in the loop's two modes: from a
    synchronous position, a verify of the index's proposal there, a synchronous step, or a
    pipelined run started at a synchronous step's price; a pipelined position (its token in
    flight, its proposal one token late) either submits the next step (1) or drains into a
    synchronous position (0). The oracle is the same program without the modes."""
    targets = [*reply, -1] if stop_reason == "eos" and reply else list(reply)
    at = proposals(prompt, reply, PromptLookupConfig(max_draft=ORACLE_MAX_DRAFT), len(targets))
    end, step = len(targets), cal.width_cost(costs, 1)
    synchronous, pipelined = [0.0] * (end + 1), [0.0] * (end + 1)
    for i in range(end - 1, 0, -1):
        pipelined[i] = min(1.0 + pipelined[i + 1] if i + 1 < end else 0.0, synchronous[i + 1])
        landed = 0
        while (landed < len(at[i]) and i + landed < end
               and at[i][landed] == targets[i + landed]):
            landed += 1
        best = min(step + synchronous[i + 1], step + pipelined[i])
        for k in range(1, min(len(at[i]), max_tokens - i - 1) + 1):
            emitted = min(min(landed, k) + 1, end - i)
            best = min(best, cal.width_cost(costs, k + 1) + synchronous[i + emitted])
        synchronous[i] = best
    return synchronous[1] if end > 1 else 0.0


def confidence_auc(replies: Sequence[tuple[str, dict]],
                   confidence: dict[tuple[int, ...], list[float]]) -> tuple[float, int, float]:
    """How well the model's confidence in the last token tells whether a fresh match's first
    proposal lands: (AUC, fresh matches, their landing rate). A fresh match: the index
    proposes at a position where the proposal before it, if any, missed its first token."""
    landed, missed = [], []
    for _, r in replies:
        reply, at = r["reply"], proposals(r["prompt_ids"], r["reply"],
                                          PromptLookupConfig(max_draft=32), len(r["reply"]))
        for i in range(1, len(reply)):
            if at[i] and (not at[i - 1] or at[i - 1][0] != reply[i - 1]):
                (landed if at[i][0] == reply[i] else missed).append(confidence[tuple(reply)][i - 1])
    pairs = sum((a > b) + 0.5 * (a == b) for a in landed for b in missed)
    fresh = len(landed) + len(missed)
    return pairs / (len(landed) * len(missed)), fresh, len(landed) / fresh


def lengths(text: str) -> list[int]:
    """`--short 20,32,48`: reply lengths, each at least 1."""
    return [positive_int(item) for item in text.split(",")]


def main() -> None:
    parser = BenchParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", required=True,
                        help="the set (a label: tuning, heldout) the --db in the same place joins")
    parser.add_argument("--db", action="append", required=True,
                        help="a store of plain replies; repeat with --set and --matrix for each")
    parser.add_argument("--matrix", action="append", required=True,
                        help="the matrix of plain replies read from the --db in the same place")
    parser.add_argument("--confidence", action="store_true",
                        help="add the model-confidence row (loads the bundled torch model)")
    parser.add_argument("--short", default=[], type=lengths,
                        help="comma list of reply lengths: a second table, each variant's decode "
                             "speed-up over plain on every reply cut to that length")
    parser.add_argument("--only", action="append", default=[],
                        help="run only the variants whose label contains this (repeatable)")
    args = parser.parse_args()
    one_per(parser, "--db", args.db, "--set", args.set)
    one_per(parser, "--matrix", args.matrix, "--set", args.set)
    if args.only:
        for label in [v for v in VARIANTS if not any(o in v for o in args.only)]:
            del VARIANTS[label]
    replies = [(name, reply) for name, db, matrix in zip(args.set, args.db, args.matrix, strict=True)
               for reply in load_replies(db, matrix)]
    confidence = model_confidence(replies) if args.confidence else {}
    if args.confidence:
        VARIANTS["fresh prior = the model's confidence in the last token"] = confidence_prior
        auc, fresh, rate = confidence_auc(replies, confidence)
        print(f"The model's confidence in the last token against a fresh match's first proposal "
              f"landing: AUC {auc:.2f} over {fresh} fresh matches (landing rate {rate:.2f}).\n")
    tables = [table_ratio(spec) for spec in TABLES]
    bounds = {}
    for name, r in replies:
        for table, costs, pipeline in tables:
            kwargs = {"stop_reason": r["stop"], "max_tokens": r["max_tokens"], "costs": costs}
            bound = oracle(r["prompt_ids"], r["reply"],
                           lookup=PromptLookupConfig(max_draft=ORACLE_MAX_DRAFT), **kwargs)
            plain = replay(r["prompt_ids"], r["reply"], lookup=None, pipeline=pipeline,
                           **kwargs).cost_steps
            bounds[(name, r["prompt"], table)] = (bound, plain)
    groups = [(s, kind) for s in dict.fromkeys(args.set) for kind in ("copy", "prose")]
    aware: dict[tuple[str, str], list[tuple[float, float]]] = {g: [] for g in groups}
    for name, r in replies:
        for table, costs, pipeline in tables:
            bound, plain = bounds[(name, r["prompt"], table)]
            # A host that never pipelines has one mode, whose cheapest schedule is the oracle's.
            cost = loop_aware_bound(r["prompt_ids"], r["reply"], r["stop"], r["max_tokens"],
                                    costs) if pipeline else bound.cost_steps
            aware[(name, kind_of(r["prompt"]))].append((bound.efficiency(cost), plain / cost))
    print("| variant | " + " | ".join(f"{s} {k}: mean efficiency (worst speed-up)"
                                      for s, k in groups) + " |")
    print("|---" * (len(groups) + 1) + "|")
    for label, variant in VARIANTS.items():
        cells: dict[tuple[str, str], list[tuple[float, float]]] = {g: [] for g in groups}
        with variant():
            for name, r in replies:
                Reply.prompt, Reply.tokens = r["prompt_ids"], r["reply"]
                Reply.proposals = proposals(r["prompt_ids"], r["reply"],
                                            PromptLookupConfig(max_draft=32), len(r["reply"]))
                Reply.confidence = confidence.get(tuple(r["reply"]))
                for table, costs, pipeline in tables:
                    lookup = PromptLookupConfig(max_draft=32, policy="calibrated", costs=costs)
                    done = replay(r["prompt_ids"], r["reply"], stop_reason=r["stop"],
                                  max_tokens=r["max_tokens"], lookup=lookup, costs=costs,
                                  pipeline=pipeline)
                    bound, plain = bounds[(name, r["prompt"], table)]
                    cells[(name, kind_of(r["prompt"]))].append(
                        (bound.efficiency(done.cost_steps), plain / done.cost_steps))
        row = [f"{statistics.mean(e for e, _ in cells[g]):.3f} ({min(s for _, s in cells[g]):.3f})"
               for g in groups]
        print(f"| {label} | " + " | ".join(row) + " |", flush=True)
    row = [f"{statistics.mean(e for e, _ in aware[g]):.3f} ({min(s for _, s in aware[g]):.3f})"
           for g in groups]
    print("| loop-aware bound (knows the reply, in the loop's two modes) | "
          + " | ".join(row) + " |")
    if args.short:
        short_replies(args.short, replies, tables)


def short_replies(lengths: Sequence[int], replies: Sequence[tuple[str, dict]],
                  tables: Sequence[tuple[str, Sequence[float], bool]]) -> None:
    """Each variant's decode speed-up over plain on the first n tokens of every reply (all
    sets pooled): geometric mean and worst over replies x tables, copy-heavy and prose apart.
    A short reply is where one rejected draft shows."""
    cols = [(n, kind) for n in lengths for kind in ("copy", "prose")]
    print("\n| variant | " + " | ".join(f"{n} tokens, {k}: geo-mean (worst)" for n, k in cols)
          + " |")
    print("|---" * (len(cols) + 1) + "|")
    for label, variant in VARIANTS.items():
        if variant is confidence_prior:
            continue  # its confidences are for whole replies only
        speedups: dict[tuple[int, str], list[float]] = {c: [] for c in cols}
        with variant():
            for _, r in replies:
                Reply.prompt, Reply.confidence = r["prompt_ids"], None
                for n in lengths:
                    if len(r["reply"]) < n:
                        continue
                    Reply.tokens = r["reply"][:n]
                    Reply.proposals = proposals(r["prompt_ids"], Reply.tokens,
                                                PromptLookupConfig(max_draft=32), n)
                    for _, costs, pipeline in tables:
                        kwargs = {"stop_reason": "max_tokens", "max_tokens": n, "costs": costs,
                                  "pipeline": pipeline}
                        plain = replay(r["prompt_ids"], Reply.tokens, lookup=None, **kwargs)
                        done = replay(r["prompt_ids"], Reply.tokens, **kwargs, lookup=PromptLookupConfig(
                            max_draft=32, policy="calibrated", costs=costs))
                        speedups[(n, kind_of(r["prompt"]))].append(
                            plain.cost_steps / done.cost_steps)
        print(f"| {label} | " + " | ".join(
            f"{statistics.geometric_mean(speedups[c]):.3f} ({min(speedups[c]):.3f})"
            for c in cols) + " |", flush=True)


if __name__ == "__main__":
    run_main(main)
