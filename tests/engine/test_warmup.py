"""Verify-width warm-up: each width once per loaded model, over a short context (scenario 6.29)."""

from __future__ import annotations

import pytest

from specfleet.engine.config import PromptLookupConfig
from specfleet.engine.loop import generate, warm_up_verify_widths
from specfleet.engine.runners.toy import InductionModel, WidthRecordingModel
from specfleet.engine.warmup import WARM_CONTEXT_TOKENS, cold_widths, fitting_draft


def test_warmup_runs_every_verify_width_and_rolls_each_back():
    """6.29 warmup_runs_every_verify_width_and_rolls_each_back."""
    model = WidthRecordingModel()
    model.forward([1, 1, 1])  # stale state is reset first
    config = PromptLookupConfig(ngram_max=3, ngram_min=2, max_draft=4)
    prompt = list(range(1, 40))
    seconds = warm_up_verify_widths(model, prompt, config.max_draft)
    # A short prefix, not the whole prompt: the prefill was the 63 s of the old warm-up.
    assert model.forward_widths[1:] == [WARM_CONTEXT_TOKENS, 2, 3, 4, 5]
    assert model.cache_len() == 0  # `generate` prefills the prompt itself
    assert seconds >= 0.0
    with pytest.raises(ValueError):
        warm_up_verify_widths(model, [], 4)


def test_warmup_stays_inside_a_short_context():
    # Width 65 of max draft 64 ran past a 48-token context: with learned positions (GPT-2)
    # an IndexError traceback out of `generate`, whose reply itself fitted.
    model = WidthRecordingModel()
    warm_up_verify_widths(model, list(range(1, 40)), fitting_draft(64, 48))
    widths = model.forward_widths[1:]  # after the prefill
    assert widths == list(range(2, fitting_draft(64, 48) + 2)) and widths[-1] == 23
    # Each width keeps one token: the widest ends at position 4 + 21 + 23 - 1 = 47.
    assert WARM_CONTEXT_TOKENS + len(widths) - 1 + widths[-1] - 1 == 47
    assert fitting_draft(8, 48) == 8 and fitting_draft(8, None) == 8 and fitting_draft(8, 3) == 1


def test_warmup_happens_once_per_loaded_model_and_width():
    model, other = WidthRecordingModel(), WidthRecordingModel()
    warm_up_verify_widths(model, [1, 2, 3], 3)
    assert warm_up_verify_widths(model, [1, 2, 3], 3) == 0.0
    assert cold_widths(model, 3) == [] and cold_widths(model, 5) == [5, 6]
    before = len(model.forward_widths)
    warm_up_verify_widths(model, [1, 2, 3], 5)  # only the two new widths run
    assert model.forward_widths[before:] == [3, 5, 6]
    assert cold_widths(other, 3) == [2, 3, 4]  # another loaded model is still cold


def test_generate_after_warmup_equals_generate_alone():
    prompt = [1, 2, 3, 4, 1, 2, 3]
    alone = generate(InductionModel(), prompt, max_tokens=12,
                     lookup=PromptLookupConfig(max_draft=3))
    warmed = InductionModel()
    warm_up_verify_widths(warmed, prompt, 3)
    after = generate(warmed, prompt, max_tokens=12, lookup=PromptLookupConfig(max_draft=3))
    assert after.tokens == alone.tokens and after.stats == alone.stats
