"""The one seam between the engine core and a backend (MLX, torch, toy).

Handles (`Logits`, `Tokens`) are opaque backend values: lazy arrays on MLX, device tensors
on torch, plain lists on the toy runners. The core never looks inside them; it only passes
them back to the runner that made them. Every method that returns a handle may return
before the device has computed it; only `read_tokens` and `read_row` wait (host reads).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

Logits = Any  # rows of next-token logits, one row per input token
Tokens = Any  # a 1-D array of token ids living on the device
# How a runner undoes rejected verify rows: "trim" drops them from every cache; "refeed"
# restores the state kept before the verify and feeds the kept tokens again (recurrent layers).
RollbackKind = Literal["trim", "refeed"]


class UnsupportedModelError(ValueError):
    """A model prompt lookup cannot drive (e.g. a cache kind the runner cannot roll back)."""


class CacheRollbackError(RuntimeError):
    """After a rollback a cache does not hold exactly the kept tokens: the reply would be wrong."""


@runtime_checkable
class Runner(Protocol):
    """One loaded model and its KV caches on one device.

    Attributes:
        engine: "mlx", "torch" or "toy".
        device: a `Device` (`engine/kinds.py`) the runner resolved (the toy runners say "cpu").
        eos_ids: token ids that end a reply; never emitted.
        vocab_size: number of logit columns.
        rollback_kind: "trim" when every cache drops rejected rows in place, "refeed" when
            some layer (recurrent, convolution) is restored and the kept tokens fed again.
    """

    engine: str
    device: str
    eos_ids: frozenset[int]
    vocab_size: int
    rollback_kind: RollbackKind

    def reset(self) -> None:
        """Drop all cached positions: fresh caches, `cache_len() == 0`."""
        ...

    def prefill(self, prompt: Sequence[int]) -> Logits:
        """Append the whole prompt to the caches exactly as plain decoding does (same
        chunking), and return the logits of its last position (one row)."""
        ...

    def forward(self, tokens: Sequence[int] | Tokens) -> Logits:
        """Append `tokens` to the caches and return one logits row per token, lazily.

        `tokens` is a host list (verify block, synchronous step) or a device `Tokens`
        handle of one token (a pipelined step whose input the host has not read yet).
        """
        ...

    def argmax(self, logits: Logits) -> Tokens:
        """Per-row greedy choice, ties to the lowest id, lazily, on the device."""
        ...

    def submit(self, tokens: Tokens) -> None:
        """Start computing `tokens` without waiting (mx.async_eval, a CUDA copy to pinned
        memory with an event); a no-op where the backend is synchronous."""
        ...

    def read_tokens(self, tokens: Tokens) -> list[int]:
        """The host read: wait for `tokens` and return them as ints."""
        ...

    def read_row(self, logits: Logits, row: int) -> np.ndarray:
        """Wait for `logits` and return row `row` on the host (float64-convertible)."""
        ...

    def rollback(self, n: int) -> int:
        """Undo the last `n` positions that the latest `forward` appended, exactly, in every
        cache (no-op for 0); `n` is less than that forward's width (a verify keeps its first
        token, the last one accepted; some runners could go back further, none must).

        Full-attention layers drop their tail; sliding-window layers get back what the
        forward displaced; recurrent layers get back the state after the kept tokens (kept
        per token during the forward) or return to the state kept before the forward and are
        fed the kept tokens again. Afterwards every cache is checked to hold exactly the kept
        positions.

        Returns:
            Tokens fed again (0 for a runner whose caches all trim).

        Raises:
            CacheRollbackError: a cache does not hold the kept positions afterwards.
        """
        ...

    def cache_len(self) -> int:
        """Positions held by the caches."""
        ...

    def clear_allocator_cache(self) -> None:
        """Return freed device memory to the allocator (non-semantic)."""
        ...

    def peak_memory(self) -> tuple[float, str]:
        """The peak memory of this process in GB and what was measured: the device
        allocator's peak where the runner's device has one, else the process's peak RSS
        (`common.process_peak_rss`)."""
        ...
