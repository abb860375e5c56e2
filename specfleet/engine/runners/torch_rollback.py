"""Exact rollback of transformers' cache layers, one rule per layer class (the torch runner's).

transformers 5 builds a `DynamicCache` from the model config with one layer object per decoder
layer; the layer's class says how the rejected rows of a verify block are undone:

- `DynamicLayer` (full attention): drop the tail.
- `DynamicSlidingWindowLayer`: `update` keeps only the last `sliding_window - 1` positions, so
  a block displaces old ones. On a model that only trims, the layer records its past during a
  block (transformers' `record_past`, made for assisted decoding) and `crop(-n)` returns what
  the block displaced; the next forward restricts it to the window again.
- `LinearAttentionLayer` (linear attention, Mamba, short convolutions): conv and recurrent
  states absorb every token in place and cannot drop a tail. Two ways back, by what the
  installed transformers can do and what the model type is proven under
  (`recurrent_rollback_for`):
  - "record" (transformers 5.25+): before a block the layer is told to record
    (`activate_past_recording(recurrent_states_to_keep=width)`): the model then runs the
    block's recurrent part one token at a time, with the one-token kernels of plain decoding,
    keeps the state after each token and the whole convolution window, and `crop(-n)` puts
    back the state after the kept tokens. Nothing is fed again (`rollback_kind` "trim").
  - "refeed" (5.24): the states are cloned before a block, restored, and the kept tokens fed
    again (`rollback_kind` "refeed"). The attention layers go back to before the block too
    (the re-feed recomputes them): full ones drop the block, sliding ones get back the
    tensors they held, kept by reference (their `update` rebinds new tensors and never writes
    into the old ones).
  Since 5.25 the layer also counts its positions (`cumulative_length_linear`, which the
  models' positions come from when layer 0 is recurrent): a crop lowers it, a restore sets it
  back, and the per-layer check compares it.
- `LinearAttentionAnd{Full,SlidingWindow}AttentionLayer`: both rules; `DummyLayer`: nothing.

Every other class is refused at load. Prompt lookup is refused on a recurrent model whose
verify rows are not known to equal its one-token steps under the way back in use
(`RECORDED_MODEL_TYPES`, `REFEED_MODEL_TYPES`); plain decoding works. After every rollback each
layer is checked to hold exactly the kept positions; a mismatch raises `CacheRollbackError`
naming the layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from specfleet.engine.runners.base import CacheRollbackError, RollbackKind, UnsupportedModelError

LayerKind = Literal["full", "sliding", "recurrent", "recurrent+full", "recurrent+sliding", "empty"]

RecurrentRollback = Literal["record", "refeed"]

# Recurrent decoders whose re-fed verify rows equal their one-token steps in transformers
# 5.24-5.25 (to ~1e-5 logits in float64), each proven by a `tiny_torch` family. Elsewhere the
# chunked multi-token forward over a kept state differs: mamba, falcon_mamba, bamba and jamba
# by 0.5-10 logits, recurrent_gemma by ~0.05, so prompt lookup would not reply as plain.
REFEED_MODEL_TYPES = frozenset({"qwen3_next", "qwen3_5_text", "lfm2", "nemotron_h", "mamba2"})
# The same under "record" (5.25+), where a block's recurrent part runs one token at a time:
# mamba, falcon_mamba and granitemoehybrid equal their steps exactly in float64, jamba,
# falcon_h1 and zamba2 to ~1e-14, olmo_hybrid and kimi_linear to ~1e-6; the MoE ones in
# float32 (no float64 expert matmul). bamba does not (its greedy choice differs within the
# first block). Those added here pass re-fed on 5.25 too, but 5.24 was never run: refused
# re-fed. A type whose layers keep several recurrent states (qwen4_exp, inkling) would break
# here: 5.25 records every state of a layer into one shared history list.
RECORDED_MODEL_TYPES = REFEED_MODEL_TYPES | {
    "mamba", "falcon_mamba", "jamba", "granitemoehybrid", "falcon_h1", "zamba2", "olmo_hybrid",
    "qwen3_5_moe_text", "lfm2_moe", "kimi_linear"}


def recurrent_rollback_here() -> RecurrentRollback:
    """"record" where the installed transformers records a block's recurrent states (5.25+),
    else "refeed"."""
    from transformers.cache_utils import Cache

    return "record" if hasattr(Cache, "get_recurrent_states_to_keep") else "refeed"


def recurrent_rollback_for(model_type: str) -> RecurrentRollback:
    """The way back for a model of `model_type`: "record" where transformers records and the
    type is proven under it (`RECORDED_MODEL_TYPES`), else "refeed". Prompt lookup refuses an
    unproven type either way, but calibrate and the warm-up still roll blocks back on it, and
    a type whose code does not record per token (zamba, zaya) would leave a crop nothing to
    go back to; a re-feed works on any."""
    here = recurrent_rollback_here()
    return here if here == "refeed" or model_type in RECORDED_MODEL_TYPES else "refeed"


def _kind_by_class() -> dict[type, LayerKind]:
    from transformers.cache_utils import (
        DummyLayer,
        DynamicLayer,
        DynamicSlidingWindowLayer,
        LinearAttentionAndFullAttentionLayer,
        LinearAttentionAndSlidingWindowAttentionLayer,
        LinearAttentionLayer,
    )

    return {
        DynamicLayer: "full",
        DynamicSlidingWindowLayer: "sliding",
        LinearAttentionLayer: "recurrent",
        LinearAttentionAndFullAttentionLayer: "recurrent+full",
        LinearAttentionAndSlidingWindowAttentionLayer: "recurrent+sliding",
        DummyLayer: "empty",
    }


def layer_kinds(cache: Any, model_type: str) -> tuple[LayerKind, ...]:
    """The rollback rule of every layer of `cache`, by exact class.

    Args:
        cache: a `DynamicCache` built from the model's config.
        model_type: the decoder's `model_type` (its text config's, for a multimodal model).

    Raises:
        UnsupportedModelError: a layer class this module has no exact rule for (one line).
    """
    known = _kind_by_class()
    layers = list(cache.layers)
    unknown = sorted({type(layer).__name__ for layer in layers if type(layer) not in known})
    if unknown or not layers:
        names = ", ".join(unknown) or "no layers"
        raise UnsupportedModelError(
            f"{model_type}: prompt lookup cannot roll back this model's cache exactly "
            f"(unknown cache layer type {names})")
    return tuple(known[type(layer)] for layer in layers)


def lookup_refusal(kinds: tuple[LayerKind, ...], model_type: str,
                   recurrent: RecurrentRollback) -> str | None:
    """Why prompt lookup must not drive this model (plain decoding still may), or None:
    recurrent layers in a model type not proven (`RECORDED_MODEL_TYPES` under "record",
    `REFEED_MODEL_TYPES` under "refeed") to verify a block exactly as its one-token steps."""
    exact = RECORDED_MODEL_TYPES if recurrent == "record" else REFEED_MODEL_TYPES
    if any(k.startswith("recurrent") for k in kinds) and model_type not in exact:
        # Name every type that runs with this transformers (a forced re-feed knows fewer).
        here = RECORDED_MODEL_TYPES if recurrent_rollback_here() == "record" else exact
        return (f"{model_type}: its recurrent layers are not known to verify a block exactly "
                f"as one-token steps, so prompt lookup could not equal plain decoding (known: "
                f"{', '.join(sorted(here))}); plain decoding works")
    return None


def _attention_len(layer: Any) -> int:
    """Positions in the layer's key tensor (a sliding layer's own count is its total)."""
    from transformers.cache_utils import DynamicLayer

    return DynamicLayer.get_seq_length(layer)


@dataclass
class _Mark:
    """What undoing a block of two or more tokens needs (a refeed model's checkpoint)."""

    block: list[int]
    positions: int  # positions cached before the block
    windows: dict[int, tuple[Any, Any, int]] = field(default_factory=dict)  # by reference
    states: dict[int, tuple[dict, dict]] = field(default_factory=dict)  # cloned conv, recurrent


class CacheRollback:
    """Marks before blocks, undo and per-layer checks for one runner's `DynamicCache`.

    Attributes:
        kinds: the rollback rule of every cache layer.
        rollback_kind: "refeed" when a layer is recurrent and the way back is "refeed", else
            "trim".
        positions: positions every layer should hold.
    """

    def __init__(self, kinds: tuple[LayerKind, ...],
                 recurrent: RecurrentRollback = "refeed") -> None:
        self.kinds = kinds
        refeeds = recurrent == "refeed" and any(k.startswith("recurrent") for k in kinds)
        self.rollback_kind: RollbackKind = "refeed" if refeeds else "trim"
        self._recurrent = [i for i, k in enumerate(kinds) if k.startswith("recurrent")]
        # Layers told to record during a block: sliding ones, and under "record" every layer
        # with a recurrent part (whose crop trims its attention part too).
        self._recorders = [i for i, k in enumerate(kinds)
                           if k == "sliding" or (not refeeds and k.startswith("recurrent"))]
        self._records_recurrent = not refeeds and bool(self._recurrent)
        # The first layer that counts positions by its keys (shape or int, no device read).
        self.first_attention = next(
            (i for i, k in enumerate(kinds) if k not in ("recurrent", "empty")), None)
        self.reset()

    def reset(self) -> None:
        self.positions = 0
        self._width = 0  # rows of the latest forward that may still be rolled back
        self._mark: _Mark | None = None
        self._recording = False
        self._layer_positions = dict.fromkeys(self._recurrent, 0)

    # -- around each forward ----------------------------------------------------------
    def before_forward(self, cache: Any, block: list[int] | None) -> None:
        """Settle the previous block, then mark this one when it has two or more tokens.

        Args:
            cache: the runner's cache.
            block: the forward's tokens when the host has them; None for a device token or
                a prefill (never rolled back).
        """
        self._restrict_windows(cache)
        self._mark = None
        if block is None or len(block) < 2:
            return
        if self.rollback_kind == "refeed":
            self._mark = self._checkpoint(cache, block)
        elif self._recorders:
            for i in self._recorders:
                if self.kinds[i] == "sliding":
                    cache.layers[i].record_past = True
                else:  # a recurrent part keeps its state after each token of the block
                    cache.layers[i].activate_past_recording(recurrent_states_to_keep=len(block))
            self._recording = True
        # A trim-only model without sliding layers needs nothing kept: zero cost per block.

    def fed(self, width: int, undoable: bool = True) -> None:
        """Count `width` positions appended by a forward (`undoable`) or a prefill."""
        self.positions += width
        for i in self._recurrent:
            self._layer_positions[i] += width
        self._width = width if undoable else 0

    # -- rollback ---------------------------------------------------------------------
    def undo(self, cache: Any, n: int) -> list[int]:
        """Undo the last `n` positions; return the tokens the caller must feed again.

        A trim model is checked here; a refeed model is checked here against its
        checkpoint, and again by `check` once the caller has fed the tokens. A recorded
        recurrent part can go back at most `width - 1` positions: transformers' Mamba layers
        advance the state before the block in place, so only the states after each of the
        block's tokens are kept (prompt lookup always keeps the first, the last accepted).
        """
        most = self._width - 1 if self._records_recurrent and self._width else self._width
        if n < 0 or n > most:
            raise ValueError(f"cannot roll back {n} of the latest forward's {self._width} rows "
                             f"(at most {most} here)")
        self._width -= n
        if self.rollback_kind == "refeed":
            return self._restore(cache, n)
        for i, kind in enumerate(self.kinds):
            self._trim(cache.layers[i], i, kind, n)
        self._recording = False
        self.positions -= n
        self.check(cache, f"after rolling back {n}")
        return []

    def _trim(self, layer: Any, index: int, kind: LayerKind, n: int) -> None:
        if kind == "full":
            layer.crop(-n)
        elif kind != "empty":  # sliding, or recurrent under "record"
            if not layer.record_past:
                raise CacheRollbackError(
                    f"cache layer {index} ({kind}) kept no past for this forward: only blocks "
                    "of two or more host tokens can be rolled back")
            # A window gets back what the block displaced; a recurrent part the state after
            # the kept tokens and its convolution window (the rest it recorded is dropped).
            layer.crop(-n)
            _stop_recording(layer, kind)
            if index in self._layer_positions:
                self._layer_positions[index] -= n

    def _restrict_windows(self, cache: Any) -> None:
        """A block all accepted leaves recording layers oversized: back to the window (a
        recurrent part: to its convolution window, its recorded states dropped)."""
        if not self._recording:
            return
        for i in self._recorders:
            cache.layers[i].crop(0)
            _stop_recording(cache.layers[i], self.kinds[i])
        self._recording = False

    def _checkpoint(self, cache: Any, block: list[int]) -> _Mark:
        mark = _Mark(block=block, positions=self.positions)
        for i, kind in enumerate(self.kinds):
            layer = cache.layers[i]
            if kind.endswith("sliding"):
                mark.windows[i] = (layer.keys, layer.values, layer.cumulative_length)
            if kind.startswith("recurrent"):
                # conv and recurrent updates write in place (copy_, fused step kernels).
                mark.states[i] = (_clone(layer.conv_states), _clone(layer.recurrent_states))
        return mark

    def _restore(self, cache: Any, n: int) -> list[int]:
        mark = self._mark
        if mark is None:
            raise CacheRollbackError(
                "no checkpoint for this forward: a model with recurrent layers rolls back only "
                "blocks of two or more host tokens")
        self._mark = None
        for i, kind in enumerate(self.kinds):
            self._restore_layer(cache.layers[i], i, kind, mark)
        self.positions = mark.positions
        self.check(cache, f"after restoring the checkpoint to roll back {n}", mark)
        return mark.block[: len(mark.block) - n]

    def _restore_layer(self, layer: Any, index: int, kind: LayerKind, mark: _Mark) -> None:
        from transformers.cache_utils import DynamicLayer

        if kind.endswith("full"):
            DynamicLayer.crop(layer, -len(mark.block))  # the re-feed recomputes the kept rows
        if kind.endswith("sliding"):
            layer.keys, layer.values, layer.cumulative_length = mark.windows[index]
        if kind.startswith("recurrent"):
            conv, recurrent = mark.states[index]
            layer.conv_states.update(conv)
            layer.recurrent_states.update(recurrent)
            counter = _linear_counter(layer)
            if counter is not None:  # in place: transformers marks its address static
                counter.fill_(mark.positions)
            self._layer_positions[index] = mark.positions

    # -- checks -----------------------------------------------------------------------
    def check(self, cache: Any, when: str, mark: _Mark | None = None,
              error: type[Exception] = CacheRollbackError) -> None:
        """Every layer holds exactly `positions`; with `mark`, recurrent states are its own.

        Raises:
            error: one line naming the first layer that does not (CacheRollbackError unless
                the caller says otherwise).
        """
        counts = _linear_counts(cache, self._recurrent)
        for i, kind in enumerate(self.kinds):
            problem = self._layer_problem(cache.layers[i], i, kind, mark, counts.get(i))
            if problem is not None:
                raise error(f"{when}: cache layer {i} ({kind}) {problem}")

    def _layer_problem(self, layer: Any, index: int, kind: LayerKind,
                       mark: _Mark | None, counted: int | None) -> str | None:
        expected = self.positions
        if kind.endswith("full") and _attention_len(layer) != expected:
            return f"holds {_attention_len(layer)} positions, expected {expected}"
        if kind.endswith("sliding"):
            window = min(expected, layer.sliding_window - 1)
            if layer.cumulative_length != expected or _attention_len(layer) != window:
                return (f"counts {layer.cumulative_length} positions and keeps "
                        f"{_attention_len(layer)}, expected {expected} and {window}")
        if kind.startswith("recurrent"):
            if getattr(layer, "record_past", False):
                return "still records its past after the rollback"
            if expected and not any(layer.has_previous_state.values()):
                return "holds no state: the model did not feed it"
            if mark is not None and not _same_objects(layer, mark.states[index]):
                return "does not hold the state kept before the forward"
            if self._layer_positions[index] != expected:
                return f"absorbed {self._layer_positions[index]} positions, expected {expected}"
            # The models take their positions from this count: a wrong one shifts every token.
            if counted is not None and counted != expected:
                return f"counts {counted} positions, expected {expected}"
        return None


def _stop_recording(layer: Any, kind: LayerKind) -> None:
    """Back to one-token steps. A crop leaves each convolution state a slice of the recorded
    window; the fused step kernel then writes into it in place (CUDA's `causal_conv1d_update`
    wants it contiguous), so it gets a contiguous copy of its own."""
    layer.record_past = False
    if kind.startswith("recurrent"):
        for i, state in layer.conv_states.items():
            if state is not None and not state.is_contiguous():
                layer.conv_states[i] = state.contiguous()


def _linear_counts(cache: Any, indices: list[int]) -> dict[int, int]:
    """Each recurrent layer's own position count, read from the device in one transfer (a
    sync on CUDA, once per check rather than once per layer); empty before 5.25."""
    counters = {i: c for i in indices if (c := _linear_counter(cache.layers[i])) is not None}
    if not counters:
        return {}
    device = next(iter(counters.values())).device
    values = torch.stack([c.to(device) for c in counters.values()]).tolist()
    return dict(zip(counters, values, strict=True))


def _linear_counter(layer: Any) -> torch.Tensor | None:
    """The positions a recurrent layer has absorbed by transformers' own count (a 0-d tensor
    since transformers 5.25, which takes `get_seq_length` and so the model's positions from it
    when layer 0 is recurrent), or None before that."""
    return getattr(layer, "cumulative_length_linear", None)


def _clone(states: dict[int, torch.Tensor | None]) -> dict[int, torch.Tensor]:
    return {i: t.clone() for i, t in states.items() if t is not None}


def _same_objects(layer: Any, kept: tuple[dict, dict]) -> bool:
    conv, recurrent = kept
    return (all(layer.conv_states[i] is t for i, t in conv.items())
            and all(layer.recurrent_states[i] is t for i, t in recurrent.items()))
