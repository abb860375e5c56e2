"""Stored width-cost tables: one calibration per measurement, keyed by host fingerprint,
engine, device, model and weights hash, with each ratio's spread, n and provenance."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime

from specfleet.engine.widthcosts import WidthCosts
from specfleet.jobs.run import Target

TARGET = Target(host="mac1", engine="mlx", device="metal")


def table(scale: float = 1.0) -> WidthCosts:
    return WidthCosts(
        "mlx", "metal", 300, 5.0, (6.0 * scale, 7.0 * scale, 9.0 * scale),
        (1.2 * scale, 1.4 * scale, 1.8 * scale), (1.1, 1.3, 1.7), (1.3, 1.5, 1.9), n=7,
        flagged=(3,),
    )


def test_the_newest_matching_calibration_comes_back_whole_with_its_spread(store):
    store.record_width_costs(TARGET, "m1", table(), measured_at=datetime(2026, 1, 1),
                             host_fingerprint="fp1", weights_hash="w1",
                             provenance={"method": "interleaved", "git": "abc"})
    store.record_width_costs(TARGET, "m1", asdict(table(2.0)), measured_at=datetime(2026, 2, 1),
                             host_fingerprint="fp1", weights_hash="w1")
    store.record_width_costs(TARGET, "m1", table(3.0), measured_at=datetime(2026, 3, 1),
                             host_fingerprint="fp2", weights_hash="w1")
    rows = store.latest_calibration("mlx", "metal", "m1", host_fingerprint="fp1")
    assert [r.width for r in rows] == [1, 2, 3]
    assert [r.ratio for r in rows] == [1.2 * 2.0, 1.4 * 2.0, 1.8 * 2.0]
    assert [(r.ratio_lo, r.ratio_hi, r.n) for r in rows][0] == (1.1, 1.3, 7)
    assert [r.flagged for r in rows] == [False, False, True]
    assert len({r.calibration for r in rows}) == 1
    newest = store.latest_calibration("mlx", "metal", "m1")
    assert newest[0].host_fingerprint == "fp2" and newest[0].ratio == 1.2 * 3.0
    old = store.latest_calibration("mlx", "metal", "m1", host_fingerprint="fp1", host="mac1")
    assert old[0].measured_at == datetime(2026, 2, 1)


def test_provenance_is_kept_and_other_keys_do_not_match(store):
    store.record_width_costs(TARGET, "m1", table(), host_fingerprint="fp1", weights_hash="w1",
                             provenance={"method": "interleaved", "settings": {"rounds": 7}})
    rows = store.latest_calibration("mlx", "metal", "m1", weights_hash="w1")
    assert rows[0].provenance == {"method": "interleaved", "settings": {"rounds": 7}}
    assert store.latest_calibration("mlx", "metal", "m1", weights_hash="w2") == []
    assert store.latest_calibration("torch", "metal", "m1") == []
    assert store.latest_calibration("mlx", "metal", "m2") == []


def test_tables_stored_without_an_id_are_not_a_calibration(store):
    store.record_width_costs(TARGET, "m1", {1: (10.0, 5.0), 2: (12.0, 5.0)})
    assert len(store.width_costs(host="mac1")) == 2
    rows = store.latest_calibration("mlx", "metal", "m1")
    # Every record now gets an id; the plain {width: (sync, pipelined)} form has no ratio.
    assert [r.ratio for r in rows] == [None, None]
