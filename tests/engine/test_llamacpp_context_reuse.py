"""The llama.cpp peers' cached `Llama`: one per file and settings, its context grown to the
longest call, never rebuilt smaller (a rebuilt one is a cold one, unwarmed by the peer's
warm-up). A stand-in `llama_cpp` module records what is built; the real package runs in
tests/workers/test_peers.py."""

from __future__ import annotations

import sys
import types

import pytest

from specfleet.engine.peers import PeerCall
from specfleet.engine.runners import llamacpp_peers


class FakeLlama:
    built: list[int] = []

    def __init__(self, path: str, *, n_ctx: int, **settings) -> None:
        self._n_ctx = n_ctx
        self.closed = False
        FakeLlama.built.append(n_ctx)

    def n_ctx(self) -> int:
        return self._n_ctx

    def reset(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def generate(self, tokens, **sampling):
        yield from (7, 8, 9, 10)


@pytest.fixture
def fake_llama_cpp(monkeypatch):
    package = types.ModuleType("llama_cpp")
    package.Llama = FakeLlama  # type: ignore[attr-defined]
    speculative = types.ModuleType("llama_cpp.llama_speculative")
    speculative.LlamaPromptLookupDecoding = lambda **knobs: knobs  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "llama_cpp", package)
    monkeypatch.setitem(sys.modules, "llama_cpp.llama_speculative", speculative)
    monkeypatch.setattr(llamacpp_peers, "_llamas", {})
    monkeypatch.setattr(llamacpp_peers, "version", lambda name: "0.0")  # not installed here
    FakeLlama.built = []
    return FakeLlama


def test_a_shorter_call_reuses_the_longer_context_instead_of_a_fresh_llama(
        fake_llama_cpp, tmp_path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    call = PeerCall("llama.cpp", 4, gguf=str(gguf))
    for prompt_len in (600, 20, 600, 20):  # a long prompt and a short one, interleaved
        reply = llamacpp_peers.llama_cpp_generate(str(gguf), {2}, list(range(prompt_len)),
                                                  call, threads=1)
        assert reply.tokens == [7, 8, 9, 10]
    assert fake_llama_cpp.built == [1024]
    short_first = PeerCall("llama.cpp-lookup", 4, lookup_tokens=3, ngram_max=2, gguf=str(gguf))
    for prompt_len in (20, 600, 20):  # grown once, then kept
        llamacpp_peers.llama_cpp_generate(str(gguf), {2}, list(range(prompt_len)), short_first,
                                          threads=1)
    assert fake_llama_cpp.built == [1024, 512, 1024]
    assert len(llamacpp_peers._llamas) == 2  # one per lookup setting


def test_the_warm_up_builds_the_llama_the_timed_call_then_runs(fake_llama_cpp, tmp_path) -> None:
    from specfleet.engine.peers import warm_up_peer

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")

    class Runner:  # what a runner does for a GGUF peer (`TorchRunner.generate_peer`)
        engine = "torch"

        def generate_peer(self, prompt, call):
            return llamacpp_peers.llama_cpp_generate(call.gguf, {2}, prompt, call, threads=1)

    prompt = list(range(600))  # needs a 1024 context; the warm-up's own 4 tokens, 512
    call = PeerCall("llama.cpp", 4, gguf=str(gguf))
    warm_up_peer(Runner(), prompt, call)
    llamacpp_peers.llama_cpp_generate(str(gguf), {2}, prompt, call, threads=1)
    assert fake_llama_cpp.built == [1024]  # the timed call runs on the warmed one
