"""How a worker sets up one run: the arm resolved to a policy (or a peer's call), the
sampler, the engine config stored with the run, and the prompt hash.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from specfleet.engine.config import (
    PromptLookupConfig,
    needs_costs,
    policy_revision,
    resolve_policy,
)
from specfleet.engine.peers import PEER_KINDS, PEERS, PeerCall, is_peer
from specfleet.jobs.run import RunSpec


def run_policy(
    spec: RunSpec, costs: tuple[float, ...] = ()
) -> tuple[PromptLookupConfig | None, str]:
    """The arm resolved for the target's device: (lookup config or None, policy name).

    plain -> (None, "plain"); auto -> the device default; graded / gated / calibrated as
    named (calibrated with `costs`, its width-cost table); fixed (or adaptive=False) ->
    non-adaptive lookup, "fixed"; a peer -> (None, its name): it runs its library's own loop.
    """
    if spec.arm == "plain" or is_peer(spec.arm):
        return None, spec.arm
    adaptive = spec.lookup.adaptive and spec.arm != "fixed"
    choice = "auto" if spec.arm == "fixed" else spec.arm
    policy = resolve_policy(choice, spec.target.device)
    config = PromptLookupConfig.of(replace(spec.lookup, adaptive=adaptive), policy,
                                   tuple(costs) if needs_costs(policy) else ())
    return config.validate(), policy if adaptive else "fixed"


def peer_call(spec: RunSpec, should_stop: Callable[[], bool] | None = None,
              gguf: Callable[[], str | None] = lambda: None,
              threads: int | None = None) -> PeerCall | None:
    """A peer arm's request (None for our arms); a drafting peer proposes `max_draft` tokens
    after an n-gram of up to `ngram_max`, the arm's options; a llama.cpp peer runs `gguf()`,
    the model's GGUF (asked only for such a peer), on `threads` CPU threads."""
    peer = next((p for p in PEERS if p == spec.arm), None)
    if peer is None:
        return None
    guard = spec.loop_guard
    drafts = PEER_KINDS[peer].drafts
    return PeerCall(
        peer, spec.max_tokens,
        lookup_tokens=spec.lookup.max_draft if drafts else None,
        ngram_max=spec.lookup.ngram_max if drafts else None,
        loop_guard=(guard.min_period, guard.max_period, guard.repeats) if guard else None,
        should_stop=should_stop,
        gguf=gguf() if PEER_KINDS[peer].gguf else None,
        threads=threads if PEER_KINDS[peer].gguf else None,
    )


def engine_config(
    spec: RunSpec, lookup: PromptLookupConfig | None, policy: str, model_path: str,
    warmup_s: float, costs_source: str = "stored", rollback_kind: str = "trim",
    peer: dict | None = None, weight_bytes: int | None = None,
    read_gb_per_s: float | None = None, pipelines: bool | None = None,
) -> dict:
    """The exact engine settings of a run, stored with it (provenance); a calibrated run
    also says whether its width-cost table was stored or measured for it, a peer arm which
    library call and version generated it (`peer`), a real model its weights' bytes as
    loaded (`weight_bytes`: what one plain step reads) and the host's read bandwidth as its
    worker last measured it (`read_gb_per_s`), for the bandwidth ceiling, and whether its
    loop could pipeline plain steps (`pipelines`, `loop.may_pipeline`; not for a peer arm),
    which replay repeats."""
    guard = spec.loop_guard
    extra: dict[str, Any] = {"costs_source": costs_source} if needs_costs(policy) else {}
    if lookup is not None:
        extra["policy_revision"] = policy_revision(lookup)
    if peer is not None:
        extra["peer"] = peer
    if pipelines is not None:
        extra["pipelines"] = pipelines
    if weight_bytes is not None:
        extra["weight_bytes"] = weight_bytes
        if read_gb_per_s is not None:
            extra["read_gb_per_s"] = read_gb_per_s
    return {
        **extra,
        "engine": spec.target.engine,
        "device": spec.target.device,
        "model": spec.model,
        "model_path": model_path,
        "policy": policy,
        "lookup": lookup.as_dict() if lookup else None,
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
