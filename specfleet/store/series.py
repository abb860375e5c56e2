"""Per-host series beside the runs: verify-width costs and load samples (noisy hosts)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select

from specfleet.jobs.run import Target
from specfleet.store.base import StoreCore
from specfleet.store.rows import LoadSampleRow, WidthCostRow
from specfleet.store.tables import LoadSample, WidthCost
from specfleet.store.values import bulk_insert, naive_utc, utcnow

LOAD_FIELDS = ("t", "load1", "load5", "load15", "cpu_util", "gpu_util")
TABLE_FIELDS = ("sync_ms", "pipelined_ms", "ratio", "ratio_lo", "ratio_hi", "n", "flagged")
WidthCosts = Mapping[int, tuple[float, float | None]] | Iterable[Any] | Any


class StoreSeries:
    """Width-cost and load-sample methods of `Store` (mixed in; what they use of it:
    `base.StoreCore`)."""

    def record_width_costs(
        self: StoreCore, target: Target, model: str, costs: WidthCosts,
        measured_at: datetime | None = None, *, host_fingerprint: str | None = None, weights_hash: str | None = None,
        provenance: dict[str, Any] | None = None,
    ) -> int:
        """Store one calibration of verify widths on a target (its widths share an id).

        Args:
            target: where it was measured.
            model: the model alias.
            costs: an `engine.widthcosts.WidthCosts` (or its dict), `{width: (sync_ms,
                pipelined_ms)}`, or items with `width`, `sync_ms` and `pipelined_ms`.
            measured_at: when (default now).
            host_fingerprint: the host's hardware-and-versions fingerprint.
            weights_hash: the model weights' hash.
            provenance: how it was measured (method, settings, versions, git commit).

        Returns:
            How many widths were stored.
        """
        moment = naive_utc(measured_at) or utcnow()
        base = {"host": target.host, "engine": target.engine, "device": target.device,
                "model": model, "measured_at": moment, "calibration": uuid.uuid4().hex,
                "host_fingerprint": host_fingerprint, "weights_hash": weights_hash,
                "provenance": provenance}
        rows = [{**base, **item} for item in _cost_items(costs)]
        with self._write() as session:
            bulk_insert(session, WidthCost, rows)
        return len(rows)

    def width_costs(
        self: StoreCore, host: str | None = None, engine: str | None = None,
        device: str | None = None, model: str | None = None, latest: bool = True,
    ) -> list[WidthCostRow]:
        """Stored width costs, by target, model and width; `latest` keeps the newest
        measurement of each (target, model, width)."""
        conds = [col == val for col, val in ((WidthCost.host, host), (WidthCost.engine, engine),
                 (WidthCost.device, device), (WidthCost.model, model)) if val is not None]
        stmt = select(WidthCost).where(*conds).order_by(
            WidthCost.host, WidthCost.engine, WidthCost.device, WidthCost.model, WidthCost.width,
            WidthCost.measured_at, WidthCost.id,
        )
        with self._read() as session:
            rows = [_width_row(w) for w in session.scalars(stmt)]
        if not latest:
            return rows
        # Sorted oldest first, so the last row of each key is the newest measurement.
        newest = {(r.host, r.engine, r.device, r.model, r.width): r for r in rows}
        return list(newest.values())

    def record_calibration(
        self: StoreCore, target: Target, model: str, calibration: Mapping
    ) -> int:
        """Store a worker's calibration (`HostWorker.calibrate`, or one measured for a
        calibrated run): its `costs` table keyed by its host fingerprint and weights hash."""
        provenance = {k: calibration.get(k) for k in ("settings", "versions", "measure_s")}
        provenance["method"] = calibration["costs"].get("method")
        # By class: a StoreCore does not list it.
        return StoreSeries.record_width_costs(
            self, target, model, calibration["costs"],
            host_fingerprint=calibration["host_fingerprint"],
            weights_hash=calibration["weights_hash"], provenance=provenance,
        )

    def latest_calibration(
        self: StoreCore, engine: str, device: str, model: str, *,
        host_fingerprint: str | None = None, weights_hash: str | None = None,
        host: str | None = None,
    ) -> list[WidthCostRow]:
        """The widths of the newest stored calibration matching every given key, width
        order; [] when there is none (or only tables stored before calibrations had ids)."""
        conds = [WidthCost.engine == engine, WidthCost.device == device, WidthCost.model == model,
                 WidthCost.calibration.is_not(None)]
        for column, value in ((WidthCost.host_fingerprint, host_fingerprint),
                              (WidthCost.weights_hash, weights_hash), (WidthCost.host, host)):
            if value is not None:
                conds.append(column == value)
        newest = (select(WidthCost.calibration).where(*conds)
                  .order_by(WidthCost.measured_at.desc(), WidthCost.id.desc()).limit(1))
        with self._read() as session:
            calibration = session.scalar(newest)
            if calibration is None:
                return []
            stmt = select(WidthCost).where(WidthCost.calibration == calibration)
            return [_width_row(w) for w in session.scalars(stmt.order_by(WidthCost.width))]

    def record_load_samples(
        self: StoreCore, host: str, samples: Iterable[Any], matrix_id: str | None = None
    ) -> int:
        """Store load readings of a host (items with t, load1, load5, load15, cpu_util,
        gpu_util as attributes or keys; missing ones are stored as NULL).

        Returns:
            How many samples were stored.
        """
        rows = [{"host": host, "matrix_id": matrix_id, **_pick(s, LOAD_FIELDS)} for s in samples]
        for row in rows:
            row["t"] = naive_utc(row["t"])
        with self._write() as session:
            bulk_insert(session, LoadSample, rows)
        return len(rows)

    def load_samples(
        self: StoreCore, host: str | None = None, matrix_id: str | None = None,
        since: datetime | None = None, until: datetime | None = None,
    ) -> list[LoadSampleRow]:
        """Load readings, oldest first."""
        stmt = select(LoadSample).order_by(LoadSample.t, LoadSample.id)
        if host is not None:
            stmt = stmt.where(LoadSample.host == host)
        if matrix_id is not None:
            stmt = stmt.where(LoadSample.matrix_id == matrix_id)
        if since is not None:
            stmt = stmt.where(LoadSample.t >= naive_utc(since))
        if until is not None:
            stmt = stmt.where(LoadSample.t < naive_utc(until))
        with self._read() as session:
            return [_load_row(s) for s in session.scalars(stmt)]

    def latest_load_sample(self: StoreCore, host: str) -> LoadSampleRow | None:
        """The newest load reading of a host, or None."""
        stmt = (select(LoadSample).where(LoadSample.host == host)
                .order_by(LoadSample.t.desc(), LoadSample.id.desc()).limit(1))
        with self._read() as session:
            sample = session.scalars(stmt).first()
            return None if sample is None else _load_row(sample)


def _load_row(s: LoadSample) -> LoadSampleRow:
    return LoadSampleRow(host=s.host, matrix_id=s.matrix_id,
                         **{name: getattr(s, name) for name in LOAD_FIELDS})


def _cost_items(costs: WidthCosts) -> Iterator[dict[str, Any]]:
    if isinstance(costs, Mapping) and "sync_ms" not in costs:
        for width, (sync_ms, pipelined_ms) in costs.items():
            yield {"width": int(width), "sync_ms": sync_ms, "pipelined_ms": pipelined_ms}
        return
    table = costs if isinstance(costs, dict) and "sync_ms" in costs else _as_dict(costs)
    if table is not None:
        yield from _table_items(table)
        return
    for item in costs:
        yield _pick(item, ("width", "sync_ms", "pipelined_ms"))


def _as_dict(costs: Any) -> dict[str, Any] | None:
    if isinstance(getattr(costs, "sync_ms", None), list | tuple):
        return {name: getattr(costs, name, None) for name in TABLE_FIELDS}
    return None


def _table_items(table: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """engine.widthcosts.WidthCosts as rows: index i of each tuple is width i + 1."""
    flagged = set(table.get("flagged") or ())
    for i, sync_ms in enumerate(table["sync_ms"]):
        item = {"width": i + 1, "sync_ms": sync_ms, "pipelined_ms": table["pipelined_ms"],
                "flagged": (i + 1) in flagged, "n": table.get("n")}
        for name in ("ratio", "ratio_lo", "ratio_hi"):
            values = table.get(name) or ()
            item[name] = values[i] if i < len(values) else None
        yield item


def _pick(item: Any, names: tuple[str, ...]) -> dict[str, Any]:
    if isinstance(item, Mapping):
        return {name: item.get(name) for name in names}
    return {name: getattr(item, name, None) for name in names}


def _width_row(w: WidthCost) -> WidthCostRow:
    return WidthCostRow(
        host=w.host, engine=w.engine, device=w.device, model=w.model, width=w.width,
        sync_ms=w.sync_ms, pipelined_ms=w.pipelined_ms, measured_at=w.measured_at,
        calibration=w.calibration, host_fingerprint=w.host_fingerprint,
        weights_hash=w.weights_hash, ratio=w.ratio, ratio_lo=w.ratio_lo, ratio_hi=w.ratio_hi,
        n=w.n, flagged=w.flagged, provenance=w.provenance,
    )
