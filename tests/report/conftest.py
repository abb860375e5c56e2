"""A real SQLite store seeded once per module with real toy-engine runs."""

from __future__ import annotations

import pytest

from specfleet.store.store import open_store
from specfleet.workers.host import HostWorker
from tests.report.seed import after_seeds, demo_seeds, mixed_seeds, seed_matrix

DEMO_ID = "demo-000001"
AFTER_ID = "after-000002"
MIXED_ID = "mixed-000003"


@pytest.fixture(scope="module")
def worker():
    # Never noisy: a seed timed on a box busy with other tests would read "host load"
    # wherever compare and history judge a change.
    worker = HostWorker("h1", sample_period_s=3600.0, quiet_threshold_per_core=1e9)
    yield worker
    worker.close()


@pytest.fixture(scope="module")
def db_path(tmp_path_factory, worker):
    path = tmp_path_factory.mktemp("store") / "specfleet.db"
    store = open_store(str(path))
    seed_matrix(store, worker, "demo", demo_seeds(), DEMO_ID)
    seed_matrix(store, worker, "after", after_seeds(), AFTER_ID)
    seed_matrix(store, worker, "mixed", mixed_seeds(), MIXED_ID)
    store.close()
    return path


@pytest.fixture()
def store(db_path):
    store = open_store(str(db_path))
    yield store
    store.close()
