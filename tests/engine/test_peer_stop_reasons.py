"""A peer's stop reason where two stops meet at one token: named as our loop names it."""

from __future__ import annotations

from specfleet.engine.loop import generate
from specfleet.engine.peers import PeerCall, StopWatch
from specfleet.engine.runners.toy import ScriptModel
from specfleet.engine.stats import Timings

GUARD = (1, 4, 3)  # three repeats of a one-token period
PROMPT = [1, 2]


def test_a_guard_firing_at_the_last_allowed_token_ends_on_max_tokens_as_ours() -> None:
    reply = [5, 7, 7, 7]  # the guard first fires at the fourth token, the limit
    ours = generate(ScriptModel([*PROMPT, *reply, 9, 9]), PROMPT, max_tokens=len(reply),
                    loop_guard=GUARD)
    assert ours.tokens == reply and ours.stop_reason == "max_tokens"
    watch = StopWatch(PeerCall("hf", len(reply), loop_guard=GUARD))
    assert watch.should_stop(reply)  # the library stops there either way
    peer = watch.finish(reply, eos=False, timings=Timings(0.1, 0.2, 0.3), version="x")
    assert (peer.tokens, peer.stop_reason) == (ours.tokens, ours.stop_reason)


def test_a_guard_firing_before_the_limit_is_still_the_loop_guard() -> None:
    reply = [5, 7, 7, 7]
    ours = generate(ScriptModel([*PROMPT, *reply, 9, 9]), PROMPT, max_tokens=8, loop_guard=GUARD)
    assert ours.stop_reason == "loop_guard"
    watch = StopWatch(PeerCall("mlx-lm", 8, loop_guard=GUARD))
    assert watch.should_stop(reply)
    peer = watch.finish(reply, eos=False, timings=Timings(0.1, 0.2, 0.3), version="x")
    assert (peer.tokens, peer.stop_reason) == (ours.tokens, ours.stop_reason)
