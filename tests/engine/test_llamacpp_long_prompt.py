"""llama.cpp-lookup on the bundled GGUF with a prompt and reply longer than one prompt batch
(512 tokens): every row's logits must fit the package's score array."""

from __future__ import annotations

import pytest

from specfleet.engine.peers import PeerCall
from tests.engine.conftest import bundled_model  # noqa: F401 (the fetched bundled model)

pytestmark = pytest.mark.slow


def test_a_lookup_reply_past_one_batch_of_tokens_runs(bundled_model) -> None:  # noqa: F811
    pytest.importorskip("llama_cpp", reason="make test installs specfleet[llamacpp]")
    from specfleet.engine.runners.llamacpp_peers import llama_cpp_generate

    gguf = bundled_model.torch.gguf_file()
    assert gguf is not None
    prompt = [2000 + i % 50 for i in range(520)]  # past n_batch (512) before the reply
    call = PeerCall("llama.cpp-lookup", 8, lookup_tokens=10, ngram_max=2, gguf=str(gguf))
    reply = llama_cpp_generate(str(gguf), {2}, prompt, call, threads=2)
    assert len(reply.tokens) == 8 and reply.stop_reason == "max_tokens"
