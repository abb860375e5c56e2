"""Verify-width warm-up (spec 2.10; scenario 6.29)."""

from __future__ import annotations

import pytest

from specfleet.engine.config import PromptLookupConfig
from specfleet.engine.loop import warm_up_verify_widths
from specfleet.engine.runners.toy import WidthRecordingModel


def test_warmup_runs_every_verify_width_and_rolls_each_back():
    """6.29 warmup_runs_every_verify_width_and_rolls_each_back."""
    model = WidthRecordingModel()
    model.forward([1, 1, 1])  # stale state is reset first
    config = PromptLookupConfig(ngram_max=3, ngram_min=2, max_draft=4)
    seconds = warm_up_verify_widths(model, [1, 2, 3, 4, 5], config.max_draft)
    assert model.forward_widths[1:] == [5, 2, 3, 4, 5]
    assert model.cache_len() == 5 and model.cache == [1, 2, 3, 4, 5]
    assert seconds >= 0.0
    with pytest.raises(ValueError):
        warm_up_verify_widths(model, [], 4)
