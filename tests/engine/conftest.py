"""Shared real-model fixtures: the bundled models, fetched once into the user cache dir.

`bundled_model` fetches SmolLM2-135M (first run only: ~100 MB download + ~30 s conversion;
later runs find it in `SPECFLEET_HOME` / the user cache dir and do nothing). `torch_runner` /
`mlx_runner` load it once per session; tests that use them must leave the caches to `reset()`.
`gemma3_model` fetches Gemma 3 270M the same way (first run only: ~250 MB + ~100 s).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from specfleet.models.bundled import FetchResult
from specfleet.models.registry import ResolvedModel


@dataclass(frozen=True)
class BundledModel:
    """A fetched bundled model: the fetch outcome and its resolution per engine."""

    fetch: FetchResult
    torch: ResolvedModel
    mlx: ResolvedModel
    mlx_q4: ResolvedModel | None  # None where the GGUF has no exact MLX 4-bit form


@pytest.fixture(scope="session")
def bundled_model() -> BundledModel:
    from specfleet.models.bundled import fetch_bundled
    from specfleet.models.registry import resolve_model

    fetched = fetch_bundled()
    return BundledModel(
        fetched,
        resolve_model("smollm2-135m", "torch"),
        resolve_model("smollm2-135m", "mlx"),
        resolve_model("smollm2-135m-q4", "mlx"),
    )


@pytest.fixture(scope="session")
def torch_runner(bundled_model):
    pytest.importorskip("transformers", reason="the torch engine is not installed")
    import torch

    from specfleet.engine.runners.torch import TorchRunner

    # On this shared 2-core box two OpenMP threads wait on each other while other jobs hold
    # the cores: measured 6x slower wall time (16 tokens: 33 s vs 5.9 s). Tests only.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield TorchRunner.load(bundled_model.torch.path, "cpu")
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def mlx_runner(bundled_model):
    pytest.importorskip("mlx_lm", reason="the mlx engine is not installed")
    from specfleet.engine.runners.mlx import MlxRunner

    return MlxRunner.load(bundled_model.mlx.path, "cpu")


@pytest.fixture(scope="session")
def gemma3_model() -> BundledModel:
    from specfleet.models.bundled import fetch_bundled
    from specfleet.models.registry import resolve_model

    fetched = fetch_bundled("gemma3-270m")
    torch_model, mlx_model = (resolve_model("gemma3-270m", e) for e in ("torch", "mlx"))
    return BundledModel(fetched, torch_model, mlx_model, None)


@pytest.fixture(scope="module")
def one_torch_thread():
    """One OpenMP thread for a module of tiny torch models: they run fastest so, and on this
    shared 2-core box two threads wait on each other (see `torch_runner`)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
