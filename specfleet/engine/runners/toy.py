"""Exact toy runners for tests and benchmarks (docs/engine.md, "Proof").

Each toy runner has real cache semantics: the cache is the list of fed tokens and every
logits row is computed from the cached sequence up to and including its input token, so a
wrong rollback changes the output. Handles are plain Python values (a logits handle is a list
of numpy rows, a tokens handle a list of ints); `submit` is a no-op. Runners count their
forwards (`forward_widths`, prefill included) and host reads (`host_reads`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specfleet.engine.runners.base import CacheRollbackError, RollbackKind
from specfleet.engine.runners.common import process_peak_rss

INDUCTION_VOCAB = 6


class ToyRunner:
    """Base of the exact toy runners; subclasses define `row(cache)`.

    Attributes:
        cache: the fed tokens, oldest first.
        forward_widths: width of every prefill and forward, in order.
        host_reads: calls of `read_tokens` plus calls of `read_row`.
        trimmable: False models a backend whose caches cannot be rolled back.
        state_layout: "external" (KV caches the engine trims) or "model_owned".
    """

    engine = "toy"
    device = "cpu"
    trimmable = True
    state_layout = "external"
    rollback_kind: RollbackKind = "trim"

    def __init__(self, vocab: int, eos_ids: frozenset[int] = frozenset()) -> None:
        self.vocab_size = vocab
        self.eos_ids = eos_ids
        self.cache: list[int] = []
        self.last_width = 0  # rows of the latest forward not rolled back yet
        self.forward_widths: list[int] = []
        self.host_reads = 0
        self.reset()

    def row(self, cache: Sequence[int]) -> np.ndarray:
        """Logits of the next token after the whole cached sequence."""
        raise NotImplementedError

    def reset(self) -> None:
        self.cache = []
        self.last_width = 0

    def prefill(self, prompt: Sequence[int]) -> list[np.ndarray]:
        self.cache.extend(prompt)
        self.forward_widths.append(len(prompt))
        self.last_width = 0
        return [self.row(self.cache)]

    def forward(self, tokens: Sequence[int]) -> list[np.ndarray]:
        rows = []
        for token in tokens:
            self.cache.append(int(token))
            rows.append(self.row(self.cache))
        self.forward_widths.append(len(rows))
        self.last_width = len(rows)
        return rows

    def argmax(self, logits: list[np.ndarray]) -> list[int]:
        # np.argmax returns the first maximum: ties go to the lowest id.
        return [int(np.argmax(r)) for r in logits]

    def submit(self, tokens: list[int]) -> None:
        return None

    def read_tokens(self, tokens: list[int]) -> list[int]:
        self.host_reads += 1
        return list(tokens)

    def read_row(self, logits: list[np.ndarray], row: int) -> np.ndarray:
        self.host_reads += 1
        return logits[row]

    def rollback(self, n: int) -> int:
        if n < 0 or n > self.last_width:
            raise ValueError(f"cannot roll back {n} of the last forward's {self.last_width} rows")
        if n == 0:
            return 0
        del self.cache[-n:]
        self.last_width -= n
        if self.rollback_kind == "trim":
            return 0
        self.forward_widths.append(self.last_width)  # a "refeed" runner's re-feed forward
        return self.last_width

    def cache_len(self) -> int:
        return len(self.cache)

    def clear_allocator_cache(self) -> None:
        return None

    def peak_memory(self) -> tuple[float, str]:
        return process_peak_rss()


def _one_hot(vocab: int, token: int, logit: float) -> np.ndarray:
    row = np.zeros(vocab)
    row[token] = logit
    return row


class ScriptModel(ToyRunner):
    """Predicts the script token after the cached position: logit 10 at `script[len(cache)]`.

    (The reference's `script[offset + row + 1]`, offset being the cache length before the
    forward.) Past the end of the script it predicts token 0. No EOS.
    """

    def __init__(self, script: Sequence[int], vocab: int = 1024) -> None:
        super().__init__(vocab)
        self.script = list(script)

    def row(self, cache: Sequence[int]) -> np.ndarray:
        position = len(cache)
        token = self.script[position] if position < len(self.script) else 0
        return _one_hot(self.vocab_size, token, 10.0)


class InductionModel(ToyRunner):
    """A one-token induction head over the whole cache (the rollback parity matrix).

    Copies the follower of the latest (or, with `earliest`, the earliest) earlier occurrence
    of the current token, where the position right before it counts; else `(token+1) % 6`.
    Logit 8 on the winner, 7 on `(winner + 1) % 6`, 0 elsewhere. No EOS.
    """

    def __init__(self, vocab: int = INDUCTION_VOCAB, earliest: bool = False) -> None:
        super().__init__(vocab)
        self.earliest = earliest

    def row(self, cache: Sequence[int]) -> np.ndarray:
        winner = self.predict(cache)
        row = np.zeros(self.vocab_size)
        row[winner] = 8.0
        row[(winner + 1) % self.vocab_size] = 7.0
        return row

    def predict(self, cache: Sequence[int]) -> int:
        current = cache[-1]
        last = len(cache) - 1
        positions = range(last) if self.earliest else range(last - 1, -1, -1)
        for j in positions:
            if cache[j] == current:
                return cache[j + 1]
        return (current + 1) % self.vocab_size


class RecurrentInductionModel(InductionModel):
    """`InductionModel` read from a recurrent state, as a hybrid model's linear-attention layer.

    `state` is what the recurrent layer has absorbed; it cannot drop a tail, so every forward
    of two or more tokens keeps a checkpoint, and a rollback restores it and feeds the kept
    tokens again (`forward_widths` records the re-feed). Rows are computed from `state`
    alone, so a rollback that skips the restore changes the output.
    """

    rollback_kind: RollbackKind = "refeed"

    def reset(self) -> None:
        super().reset()
        self.state: list[int] = []
        self._checkpoint: list[int] = []
        self._last_tokens: list[int] = []

    def prefill(self, prompt: Sequence[int]) -> list[np.ndarray]:
        self.state.extend(prompt)
        return super().prefill(prompt)

    def forward(self, tokens: Sequence[int]) -> list[np.ndarray]:
        self._checkpoint = list(self.state)
        self._last_tokens = [int(t) for t in tokens]
        rows = []
        for token in self._last_tokens:
            self.cache.append(token)
            self.state.append(token)
            rows.append(self.row(self.state))
        self.forward_widths.append(len(rows))
        self.last_width = len(rows)
        return rows

    def rollback(self, n: int) -> int:
        if n < 0 or n > self.last_width:
            raise ValueError(f"cannot roll back {n} of the last forward's {self.last_width} rows")
        if n == 0:
            return 0
        kept = self._last_tokens[: self.last_width - n]
        del self.cache[-n:]
        self.state = [*self._checkpoint, *kept]
        self.forward_widths.append(len(kept))
        self.last_width = len(kept)
        if self.state != self.cache:
            raise CacheRollbackError(
                f"toy recurrent state holds {len(self.state)} positions after a rollback, "
                f"the cache {len(self.cache)}")
        return len(kept)


class ConstantModel(ToyRunner):
    """Always predicts `token` (logit 10); `eos` is its EOS id."""

    def __init__(self, token: int = 3, vocab: int = 8, eos: int = 7) -> None:
        super().__init__(vocab, frozenset({eos}))
        self.token = token

    def row(self, cache: Sequence[int]) -> np.ndarray:
        return _one_hot(self.vocab_size, self.token, 10.0)


class WidthRecordingModel(ConstantModel):
    """A constant model read for its `forward_widths` (test 6.29)."""


class UntrimmableModel(ConstantModel):
    """A model whose caches cannot be trimmed (test 6.27): prompt lookup must refuse it."""

    trimmable = False


class ModelOwnedStateModel(ConstantModel):
    """Batches and pads, but keeps its sequence state internally (test 6.26)."""

    state_layout = "model_owned"


class ZeroCostRunner:
    """A script runner doing almost no work per forward, for the loop-overhead benchmark.

    Predicts `script[position + 1]` for each fed position without building logits rows;
    the cache is a length only. Not for parity tests (use `ScriptModel`).
    """

    engine = "toy"
    device = "cpu"
    trimmable = True
    state_layout = "external"
    rollback_kind: RollbackKind = "trim"

    def __init__(self, script: Sequence[int], vocab: int = 1024) -> None:
        self.script = list(script) + [0] * 2
        self.vocab_size = vocab
        self.eos_ids: frozenset[int] = frozenset()
        self.length = 0

    def reset(self) -> None:
        self.length = 0

    def prefill(self, prompt: Sequence[int]) -> tuple[int, int]:
        self.length = len(prompt)
        return (self.length - 1, 1)

    def forward(self, tokens: Sequence[int]) -> tuple[int, int]:
        start = self.length
        self.length += len(tokens)
        return (start, len(tokens))

    def argmax(self, logits: tuple[int, int]) -> list[int]:
        start, width = logits
        return self.script[start + 1 : start + 1 + width]

    def submit(self, tokens: list[int]) -> None:
        return None

    def read_tokens(self, tokens: list[int]) -> list[int]:
        return tokens

    def read_row(self, logits: tuple[int, int], row: int) -> np.ndarray:
        return _one_hot(self.vocab_size, self.argmax(logits)[row], 10.0)

    def rollback(self, n: int) -> int:
        self.length -= n
        return 0

    def cache_len(self) -> int:
        return self.length

    def clear_allocator_cache(self) -> None:
        return None

    def peak_memory(self) -> tuple[float, str]:
        return process_peak_rss()


def lcg_tokens(seed: int, length: int, alphabet: int) -> list[int]:
    """The reference test-prompt generator (the rollback parity matrix's helpers).

    64-bit wrapping LCG: advance the state first, then take `(state >> 33) % alphabet`.
    """
    state = seed
    tokens = []
    for _ in range(length):
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        tokens.append((state >> 33) % alphabet)
    return tokens
