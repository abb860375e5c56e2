"""Peer engines as arms: another library's own greedy generation on the model a runner holds.

A peer arm runs on the same worker, model and prompt ids as our arms and is timed the same
way: the whole call, and a prefill that ends when the first generated token reaches the
host (here: the library's streamer), so decode-only time is the rest. Its reply is compared
with our plain decoding like any arm's; a peer that diverges is reported, never a failure.

- `hf`: transformers' greedy `generate` (`do_sample=False`) on the `TorchRunner`'s model;
- `hf-lookup`: the same with transformers' prompt lookup (`prompt_lookup_num_tokens`, the
  arm's `max_draft`, default 10; `max_matching_ngram_size`, the arm's `ngram_max`, default 2;
  its shortest n-gram is always 1);
- `mlx-lm`: mlx-lm's `stream_generate` with its greedy sampler on the `MlxRunner`'s model;
- `llama.cpp`: llama-cpp-python's greedy `Llama.generate` on the GGUF the model comes from
  (a bundled model's own file: SmolLM2's Q4_1), on torch and MLX targets (beside MLX on a
  Mac: llama.cpp's Metal build), with the worker's threads;
- `llama.cpp-lookup`: the same with the package's n-gram speculative decoding
  (`LlamaPromptLookupDecoding`: `num_pred_tokens` = the arm's `max_draft`, default 10;
  `max_ngram_size` = its `ngram_max`, default 2; down to 1-grams, as transformers).

Peers count no rounds, drafts or acceptances (transformers does not expose its prompt
lookup's), so their counters are None, not zero. The implementations live beside their
runners (`runners/torch_peers.py`, `runners/mlx_peers.py`, `runners/llamacpp_peers.py`):
only there are the frameworks used. llama-cpp-python is an optional extra (`specfleet[llamacpp]`,
built from source with the host's compiler).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from specfleet.engine.kinds import MODEL_ENGINES, ModelEngine
from specfleet.engine.stats import StopReason, Timings, loop_guard_fires
from specfleet.errors import UserError

Peer = Literal["hf", "hf-lookup", "mlx-lm", "llama.cpp", "llama.cpp-lookup"]
PEERS: tuple[Peer, ...] = get_args(Peer)

# A drafting peer's defaults: transformers' `prompt_lookup_num_tokens` in its docs (and
# llama-cpp-python's `num_pred_tokens`), both libraries' longest n-gram, and their fallback
# to 1-grams.
PEER_LOOKUP_TOKENS = 10
PEER_LOOKUP_NGRAM_MAX = 2
PEER_LOOKUP_NGRAM_MIN = 1
# A peer's untimed warm-up: its own call over the prompt's first tokens, this many new ones.
PEER_WARM_CONTEXT_TOKENS = 4
PEER_WARM_TOKENS = 8


@dataclass(frozen=True)
class PeerKind:
    """What one peer is.

    Attributes:
        engines: the engines whose runners it runs on.
        library: the distribution whose version is stored with each run.
        call: what runs, in the library's words.
        color: its points in plots (browns and pinks, apart from our arms' colours).
        knobs: the library's names for the arm's `max_draft` and `ngram_max`, stored with
            each run; None: it takes no prompt-lookup options.
        gguf: runs on the GGUF the model comes from, not on the runner's loaded model.
    """

    engines: tuple[ModelEngine, ...]
    library: str
    call: str
    color: str
    knobs: tuple[str, str] | None = None
    gguf: bool = False

    @property
    def drafts(self) -> bool:
        """Takes prompt-lookup options (`max_draft`, `ngram_max`)."""
        return self.knobs is not None

    @property
    def runs_on(self) -> str:
        """Its engines as messages name them: "torch", "torch or mlx"."""
        return " or ".join(self.engines)


PEER_KINDS: dict[Peer, PeerKind] = {
    "hf": PeerKind(("torch",), "transformers", "generate(do_sample=False)", "#8c564b"),
    "hf-lookup": PeerKind(
        ("torch",), "transformers",
        "generate(do_sample=False, prompt_lookup_num_tokens, max_matching_ngram_size)",
        "#e377c2", knobs=("prompt_lookup_num_tokens", "max_matching_ngram_size")),
    "mlx-lm": PeerKind(("mlx",), "mlx-lm", "stream_generate(sampler=make_sampler(0.0))",
                       "#bcbd22"),
    "llama.cpp": PeerKind(MODEL_ENGINES, "llama-cpp-python", "Llama.generate(temp=0.0)",
                          "#17becf", gguf=True),
    "llama.cpp-lookup": PeerKind(
        MODEL_ENGINES, "llama-cpp-python",
        "Llama(draft_model=LlamaPromptLookupDecoding(max_ngram_size, num_pred_tokens))"
        ".generate(temp=0.0)", "#9edae5", knobs=("num_pred_tokens", "max_ngram_size"),
        gguf=True),
}
if tuple(PEER_KINDS) != PEERS:  # pragma: no cover - a registry edit that missed one
    raise RuntimeError(f"peers.Peer {PEERS} and PEER_KINDS {tuple(PEER_KINDS)} differ")


def peer_kind(arm: str) -> PeerKind | None:
    """The peer an arm names; None for our own arms."""
    return next((kind for peer, kind in PEER_KINDS.items() if peer == arm), None)


def is_peer(arm: str) -> bool:
    return peer_kind(arm) is not None


@dataclass(frozen=True)
class PeerCall:
    """One peer generation request.

    Attributes:
        peer: which peer.
        max_tokens: most tokens to emit (the first one included), as our arms.
        lookup_tokens / ngram_max: a drafting peer's most proposals a round and longest
            n-gram (its `knobs`; None for the others).
        loop_guard: (min_period, max_period, repeats), checked like our loop's.
        should_stop: polled after every streamed block; True ends the reply "cancelled".
    """

    peer: Peer
    max_tokens: int
    lookup_tokens: int | None = None
    ngram_max: int | None = None
    loop_guard: tuple[int, int, int] | None = None
    should_stop: Callable[[], bool] | None = None
    gguf: str | None = None  # the model's GGUF file, for a peer that runs on it
    threads: int | None = None  # CPU threads for a llama.cpp peer (None: the library's own)
    # Tokens a library's context must hold, if more than this call's: the warm-up's is the
    # timed call's, so a llama.cpp peer warms the `Llama` that call will run on.
    context_tokens: int | None = None

    def settings(self) -> dict[str, Any]:
        """The library call's settings, stored with the run (engine_config)."""
        kind = PEER_KINDS[self.peer]
        extra = ({kind.knobs[0]: self.lookup_tokens, kind.knobs[1]: self.ngram_max}
                 if kind.knobs else {})
        weights = {"gguf": Path(self.gguf).name} if self.gguf else {}
        return {"library": kind.library, "call": kind.call, **extra, **weights}

    def warm_key(self) -> str:
        """What a warm-up covers: the peer and its settings."""
        return f"{self.peer}:{self.lookup_tokens}:{self.ngram_max}"


@dataclass(frozen=True)
class PeerGeneration:
    """One peer reply and what it cost (the fields a worker reads from `loop.Generation`).

    Attributes:
        tokens: emitted tokens, EOS excluded, cut where the loop guard fired.
        timings: prefill = start to the first streamed token; decode = the rest.
        stop_reason: "eos", "max_tokens", "loop_guard" or "cancelled".
        library_version: the version of the library that generated it.
    """

    tokens: list[int]
    timings: Timings
    stop_reason: StopReason
    library_version: str


class FirstTokenClock:
    """Times a peer call as the loop times ours: prefill ends at the first generated token."""

    def __init__(self) -> None:
        self.start_s = time.perf_counter()
        self.first_s: float | None = None

    def token_arrived(self) -> None:
        if self.first_s is None:
            self.first_s = time.perf_counter()

    def timings(self) -> Timings:
        end_s = time.perf_counter()
        first_s = end_s if self.first_s is None else self.first_s
        return Timings(first_s - self.start_s, end_s - first_s, end_s - self.start_s)


class StopWatch:
    """The stops a library cannot make itself: the loop guard, checked at every new token as
    our loop does (a block that lands several tokens is checked token by token), and
    cancellation."""

    def __init__(self, call: PeerCall) -> None:
        self.call = call
        self.guard_at: int | None = None  # reply length at which the guard fired
        self.cancelled = False
        self._checked = 0

    def should_stop(self, generated: Sequence[int]) -> bool:
        guard = self.call.loop_guard
        if guard is not None and self.guard_at is None:
            for n in range(self._checked + 1, len(generated) + 1):
                if loop_guard_fires(generated[:n], *guard):
                    self.guard_at = n
                    break
            self._checked = len(generated)
        if self.call.should_stop is not None and self.call.should_stop():
            self.cancelled = True
        return self.guard_at is not None or self.cancelled

    def finish(self, tokens: list[int], eos: bool, timings: Timings,
               version: str) -> PeerGeneration:
        """The reply cut where the guard fired, with the reason it stopped (at the limit's
        own token the limit, as our loop names it)."""
        reason: StopReason = "max_tokens"
        if self.cancelled:
            reason = "cancelled"
        elif self.guard_at is not None and self.guard_at <= len(tokens):
            tokens = tokens[: self.guard_at]
            reason = "loop_guard" if self.guard_at < self.call.max_tokens else "max_tokens"
        elif eos:
            reason = "eos"
        return PeerGeneration(tokens, timings, reason, version)


def generate_peer(runner: Any, prompt: Sequence[int], call: PeerCall) -> PeerGeneration:
    """Run a peer on a loaded runner's model (greedy), timed like `loop.generate`.

    Args:
        runner: a `TorchRunner` for hf / hf-lookup, an `MlxRunner` for mlx-lm, either for
            llama.cpp(-lookup); its own caches are left alone (the library builds its own).
        prompt: prompt token ids, as our arms feed them.
        call: the request.

    Returns:
        The `PeerGeneration`.

    Raises:
        UserError: the peer does not run on this runner's engine.
    """
    kind = PEER_KINDS[call.peer]
    if getattr(runner, "engine", None) not in kind.engines:
        raise UserError(f"arm {call.peer} runs on {kind.runs_on} targets only, not on "
                        f"{getattr(runner, 'engine', '?')}")
    if not prompt:
        raise ValueError("the prompt is empty")
    if PEER_KINDS[call.peer].gguf and call.gguf is None:
        raise UserError(f"arm {call.peer} runs the GGUF a model comes from, and this model has "
                        "none (a bundled model has its own; a local folder: one .gguf in it)")
    return runner.generate_peer(prompt, call)  # the runner knows its engine's peer library


def warm_up_peer(runner: Any, prompt: Sequence[int], call: PeerCall) -> float:
    """The peer's own call once, untimed, over the prompt's first tokens (kernels, lazy
    allocations, the library's first-call set-up). Returns seconds spent."""
    start = time.perf_counter()
    warm = PeerCall(call.peer, PEER_WARM_TOKENS, call.lookup_tokens, call.ngram_max,
                    gguf=call.gguf, threads=call.threads,
                    context_tokens=len(prompt) + call.max_tokens)
    generate_peer(runner, list(prompt[:PEER_WARM_CONTEXT_TOKENS]), warm)
    return time.perf_counter() - start
