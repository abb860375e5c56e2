"""What produced a run, apart from the code: the things `compare` checks before it calls a
slow-down a regression (issue 7 provenance), and `history` names between two points.

Power mode and clocks come from the host conditions read before the run
(`workers/conditions`): power mode = power source, Low Power Mode, CPU governor; clocks =
the clock ceilings (CPU hardware max and policy cap, a core capped below its own max, each
GPU's max SM clock and power cap),
not the momentary clocks. A run stored without conditions leaves these two out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

# The stored run's fields `provenance` reads (store `RunRow` names).
PROVENANCE_FIELDS: tuple[str, ...] = (
    "weights_hash", "prompt_hash", "max_tokens", "engine_config", "host_fingerprint", "versions",
    "conditions",
)
# engine_config keys that are measurements or code, not settings (a policy's new revision
# that runs slower is a regression, as any code change is; so is a loop that stops pipelining)
# `costs_source` says whether the run measured its cost table or read it from the store;
# the table itself is compared.
_MEASURED_CONFIG_KEYS = ("warmup_s", "weight_bytes", "read_gb_per_s", "policy_revision",
                         "pipelines", "costs_source")
# engine_config keys named apart: greedy against sampled decoding is another workload.
_SAMPLING_KEYS = ("temperature", "seed")


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _conditions_parts(run) -> dict[str, str]:
    before = (getattr(run, "conditions", None) or {}).get("before") or {}
    power = {k: before.get(k) for k in ("power_source", "low_power_mode", "cpu_governor")}
    clocks = {k: before.get(k) for k in ("cpu_max_mhz", "cpu_limit_mhz")}
    # A core capped below its own max (on a big.LITTLE CPU the lowest ceiling above is a
    # small core's max, which no cap moves); only a real cap is named, so an uncapped run
    # reads as one stored before the field existed.
    cap = before.get("cpu_cap") or {}
    if cap.get("limit_mhz") is not None and cap.get("max_mhz") is not None \
            and cap["limit_mhz"] < cap["max_mhz"]:
        clocks["cpu_cap"] = cap
    clocks["gpus"] = [[g.get("name"), g.get("sm_clock_max_mhz"), g.get("power_cap_w")]
                      for g in before.get("gpus", [])]
    parts = {}
    if any(v is not None for v in power.values()):
        parts["power mode"] = _canonical(power)
    if clocks["gpus"] or any(v is not None for k, v in clocks.items() if k != "gpus"):
        parts["clocks"] = _canonical(clocks)
    return parts


def provenance(run) -> dict[str, str]:
    """The run's provenance minus its code version, each part as comparable text (power
    mode and clocks only when the run's host conditions recorded them)."""
    raw = run.engine_config or {}
    config = {k: v for k, v in raw.items() if k not in (*_MEASURED_CONFIG_KEYS, *_SAMPLING_KEYS)}
    libraries = {k: v for k, v in (run.versions or {}).items() if not k.startswith("specfleet")}
    return {
        "weights hash": str(run.weights_hash),
        "prompt hash": str(run.prompt_hash),
        # tok/s grows with the reply (prefill spread over more tokens): not the same workload
        "token limit": str(getattr(run, "max_tokens", None)),
        "engine config": _canonical(config),
        "host fingerprint": str(run.host_fingerprint),
        "library versions": _canonical(libraries),
        **_sampling_part(raw),
        **_conditions_parts(run),
    }


def _sampling_part(config: dict) -> dict[str, str]:
    """The sampler's settings as their own part, where the run recorded them."""
    if not any(k in config for k in _SAMPLING_KEYS):
        return {}
    return {"sampling": _canonical({k: config.get(k) for k in _SAMPLING_KEYS})}


def memo() -> Callable[[object], dict[str, str]]:
    """`provenance` computed once per run object (a history compares each point twice)."""
    cache: dict[int, tuple[object, dict[str, str]]] = {}

    def of(run) -> dict[str, str]:
        hit = cache.get(id(run))
        if hit is None or hit[0] is not run:
            hit = cache[id(run)] = (run, provenance(run))
        return hit[1]

    return of


def by_value() -> Callable[[object], dict[str, str]]:
    """`provenance` computed once per distinct stored value (runs of one matrix mostly share
    theirs): keyed on the fields it reads, the JSON ones by `repr` (exact for JSON values)."""
    cache: dict[tuple, dict[str, str]] = {}

    def of(run) -> dict[str, str]:
        key = tuple(repr(getattr(run, name, None)) for name in PROVENANCE_FIELDS)
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = provenance(run)
        return hit

    return of


def differences(runs_a: Iterable, runs_b: Iterable, of=provenance) -> list[str]:
    """Names of the provenance parts whose values differ between two sets of runs (a part
    recorded on one side only is not called a difference: there is nothing to compare).

    Args:
        of: the provenance of one run (a memo of `provenance` when runs recur).
    """
    seen_a: dict[str, set[str]] = {}
    seen_b: dict[str, set[str]] = {}
    for runs, seen in ((runs_a, seen_a), (runs_b, seen_b)):
        for run in runs:
            for name, value in of(run).items():
                seen.setdefault(name, set()).add(value)
    return [name for name in seen_a if name in seen_b and seen_a[name] != seen_b[name]]


THROTTLED_HOST = "a throttled host"  # what `host_state` says of a throttled run
NOISY_HOST = "host load (noisy runs)"  # ... and of a run timed while its host was busy
HOST_STATES = (NOISY_HOST, THROTTLED_HOST)  # every entry `host_state` can give: no setting


def host_state(runs_a: Iterable, runs_b: Iterable) -> list[str]:
    """What of the hosts' state could explain a change: runs timed while the host was busy
    (`noisy`) or throttled on either side. Not provenance (nothing to compare), but a
    slow-down beside them is no evidence against the code."""
    runs = [*runs_a, *runs_b]
    said = []
    if any(getattr(run, "noisy", False) for run in runs):
        said.append(NOISY_HOST)
    if any(getattr(run, "throttled", False) for run in runs):
        said.append(THROTTLED_HOST)
    return said
