"""The llama.cpp peers (`engine/peers.py`): llama-cpp-python's `Llama.generate`, greedy, on
the GGUF the runner's model was converted from (a bundled model's own file), with or without
the package's n-gram speculative decoding (`LlamaPromptLookupDecoding`).

The GGUF is what llama.cpp users run: for SmolLM2 its Q4_1 blocks, where our torch arms run
the same weights dequantized to float32, so a reply that differs from our plain one is the
precision at work, reported as parity like any peer's. Threads are the worker's (the call's
`threads`, what the worker gives its engines), so a peer gets the cores our arms get; on a
runner whose device is a GPU every layer is offloaded (`n_gpu_layers=-1`, a CUDA or Metal
build of the package).

A `Llama` is built once per file and lookup settings, outside the timed call (as our model
load is), by the warm-up with the context the timed call needs, rebuilt only for a longer
one, and reset before each call: `generate` would otherwise reuse the previous call's cached
prompt. With drafting, llama-cpp-python keeps every row's logits (`logits_all`), n_ctx x
vocab floats (200 MB at 1024 x 49152), so the context is sized to the call, rounded up to
`CONTEXT_STEP`.
"""

from __future__ import annotations

import atexit
from collections.abc import Sequence, Set
from importlib.metadata import version
from pathlib import Path
from typing import Any

from specfleet.engine.peers import PEER_KINDS, FirstTokenClock, PeerCall, PeerGeneration, StopWatch
from specfleet.errors import UserError, extra_install

CONTEXT_STEP = 512
INSTALL_HINT = (f"{extra_install('llamacpp')} (it builds llama.cpp from source "
                "with the host's compiler; the README's llama.cpp paragraph gives CMAKE_ARGS "
                "per backend)")

# By file, lookup settings, threads and offload; each holds the longest context asked.
_llamas: dict[tuple[str, int | None, int | None, int | None, bool], Any] = {}


@atexit.register
def _close_llamas() -> None:
    """Free the cached models while llama_cpp can: left to `Llama.__del__` at interpreter
    shutdown, each printed a TypeError traceback (its C bindings already torn down)."""
    while _llamas:
        _llamas.popitem()[1].close()


def llama_cpp_generate(gguf: str, eos_ids: Set[int], prompt: Sequence[int], call: PeerCall,
                       threads: int | None, offload: bool = False) -> PeerGeneration:
    """llama.cpp's greedy generation on `gguf`: see `engine.peers.generate_peer`.

    Args:
        gguf: the model's GGUF file (the same vocabulary as the runner's tokenizer).
        eos_ids: the runner's end-of-sequence ids (a reply stops before one, never emits it).
        prompt: prompt token ids, as our arms feed them.
        call: the request (llama.cpp-lookup's `lookup_tokens` and `ngram_max`).
        threads: CPU threads for llama.cpp's decode and prompt batches (None: its default).
        offload: put every layer on the GPU the package was built for.
    """
    tokens_held = max(len(prompt) + call.max_tokens, call.context_tokens or 0)
    llm = _llama(gguf, tokens_held + (call.lookup_tokens or 0) + 1, call, threads, offload)
    watch = StopWatch(call)
    tokens: list[int] = []
    eos = False
    llm.reset()  # a fresh prompt every call: no prefix of the last one is reused
    clock = FirstTokenClock()
    stream = llm.generate(list(prompt), temp=0.0, top_k=1, top_p=1.0, min_p=0.0,
                          repeat_penalty=1.0, reset=False)
    for token in stream:
        clock.token_arrived()
        if int(token) in eos_ids:
            eos = True
            break
        tokens.append(int(token))
        if len(tokens) >= call.max_tokens or watch.should_stop(tokens):
            break
    stream.close()
    timings = clock.timings()
    return watch.finish(tokens, eos, timings, version("llama-cpp-python"))


def _llama(gguf: str, needed: int, call: PeerCall, threads: int | None, offload: bool) -> Any:
    """The cached `Llama` for this file and lookup settings with a context of >= `needed`."""
    try:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
    except ImportError:
        raise UserError(f"arm {call.peer} needs llama-cpp-python: {INSTALL_HINT}") from None
    if not Path(gguf).is_file():
        raise UserError(f"arm {call.peer}: the GGUF {gguf} is gone; fetch the model again "
                        "(specfleet models fetch)")
    drafts = PEER_KINDS[call.peer].drafts
    key = (gguf, call.lookup_tokens if drafts else None, call.ngram_max if drafts else None,
           threads, offload)
    cached = _llamas.get(key)
    # A shorter call keeps the longer context: rebuilt, it would be a Llama never warmed.
    if cached is not None and cached.n_ctx() >= needed:
        return cached
    if cached is not None:
        _llamas.pop(key).close()  # too small for this call: replaced by a larger one
    context = -(-needed // CONTEXT_STEP) * CONTEXT_STEP
    draft = (LlamaPromptLookupDecoding(max_ngram_size=call.ngram_max or 2,
                                       num_pred_tokens=call.lookup_tokens or 10)
             if drafts else None)
    # With a draft model the package keeps every row's logits, but sizes its score array by
    # the `logits_all` given: left False, a reply past n_batch tokens failed to store them.
    _llamas[key] = Llama(gguf, n_ctx=context, n_batch=min(context, CONTEXT_STEP),
                         n_threads=threads, n_threads_batch=threads, draft_model=draft,
                         logits_all=drafts, n_gpu_layers=-1 if offload else 0, verbose=False)
    return _llamas[key]
