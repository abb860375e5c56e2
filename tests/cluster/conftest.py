"""Fixtures of the cluster tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def home(tmp_path, monkeypatch):
    """This machine's fleet folders and a Ray token of the test's own (`tmp_path`), and the
    variables `fleet up` / `join` set, restored after the test (Ray's multi-node switch too:
    `fleet_up` of a loopback head turns it off in this process)."""
    from ray._private import ray_constants

    from specfleet.cluster.raybind import MULTINODE_SWITCH

    monkeypatch.delenv(MULTINODE_SWITCH, raising=False)  # a user's shell has none
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", ray_constants.ENABLE_RAY_CLUSTER)
    monkeypatch.setenv("SPECFLEET_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SPECFLEET_RUNTIME_DIR", str(tmp_path / "run"))
    token = tmp_path / "auth_token"  # never the real one
    token.write_text("0" * 64)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    return tmp_path
