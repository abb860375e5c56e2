"""The `calibrated` draft policy: the draft length that lands most tokens per unit of cost.

Graded and Gated size a draft from acceptance alone. This policy also knows what a verify
block costs on the host at hand: `costs[w - 1]` is the cost of a synchronous verify of width
`w` in pipelined plain steps (spec 7.6, measured by `specfleet calibrate`). Each round it picks

    k* = argmax over k in 1..max_draft of (1 + E[landed | k]) / cost(k + 1),
    E[landed | k] = p + p^2 + ... + p^k        (a draft lands up to its first miss),

and drafts nothing when that rate does not beat a plain pipelined step (1 token per step).
On a model whose rollback feeds the kept tokens again (recurrent layers, `rollback_kind`
"refeed"), a draft whose first miss is at proposal a+1 also pays a forward of width a+1:
the cost becomes cost(k + 1) + sum over a < k of p^a (1 - p) cost(a + 1).
`p` is a count estimate: landed proposals ("hits") and first rejections ("misses"), each
decayed by `DECAY` per drafted round, over a Beta(1, 1) prior. No clock is read. While it
drafts nothing the loop keeps looking up two-token shadow probes (as it does for a paused
Gated loop); each confirmed probe counts as two hits, which is the way back to drafting.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from specfleet.engine.governor import SHADOW_CONFIRM, GovernorState

PRIOR_HITS = 1.0
PRIOR_MISSES = 1.0
# Evidence older than a few drafted rounds fades: copy spans start and end mid-reply.
DECAY = 0.8
PLAIN_STEP_RATE = 1.0  # a pipelined plain step lands one token per step


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


def expected_landed(p: float, k: int) -> float:
    """p + p^2 + ... + p^k: proposals expected to land from a draft of `k`."""
    return sum(p**i for i in range(1, k + 1))


def expected_refeed_cost(p: float, costs: Sequence[float], k: int) -> float:
    """Expected cost of re-feeding after a draft of `k`: the first miss at proposal a+1
    (probability p^a (1 - p)) re-feeds the a+1 kept tokens, one forward of that width."""
    return sum(p**a * (1.0 - p) * width_cost(costs, a + 1) for a in range(k))


def best_draft(p: float, costs: Sequence[float], max_draft: int, refeeds: bool = False) -> int:
    """The draft length with the highest tokens per cost; 0 when none beats a plain step.

    Ties keep the shorter draft (a wider block risks more on a miss). With `refeeds`, a
    rejected draft's re-feed is priced in (`expected_refeed_cost`).
    """
    best_k, best_rate = 0, PLAIN_STEP_RATE
    for k in range(1, max_draft + 1):
        cost = width_cost(costs, k + 1)
        if refeeds:
            cost += expected_refeed_cost(p, costs, k)
        rate = (1.0 + expected_landed(p, k)) / cost
        if rate > best_rate:
            best_k, best_rate = k, rate
    return best_k


class CalibratedGovernor:
    """Cost-aware budgets from a width-cost table and decayed acceptance counts.

    Args:
        max_draft: most proposals per round.
        costs: cost of verify widths 1..n in pipelined plain steps.
        refeeds: a rollback on this model feeds the kept tokens again (priced per draft).
    """

    name: ClassVar[str] = "calibrated"
    needs_costs: ClassVar[bool] = True
    # Up to a 33-row block: the widest width a measured table covers.
    default_max_draft: ClassVar[int] = 32

    @classmethod
    def build(cls, max_draft: int, costs: Sequence[float], refeeds: bool) -> CalibratedGovernor:
        """The policy for a validated config: its width-cost table and re-feed pricing."""
        return cls(max_draft, costs, refeeds)

    def __init__(self, max_draft: int, costs: Sequence[float], refeeds: bool = False) -> None:
        self.max_draft = max_draft
        self.costs = tuple(costs)
        self.refeeds = refeeds
        self.hits = 0.0
        self.misses = 0.0
        self.paused = False

    def acceptance(self) -> float:
        """Estimated probability that a proposal lands given the ones before it did."""
        return (self.hits + PRIOR_HITS) / (self.hits + self.misses + PRIOR_HITS + PRIOR_MISSES)

    def budget(self) -> int:
        k = best_draft(self.acceptance(), self.costs, self.max_draft, self.refeeds)
        self.paused = k == 0
        return k

    def record(self, accepted: int, proposed: int) -> None:
        # A draft that landed whole says nothing about the next token: no miss.
        self._count(accepted, 1.0 if accepted < proposed else 0.0)

    def _count(self, hits: float, misses: float) -> None:
        self.hits = DECAY * self.hits + hits
        self.misses = DECAY * self.misses + misses

    def probes_while_paused(self) -> bool:
        return self.paused

    def shadow_confirmed(self) -> None:
        if self.paused:
            self._count(float(SHADOW_CONFIRM), 0.0)

    def state(self) -> GovernorState:
        return GovernorState("calibrated", self.acceptance(), int(self.misses), self.paused)
