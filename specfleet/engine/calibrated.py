"""The `calibrated` draft policy: the draft length with the largest expected saving.

Graded and Gated size a draft from acceptance alone. This policy also knows what a verify
block costs on the host at hand: `costs[w - 1]` is the cost of a synchronous verify of width
`w` in pipelined plain steps (spec 7.6, measured by `specfleet calibrate`). Every schedule
emits the same reply, so the cheapest is the one that saves the most steps over plain
decoding (the oracle's objective, `engine/oracle.py`); each round it proposes

    k* = argmax over k in 1..max_draft of  1 + E[landed | k] - cost(k + 1) - LOSS_WEIGHT x E[loss | k],
    E[landed | k] = S(1) + ... + S(k),   S(j) = P(the first j proposals all land),
    E[loss | k] = sum over a of P(landed = a) x max(0, cost(k + 1) - 1 - a),

and nothing when no k scores above plain (a pipelined plain step lands one token for one
step); a near-tie (within NEAR_TIE) keeps the shorter draft. The loss term counts only the
rounds that cost more than the plain steps they replace: between lengths that save about the same on average it takes the one whose miss
costs less (a fresh match in prose: 2 proposals, not 5), and it leaves a long copy's wide
blocks alone (they rarely land short). Replayed over seven tables, it kept the mean
efficiency and lifted the worst held-out prose reply from 0.959x to 0.994x plain
(docs/benchmark_results/policy-variants-2026-12-03.md).
The rule runs twice a round: `budget`, before the lookup, decides whether to draft at all
(whether a proposal of `max_draft` tokens on the current match could save anything) and
then allows `max_draft`; `size`, after it, sizes the draft to the proposal the index found,
k <= len(proposal) (`DraftGovernor.size`).
On a model whose rollback feeds the kept tokens again (`rollback_kind` "refeed"), a draft
whose first miss is at proposal a+1 also pays a forward of width a+1, unless the miss ends the
reply (the loop re-feeds nothing then): only an EOS or the loop guard can, which no policy
foresees; the token limit never ends a round with a miss (the draft leaves room for the bonus).

`S(j)` is a product of hazards: the chance that a proposal lands given that the current
match has already held d tokens (`run`). A copy that has run long tends to run on (an edit
restating a function), one that broke after a token or two says little, so the hazard is
estimated per depth bucket (0, 1, 2-3, 4-7, ... 32+) from this reply's own verifies:
landed proposals over verified ones at that depth, decayed by `DECAY` per drafted round,
over a prior worth `PRIOR_WEIGHT` proposals at (1 + d) / (2 + d) (a uniform prior on each
match's own rate, after d tokens held). A rejection ends the match (the bonus row is the
model's own token, so the next lookup is a fresh one); a draft that lands whole keeps it.
A lookup that finds nothing ends the match too. A reply caught in a loop is drafted
through it (`cycles`, `lookup.cycle_out`). No clock is read. The n-gram length the
proposal matched on is not used: splitting the hazards by it (or counting it as held depth)
measured worse (docs/benchmark_results/oracle-policy.md). While it drafts nothing the loop
keeps looking up two-token shadow probes (as for a paused Gated loop); a confirmed probe is
a match that held two tokens (run 2), the way back to drafting.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from specfleet.engine.governor import SHADOW_CONFIRM, DraftGovernor, GovernorState, PolicyOption

BUCKETS = 7  # match depths 0, 1, 2-3, 4-7, 8-15, 16-31, 32+
PRIOR_WEIGHT = 2.0  # proposals' worth of belief in `prior_hazard` per bucket
# Evidence older than a few drafted rounds fades: copy spans start and end mid-reply.
DECAY = 0.8
PLAIN_STEP_SAVING = 0.0  # a pipelined plain step lands one token for one step
# Steps of saving given up per step a draft is expected to lose against plain decoding.
LOSS_WEIGHT = 0.5
# Drafts scoring within this many steps of the best are a tie, which the shortest wins: past
# a table's last width every row looks nearly free, and a wide block that wins by a hair
# loses all of it on a miss (docs/benchmark_results/policy-variants-2026-12-03.md).
NEAR_TIE = 0.05
# A synchronous one-token step costing at most this many pipelined steps (MLX on a quiet CPU)
# is as cheap as pipelining: within a calibration's noise.
FREE_SYNC_STEP = 1.05


def width_cost(costs: Sequence[float], width: int) -> float:
    """Cost of a verify of `width` rows; past the table's end the last increment continues.

    Args:
        costs: cost of widths 1..len(costs) in pipelined steps (index 0 = width 1).
        width: verify width (>= 1).
    """
    if width <= len(costs):
        return costs[width - 1]
    step = max(costs[-1] - costs[-2], 0.0) if len(costs) > 1 else costs[-1]
    return costs[-1] + (width - len(costs)) * step


def depth_bucket(depth: int) -> int:
    """Hazard bucket of a proposal `depth` tokens into its match: 0, 1, 2-3, 4-7, ... 32+."""
    return min(depth.bit_length(), BUCKETS - 1)


def prior_hazard(bucket: int) -> float:
    """(1 + d) / (2 + d) at the bucket's first depth d: after d landed tokens, the posterior
    mean of a match's own landing rate under a uniform prior (a fresh match: 1/2)."""
    depth = 0 if bucket == 0 else 1 << (bucket - 1)
    return (1.0 + depth) / (2.0 + depth)


def survival(hazards: Sequence[float], run: int, k: int) -> list[float]:
    """S(1..k): the chance that the first j proposals all land, for a match that has held
    `run` tokens (a fresh one: 0).

    Args:
        hazards: per depth bucket, the chance a proposal lands given the ones before did.
        run: tokens the match has held so far.
        k: proposals.
    """
    out, alive = [], 1.0
    for depth in range(run, run + k):
        alive *= hazards[depth_bucket(depth)]
        out.append(alive)
    return out


def expected_refeed_cost(alive: Sequence[float], costs: Sequence[float]) -> float:
    """Expected cost of re-feeding after a draft of len(alive): the first miss at proposal
    a+1 (probability S(a) - S(a+1)) re-feeds the a+1 kept tokens, one forward of that width."""
    before = [1.0, *alive]
    return sum((before[a] - before[a + 1]) * width_cost(costs, a + 1) for a in range(len(alive)))


def expected_loss(alive: Sequence[float], cost: float) -> float:
    """Expected steps a draft of len(alive) proposals costing `cost` loses against plain
    decoding: landing a of them (probability S(a) - S(a+1)) replaces a + 1 plain steps."""
    loss, held = 0.0, 1.0  # held: S(a), the chance the first a proposals all land
    for a in range(len(alive) + 1):
        excess = cost - 1.0 - a
        if excess <= 0.0:  # landing a or more pays for the block: no later term loses
            break
        after = alive[a] if a < len(alive) else 0.0
        loss += (held - after) * excess
        held = after
    return loss


def saving_draft(alive: Sequence[float], costs: Sequence[float], refeeds: bool = False) -> int:
    """The draft length (at most len(alive)) with the best expected saving over plain
    decoding less LOSS_WEIGHT x its expected loss against plain,
    1 + S(1) + ... + S(k) - cost(k + 1) - LOSS_WEIGHT x `expected_loss`; 0 when none scores
    above plain.

    A near-tie keeps the shorter draft: the shortest length scoring within NEAR_TIE of the
    best (a wider block risks more on a miss). With `refeeds`, a rejected draft's re-feed is
    priced in (`expected_refeed_cost`).
    """
    best_score, landed = PLAIN_STEP_SAVING, 0.0
    scored: list[tuple[int, float]] = []  # (k, score) of every length that could be chosen
    for k in range(1, len(alive) + 1):
        landed += alive[k - 1]
        cost = width_cost(costs, k + 1)
        if refeeds:
            cost += expected_refeed_cost(alive[:k], costs)
        saving = 1.0 + landed - cost
        if saving <= max(best_score - NEAR_TIE, PLAIN_STEP_SAVING) + 1e-12:
            continue  # the loss term only lowers a score: skip its O(k) sum (a paused round's cost)
        score = saving - LOSS_WEIGHT * expected_loss(alive[:k], cost)
        if score > PLAIN_STEP_SAVING + 1e-12:
            scored.append((k, score))
            best_score = max(best_score, score)
    return next((k for k, score in scored if score >= best_score - NEAR_TIE - 1e-12), 0)


def best_draft(p: float, costs: Sequence[float], max_draft: int, refeeds: bool = False) -> int:
    """`saving_draft` when every proposal lands with the same chance `p` (S(j) = p^j)."""
    return saving_draft([p**j for j in range(1, max_draft + 1)], costs, refeeds)


class CalibratedGovernor(DraftGovernor):
    """Cost-aware budgets from a width-cost table, the current match's run and decayed
    per-depth landing counts.

    Args:
        max_draft: most proposals per round.
        costs: cost of verify widths 1..n in pipelined plain steps.
        refeeds: a rollback on this model feeds the kept tokens again (priced per draft).
    """

    name: ClassVar[str] = "calibrated"
    color: ClassVar[str] = "#ff7f0e"  # its points in plots
    needs_costs: ClassVar[bool] = True
    # Up to a 33-row block: the widest width a measured table covers.
    default_max_draft: ClassVar[int] = 32
    options: ClassVar[tuple[PolicyOption, ...]] = ()  # it sizes each draft from the table
    # A reply caught in a loop is drafted through it, not one period a round.
    cycles: ClassVar[bool] = True
    # 2: pipelines again on the first empty round where a synchronous step costs more than
    # FREE_SYNC_STEP (runs stored before carry no revision: 1). 3: a near-tie (NEAR_TIE)
    # keeps the shorter draft.
    revision: ClassVar[int] = 3

    @classmethod
    def build(cls, max_draft: int, costs: Sequence[float], refeeds: bool,
              own: Mapping[str, int]) -> CalibratedGovernor:
        """The policy for a validated config: its width-cost table and re-feed pricing."""
        return cls(max_draft, costs, refeeds)

    def __init__(self, max_draft: int, costs: Sequence[float], refeeds: bool = False) -> None:
        self.max_draft = max_draft
        self.costs = tuple(costs)
        self.refeeds = refeeds
        # Per depth bucket: proposals verified there, and how many of them landed.
        self.tried = [0.0] * BUCKETS
        self.landed = [0.0] * BUCKETS
        self.run = 0  # tokens the current match has held
        self.paused = False
        # After a draft, the loop's two synchronous empty rounds (spec 2.8) look up each
        # token at once; where a synchronous step costs more than a pipelined one (GPU hosts:
        # 1.07-1.23), that costs more than it saves, so the loop pipelines on the first.
        if self.costs and self.costs[0] > FREE_SYNC_STEP:
            self.empty_rounds_before_pipeline = 0

    def hazards(self) -> list[float]:
        """Per depth bucket: the estimated chance that a proposal there lands."""
        return [(self.landed[b] + PRIOR_WEIGHT * prior_hazard(b)) / (self.tried[b] + PRIOR_WEIGHT)
                for b in range(BUCKETS)]

    def acceptance(self) -> float:
        """Estimated chance that the next proposal lands, given the current match's run."""
        return self.hazards()[depth_bucket(self.run)]

    def budget(self) -> int:
        # A cap, not the width: `size` picks that once the proposal is known.
        self.paused = self._saving_draft(self.max_draft) == 0
        return 0 if self.paused else self.max_draft

    def size(self, proposal: Sequence[int], ngram: int) -> int:
        if not proposal:
            self.run = 0  # the lookup found nothing: the match has ended
            return 0
        return self._saving_draft(len(proposal))

    def _saving_draft(self, most: int) -> int:
        return saving_draft(survival(self.hazards(), self.run, most), self.costs, self.refeeds)

    def record(self, accepted: int, proposed: int) -> None:
        # A draft that landed whole says nothing about the token after it: no miss.
        rejected = accepted < proposed
        self._count(self.run, accepted, rejected)
        self.run = 0 if rejected else self.run + accepted

    def _count(self, run: int, landed: int, missed: bool) -> None:
        self.tried = [DECAY * n for n in self.tried]
        self.landed = [DECAY * n for n in self.landed]
        for depth in range(run, run + landed + missed):
            self.tried[depth_bucket(depth)] += 1.0
        for depth in range(run, run + landed):
            self.landed[depth_bucket(depth)] += 1.0

    def probes_while_paused(self) -> bool:
        return self.paused

    def shadow_confirmed(self) -> None:
        if self.paused:
            # Refuted probes are never reported, so a confirmed one is no evidence about how
            # often fresh matches land; it says this match has held SHADOW_CONFIRM tokens.
            self._count(0, 0, False)
            self.run = SHADOW_CONFIRM

    def state(self) -> GovernorState:
        misses = sum(t - n for t, n in zip(self.tried, self.landed, strict=True))
        return GovernorState("calibrated", self.acceptance(), round(misses), self.paused)
