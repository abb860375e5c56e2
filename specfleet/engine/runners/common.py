"""Helpers the runners share: prompt encoding, top-2 forensics over `read_row`, and the
process's peak RSS for a device without an allocator of its own."""

from __future__ import annotations

import resource
import sys
from typing import Any

import numpy as np

from specfleet.errors import UserError


def encode_with_template(
    tokenizer: Any, text: str, chat: bool, system: str | None = None
) -> list[int]:
    """Token ids of `text`; with `chat` (and a template), the user turn plus generation prompt.

    Args:
        tokenizer: a Hugging Face tokenizer (or mlx-lm's wrapper of one).
        text: the prompt text (not empty).
        chat: apply the chat template when the tokenizer has one.
        system: a system turn before the user's; needs the chat template.

    Returns:
        Token ids as plain ints.
    """
    if not text:
        raise UserError("--prompt is empty: give some text to continue")
    templated = chat and getattr(tokenizer, "chat_template", None)
    if system is not None and not templated:
        why = "--no-chat was given" if not chat else "this model has none"
        raise UserError(f"--system-prompt needs the chat template, and {why}; expected no "
                        "--system-prompt (or a model with a chat template, without --no-chat)")
    if templated:
        turns = [{"role": "system", "content": system}] if system is not None else []
        ids = tokenizer.apply_chat_template(
            [*turns, {"role": "user", "content": text}], add_generation_prompt=True,
            tokenize=True,
        )
        if hasattr(ids, "keys"):  # transformers 5 may return a BatchEncoding
            ids = ids["input_ids"]
        return [int(t) for t in ids]
    return [int(t) for t in tokenizer.encode(text)]


def check_chat_template(tokenizer: Any) -> None:
    """Render the folder's chat template once at load, so a broken one (a Jinja syntax
    error) is the folder refused in one line, not a traceback at the first prompt.

    Raises:
        ValueError: naming the template and what Jinja said.
    """
    import jinja2

    if not getattr(tokenizer, "chat_template", None):
        return
    try:
        tokenizer.apply_chat_template([{"role": "user", "content": "x"}],
                                      add_generation_prompt=True, tokenize=False)
    except jinja2.TemplateError as err:
        raise ValueError(f"its chat template does not render: {err}; expected a Jinja "
                         "template (chat_template.jinja or tokenizer_config.json)") from None


class TokenizerText:
    """Text <-> ids through `self.tokenizer`, the same on every real runner."""

    tokenizer: Any
    vocab_size: int

    def encode_prompt(self, text: str, chat: bool = True, system: str | None = None) -> list[int]:
        """Token ids of `text`; with `chat`, wrapped in the chat template plus generation prompt
        (after the `system` turn when given).

        Raises:
            UserError: an id past the model's vocabulary (a tokenizer of another model: torch
                would fail in its embedding, MLX read past the table and reply garbage).
        """
        ids = encode_with_template(self.tokenizer, text, chat, system)
        beyond = max(ids, default=-1)
        if beyond >= self.vocab_size:
            raise UserError(f"the prompt holds token id {beyond}, past this model's vocabulary "
                            f"of {self.vocab_size} ids (its tokenizer and its weights come from "
                            "different models); expected a tokenizer that matches config.json's "
                            "vocab_size")
        return ids

    def decode(self, ids) -> str:
        """The text of `ids`, special tokens dropped."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


class IdsOnlyTokenizer:
    """Stands in for a tokenizer on a runner driven by token ids (the tiny self-test models):
    no EOS, no chat template, no text in; ids decode to `<id>`."""

    eos_token_id = None
    eos_token_ids = None  # mlx-lm's wrapper attribute, read by the MLX runner
    chat_template = None

    def encode(self, text: str) -> list[int]:
        raise UserError("this model takes token ids, not text (a tiny self-test model)")

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return " ".join(f"<{int(i)}>" for i in ids)


def top2(runner: Any, logits: Any, row: int) -> tuple[int, float, int, float]:
    """The two best tokens of one logits row, ties to the lowest id (parity forensics).

    Args:
        runner: the runner that produced `logits`.
        logits: a logits handle from `prefill` / `forward`.
        row: row index within `logits`.

    Returns:
        (id1, logit1, id2, logit2) with logit1 >= logit2.
    """
    values = np.asarray(runner.read_row(logits, row), dtype=np.float64)
    first = int(np.argmax(values))
    rest = values.copy()
    rest[first] = -np.inf
    second = int(np.argmax(rest))
    return first, float(values[first]), second, float(values[second])


def relative_margin(logit1: float, logit2: float) -> float:
    """(logit1 - logit2) / max(|logit1|, 1): the near-tie measure the parity tests use."""
    return (logit1 - logit2) / max(abs(logit1), 1.0)


def eos_id_set(*sources: Any) -> frozenset[int]:
    """Union of EOS ids given as ints, iterables of ints, or None."""
    ids: set[int] = set()
    for source in sources:
        if isinstance(source, int):
            ids.add(source)
        elif source:
            ids.update(int(t) for t in source)
    return frozenset(ids)


def process_peak_rss() -> tuple[float, str]:
    """This process's peak resident set in GB: the peak memory of a runner whose device
    has no allocator of its own to ask."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    per_unit = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return rss * per_unit / 1e9, "process peak RSS"
