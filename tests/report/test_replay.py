"""Replays sent to a worker actor on a real (local, multi-node) Ray cluster."""

from __future__ import annotations

import pytest

from specfleet.cluster.forensics import worker_replayer
from specfleet.cluster.localfleet import LocalFleet
from specfleet.report.parity import check_parity
from tests.report.conftest import DEMO_ID

pytestmark = pytest.mark.slow


def test_store_run_spec_rebuilds_the_run(store) -> None:
    run = next(r for r in store.runs(matrix=DEMO_ID) if r.host == "h2" and r.arm == "graded")
    spec = store.run_spec(run.run_key)
    assert (spec.target.host, spec.model, spec.arm, spec.prompt_name) == ("h2", "script",
                                                                         "graded", run.prompt_name)
    assert spec.prompt_text in ("hello world hello world", "the cat sat on the mat")


def test_divergence_replayed_by_the_hosts_actor(store) -> None:
    with LocalFleet(["h2"], worker_kwargs={"sample_period_s": 3600.0},
                    first_host_on_head=True) as fleet:
        workers = fleet.start_workers()
        report = check_parity(store, DEMO_ID, worker_replayer(store, workers))
    (diverged,) = [a for a in report.arms if a.verdict != "identical"]
    assert (diverged.target, diverged.prompt, diverged.arm) == ("h2/toy/cpu", "copy", "graded")
    assert diverged.verdict == "suspect" and diverged.replay.text_b == "Z"
    assert diverged.replay.margins.a.gap == pytest.approx(10.0)
