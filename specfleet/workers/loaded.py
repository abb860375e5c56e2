"""Loading, warming and keeping models: the one way a runner is made ready to generate.

`load_model` loads a resolved model (a worker's run and `specfleet generate` alike);
`check_model` says, without loading, whether a model would load here (`matrix validate`);
`LoadedModel.warm` runs its verify widths once per max draft; `LoadedModels` is a worker's
LRU of loaded runners, keyed by (engine, device, model path) and bounded by memory (the least
recently used model is dropped when a new one would not fit the budget).
"""

from __future__ import annotations

import gc
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from specfleet import openblas
from specfleet.engine.kinds import MODEL_ENGINES
from specfleet.engine.peers import PeerCall, warm_up_peer
from specfleet.errors import UserError, extra_install, one_line
from specfleet.settings import THREADS, logical_cpus

ModelKey = tuple[str, str, str]  # (engine, device, model path)


@dataclass
class LoadedModel:
    """One loaded runner and what is known about it.

    Attributes:
        key: (engine, device, model path).
        runner: the loaded runner (None once released).
        size_bytes: the weights' size on disk.
        weights_hash: the weights' content hash, if known.
        load_s: seconds the load took.
        alias: the name the model was asked for (a registry alias, or the folder).
        warmed_drafts: max draft -> seconds its verify widths took to warm.
        warmed_peers: a peer arm and its settings (`PeerCall.warm_key`) -> seconds its
            warm-up took.
        runs: runs generated with it.
        weight_bytes: the weights' bytes as loaded on the device (`runner.weight_bytes()`;
            None for a runner that cannot say).
    """

    key: ModelKey
    runner: Any
    size_bytes: int
    weights_hash: str | None
    load_s: float
    alias: str = ""
    warmed_drafts: dict[int, float] = field(default_factory=dict)
    warmed_peers: dict[str, float] = field(default_factory=dict)
    runs: int = 0
    weight_bytes: int | None = None

    @property
    def path(self) -> str:
        return self.key[2]

    def warm_draft(self, max_draft: int) -> int:
        """The widest draft `warm` runs for `max_draft`: less where the model's context is
        too short for the warm-up of every width (`engine.warmup.fitting_draft`)."""
        from specfleet.engine.warmup import fitting_draft
        from specfleet.models.registry import context_tokens

        context = context_tokens(Path(self.path)) if self.key[0] in MODEL_ENGINES else None
        return fitting_draft(max_draft, context)

    def warm(self, prompt_ids: Sequence[int], max_draft: int) -> float:
        """Run every verify width up to `warm_draft(max_draft) + 1` once per max draft (the
        engine also keeps it once per runner per process); 0.0 when already warm. Leaves the
        caches empty."""
        if max_draft in self.warmed_drafts:
            return 0.0
        from specfleet.engine.warmup import warm_up_verify_widths

        self.warmed_drafts[max_draft] = warm_up_verify_widths(self.runner, prompt_ids,
                                                              self.warm_draft(max_draft))
        self.runner.reset()
        return self.warmed_drafts[max_draft]

    def warm_peer(self, prompt_ids: Sequence[int], call: PeerCall) -> float:
        """A peer arm's warm-up (`engine.peers.warm_up_peer`), once per peer and settings on
        this model, as our arms' verify widths; 0.0 when already warm."""
        key = call.warm_key()
        if key in self.warmed_peers:
            return 0.0
        self.warmed_peers[key] = warm_up_peer(self.runner, prompt_ids, call)
        return self.warmed_peers[key]

    def summary(self) -> dict:
        engine, device, path = self.key
        return {
            "engine": engine,
            "device": device,
            "path": path,
            "size_gb": round(self.size_bytes / 2**30, 3),
            "load_s": round(self.load_s, 3),
            "warmed_max_drafts": sorted(self.warmed_drafts),
            "warmed_peers": sorted(self.warmed_peers),
            "runs": self.runs,
            "weight_bytes": self.weight_bytes,
        }


class EngineNotInstalled(UserError):
    """A real engine's packages are missing; the message says how to install them."""


def runner_class(engine: str) -> Any:
    """The runner class of a real engine (imports the backend only here).

    Raises:
        EngineNotInstalled: the engine's packages are not installed.
    """
    try:
        if engine == "torch":
            from transformers.utils import logging as hf_logging

            from specfleet.engine.runners.torch import TorchRunner

            hf_logging.disable_progress_bar()  # the weight-loading bar would clutter stderr
            return TorchRunner
        if engine == "mlx":
            from specfleet.engine.runners.mlx import MlxRunner

            return MlxRunner
    except ImportError as err:
        raise EngineNotInstalled(
            f"the {engine} engine is not installed ({err.name or err}); "
            f"install it with {extra_install(engine)}"
        ) from None
    raise ValueError(f"unknown engine {engine!r}")


@dataclass(frozen=True)
class ModelCheck:
    """Whether one model can run on one engine on this host, found without loading it.

    Attributes:
        problem: why it cannot, one line (None: it can).
        missing: the model is known but its files are not on this host (another may hold them).
        no_source: its alias names no source for this engine: runs there are left out.
    """

    problem: str | None = None
    missing: bool = False
    no_source: bool = False


def check_model(model: str, engine: str, max_tokens: int) -> ModelCheck:
    """Resolve `model` for `engine` as a run here would (toy names parsed, aliases and
    folders found, weights not hashed) and check its context against `max_tokens`.

    Args:
        model: a toy model name, an alias, a model folder or `hf:ORG/NAME`.
        engine: toy, mlx or torch.
        max_tokens: the longest reply a run of it asks for.

    Returns:
        The `ModelCheck`.
    """
    if engine == "toy":
        from specfleet.workers.toy import parse_toy_model

        try:
            parse_toy_model(model)
        except UserError as err:
            return ModelCheck(str(err))
        return ModelCheck()
    from specfleet.models.registry import (
        ModelNotFetched,
        NoEngineSource,
        bundled_source,
        context_tokens,
        resolve_model,
    )

    try:
        resolved = resolve_model(model, engine, measure=False)
    except ModelNotFetched as err:
        return ModelCheck(str(err), missing=True)
    except NoEngineSource as err:
        return ModelCheck(str(err), no_source=True)
    except UserError as err:
        return ModelCheck(str(err))
    if resolved.path is not None and bundled_source(resolved.source) is None:  # bundled: loads
        from specfleet.engine.runners.folders import folder_problem

        problem = folder_problem(resolved.path, engine)
        if problem is not None:
            return ModelCheck(problem)
    context = context_tokens(resolved.path)
    if context is not None and max_tokens >= context:
        return ModelCheck(f"max_tokens {max_tokens} leaves no room for the prompt in the "
                          f"model's context of {context} tokens")
    return ModelCheck()


def model_context(model: str, engine: str) -> tuple[int | None, Any]:
    """(context length, token counter) of `model` for `engine` on this machine, either None
    where unknown (a toy model, no config field, no tokenizer.json, not resolvable here)."""
    from specfleet.models.registry import context_tokens, resolve_model, token_counter

    if engine not in MODEL_ENGINES:
        return None, None
    try:
        path = resolve_model(model, engine, measure=False).path
    except UserError:
        return None, None
    return context_tokens(path), token_counter(path)


def sure_overruns(model: str, engine: str, prompts: Sequence[tuple[str, int]]
                  ) -> list[tuple[int, int, int, int]]:
    """The prompts (text, max_tokens) whose tokens and max_tokens surely pass the context of
    `model` on this machine, as (index, tokens, max_tokens, context): counted with its
    tokenizer.json before any chat template, a floor, so a run counts again exactly. None
    where the context or the tokenizer is unknown here."""
    context, count = model_context(model, engine)
    if context is None or count is None:
        return []
    return [(i, tokens, limit, context) for i, (text, limit) in enumerate(prompts)
            if (tokens := count(text)) + limit > context]


def check_context(folder: str, spec: Any, prompt_tokens: int) -> None:
    """Fail a run (`RunSpec`) whose prompt and reply overrun the model's context: past it the
    positions are ones the model never saw, and the run would be stored as done all the same."""
    from specfleet.models.registry import overrun_context

    context = overrun_context(folder, prompt_tokens, spec.max_tokens)
    if context is not None:
        raise UserError(f"prompt {spec.prompt_name!r} is {prompt_tokens} tokens and max_tokens "
                        f"{spec.max_tokens}; together they exceed {spec.model}'s context of "
                        f"{context} tokens; expected a shorter prompt or a smaller max_tokens")


def worker_threads() -> int:
    """$SPECFLEET_THREADS, else one per physical core but one (left to Ray's daemons and the
    driver), never more than the CPUs this process may run on (taskset): the CPU threads a
    worker gives its engines (and a llama.cpp peer)."""
    # Physical cores, not logical CPUs: a core's second hyperthread only slows matmul threads.
    cores = psutil.cpu_count(logical=False) or os.cpu_count() or 1
    # Under an affinity mask, threads beyond its CPUs only take turns on them.
    cores = min(cores, logical_cpus())
    return THREADS.read() or max(1, cores - 1)


def use_every_core(engine: str) -> int:
    """Give `engine` $SPECFLEET_THREADS CPU threads, else one per physical core but one (left
    to Ray's daemons and the driver); the count. Called by a worker before it loads a model:
    Ray runs an actor that holds no CPU with OMP_NUM_THREADS=1, which would leave torch (and
    OpenBLAS under MLX) on one thread however many cores the host has."""
    threads = worker_threads()
    if engine == "torch":
        import torch

        torch.set_num_threads(threads)  # process-wide: every thread of the worker uses it
    elif engine == "mlx":
        openblas.set_threads(threads)
    return threads


def load_model(resolved: Any, engine: str, device: str) -> LoadedModel:
    """Load a resolved model (`models.registry.resolve_model`) on `device`, timed.

    Raises:
        EngineNotInstalled: the engine is not installed.
        UnsupportedModelError: the runner refuses the model or the device.
    """
    from specfleet.engine.runners.base import UnsupportedModelError
    from specfleet.engine.runners.folders import json_files_problem

    problem = None if resolved.path is None else json_files_problem(Path(resolved.path))
    if problem is not None:  # else a TypeError from inside the library's loader
        raise UnsupportedModelError(problem)
    start = time.perf_counter()
    try:
        # The runner resolves "auto" and refuses a device this host lacks.
        runner = runner_class(engine).load(str(resolved.path), device)
    except (UserError, UnsupportedModelError):
        raise
    except (ValueError, KeyError, OSError) as err:  # the library refusing the folder itself
        raise UnsupportedModelError(one_line(
            f"{resolved.path}: the {engine} engine cannot load this folder ({_said(err)}); "
            "expected a model folder with config.json (its model_type), the weights "
            "(*.safetensors) and the tokenizer")) from None
    return LoadedModel(
        (engine, device, str(resolved.path)),
        runner,
        int(resolved.size_bytes or 0),
        resolved.weights_hash,
        time.perf_counter() - start,
        alias=resolved.alias,
        weight_bytes=runner.weight_bytes(),
    )


def _said(err: BaseException) -> str:
    """The library's own words: its message's first line, and the next where the first ends
    in a colon (mlx-lm names the weights the model lacks there, one a line); a KeyError's
    bare key said as the key a file lacks."""
    if isinstance(err, KeyError) and len(err.args) == 1:  # str() is the bare key: 'added_tokens'
        return f"a file of it lacks the key {err.args[0]!r}"
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}{' ...' if len(lines) > 2 else ''}"
    return lines[0]


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
    if engine == "torch" and torch is not None:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        if torch.backends.mps.is_available():  # Apple Silicon: unified memory, like GB10
            torch.mps.empty_cache()
    mx = sys.modules.get("mlx.core")
    if engine == "mlx" and mx is not None:
        mx.clear_cache()
