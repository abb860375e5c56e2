"""A text-only model folder transformers 5 saves under a model_type mlx-lm loads by another
name (Qwen3.5's `qwen3_5_text`: mlx-lm's `qwen3_5` takes a config without `text_config`),
run on MLX as on torch."""

from __future__ import annotations

import json

import pytest

from specfleet.engine.runners.folders import folder_problem, mlx_config_overrides
from specfleet.engine.runners.tiny_torch import TINY_FAMILIES
from tests.models.test_user_folders import generate, save_tiny


@pytest.fixture(scope="module")
def qwen3_5_text(tmp_path_factory):
    folder = tmp_path_factory.mktemp("qwen3_5_text") / "model"
    return save_tiny(folder, "qwen3_5_text", **TINY_FAMILIES["qwen3_5_text"].config)


@pytest.mark.torch
def test_mlx_is_told_the_module_that_loads_a_qwen3_5_text_folder(qwen3_5_text):
    # matrix validate and generate refused it: "an architecture the mlx engine does not know".
    assert folder_problem(qwen3_5_text, "mlx") is None
    assert mlx_config_overrides(qwen3_5_text)["model_type"] == "qwen3_5"


@pytest.mark.mlx
@pytest.mark.torch
def test_a_qwen3_5_text_folder_replies_on_mlx_as_on_torch(qwen3_5_text):
    replies = {engine: generate(qwen3_5_text, engine) for engine in ("torch", "mlx")}
    replies["lookup"] = generate(qwen3_5_text, "mlx", "--prompt-lookup")
    for result in replies.values():
        assert result.exit_code == 0, result.output
    ids = {name: json.loads(result.stdout)["token_ids"] for name, result in replies.items()}
    assert ids["mlx"] == ids["torch"] == ids["lookup"]
