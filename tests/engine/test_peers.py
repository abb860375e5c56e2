"""Peer arms' shared parts: the registry, the stops a library cannot make, the clock.

The real libraries on the bundled model run in tests/workers/test_peers.py.
"""

from __future__ import annotations

import time

import pytest

from specfleet.engine.kinds import MODEL_ENGINES
from specfleet.engine.peers import (
    PEER_KINDS,
    PEERS,
    FirstTokenClock,
    PeerCall,
    StopWatch,
    generate_peer,
    is_peer,
    peer_kind,
)
from specfleet.engine.stats import Timings, loop_guard_fires
from specfleet.errors import UserError

TIMINGS = Timings(0.1, 0.2, 0.3)


def test_every_peer_names_a_real_engine_and_the_lookups_draft() -> None:
    assert PEERS == ("hf", "hf-lookup", "mlx-lm", "llama.cpp", "llama.cpp-lookup")
    assert {e for p in PEERS for e in PEER_KINDS[p].engines} == set(MODEL_ENGINES)
    assert PEER_KINDS["llama.cpp"].engines == PEER_KINDS["llama.cpp-lookup"].engines == (
        MODEL_ENGINES)
    assert [p for p in PEERS if PEER_KINDS[p].drafts] == ["hf-lookup", "llama.cpp-lookup"]
    assert [p for p in PEERS if PEER_KINDS[p].gguf] == ["llama.cpp", "llama.cpp-lookup"]
    assert is_peer("mlx-lm") and not is_peer("plain") and peer_kind("graded") is None


def test_the_guard_cuts_a_block_at_the_token_where_it_fires_as_our_loop_would() -> None:
    watch = StopWatch(PeerCall("hf-lookup", 64, loop_guard=(1, 4, 3)))
    reply = [5, 6, 7, 7]
    assert not watch.should_stop(reply)
    reply += [7, 8, 9]  # one block: the guard fires at the third 7 (length 5), not at 7
    assert watch.should_stop(reply)
    done = watch.finish(reply, eos=False, timings=TIMINGS, version="x")
    assert done.tokens == [5, 6, 7, 7, 7] and done.stop_reason == "loop_guard"
    first = next(n for n in range(1, 8) if loop_guard_fires(reply[:n], 1, 4, 3))
    assert first == len(done.tokens)


def test_stop_reasons_eos_max_tokens_and_cancelled() -> None:
    plain = StopWatch(PeerCall("hf", 4))
    assert not plain.should_stop([1, 2])
    assert plain.finish([1, 2], eos=True, timings=TIMINGS, version="x").stop_reason == "eos"
    assert plain.finish([1, 2, 3, 4], False, TIMINGS, "x").stop_reason == "max_tokens"
    stop = StopWatch(PeerCall("mlx-lm", 4, should_stop=lambda: True))
    assert stop.should_stop([1])
    assert stop.finish([1], eos=False, timings=TIMINGS, version="x").stop_reason == "cancelled"


def test_the_clock_ends_prefill_at_the_first_token() -> None:
    clock = FirstTokenClock()
    time.sleep(0.01)
    clock.token_arrived()
    time.sleep(0.01)
    clock.token_arrived()  # later tokens do not move it
    timings = clock.timings()
    assert timings.prefill_s >= 0.01 and timings.decode_s >= 0.01
    assert timings.total_s == pytest.approx(timings.prefill_s + timings.decode_s)


def test_settings_name_the_library_call_and_hf_lookups_knobs() -> None:
    call = PeerCall("hf-lookup", 16, lookup_tokens=10, ngram_max=2)
    assert call.settings() == {
        "library": "transformers", "call": PEER_KINDS["hf-lookup"].call,
        "prompt_lookup_num_tokens": 10, "max_matching_ngram_size": 2,
    }
    assert PeerCall("mlx-lm", 16).settings()["library"] == "mlx-lm"
    assert call.warm_key() != PeerCall("hf-lookup", 16, 5, 2).warm_key()


def test_a_peer_on_another_engines_runner_is_one_line() -> None:
    class Toy:
        engine = "toy"

    with pytest.raises(UserError, match="^arm hf-lookup runs on torch targets only, not on toy$"):
        generate_peer(Toy(), [1, 2], PeerCall("hf-lookup", 4, 10, 2))


def test_a_gguf_peer_without_a_gguf_is_one_line() -> None:
    class Torch:
        engine = "torch"

    with pytest.raises(UserError, match=r"^arm llama\.cpp runs the GGUF a model comes from, and "
                                        r"this model has none \(a bundled model"):
        generate_peer(Torch(), [1, 2], PeerCall("llama.cpp", 4))


def test_llama_cpp_settings_use_its_own_knob_names() -> None:
    call = PeerCall("llama.cpp-lookup", 16, lookup_tokens=6, ngram_max=3, gguf="m.gguf")
    assert call.settings() == {"library": "llama-cpp-python",
                               "call": PEER_KINDS["llama.cpp-lookup"].call,
                               "num_pred_tokens": 6, "max_ngram_size": 3, "gguf": "m.gguf"}
    assert "num_pred_tokens" not in PeerCall("llama.cpp", 16, gguf="m.gguf").settings()


def test_without_the_package_a_llama_cpp_arm_says_how_to_install_it(monkeypatch) -> None:
    import sys

    from specfleet.engine.runners import llamacpp_peers

    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # as if not installed
    with pytest.raises(UserError, match=r"^arm llama\.cpp needs llama-cpp-python: pip install "
                                        r"-e '\.\[llamacpp\]' in a checkout"):
        llamacpp_peers.llama_cpp_generate("m.gguf", {2}, [1, 2], PeerCall("llama.cpp", 4), 1)
