"""`workers/costs.with_stored_costs`: the head attaches a host's stored width-cost table to a
calibrated run only where the policy can run on it."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from specfleet.engine.widthcosts import WidthCosts
from specfleet.jobs.run import RunSpec, Target
from specfleet.store.store import open_store
from specfleet.workers.costs import costs_key, with_stored_costs

TARGET = Target(host="box1", engine="toy", device="cpu")
SPEC = RunSpec(run_key="k", target=TARGET, model="script", prompt_name="p",
               prompt_text="a b a b", arm="calibrated", max_tokens=20)


def stored(tmp_path, ratio: tuple[float, ...]):
    """A store holding one calibration of `SPEC`'s host and model with `ratio`."""
    table = WidthCosts(engine="toy", device="cpu", prompt_len=8, pipelined_ms=1.0,
                       sync_ms=ratio, ratio=ratio, ratio_lo=ratio, ratio_hi=ratio)
    store = open_store(str(tmp_path / "s.db"))
    store.record_calibration(TARGET, "script", {"costs": asdict(table), "host_fingerprint": "f",
                                                "weights_hash": "w"})
    return store


def test_a_stored_table_is_attached_with_its_key(tmp_path):
    with stored(tmp_path, (1.0, 1.2)) as store:
        spec = with_stored_costs(store, SPEC)
    assert spec.costs == pytest.approx((1.0, 1.2)) and spec.costs_key == costs_key("f", "w")


def test_a_table_the_policy_refuses_is_not_attached(tmp_path):
    # `job calibrate --max-width 1` stores a one-width table; attached, every calibrated run
    # of that host failed ("needs a width-cost table of at least widths 1-2") until a wider
    # one was measured by hand. Unattached, the worker measures its own.
    with stored(tmp_path, (1.0,)) as store:
        spec = with_stored_costs(store, SPEC)
    assert spec.costs is None and spec.costs_key is None
