"""What produced a run, apart from the code: the things `compare` checks before it calls a
slow-down a regression (issue 7 provenance)."""

from __future__ import annotations

import json
from collections.abc import Iterable

# engine_config keys that are measurements or code, not settings
_MEASURED_CONFIG_KEYS = ("warmup_s",)


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def provenance(run) -> dict[str, str]:
    """The run's provenance minus its code version, each part as comparable text."""
    config = {k: v for k, v in (run.engine_config or {}).items()
              if k not in _MEASURED_CONFIG_KEYS}
    libraries = {k: v for k, v in (run.versions or {}).items() if not k.startswith("specfleet")}
    return {
        "weights hash": str(run.weights_hash),
        "prompt hash": str(run.prompt_hash),
        "engine config": _canonical(config),
        "host fingerprint": str(run.host_fingerprint),
        "library versions": _canonical(libraries),
    }


def differences(runs_a: Iterable, runs_b: Iterable) -> list[str]:
    """Names of the provenance parts whose values differ between two sets of runs."""
    seen_a: dict[str, set[str]] = {}
    seen_b: dict[str, set[str]] = {}
    for runs, seen in ((runs_a, seen_a), (runs_b, seen_b)):
        for run in runs:
            for name, value in provenance(run).items():
                seen.setdefault(name, set()).add(value)
    return [name for name in seen_a if seen_a[name] != seen_b.get(name, set())]
