"""The colours of arms in plots come from the registries (a policy's and a peer's own class)."""

from __future__ import annotations

from specfleet.engine.peers import PEER_KINDS
from specfleet.engine.policies import POLICIES
from specfleet.jobs.run import ARMS
from specfleet.report.plots import arm_color


def test_every_arm_has_its_own_colour():
    colours = {arm: arm_color(arm) for arm in ARMS}
    assert len(set(colours.values())) == len(ARMS), colours
    assert "#333333" not in colours.values()  # the grey for an arm no registry names


def test_a_policy_and_a_peer_are_drawn_in_the_colour_their_class_declares():
    for name, cls in POLICIES.items():
        assert arm_color(name) == cls.color
    for name, kind in PEER_KINDS.items():
        assert arm_color(name) == kind.color
    assert arm_color("no-such-arm") == "#333333"
