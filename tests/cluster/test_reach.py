"""Which fleet a command uses: --address, $SPECFLEET_ADDRESS, $RAY_ADDRESS, joined, embedded."""

from __future__ import annotations

import pytest

from specfleet.cluster import noderecord
from specfleet.cluster.reach import EMBEDDED, JOINED, announce, choose_fleet
from specfleet.errors import UserError

BOTH = {"SPECFLEET_ADDRESS": "10.0.0.2:6379", "RAY_ADDRESS": "10.0.0.3:6379"}


def test_the_order_is_flag_then_environment_then_joined_then_embedded() -> None:
    joined = "10.0.0.4:6379"
    assert choose_fleet("10.0.0.1:6379", env=BOTH, joined=joined).source == "--address"
    assert choose_fleet(None, env=BOTH, joined=joined).address == "10.0.0.2:6379"
    ray_only = choose_fleet(None, env={"RAY_ADDRESS": "10.0.0.3:6379"}, joined=joined)
    assert (ray_only.address, ray_only.source) == ("10.0.0.3:6379", "$RAY_ADDRESS")
    assert choose_fleet(None, env={}, joined=joined).source == JOINED
    alone = choose_fleet(None, env={}, joined=None)
    assert alone.embedded and alone.source == EMBEDDED


def test_embedded_forces_the_private_fleet_and_refuses_an_address_beside_it() -> None:
    assert choose_fleet(None, embedded=True, env=BOTH, joined="10.0.0.4:6379").embedded
    with pytest.raises(UserError, match="--embedded and --address: give one of them"):
        choose_fleet("10.0.0.1:6379", embedded=True)


def test_a_malformed_address_names_where_it_came_from() -> None:
    with pytest.raises(UserError, match=r"^\$RAY_ADDRESS 'auto': expected HOST:PORT"):
        choose_fleet(None, env={"RAY_ADDRESS": "auto"}, joined=None)


def test_the_announcement_line() -> None:
    assert announce(choose_fleet(None, env={}, joined=None), 1) == (
        "fleet: embedded (this machine only)")
    assert announce(choose_fleet("head1:6379", env={}), 3) == "fleet: head1:6379 (3 hosts)"
    assert announce(choose_fleet("head1:6379", env={}), 1) == "fleet: head1:6379 (1 host)"


def test_up_and_join_are_remembered_until_leave(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SPECFLEET_HOME", str(tmp_path))
    assert noderecord.joined_fleet() is None
    assert choose_fleet(None, env={}).embedded  # never joined: the embedded fleet
    noderecord.save(noderecord.NodeRecord("10.0.0.5:6379", "h2", False, str(tmp_path / "r")))
    assert choose_fleet(None, env={}).address == "10.0.0.5:6379"
    noderecord.forget()
    assert choose_fleet(None, env={}).embedded
