"""The oracle bound: the cheapest drafting schedule for a known greedy reply.

A greedy run's reply is fixed, so at every position the n-gram index's proposal (spec 1.4,
continued as its cycle where the reply is caught in a loop: the longest any policy may
draft, `lookup.cycle_out`) and how many of its tokens would land are known. The cheapest way
to produce the whole reply under a width-cost table is then a dynamic program over reply
positions: from position i, either a plain step (one token; the cheaper of a pipelined step,
1, and a synchronous one, `cost(1)`), or a verify of the proposal's first k tokens (k =
1..max_draft, at most what the index proposes and what the token limit leaves room for) that
costs `cost(k + 1)` and emits the landed proposals plus the bonus row, plus a re-feed of the
kept tokens when the model's rollback re-feeds (`refeeds`) and some proposal was rejected in
a round that does not end the reply (the loop re-feeds nothing once the reply has ended).
Rows are priced as `predict.trace_cost` prices a replayed round, so no policy's replayed
cost can be lower.

The oracle skips the pipeline's mechanics: the drain of an in-flight step before a verify,
the synchronous rounds before pipelining resumes, a step submitted before the EOS is read.
It is a ceiling for prompt lookup on that host, not a schedule the loop could always run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specfleet.engine.calibrated import width_cost
from specfleet.engine.config import PromptLookupConfig
from specfleet.engine.lookup import NgramIndex

_EOS = -1  # stands for the EOS after a reply that ended on one; matches no proposal


@dataclass(frozen=True)
class OracleStep:
    """One round of the oracle's schedule.

    Attributes:
        position: tokens emitted before the round (the prefill token included).
        draft: proposals verified (0: a plain step).
        accepted: proposals that landed.
        emitted: positions the round advanced (a verify's bonus row included; the EOS row
            of a reply that ended on one counts as a position).
        cost_steps: its cost in pipelined plain steps, a re-feed included.
    """

    position: int
    draft: int
    accepted: int
    emitted: int
    cost_steps: float


@dataclass(frozen=True)
class OracleSchedule:
    """The cheapest schedule for one reply and its cost.

    Attributes:
        steps: its rounds in order.
        cost_steps: their total cost in pipelined plain steps.
    """

    steps: tuple[OracleStep, ...]
    cost_steps: float

    @property
    def verifies(self) -> int:
        return sum(1 for s in self.steps if s.draft)

    @property
    def plain_steps(self) -> int:
        return sum(1 for s in self.steps if not s.draft)

    @property
    def proposed(self) -> int:
        return sum(s.draft for s in self.steps)

    @property
    def accepted(self) -> int:
        return sum(s.accepted for s in self.steps)

    def efficiency(self, policy_steps: float) -> float:
        """Oracle cost over a policy's cost (<= 1.0); 1.0 when neither costs anything."""
        return self.cost_steps / policy_steps if policy_steps > 0 else 1.0


def proposals(prompt: Sequence[int], reply: Sequence[int], lookup: PromptLookupConfig,
              positions: int) -> list[list[int]]:
    """The index's proposal (up to `max_draft`, cycled in a loop) after each of the
    first `positions` tokens of the reply have been emitted; entry i is the proposal at
    position i."""
    index = NgramIndex(lookup.ngram_min, lookup.ngram_max)
    context = list(prompt)
    out = []
    for position in range(positions):
        if position:
            context.append(reply[position - 1])
        index.extend(context)
        out.append(index.find(context, lookup.max_draft, cyclic=True))
    return out


def landed_count(proposal: Sequence[int], targets: Sequence[int], position: int) -> int:
    """How many leading tokens of `proposal` equal `targets` from `position` on."""
    landed = 0
    for token in proposal:
        if position + landed >= len(targets) or targets[position + landed] != token:
            break
        landed += 1
    return landed


def _verify(position: int, k: int, landed: int, left: int, costs: Sequence[float],
            refeeds: bool) -> OracleStep:
    """A verify of k proposals whose first `landed` match, `left` positions from the end. As
    in the loop, the row that reaches the end stops the block uncounted as accepted, and a
    round that ends the reply re-feeds nothing."""
    accepted = min(landed, k, left - 1)
    emitted = min(min(landed, k) + 1, left)
    cost = width_cost(costs, k + 1)
    if refeeds and accepted < k and emitted < left:
        cost += width_cost(costs, accepted + 1)  # the kept rows fed again
    return OracleStep(position, k, accepted, emitted, cost)


def oracle(
    prompt: Sequence[int],
    reply: Sequence[int],
    *,
    stop_reason: str,
    max_tokens: int,
    lookup: PromptLookupConfig,
    costs: Sequence[float],
    refeeds: bool = False,
) -> OracleSchedule:
    """The cheapest drafting schedule over `lookup`'s n-gram index for a known greedy reply.

    Exact dynamic program over reply positions, O(len(reply) * max_draft) after the index.

    Args:
        prompt: the run's prompt token ids.
        reply: its emitted token ids (the prefill token first).
        stop_reason: the run's stop reason ("eos": an EOS row ends the reply).
        max_tokens: the run's token limit (a verify leaves room for its bonus row).
        lookup: the index (ngram_min, ngram_max) and the widest draft (max_draft) allowed;
            the policy fields are ignored.
        costs: width-cost table (widths 1..n) in pipelined plain steps.
        refeeds: a rollback re-feeds the kept tokens, priced as a forward of their width.

    Returns:
        The schedule from the first decode position to the end, and its cost.
    """
    targets = [*reply, _EOS] if stop_reason == "eos" and reply else list(reply)
    at = proposals(prompt, reply, lookup, len(targets))
    choice, cost = _cheapest(targets, at, max_tokens, costs, refeeds)
    steps = []
    position = 1
    while position < len(targets):
        steps.append(choice[position])
        position += choice[position].emitted
    return OracleSchedule(tuple(steps), cost)


def _cheapest(targets: Sequence[int], at: Sequence[Sequence[int]], max_tokens: int,
              costs: Sequence[float], refeeds: bool) -> tuple[dict[int, OracleStep], float]:
    """The DP, from the end back: each position's cheapest first round and the total cost
    from position 1."""
    end = len(targets)
    plain = min(1.0, width_cost(costs, 1))
    best = [0.0] * (end + 1)
    choice: dict[int, OracleStep] = {}
    for position in range(end - 1, 0, -1):
        step = OracleStep(position, 0, 0, 1, plain)
        total = plain + best[position + 1]
        landed = landed_count(at[position], targets, position)
        # The loop caps a draft at the token limit less the bonus row (spec 2.4 b).
        for k in range(1, min(len(at[position]), max_tokens - position - 1) + 1):
            move = _verify(position, k, landed, end - position, costs, refeeds)
            if move.cost_steps + best[position + move.emitted] < total:
                step, total = move, move.cost_steps + best[position + move.emitted]
        best[position], choice[position] = total, step
    return choice, best[1] if end > 1 else 0.0
