"""The policy registry: each drafting policy's name mapped to its governor class.

What a policy needs (a width-cost table, its default max draft, parameters of its own, its
colour in plots) is declared on its class (`needs_costs`, `default_max_draft`, `options`,
`build`, `color`); nothing outside the governor modules names a policy. A new adaptive
policy is one class plus its name in `governor.Policy` and here; its `options` become matrix
arm fields, bounds checked by `config.PromptLookupConfig.validate` and `generate
--prompt-lookup-*` flags.
"""

from __future__ import annotations

from specfleet.engine.calibrated import CalibratedGovernor
from specfleet.engine.governor import (
    POLICY_NAMES,
    GatedGovernor,
    GradedGovernor,
    Policy,
    PolicyOption,
)

POLICIES: dict[str, type[GradedGovernor | GatedGovernor | CalibratedGovernor]] = {
    cls.name: cls for cls in (GradedGovernor, GatedGovernor, CalibratedGovernor)
}
if tuple(POLICIES) != POLICY_NAMES:  # pragma: no cover - a registry edit that missed one
    raise RuntimeError(f"governor.Policy {POLICY_NAMES} and POLICIES {tuple(POLICIES)} differ")

# Every policy's own options by name, in registry order (two policies may share one name).
POLICY_OPTIONS: dict[str, PolicyOption] = {
    option.name: option for cls in POLICIES.values() for option in cls.options
}

# `auto`: the policy each device was tuned on (Gated on GB10's CUDA), Graded elsewhere.
AUTO_POLICY_BY_DEVICE: dict[str, Policy] = {"cuda": "gated"}
AUTO_POLICY_OTHERWISE: Policy = "graded"
