"""`fleet status` on hosts that went away. One whose node Ray lists dead (its raylet killed,
no supervisor to bring it back): the reason says the node is down and what brings the worker
back, not Ray's "The actor ... is temporarily unavailable: ... The actor is restarting.." cut
at 200 characters, which read as a worker about to answer. One that left (`fleet leave`):
not listed at all, where its dead node kept it in the table for as long as the head ran."""

from __future__ import annotations

import socket

from specfleet.cluster import fleet as fleet_mod


def test_a_host_whose_node_ray_lists_dead_says_its_node_is_down():
    with socket.socket() as closed:  # a port nothing listens on: refused, so reachable
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    gone = fleet_mod.HostNode("h2", "linux-cpu", "n2", "127.0.0.1", False, port)
    assert fleet_mod._not_answering(gone, "The actor is restarting..") == {
        "health": fleet_mod.SUSPECT, "reason": (
            "its node is down (Ray lists it dead); its worker comes back when the host rejoins: "
            "its supervisor does so, or `specfleet fleet join` there")}


def test_a_host_that_left_is_not_listed(monkeypatch):
    # After `fleet leave` on h2 its node stays in Ray's table, dead: status listed
    # `h2  linux-cpu  dead (no worker actor)` for as long as the head ran.
    nodes = [fleet_mod.HostNode("h1", "linux-cpu", "n1", "10.0.0.1", True, 1),
             fleet_mod.HostNode("h2", "linux-cpu", "n2", "10.0.0.2", False, 1)]
    monkeypatch.setattr(fleet_mod, "discover_hosts", lambda include_dead=False: nodes)
    monkeypatch.setattr(fleet_mod, "list_workers", lambda: [])
    monkeypatch.setattr(fleet_mod, "get_worker", lambda host: None)
    assert [(row["host"], row["health"]) for row in fleet_mod.fleet_status()] == [
        ("h1", fleet_mod.DEAD)]
