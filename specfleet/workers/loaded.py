"""The models a worker keeps loaded: keyed by (engine, device, model path), bounded by memory.

The least recently used model is dropped when a new one would not fit the budget. Each entry
remembers which verify widths were warmed, so a model is warmed once per max draft.
"""

from __future__ import annotations

import gc
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ModelKey = tuple[str, str, str]  # (engine, device, model path)


@dataclass
class LoadedModel:
    """One loaded runner and what the worker knows about it."""

    key: ModelKey
    runner: Any
    size_bytes: int
    weights_hash: str | None
    load_s: float
    warmed_drafts: dict[int, float] = field(default_factory=dict)  # max_draft -> warm-up s
    runs: int = 0

    def summary(self) -> dict:
        engine, device, path = self.key
        return {
            "engine": engine,
            "device": device,
            "path": path,
            "size_gb": round(self.size_bytes / 2**30, 3),
            "load_s": round(self.load_s, 3),
            "warmed_max_drafts": sorted(self.warmed_drafts),
            "runs": self.runs,
        }


class LoadedModels:
    """An LRU of loaded runners whose total size stays within `budget_bytes`.

    Args:
        budget_bytes: total size allowed; a model bigger than the budget still loads alone.
    """

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[ModelKey, LoadedModel] = OrderedDict()

    def get_or_load(
        self, key: ModelKey, size_bytes: int, load: Callable[[], LoadedModel]
    ) -> LoadedModel:
        """The loaded model for `key`, loading it with `load()` after making room."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            return entry
        self._make_room(size_bytes)
        entry = load()
        self._entries[key] = entry
        return entry

    def _make_room(self, size_bytes: int) -> None:
        while self._entries and self.used_bytes() + size_bytes > self.budget_bytes:
            _, evicted = self._entries.popitem(last=False)
            _release(evicted)

    def used_bytes(self) -> int:
        return sum(e.size_bytes for e in self._entries.values())

    def lru_keys(self) -> list[ModelKey]:
        """Loaded keys, least recently used first."""
        return list(self._entries)

    def summaries(self) -> list[dict]:
        return [e.summary() for e in self._entries.values()]

    def clear(self) -> None:
        while self._entries:
            _release(self._entries.popitem(last=False)[1])


def _release(entry: LoadedModel) -> None:
    runner = entry.runner
    entry.runner = None
    del runner
    gc.collect()  # drop the weights now, before the next model is loaded
    _empty_device_caches(entry.key[0])


def _empty_device_caches(engine: str) -> None:
    import sys

    torch = sys.modules.get("torch")  # only when the engine already imported it
    if engine == "torch" and torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()
    mx = sys.modules.get("mlx.core")
    if engine == "mlx" and mx is not None:
        mx.clear_cache()
