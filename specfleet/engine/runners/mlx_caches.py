"""Exact rollback of mlx-lm's prompt caches, layer by layer, by cache kind.

mlx-lm's `trim_prompt_cache` is all or nothing: once a sliding window has wrapped
(`RotatingKVCache.is_trimmable()` is `offset < max_size`) it trims no layer at all, and
recurrent layers (`ArraysCache`) never trim. Prompt lookup must undo the rejected rows of
every verify exactly, so each layer is rolled back by its kind:

- full attention (`KVCache`, `ChunkedKVCache`): drop the tail (`trim`).
- sliding window (`RotatingKVCache`): a forward of two or more tokens goes through
  `_update_concat`, which rebinds keys/values to [the old entries in temporal order, at
  most `max_size - 1` of them after the `keep` sinks; the new block], so dropping the block's
  tail is exact. Undoing a whole block restores the arrays kept before it (concat rebinds,
  so they are untouched). A one-token step writes in place; it is undone only while it
  overwrote nothing.
- recurrent (`ArraysCache`: convolution and SSM / linear-attention state): the models rebind
  `cache[i] = new`, so references kept before a forward are the state before it; a rollback
  restores them and the runner feeds the kept tokens again ("refeed").
- `CacheList`: each member by its kind.

After every rollback each layer is checked against the position count kept here; a mismatch
raises `CacheRollbackError` naming the layer and its cache type. Any other cache type is
refused when the caches are made (`UnsupportedModelError`). Prompt lookup is refused (plain
decoding works) on a model with recurrent layers whose type is not in `REFEED_MODEL_TYPES`:
a re-fed block equals one-token steps only where the model's multi-token forward does, and
that is proven per model type, by a `tiny_mlx` family.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import mlx.core as mx
from mlx_lm.models.cache import (
    ArraysCache,
    CacheList,
    ChunkedKVCache,
    KVCache,
    RotatingKVCache,
)

from specfleet.engine.runners.base import CacheRollbackError, UnsupportedModelError

# Model types with recurrent layers whose multi-token forward equals their one-token steps in
# mlx-lm 0.32 (to ~1e-5 logits, most exactly: the recurrence runs token by token), each proven
# by a `tiny_mlx` family. falcon_mamba runs mlx-lm's mamba module.
REFEED_MODEL_TYPES = frozenset({"qwen3_5", "qwen3_5_moe", "qwen3_next", "lfm2", "lfm2_moe",
                                "nemotron_h", "mamba2", "mamba", "falcon_mamba", "jamba",
                                "granitemoehybrid", "falcon_h1", "olmo_hybrid",
                                "kimi_linear"})

LayerKind = Literal["trim", "window", "recurrent"]
KINDS: dict[type, LayerKind] = {
    KVCache: "trim",
    ChunkedKVCache: "trim",
    RotatingKVCache: "window",
    ArraysCache: "recurrent",
}


@dataclass(eq=False)
class Layer:
    """One leaf cache and what its rollback needs.

    Attributes:
        label: layer index, "3" or "3.1" for a member of a `CacheList`.
        cache: the mlx-lm cache object.
        kind: how it rolls back.
        saved: window: (keys, values, offset, _idx) before a forward of two or more tokens;
            recurrent: the state arrays before the latest forward. None otherwise.
        fed: positions a recurrent layer has absorbed (our count; the cache keeps none).
        saved_fed: `fed` before the latest forward.
    """

    label: str
    cache: Any
    kind: LayerKind
    saved: Any = None
    fed: int = 0
    saved_fed: int = 0


def layers_of(caches: list[Any], prefix: str = "") -> list[Layer]:
    """The leaf caches of a prompt cache, `CacheList`s opened; refuses unknown cache types."""
    layers = []
    for i, cache in enumerate(caches):
        label = f"{prefix}{i}"
        if type(cache) is CacheList:
            layers.extend(layers_of(list(cache.caches), f"{label}."))
            continue
        kind = KINDS.get(type(cache))
        if kind is None:
            known = ", ".join([*(t.__name__ for t in KINDS), "CacheList"])
            raise UnsupportedModelError(
                f"prompt lookup cannot roll back this model's {type(cache).__name__} cache "
                f"(layer {label}); the MLX runner rolls back {known}")
        layers.append(Layer(label, cache, kind))
    return layers


class PromptCaches:
    """A model's mlx-lm prompt caches with the bookkeeping an exact rollback needs.

    Attributes:
        caches: the list passed to the model (`cache=`).
        layers: its leaf caches.
        refeeds: some layer is recurrent: a rollback restores and re-feeds.
        position: positions held (prompt and forwards, minus rollbacks).
        width: positions of the latest forward not rolled back yet.
        tokens: the latest forward's input ids (what a re-feed takes its kept tokens from).
    """

    def __init__(self, caches: list[Any]) -> None:
        self.caches = caches
        self.layers = layers_of(caches)
        self.refeeds = any(layer.kind == "recurrent" for layer in self.layers)
        # Only windows and recurrent layers keep anything per forward: pure KV models pay nothing.
        self._keeping = [layer for layer in self.layers if layer.kind != "trim"]
        self.position = 0
        self.width = 0
        self.tokens: mx.array | None = None

    def prefilled(self, n: int) -> None:
        """`n` prompt positions were appended; a prefill is never rolled back."""
        self.position += n
        self.width = 0
        for layer in self._keeping:
            layer.saved = None
            layer.fed += n

    def before_forward(self, tokens: mx.array) -> None:
        """Keep what undoing this forward needs (references only), then count it."""
        width = tokens.size
        for layer in self._keeping:
            _KEEP[layer.kind](layer, width)
        self.position += width
        self.width = width
        self.tokens = tokens

    def roll_back(self, n: int) -> int:
        """Undo the latest forward's last `n` positions in every layer.

        Returns:
            How many kept tokens the caller must feed again (`tokens[:returned]`): 0 when
            every layer trims; with recurrent layers every layer goes back to before the
            forward and the kept tokens are re-fed.

        Raises:
            ValueError: `n` is more than the latest forward's width.
            CacheRollbackError: some layer does not hold the kept positions afterwards.
        """
        if n == 0:
            return 0
        if not 0 < n <= self.width:
            raise ValueError(f"cannot roll back {n} of the last forward's {self.width} positions")
        kept = self.width - n
        drop = self.width if self.refeeds else n
        for layer in self.layers:
            _ROLL_BACK[layer.kind](layer, drop, self.width)
        self.position -= drop
        self.width -= drop
        self.check(restored=self.refeeds)
        return kept if self.refeeds else 0

    def check(self, restored: bool = False) -> None:
        """Every layer holds exactly `position` positions (recurrent: and, when `restored`,
        the very state arrays kept before the forward); else `CacheRollbackError`."""
        for layer in self.layers:
            problem = _PROBLEM[layer.kind](layer, self.position, restored)
            if problem:
                raise CacheRollbackError(
                    f"after a rollback layer {layer.label} ({type(layer.cache).__name__}) "
                    f"{problem}; the reply would be wrong")


# -- keep, per kind --------------------------------------------------------------------
def _keep_window(layer: Layer, width: int) -> None:
    c = layer.cache
    # Two or more tokens go through _update_concat, which rebinds: these stay untouched (and
    # alive until the next forward: one more window per sliding layer at most). A one-token
    # step writes into the arrays in place, so references would not help.
    layer.saved = (c.keys, c.values, c.offset, c._idx) if width >= 2 else None


def _keep_recurrent(layer: Layer, width: int) -> None:
    layer.saved = list(layer.cache.cache)
    layer.saved_fed = layer.fed
    layer.fed += width


# -- roll back, per kind ---------------------------------------------------------------
def _roll_back_trim(layer: Layer, n: int, width: int) -> None:
    layer.cache.trim(n)


def _roll_back_window(layer: Layer, n: int, width: int) -> None:
    c = layer.cache
    if layer.saved is not None and n == width:
        c.keys, c.values, c.offset, c._idx = layer.saved
    elif layer.saved is not None:
        # _update_concat left [old entries in temporal order, the block]: drop the block's tail.
        c.keys = c.keys[..., :-n, :]
        c.values = c.values[..., :-n, :]
        c.offset -= n
        c._idx = c.keys.shape[2]
    elif c.offset <= c.max_size:  # a one-token step into a window that had not wrapped
        c.trim(n)
    else:
        raise CacheRollbackError(
            f"layer {layer.label} (RotatingKVCache): a one-token step overwrote the oldest "
            f"entry of its {c.max_size}-entry window and cannot be undone")


def _roll_back_recurrent(layer: Layer, n: int, width: int) -> None:
    if n != width:  # PromptCaches drops whole forwards on models with recurrent layers
        raise CacheRollbackError(f"layer {layer.label} (ArraysCache) cannot drop a partial tail")
    layer.cache.cache = list(layer.saved)
    layer.fed = layer.saved_fed


# -- check, per kind: "" when the layer holds `position` positions ------------------------
def _problem_trim(layer: Layer, position: int, restored: bool) -> str:
    offset = layer.cache.offset
    return "" if offset == position else f"holds {offset} positions, expected {position}"


def _problem_window(layer: Layer, position: int, restored: bool) -> str:
    c = layer.cache
    if c.offset != position:
        return f"holds {c.offset} positions, expected {position}"
    stored = 0 if c.keys is None else c.keys.shape[2]
    if stored < min(position, c.max_size - 1):
        return f"stores {stored} entries, expected at least {min(position, c.max_size - 1)}"
    if position < c.max_size and c._idx != position:
        return f"writes next at {c._idx}, expected {position}"
    if position >= c.max_size and not c.keep <= c._idx <= stored:
        return f"writes next at {c._idx}, outside its {stored} entries"
    return ""


def _problem_recurrent(layer: Layer, position: int, restored: bool) -> str:
    if layer.fed != position:
        return f"has absorbed {layer.fed} positions, expected {position}"
    if restored and any(a is not b for a, b in zip(layer.cache.cache, layer.saved, strict=True)):
        return "does not hold the state kept before the forward"
    return ""


_KEEP: dict[LayerKind, Callable[[Layer, int], None]] = {
    "window": _keep_window, "recurrent": _keep_recurrent,
}
_ROLL_BACK: dict[LayerKind, Callable[[Layer, int, int], None]] = {
    "trim": _roll_back_trim, "window": _roll_back_window, "recurrent": _roll_back_recurrent,
}
_PROBLEM: dict[LayerKind, Callable[[Layer, int, bool], str]] = {
    "trim": _problem_trim, "window": _problem_window, "recurrent": _problem_recurrent,
}


def lookup_refusal(refeeds: bool, model_type: str) -> str | None:
    """Why prompt lookup must not drive this model (plain decoding still may), or None: it
    has recurrent layers (`refeeds`) and its type is not in `REFEED_MODEL_TYPES`."""
    if refeeds and model_type not in REFEED_MODEL_TYPES:
        return (f"{model_type}: its recurrent layers are not known to verify a block exactly "
                f"as one-token steps on MLX, so prompt lookup could not equal plain decoding "
                f"(known: {', '.join(sorted(REFEED_MODEL_TYPES))}); plain decoding works")
    return None
