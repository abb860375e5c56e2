"""The config keys lifted for mlx-lm, progress bars off a terminal (the conversions themselves run in the bundled fetches:
tests/models/test_bundled.py and tests/engine/test_gemma3.py)."""

from __future__ import annotations

import io
import sys

import pytest

from specfleet.engine.runners import gguf_convert
from specfleet.engine.runners.gguf_convert import lift_rope_keys

GEMMA3_TYPES = (["sliding_attention"] * 5 + ["full_attention"]) * 3


def test_a_single_rope_base_is_lifted():
    config = {"rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"}}
    assert lift_rope_keys(config) == {**config, "rope_theta": 100000.0}


def test_gemma3_bases_and_pattern_are_lifted_and_transformers_keys_kept():
    config = {
        "layer_types": GEMMA3_TYPES,
        "rope_parameters": {
            "full_attention": {"rope_theta": 1_000_000.0, "rope_type": "default"},
            "sliding_attention": {"rope_theta": 10_000.0, "rope_type": "default"},
        },
    }
    lifted = lift_rope_keys(config)
    assert (lifted["rope_theta"], lifted["rope_local_base_freq"]) == (1_000_000.0, 10_000.0)
    assert lifted["sliding_window_pattern"] == 6
    assert lifted["rope_parameters"] == config["rope_parameters"] and "rope_theta" not in config


def test_keys_already_at_the_top_are_left_alone():
    config = {"rope_theta": 5.0, "rope_parameters": {"rope_theta": 100000.0}}
    assert lift_rope_keys(config)["rope_theta"] == 5.0


def test_layer_types_mlx_lm_cannot_express_are_refused():
    layer_types = [*GEMMA3_TYPES[:-1], "sliding_attention"]  # the last full layer missing
    with pytest.raises(ValueError, match="not every 6th layer full"):
        lift_rope_keys({"layer_types": layer_types})


class _Stderr(io.StringIO):
    def __init__(self, terminal: bool) -> None:
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


@pytest.mark.parametrize("terminal", [True, False])
def test_progress_bars_are_drawn_only_in_a_terminal(terminal, monkeypatch):
    # Each bar redraws with a `\r`: `models fetch 2>&1 | tail` printed hundreds of them.
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()
    monkeypatch.setattr(sys, "stderr", _Stderr(terminal))
    try:
        gguf_convert.bars_only_in_a_terminal()
        assert hf_logging.is_progress_bar_enabled() is terminal
    finally:
        hf_logging.enable_progress_bar()
