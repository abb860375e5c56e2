"""`encode_with_template` refuses a system turn it cannot place, saying why and what instead."""

from __future__ import annotations

import pytest

from specfleet.engine.runners.common import encode_with_template
from specfleet.errors import UserError


class Plain:
    """A tokenizer without a chat template (a base model: Gemma 3 270M's)."""

    chat_template = None

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]


@pytest.mark.parametrize(("chat", "why"), [
    (True, "this model has none"), (False, "--no-chat was given")])
def test_a_system_turn_without_a_template_names_the_cause(chat, why) -> None:
    # Both causes were said as one "(this model has none, or --no-chat was given)".
    with pytest.raises(UserError) as refused:
        encode_with_template(Plain(), "hi", chat=chat, system="be brief")
    assert str(refused.value) == (f"--system-prompt needs the chat template, and {why}; "
                                  "expected no --system-prompt (or a model with a chat "
                                  "template, without --no-chat)")


def test_without_a_system_turn_the_text_is_encoded_plainly() -> None:
    assert encode_with_template(Plain(), "hi", chat=True) == [104, 105]
