"""Samplers: greedy on the device, or host-side over one logits row (docs/engine.md, "Sampling").

Reading of this project: only the greedy path with no history and no bias
(`SamplerConfig.batched_argmax`) is decided on the device, by one batched argmax and one
host read per verify; it alone may pipeline. Every other sampler (temperature > 0, token
bias, a repetition penalty) runs here on the host over `runner.read_row`, so those rounds
are synchronous and row by row, each row sampled against a history that already holds the
tokens accepted earlier in the same block. Acceptance is sampler-match: a row's sampled
token is emitted, and the proposal at that slot is accepted iff it equals that token
(sampler-match), which keeps the output distributed as the target's own.

Repetition penalty: once per distinct token among the last `repetition_last_n`
history tokens (history = prompt + emitted tokens), a positive logit is divided by the
penalty, a negative one multiplied, zero left alone. Greedy argmax breaks ties toward the
lowest token id. Each sampled row costs exactly one draw from a seeded
`numpy.random.Generator`, so a seeded run equals the sequential reference draw for draw.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from specfleet.engine.config import ConfigError


@dataclass(frozen=True)
class SamplerConfig:
    """How the target picks each token.

    Args:
        temperature: 0 is greedy.
        top_k: keep the k most likely tokens (0 keeps all; 1 is greedy).
        top_p: keep the smallest most-likely set whose mass reaches top_p (1.0 keeps all).
        repetition_penalty: 1.0 is off.
        repetition_last_n: history tokens the penalty looks at.
        token_bias: token id -> logit offset.
        seed: seed of the host RNG (None: fresh entropy).
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    repetition_last_n: int = 64
    token_bias: Mapping[int, float] | None = None
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        """Temperature 0 or top-k 1: the target is an argmax."""
        return self.temperature == 0.0 or self.top_k == 1

    @property
    def needs_history(self) -> bool:
        """The sampler reads emitted history (a repetition penalty)."""
        return self.repetition_penalty != 1.0

    @property
    def batched_argmax(self) -> bool:
        """Rows may be decided by one device argmax: greedy, no history, no bias."""
        return self.greedy and not self.needs_history and not self.token_bias

    def validate(self) -> SamplerConfig:
        """Raise `ConfigError` naming the field and bound; return self when valid."""
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):  # nan too
            raise ConfigError(f"temp must be a finite number >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ConfigError(f"top-k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top-p must be in (0, 1], got {self.top_p}")
        if self.repetition_penalty <= 0:
            raise ConfigError(f"repetition-penalty must be > 0, got {self.repetition_penalty}")
        if self.repetition_last_n < 0:
            raise ConfigError(f"repetition-last-n must be >= 0, got {self.repetition_last_n}")
        return self


def apply_repetition_penalty(
    logits: np.ndarray, history: Sequence[int], penalty: float, last_n: int
) -> None:
    """Penalise, in place, each distinct token among the last `last_n` history tokens."""
    if last_n <= 0 or penalty == 1.0:
        return
    for token in set(history[-last_n:]):
        value = logits[token]
        if value > 0:
            logits[token] = value / penalty
        elif value < 0:
            logits[token] = value * penalty


def _filtered_probs(logits: np.ndarray, config: SamplerConfig) -> np.ndarray:
    """Softmax at the temperature with top-k and top-p filters (zeros outside the set)."""
    # Shifted before dividing: a tiny temperature (1e-320) would overflow logits to inf,
    # and inf - inf is nan; shifted, the maxima stay 0 and every other logit tends to -inf.
    with np.errstate(over="ignore"):  # an overflow here is exactly the -inf it tends to
        scaled = (logits - logits.max()) / config.temperature
    if 0 < config.top_k < scaled.size:
        # Ties at the k-th value keep the lower ids (stable order by descending logit).
        order = np.argsort(-scaled, kind="stable")
        scaled[order[config.top_k :]] = -np.inf
    probs = np.exp(scaled)  # its maximum is 0 already (shifted above; top-k keeps it)
    probs /= probs.sum()
    if config.top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        cumulative = np.cumsum(probs[order])
        keep = int(np.searchsorted(cumulative, config.top_p)) + 1
        probs[order[keep:]] = 0.0
        probs /= probs.sum()
    return probs


class HostSampler:
    """Samples one host logits row at a time; holds the seeded RNG of one generation."""

    def __init__(self, config: SamplerConfig) -> None:
        self.config = config
        self.rng = np.random.default_rng(config.seed)

    def sample(self, row: np.ndarray | Sequence[float], history: Sequence[int]) -> int:
        """Pick the token for one row.

        Args:
            row: the row's logits (converted to float64).
            history: prompt + every token emitted before this row.

        Returns:
            The chosen token id (greedy: lowest id among the maxima).
        """
        config = self.config
        logits = np.array(row, dtype=np.float64)
        apply_repetition_penalty(
            logits, history, config.repetition_penalty, config.repetition_last_n
        )
        if config.token_bias:
            for token, bias in config.token_bias.items():
                logits[token] += bias
        if config.greedy:
            return int(np.argmax(logits))
        probs = _filtered_probs(logits, config)
        # One draw per row keeps seeded runs aligned with the sequential reference.
        cumulative = np.cumsum(probs)
        index = int(np.searchsorted(cumulative, self.rng.random() * cumulative[-1], "right"))
        return min(index, probs.size - 1)
