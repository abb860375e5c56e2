"""tools/chaos.py's schedule: a seed names one schedule of faults. The seeded chaos schedule
itself runs on the namespace fleet of tests/cluster/test_netfleet_faults.py."""

from __future__ import annotations

from tests.cluster.nsfleet import load_tool

chaos = load_tool("chaos")
SEED, DURATION_S = 1149, 40.0


def test_the_same_seed_gives_the_same_schedule() -> None:
    first = chaos.schedule(SEED, 300.0)
    assert first == chaos.schedule(SEED, 300.0) and first != chaos.schedule(SEED + 1, 300.0)
    kinds = {f.kind for f in chaos.schedule(SEED, DURATION_S, ("h1", "h2"))}
    assert kinds == {"link_cut", "driver_kill", "second_driver", "raylet_kill", "store_outage"}
