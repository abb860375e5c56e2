"""Prompt-lookup configuration and its validation (spec section 1.2)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, ClassVar, Literal, get_args

from specfleet.engine.governor import (
    DEFAULT_MAX_DRAFT,
    POLICY_NAMES,
    DraftGovernor,
    FixedGovernor,
    Policy,
)
from specfleet.engine.policies import (
    AUTO_POLICY_BY_DEVICE,
    AUTO_POLICY_OTHERWISE,
    POLICIES,
    POLICY_OPTIONS,
)

DEFAULT_NGRAM_MAX = 3
DEFAULT_NGRAM_MIN = 2
# The index keeps one key per position per n-gram length: memory grows with range x context.
NGRAM_MAX_LIMIT = 16
MAX_DRAFT_LIMIT = 64

PolicyChoice = Literal["auto", Policy]  # "auto": the device's default policy
POLICY_CHOICES: tuple[PolicyChoice, ...] = get_args(PolicyChoice)


class ConfigError(ValueError):
    """A user-facing configuration mistake; the message names the flag and its bound.

    Attributes:
        field: the setting at fault (`PromptLookupConfig`'s field name), when one is.
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class LookupOptions:
    """The prompt-lookup settings a user gives (flags, a matrix arm, a job) and a run carries
    to its worker, which adds the arm's resolved policy (`PromptLookupConfig`).

    Args:
        ngram_max: longest suffix tried first.
        ngram_min: shortest suffix tried.
        max_draft: most proposals per round (verify width = max_draft + 1).
        adaptive: False always asks for `max_draft` (no governor, no pauses, no probes).
        policy_options: the policy's own parameters given (its class's `options`, by name);
            the others take their defaults.
    """

    # pydantic's own settings for it inside a message (`jobs.run`), whatever the message's:
    # unknown keys refused, a mapping taken even by a strict model.
    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}

    ngram_max: int = DEFAULT_NGRAM_MAX
    ngram_min: int = DEFAULT_NGRAM_MIN
    max_draft: int = DEFAULT_MAX_DRAFT
    adaptive: bool = True
    # Keyword-only: `PromptLookupConfig`'s policy and costs keep their places after adaptive.
    policy_options: dict[str, int] = field(default_factory=dict, kw_only=True, hash=False)

    def as_dict(self) -> dict[str, Any]:
        """The fields as stored and printed; `policy_options` only where some are given, so
        a run without any reads as runs always have."""
        given = asdict(self)
        if not self.policy_options:
            del given["policy_options"]
        return given


@dataclass(frozen=True)
class PromptLookupConfig(LookupOptions):
    """How the drafter looks up proposals and how the governor sizes them: the options and
    the policy they run under.

    Args:
        policy: resolved drafting policy (one of `policies.POLICIES`); ignored when not
            adaptive.
        costs: verify cost of widths 1..n in pipelined plain steps (spec 7.6); the
            calibrated policy's table, empty for the others.
    """

    policy: Policy = AUTO_POLICY_OTHERWISE  # the spec's policy (PR #2074)
    costs: tuple[float, ...] = ()

    @classmethod
    def of(cls, options: LookupOptions, policy: Policy = AUTO_POLICY_OTHERWISE,
           costs: tuple[float, ...] = ()) -> PromptLookupConfig:
        """`options` run under `policy` (`costs`: its width-cost table, where it needs one)."""
        given = {f.name: getattr(options, f.name) for f in fields(LookupOptions)}
        return cls(**given, policy=policy, costs=costs)

    def validate(self) -> PromptLookupConfig:
        """Raise `ConfigError` naming the flag and bound; return self when valid."""
        if self.ngram_min < 1:
            raise ConfigError("ngram-min must be at least 1", "ngram_min")
        if self.ngram_max < self.ngram_min:
            raise ConfigError(
                f"ngram-max ({self.ngram_max}) must be >= ngram-min ({self.ngram_min})",
                "ngram_max",
            )
        if self.ngram_max > NGRAM_MAX_LIMIT:
            raise ConfigError(f"ngram-max ({self.ngram_max}) must be at most {NGRAM_MAX_LIMIT}",
                              "ngram_max")
        if self.max_draft < 1:
            raise ConfigError("max-draft must be at least 1", "max_draft")
        if self.max_draft > MAX_DRAFT_LIMIT:
            raise ConfigError(f"max-draft ({self.max_draft}) must be at most {MAX_DRAFT_LIMIT}",
                              "max_draft")
        if self.policy not in POLICY_NAMES:
            raise ConfigError(
                f"policy must be one of {', '.join(POLICY_NAMES)}, got {self.policy!r}", "policy"
            )
        if self.adaptive and POLICIES[self.policy].needs_costs:
            _check_costs(self.costs)
        for name, value in self.policy_options.items():
            self._check_own(name, value)
        return self

    def _check_own(self, name: str, value: int) -> None:
        flag = name.replace("_", "-")
        takes = {o.name: o for o in POLICIES[self.policy].options} if self.adaptive else {}
        if name not in takes:
            owners = [p for p, cls in POLICIES.items() if name in {o.name for o in cls.options}]
            if not owners:
                known = ", ".join(POLICY_OPTIONS) or "none"
                raise ConfigError(f"no policy takes {flag} (policies' own options: {known})",
                                  name)
            shown = self.policy if self.adaptive else "fixed"
            raise ConfigError(f"{flag} is the {' or '.join(owners)} policy's own; {shown} sizes "
                              f"its drafts itself (drop {flag} or use {owners[0]})", name)
        option = takes[name]
        most = self.max_draft if option.most is None else option.most
        if not option.least <= value <= most:
            high = f"max-draft ({most})" if option.most is None else str(most)
            raise ConfigError(f"{flag} ({value}) must be from {option.least} to {high}", name)

    def with_max_draft(self, max_draft: int) -> PromptLookupConfig:
        return replace(self, max_draft=max_draft)


def _check_costs(costs: tuple[float, ...]) -> None:
    if len(costs) < 2:
        raise ConfigError(
            "this policy needs a width-cost table of at least widths 1-2 "
            "(measure one with `specfleet calibrate --store`)",
            "costs",
        )
    if not all(math.isfinite(c) and c > 0 for c in costs):  # inf: past it every width is NaN
        raise ConfigError(f"width costs must all be positive finite numbers, got {costs}",
                          "costs")


def default_max_draft(policy: str) -> int:
    """The max draft a policy runs with when none is given (its class says; else 7)."""
    return POLICIES[policy].default_max_draft if policy in POLICIES else DEFAULT_MAX_DRAFT


def options_for(policy: str, given: Mapping[str, Any]) -> LookupOptions:
    """The options a user gave (by `LookupOptions` field name, or a policy option's name),
    the rest at their defaults; an absent `max_draft` is `policy`'s own (`default_max_draft`)."""
    own = {name: value for name, value in given.items() if name in POLICY_OPTIONS}
    common = {name: value for name, value in given.items() if name not in own}
    return LookupOptions(**{"max_draft": default_max_draft(policy), **common},
                         policy_options=own)


def candidate_policies(choice: str) -> tuple[Policy, ...]:
    """The policies an arm or `--prompt-lookup-policy` may run: `auto`'s on any device (its
    default first), else the one named; the default for a name that is no policy (`fixed`,
    whose drafts no policy sizes)."""
    if choice in POLICY_NAMES:
        return (choice,)
    if choice == "auto":
        return tuple(dict.fromkeys([AUTO_POLICY_OTHERWISE, *AUTO_POLICY_BY_DEVICE.values()]))
    return (AUTO_POLICY_OTHERWISE,)


def needs_costs(policy: str) -> bool:
    """Whether a policy runs only with a width-cost table (measured by `calibrate`)."""
    return policy in POLICIES and POLICIES[policy].needs_costs


def policy_revision(config: PromptLookupConfig) -> int:
    """The revision of the rule a run under `config` drafts by (`DraftGovernor.revision`;
    the fixed, non-adaptive rule: 1)."""
    return POLICIES[config.policy].revision if config.adaptive and config.policy in POLICIES else 1


def make_governor(config: PromptLookupConfig, refeeds: bool = False) -> DraftGovernor:
    """The governor a validated config asks for (`FixedGovernor` when not adaptive).

    Args:
        config: a validated prompt-lookup config.
        refeeds: the runner's rollback feeds kept tokens again (`rollback_kind` "refeed").
    """
    if not config.adaptive:
        return FixedGovernor(config.max_draft)
    policy = POLICIES[config.policy]
    own = {o.name: config.policy_options.get(o.name, o.default) for o in policy.options}
    return policy.build(config.max_draft, config.costs, refeeds, own)


def resolve_policy(choice: str, device: str) -> Policy:
    """Resolve a policy choice for a device: `auto` is the device's own (`policies.py`).

    Args:
        choice: one of `POLICY_CHOICES`.
        device: the backend device ("cuda", "metal", "mps", "cpu", ...).

    Returns:
        One of `governor.POLICY_NAMES`.
    """
    if choice == "auto":
        return AUTO_POLICY_BY_DEVICE.get(device, AUTO_POLICY_OTHERWISE)
    for name in POLICY_NAMES:
        if choice == name:
            return name
    raise ConfigError(
        f"prompt-lookup-policy must be one of {', '.join(POLICY_CHOICES)}; got {choice!r}"
    )
