"""The MLX peer (`engine/peers.py`): mlx-lm's own `stream_generate` with its greedy sampler
on the model an `MlxRunner` holds, on the runner's stream (so on the runner's device).

`stream_generate` yields once per token, the first right after the prompt's last token is
read; the clock's prefill ends there, as ours ends at the first token's host read. It ends
on EOS with a last response carrying the EOS token (`finish_reason` "stop"), never emitted.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import version
from typing import Any

from mlx_lm import stream_generate
from mlx_lm.sample_utils import make_sampler

from specfleet.engine.peers import FirstTokenClock, PeerCall, PeerGeneration, StopWatch


def mlx_lm_generate(model: Any, tokenizer: Any, stream: Any, prompt: Sequence[int],
                    call: PeerCall) -> PeerGeneration:
    """mlx-lm's `stream_generate` on a runner's model and stream: see
    `engine.peers.generate_peer`."""
    watch = StopWatch(call)
    tokens: list[int] = []
    eos = False
    clock = FirstTokenClock()
    responses = stream_generate(model, tokenizer, prompt=list(prompt),
                                max_tokens=call.max_tokens, sampler=make_sampler(0.0),
                                stream=stream)
    for response in responses:
        clock.token_arrived()
        if response.finish_reason == "stop":
            eos = True
            break
        tokens.append(int(response.token))
        if watch.should_stop(tokens):
            break
    responses.close()  # leaves mlx-lm's wired-memory context at once
    timings = clock.timings()
    return watch.finish(tokens, eos, timings, version("mlx-lm"))
