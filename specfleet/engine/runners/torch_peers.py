"""The torch peers (`engine/peers.py`): transformers' own greedy `generate`, with or without
its prompt lookup, on the model a `TorchRunner` holds.

The call gets a fresh `GenerationConfig` (greedy, one beam, our EOS ids) rather than the
checkpoint's generation defaults, so a repetition penalty or similar shipped with a model
never enters: both sides decode by plain argmax. transformers streams the prompt first, then
every generated block; the clock's prefill ends at the first block, as ours ends at the first
token's host read. (On MPS transformers streams one step late, which moves one step's time
from decode into prefill there.)
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from typing import Any

import torch
import transformers
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from specfleet.engine.peers import FirstTokenClock, PeerCall, PeerGeneration, StopWatch


class _Clocked(BaseStreamer):
    """Notes when the first generated block reaches the host (the first put is the prompt)."""

    def __init__(self, clock: FirstTokenClock) -> None:
        self.clock = clock
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if self._prompt_seen:
            self.clock.token_arrived()
        self._prompt_seen = True

    def end(self) -> None:
        pass


class _Stops(StoppingCriteria):
    """The loop guard and cancellation, over the tokens generated so far."""

    def __init__(self, watch: StopWatch, prompt_len: int) -> None:
        self.watch = watch
        self.prompt_len = prompt_len

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor,
                 **kwargs) -> torch.BoolTensor:
        stop = self.watch.should_stop(input_ids[0, self.prompt_len:].tolist())
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool,  # type: ignore[return-value]
                          device=input_ids.device)


def greedy_config(eos_ids: Set[int], call: PeerCall) -> GenerationConfig:
    """transformers' greedy decoding with our EOS ids, plus its prompt lookup for hf-lookup."""
    eos = sorted(eos_ids)
    lookup = ({"prompt_lookup_num_tokens": call.lookup_tokens,
               "max_matching_ngram_size": call.ngram_max} if call.lookup_tokens else {})
    return GenerationConfig(
        do_sample=False, num_beams=1, max_new_tokens=call.max_tokens,
        eos_token_id=eos or None, pad_token_id=eos[0] if eos else 0, **lookup,
    )


def hf_generate(model: Any, eos_ids: Set[int], prompt: Sequence[int],
                call: PeerCall) -> PeerGeneration:
    """transformers' `generate` on a runner's model: see `engine.peers.generate_peer`."""
    watch = StopWatch(call)
    ids = torch.tensor([list(prompt)], dtype=torch.long, device=model.device)
    config = greedy_config(eos_ids, call)
    clock = FirstTokenClock()
    with torch.inference_mode():
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), generation_config=config,
            streamer=_Clocked(clock),
            stopping_criteria=StoppingCriteriaList([_Stops(watch, len(prompt))]),
        )
    timings = clock.timings()
    tokens = [int(t) for t in out[0, len(prompt):].tolist()]
    ended = next((i for i, t in enumerate(tokens) if t in eos_ids), None)
    if ended is not None:
        tokens = tokens[:ended]
    return watch.finish(tokens, ended is not None, timings, transformers.__version__)
