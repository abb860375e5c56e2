"""A model folder the library refuses as it loads: the one line a run stores (and `generate`
prints) keeps the library's words whole where they go on past a line break."""

from __future__ import annotations

import pytest

from specfleet.engine.runners.tiny_torch import TINY_FAMILIES
from tests.models.test_user_folders import generate, save_tiny


@pytest.mark.mlx
@pytest.mark.torch
def test_the_weights_mlx_lm_finds_no_place_for_are_named(tmp_path):
    # mlx-lm's LFM2 ties its output layer to the embeddings; a folder with its own lm_head
    # read "(Received 1 parameters not in model: )", the name on the line cut off.
    folder = save_tiny(tmp_path / "lfm2", "lfm2", **TINY_FAMILIES["lfm2"].config)
    result = generate(folder, "mlx")
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert (f"{folder}: the mlx engine cannot load this folder (Received 1 parameters not in "
            "model: lm_head.weight.); expected a model folder") in line, line
