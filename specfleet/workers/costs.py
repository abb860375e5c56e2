"""The calibrated arm's width-cost table on a worker: the head's stored one, else measured.

The head attaches the newest stored table of the run's host, engine, device and model to a
calibrated RunSpec (`costs`, with the `host_fingerprint:weights_hash` it was measured
under). The worker uses it when that key is its own; otherwise it measures one with the
quick settings (bounded: under 20 s on the bundled model on this project's machine), keeps
it for the rest of its life, and returns it with the run so the head stores it.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from specfleet.engine.config import ConfigError, PromptLookupConfig, needs_costs
from specfleet.jobs.run import RunSpec


def costs_key(host_fingerprint: str | None, weights_hash: str | None) -> str:
    """The key a stored table must carry to be used on a host for a model's weights."""
    return f"{host_fingerprint or '-'}:{weights_hash or '-'}"


def with_stored_costs(store, spec: RunSpec) -> RunSpec:
    """A calibrated run with the newest stored width-cost table of its host, engine, device
    and model attached (the worker uses it only if its fingerprint and weights match)."""
    rows = store.latest_calibration(spec.target.engine, spec.target.device, spec.model,
                                    host=spec.target.host)
    if not rows or any(r.ratio is None for r in rows):
        return spec
    costs = tuple(r.ratio for r in rows)
    # A table the arm refuses (`job calibrate --max-width 1`) failed every run it was sent
    # with; without one the worker measures its own, which the head stores as the newest.
    if not takes_costs(spec.arm, costs):
        return spec
    key = costs_key(rows[0].host_fingerprint, rows[0].weights_hash)
    return spec.model_copy(update={"costs": costs, "costs_key": key})


def takes_costs(policy: str, costs: tuple[float, ...]) -> bool:
    """Whether `policy` runs on the width-cost table `costs` (its own check decides)."""
    try:
        PromptLookupConfig(policy=policy, costs=costs).validate()  # type: ignore[arg-type]
    except ConfigError:
        return False
    return True


class CostTables:
    """Width-cost tables this worker measured, by (engine, device, weights hash)."""

    def __init__(self) -> None:
        self._measured: dict[tuple[str, str, str | None], tuple[float, ...]] = {}

    def for_run(
        self, spec: RunSpec, entry: Any, host_fingerprint: str
    ) -> tuple[tuple[float, ...], dict | None]:
        """(ratios of widths 1..n, the table measured for this run or None).

        A run whose arm needs no table gets ((), None).
        """
        if not needs_costs(spec.arm):
            return (), None
        if spec.costs and spec.costs_key == costs_key(host_fingerprint, entry.weights_hash):
            return tuple(spec.costs), None
        key = (spec.target.engine, spec.target.device, entry.weights_hash)
        if key in self._measured:
            return self._measured[key], None
        from specfleet.engine.widthcosts import QUICK, measure_width_costs

        start_s = time.perf_counter()
        table = measure_width_costs(entry.runner, QUICK)
        entry.runner.reset()
        self._measured[key] = table.ratio
        calibration = {
            "costs": asdict(table),
            "host_fingerprint": host_fingerprint,
            "weights_hash": entry.weights_hash,
            "measure_s": round(time.perf_counter() - start_s, 2),
            "settings": asdict(QUICK),
        }
        return table.ratio, calibration
