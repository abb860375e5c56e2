"""A short seeded chaos run (tools/chaos.py) on a namespace fleet of two hosts (h1 head, h2;
`cli` drives too; PostgreSQL in h1's namespace): a minute of toy matrices under seed 37's
faults, overlapping (h2's link cut 39 s, across a driver SIGKILL with `resume` from the
other host, a second driver at once and h2's raylet SIGKILL; the store stopped longer than
the drivers' retry bound), then every invariant of tools/chaos_checks.py must hold.
Skips (with the reason) where namespaces cannot be made: not root, no `ip`.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_TOOLS = Path(__file__).parents[2] / "tools"


def _load(name: str):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _TOOLS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


netfleet = _load("netfleet")
chaos = _load("chaos")
WHY_NOT = netfleet.can_build()
SEED, DURATION_S = 37, 60.0


def test_the_same_seed_gives_the_same_schedule() -> None:
    first = chaos.schedule(SEED, 300.0)
    assert first == chaos.schedule(SEED, 300.0) and first != chaos.schedule(SEED + 1, 300.0)
    kinds = {f.kind for f in chaos.schedule(SEED, DURATION_S, ("h1", "h2"))}
    assert kinds == {"link_cut", "driver_kill", "second_driver", "raylet_kill", "store_outage"}


@pytest.fixture(scope="module")
def fleet():
    built, pg_root = chaos.build(2)
    try:
        yield built
    finally:
        problems = chaos.teardown(built, pg_root)
        assert not problems, problems


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")
def test_a_seeded_chaos_minute_breaks_no_invariant(fleet, tmp_path) -> None:
    run = chaos.Chaos(fleet, SEED, DURATION_S, logs=tmp_path)
    results = run.run()
    print()
    for result in results:
        print(result.line())
    for log in sorted(tmp_path.glob("settle_*.log")):
        print(log.name, log.read_text()[-1500:])
    applied = {f.kind for f, note in run.applied if not note.startswith("skipped")}
    assert {"link_cut", "store_outage", "raylet_kill", "driver_kill"} <= applied, run.applied
    assert run.matrices and len(run.ended) >= 3, [e.label for e in run.ended]
    broken = [result.line() for result in results if not result.ok]
    assert not broken, "\n".join(broken)
