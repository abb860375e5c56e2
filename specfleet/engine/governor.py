"""Draft policies: how many tokens to propose each round (spec sections 3 and 4).

`Graded` (PR #2074, tuned on Apple Silicon) shrinks the block with an EMA of landed tokens
and pauses on timers 4..32 after three misses. `Gated` (PR #2092, tuned on GB10) uses only
a narrow (2) or full block, starts narrow on probation, and pauses with no timer until a
shadow probe confirms two unverified tokens.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol, Self, get_args

# The drafting policies by name; `engine/policies.py` maps each to its class.
Policy = Literal["graded", "gated", "calibrated"]
POLICY_NAMES: tuple[Policy, ...] = get_args(Policy)

DEFAULT_MAX_DRAFT = 7  # most proposals per round unless a policy or the user says otherwise
SHADOW_CONFIRM = 2  # a shadow probe settles on this many claimed tokens
PLAIN_ROUNDS_BEFORE_PIPELINE = 2  # lookup pipelines on the third consecutive empty round
MISSES_BEFORE_COOLDOWN = 3
MIN_COOLDOWN = 4
MAX_COOLDOWN = 32
EMA_FACTOR = 0.5
# Verify width 3: the widest below CUDA's 4-row multirow kernel instantiation.
GATED_NARROW_DRAFT = 2
GATED_FULL_AT = 1.5
GATED_START_EMA = 1.0


@dataclass(frozen=True)
class PolicyOption:
    """A parameter a policy takes of its own: a whole number a user may set (a matrix arm's
    field `name`, `generate --prompt-lookup-NAME`), given to the policy's `build`.

    Args:
        name: its field name (snake_case, unlike any `LookupOptions` field's; the flag
            spells it with dashes).
        default: the value when none is given.
        help: one line for `generate --help` and the matrix schema.
        least: its lower bound.
        most: its upper bound; None: the run's max draft.
    """

    name: str
    default: int
    help: str
    least: int = 1
    most: int | None = None


def round_half_away(x: float) -> int:
    """Rust's `f64::round` for x >= 0; Python's `round` is banker's (2.5 -> 2)."""
    return math.floor(x + 0.5)


@dataclass(frozen=True)
class GovernorState:
    """A snapshot for round traces."""

    policy: str
    ema: float
    misses: int
    paused: bool
    cooldown: int = 0
    probation: bool = False


class DraftGovernor(Protocol):
    """What the round loop asks of a policy.

    A policy class subclasses it to inherit `size`, the spec's identity, and `cycles` false:
    the loop then drafts `index.find(context, config)[:budget]` exactly (spec 2.4 (c)).
    """

    # True: in a loop, a proposal the context's end cut short continues as the cycle
    # (`lookup.cycle_out`); the spec's policies draft the spec's proposal only.
    cycles: ClassVar[bool] = False
    # Empty rounds in a row before the loop pipelines again (spec 2.8: on the third).
    empty_rounds_before_pipeline: int = PLAIN_ROUNDS_BEFORE_PIPELINE
    # Which revision of the policy's rule made a run: stored with it, so `replay` compares a
    # run's counters only with the rule that made them (a run stored without one: 1).
    revision: ClassVar[int] = 1

    def budget(self) -> int:
        """Proposals allowed this round; called exactly once per loop iteration."""
        ...

    def size(self, proposal: Sequence[int], ngram: int) -> int:
        """Proposals to verify, after the lookup: a prefix of `proposal` (already cut to the
        budget), found on an `ngram`-token suffix (0: none matched). Called once per round
        whose budget is positive; the spec's policies verify the whole proposal."""
        return len(proposal)

    def record(self, accepted: int, proposed: int) -> None:
        """Feed back a drafted round: proposals landed out of those verified."""
        ...

    def probes_while_paused(self) -> bool: ...

    def shadow_confirmed(self) -> None: ...

    def state(self) -> GovernorState: ...


class _CostFree(DraftGovernor):
    """What a policy that needs no width-cost table declares (see `engine/policies.py`)."""

    needs_costs: ClassVar[bool] = False  # True: runs only with a width-cost table
    default_max_draft: ClassVar[int] = DEFAULT_MAX_DRAFT
    options: ClassVar[tuple[PolicyOption, ...]] = ()  # the parameters it takes of its own

    def __init__(self, max_draft: int) -> None:
        self.max_draft = max_draft

    @classmethod
    def build(cls, max_draft: int, costs: Sequence[float], refeeds: bool,
              own: Mapping[str, int]) -> Self:
        """The policy for a validated config (only cost-aware policies use costs, refeeds).

        Args:
            own: each of its `options` by name, given or at its default.
        """
        return cls(max_draft)


class GradedGovernor(_CostFree):
    """PR #2074's governor: budget `floor(2*ema + 0.5) + 2`, pauses of 4, 8, 16, 32 rounds."""

    name: ClassVar[str] = "graded"
    color: ClassVar[str] = "#1f77b4"  # its points in plots (matplotlib's blue)

    def __init__(self, max_draft: int) -> None:
        self.max_draft = max_draft
        self.ema = float(max_draft)  # optimistic: an edit's first match gets the full block
        self.misses = 0
        self.cooldown = 0
        self.next_cooldown = MIN_COOLDOWN

    def budget(self) -> int:
        if self.cooldown > 0:
            self.cooldown -= 1
            return 0
        return max(1, min(round_half_away(2.0 * self.ema) + 2, self.max_draft))

    def record(self, accepted: int, proposed: int = 0) -> None:
        self.ema = EMA_FACTOR * self.ema + EMA_FACTOR * accepted
        if accepted > 0:
            self.misses = 0
            self.next_cooldown = MIN_COOLDOWN
            return
        self.misses += 1
        if self.misses >= MISSES_BEFORE_COOLDOWN:
            self.misses = 0
            self.cooldown = self.next_cooldown
            self.next_cooldown = min(2 * self.next_cooldown, MAX_COOLDOWN)

    def probes_while_paused(self) -> bool:
        return False

    def shadow_confirmed(self) -> None:
        return None

    def state(self) -> GovernorState:
        return GovernorState("graded", self.ema, self.misses, self.cooldown > 0, self.cooldown)


class GatedGovernor(_CostFree):
    """PR #2092's governor: narrow or full blocks, probation, timer-free pause."""

    name: ClassVar[str] = "gated"
    color: ClassVar[str] = "#d62728"

    def __init__(self, max_draft: int) -> None:
        self.max_draft = max_draft
        self.ema = GATED_START_EMA
        self.misses = 0
        self.drafting = True
        self.probation = True  # the first drafted round has no evidence

    def budget(self) -> int:
        if not self.drafting:
            return 0
        if self.ema >= GATED_FULL_AT:
            return self.max_draft
        return min(GATED_NARROW_DRAFT, self.max_draft)

    def record(self, accepted: int, proposed: int = 0) -> None:
        self.ema = EMA_FACTOR * self.ema + EMA_FACTOR * accepted
        # Only a whole narrow block's worth ends probation; one stray token does not.
        if accepted >= min(GATED_NARROW_DRAFT, self.max_draft):
            self.probation = False
        if accepted > 0:
            self.misses = 0
            return
        self.misses += 1
        if self.probation or self.misses >= MISSES_BEFORE_COOLDOWN:
            self.drafting = False
            self.misses = 0

    def probes_while_paused(self) -> bool:
        return not self.drafting

    def shadow_confirmed(self) -> None:
        if not self.probes_while_paused():
            return
        self.drafting = True
        self.probation = True
        self.misses = 0
        self.ema = GATED_START_EMA

    def state(self) -> GovernorState:
        return GovernorState(
            "gated", self.ema, self.misses, not self.drafting, probation=self.probation
        )


class FixedGovernor(DraftGovernor):
    """Non-adaptive mode: always `max_draft`; never pauses, records or probes."""

    def __init__(self, max_draft: int) -> None:
        self.max_draft = max_draft

    def budget(self) -> int:
        return self.max_draft

    def record(self, accepted: int, proposed: int = 0) -> None:
        return None

    def probes_while_paused(self) -> bool:
        return False

    def shadow_confirmed(self) -> None:
        return None

    def state(self) -> GovernorState:
        return GovernorState("fixed", float(self.max_draft), 0, False)
