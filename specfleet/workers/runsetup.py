"""How a worker sets up one run: the arm resolved to a policy, the sampler, the engine
config stored with the run, and the prompt hash.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from typing import Any

from specfleet.engine.config import PromptLookupConfig, resolve_policy
from specfleet.jobs.run import RunSpec


def run_policy(
    spec: RunSpec, costs: tuple[float, ...] = ()
) -> tuple[PromptLookupConfig | None, str]:
    """The arm resolved for the target's device: (lookup config or None, policy name).

    plain -> (None, "plain"); auto -> the device default; graded / gated / calibrated as
    named (calibrated with `costs`, its width-cost table); fixed (or adaptive=False) ->
    non-adaptive lookup, "fixed".
    """
    if spec.arm == "plain":
        return None, "plain"
    options = spec.lookup
    adaptive = options.adaptive and spec.arm != "fixed"
    choice = "auto" if spec.arm == "fixed" else spec.arm
    policy = resolve_policy(choice, spec.target.device)
    config = PromptLookupConfig(
        ngram_max=options.ngram_max,
        ngram_min=options.ngram_min,
        max_draft=options.max_draft,
        adaptive=adaptive,
        policy=policy,
        costs=tuple(costs) if policy == "calibrated" else (),
    )
    return config.validate(), policy if adaptive else "fixed"


def engine_config(
    spec: RunSpec, lookup: PromptLookupConfig | None, policy: str, model_path: str,
    warmup_s: float, costs_source: str = "stored", rollback_kind: str = "trim",
) -> dict:
    """The exact engine settings of a run, stored with it (provenance); a calibrated run
    also says whether its width-cost table was stored or measured for it."""
    guard = spec.loop_guard
    extra = {"costs_source": costs_source} if policy == "calibrated" else {}
    return {
        **extra,
        "engine": spec.target.engine,
        "device": spec.target.device,
        "model": spec.model,
        "model_path": model_path,
        "policy": policy,
        "lookup": asdict(lookup) if lookup else None,
        "chat": spec.chat,
        "temperature": spec.temperature,
        "seed": spec.seed,
        "loop_guard": guard.model_dump() if guard else None,
        "warmed": spec.target.engine != "toy",
        "warmup_s": round(warmup_s, 4),
        "rollback_kind": rollback_kind,  # "refeed": replay prices each rollback's re-feed
    }


def prompt_hash(text: str) -> str:
    """sha256 of the prompt text (UTF-8)."""
    return hashlib.sha256(text.encode()).hexdigest()


def sampler_config(spec: RunSpec) -> Any:
    """The engine sampler of a run (greedy at temperature 0)."""
    from specfleet.engine.sampling import SamplerConfig

    return SamplerConfig(temperature=spec.temperature, seed=spec.seed).validate()
