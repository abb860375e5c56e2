"""Divergence forensics on a toy runner whose logits are exact and depend on forward width."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from specfleet.engine.forensics import (
    NEAR_TIE_LOGIT_MARGIN,
    PathRow,
    RowMargins,
    classify,
    first_divergence,
    is_bfloat16,
    logits_at,
    margins_from_dict,
    replay_divergence,
    replay_margins,
    tie_margin,
    top2,
)

VOCAB = 6


class WidthToy:
    """A runner whose row logits are `fn(context, width)`: exact, cache-dependent, and
    able to round a near-tie differently in a wide forward (what spec 8.3 describes)."""

    engine = "toy"
    device = "cpu"
    eos_ids = frozenset()
    vocab_size = VOCAB

    def __init__(self, fn: Callable[[tuple[int, ...], int], list[float]]):
        self.fn = fn
        self.cache: list[int] = []
        self.forwards: list[int] = []

    def reset(self) -> None:
        self.cache = []
        self.forwards = []

    def prefill(self, prompt: Sequence[int]) -> list[list[float]]:
        self.cache = list(prompt)
        return [self.fn(tuple(self.cache), 1)]

    def forward(self, tokens: Sequence[int]) -> list[list[float]]:
        rows = []
        for token in tokens:
            self.cache.append(int(token))
            rows.append(self.fn(tuple(self.cache), len(tokens)))
        self.forwards.append(len(tokens))
        return rows

    def argmax(self, logits):
        return [top2(row)[0][0] for row in logits]

    def submit(self, tokens) -> None:
        pass

    def read_tokens(self, tokens) -> list[int]:
        return list(tokens)

    def read_row(self, logits, row: int) -> list[float]:
        return logits[row]

    def trim(self, n: int) -> None:
        del self.cache[len(self.cache) - n :]

    def cache_len(self) -> int:
        return len(self.cache)

    def clear_allocator_cache(self) -> None:
        pass


def _one_hot(token: int, value: float = 10.0) -> list[float]:
    row = [0.0] * VOCAB
    row[token] = value
    return row


def near_tie_model(context: tuple[int, ...], width: int) -> list[float]:
    """Counts up mod 5; after 4 generated tokens tokens 3 and 4 tie within 0.01, and a wide
    forward tips the tie toward 4."""
    if len(context) == 2 + 4:
        row = [0.0] * VOCAB
        row[3], row[4] = 7.0, 6.99 + (0.02 if width > 1 else 0.0)
        return row
    return _one_hot((context[-1] + 1) % 5)


def bug_model(context: tuple[int, ...], width: int) -> list[float]:
    """Like near_tie_model but the wide forward changes the winner by whole logits."""
    if len(context) == 2 + 4 and width > 1:
        return _one_hot(5)
    return _one_hot((context[-1] + 1) % 5)


PROMPT = [0, 1]


def test_first_divergence_equal_prefix_and_different() -> None:
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2
    assert first_divergence([], []) is None


def test_top2_ties_toward_lowest_id() -> None:
    assert top2([1.0, 3.0, 3.0, 2.0]) == ((1, 3.0), (2, 3.0))


def test_logits_at_feeds_one_token_steps_then_one_block() -> None:
    runner = WidthToy(near_tie_model)
    tokens = [2, 3, 4, 0, 3]
    row = logits_at(runner, PROMPT, tokens, 4, width=3)
    assert runner.forwards == [1, 3]
    assert row[4] == pytest.approx(7.01)
    row0 = logits_at(runner, PROMPT, tokens, 0, width=8)
    assert row0 == _one_hot(2)


def test_near_tie_flip_is_classified_near_tie() -> None:
    plain = [2, 3, 4, 0, 3, 4]
    spec = [2, 3, 4, 0, 4, 0]
    row = first_divergence(plain, spec)
    margins = replay_margins(WidthToy(near_tie_model), PROMPT, plain, spec, row)
    assert (margins.row, margins.token_a, margins.token_b) == (4, 3, 4)
    assert margins.a.top2 == ((3, 7.0), (4, 6.99))
    assert margins.a.gap == pytest.approx(0.01)
    assert margins.b.gap == pytest.approx(0.01)
    assert (margins.a.width, margins.b.width) == (1, 4)
    assert classify(margins) == "near-tie"
    assert classify(margins, threshold=0.005) == "suspect"


def _flip(high: float, low: float) -> RowMargins:
    """Token 3 leads token 4 by high - low on the plain path, and trails it so on the other."""
    return RowMargins(4, 3, 4, PathRow(((3, high), (4, low)), high - low, high - low, 1),
                      PathRow(((4, high), (3, low)), high - low, high - low, 8))


@pytest.mark.parametrize(("high", "low", "verdict"), [
    (40.0, 39.75, "near-tie"),  # bf16 rows at 32-64: one step is 0.25
    (40.0, 39.5, "near-tie"),  # two steps
    (40.0, 39.0, "suspect"),  # four steps: more than any rounding
    (40.0001, 39.7501, "suspect"),  # float32 rows: the margin stays 0.25
    (7.0, 6.75, "suspect"),  # bf16 at 4-8: a step is 1/32, so 0.25 is eight of them
])
def test_a_one_step_flip_on_bfloat16_logits_is_a_near_tie(high, low, verdict) -> None:
    assert classify(_flip(high, low)) == verdict


def test_the_bfloat16_margin_follows_the_rows_magnitude() -> None:
    assert [is_bfloat16(v) for v in (1.0, 39.75, -0.375, 1.0001, float("nan"), float("-inf"))] \
        == [True, True, True, False, False, False]
    assert tie_margin(_flip(20.0, 19.875)) == pytest.approx(2.5 * 0.125)
    assert tie_margin(_flip(100.0, 99.5)) == pytest.approx(2.5 * 0.5)
    assert tie_margin(_flip(3.0, 2.5)) == NEAR_TIE_LOGIT_MARGIN  # wider than 2.5 steps there
    assert tie_margin(_flip(40.0, 39.75), threshold=2.0) == 2.0  # a wider --near-tie stands


def test_whole_logit_flip_is_suspect() -> None:
    plain = [2, 3, 4, 0, 1]
    spec = [2, 3, 4, 0, 5]
    margins = replay_margins(WidthToy(bug_model), PROMPT, plain, spec, 4)
    assert margins.a.gap == pytest.approx(10.0)
    assert margins.b.top2[0] == (5, 10.0)
    assert margins.min_gap > NEAR_TIE_LOGIT_MARGIN
    assert classify(margins) == "suspect"


def third_token_model(context: tuple[int, ...], width: int) -> list[float]:
    """Where the stored replies part (3 against 4), this model's best is token 5 by whole
    logits on both paths, 3 and 4 level far below: a model other than the runs'."""
    if len(context) == 2 + 4:
        row = [0.0] * VOCAB
        row[3], row[4], row[5] = 1.0, 1.0, 11.0
        return row
    return _one_hot((context[-1] + 1) % 5)


def test_a_replay_whose_best_is_a_third_token_is_suspect_not_a_near_tie() -> None:
    # The stored tokens' gap was 0 on both paths, so it passed as a near-tie (parity exit 0)
    # though the replay reproduced neither reply.
    plain = [2, 3, 4, 0, 3, 4]
    spec = [2, 3, 4, 0, 4, 0]
    margins = replay_margins(WidthToy(third_token_model), PROMPT, plain, spec, 4)
    assert (margins.a.gap, margins.b.gap) == (0.0, 0.0)
    assert (margins.a.lead, margins.b.lead) == (10.0, 10.0)
    assert classify(margins) == "suspect"
    assert classify(margins_from_dict(replay_divergence(
        WidthToy(third_token_model), PROMPT, plain, spec, 4)["margins"])) == "suspect"
    near = replay_margins(WidthToy(near_tie_model), PROMPT, plain, spec, 4)
    assert (near.a.lead, near.b.lead) == (0.0, 0.0)  # one of the two is the row's best


def test_one_path_ended_compares_against_runner_up() -> None:
    plain = [2, 3, 4, 0]
    spec = [2, 3, 4, 0, 5]
    margins = replay_margins(WidthToy(bug_model), PROMPT, plain, spec, 4)
    assert margins.token_a == -1
    assert margins.b.gap == pytest.approx(10.0)


EOS = 5


def eos_far_model(context: tuple[int, ...], width: int) -> list[float]:
    """near_tie_model's rows with EOS (5) ten logits below: a reply that ends there ended
    wrongly, whatever the runner-up."""
    row = near_tie_model(context, width)
    row[EOS] = max(row) - 10.0
    return row


def eos_tie_model(context: tuple[int, ...], width: int) -> list[float]:
    """Counts up mod 5; after 4 generated tokens EOS ties with 3, and a wide forward tips it."""
    if len(context) == 2 + 4:
        row = [0.0] * VOCAB
        row[3], row[EOS] = 7.0, 6.99 + (0.02 if width > 1 else 0.0)
        return row
    return _one_hot((context[-1] + 1) % 5)


def _eos_toy(fn: Callable[[tuple[int, ...], int], list[float]]) -> WidthToy:
    runner = WidthToy(fn)
    runner.eos_ids = frozenset({EOS})
    return runner


def test_a_reply_cut_short_where_eos_is_far_down_is_suspect() -> None:
    # The plain row is a near-tie between 3 and 4; the arm's reply ends there, but its EOS is
    # 10 logits down on both paths: no rounding explains the ending.
    plain, spec = [2, 3, 4, 0, 3], [2, 3, 4, 0]
    margins = replay_margins(_eos_toy(eos_far_model), PROMPT, plain, spec, 4)
    assert margins.token_b == -1 and margins.a.margin == pytest.approx(0.01)
    assert margins.a.gap == pytest.approx(10.0) and margins.b.gap == pytest.approx(-9.99)
    assert classify(margins) == "suspect"


def test_a_reply_that_ends_on_a_near_tie_eos_is_a_near_tie() -> None:
    plain, spec = [2, 3, 4, 0, 3], [2, 3, 4, 0]
    margins = replay_margins(_eos_toy(eos_tie_model), PROMPT, plain, spec, 4)
    assert margins.a.gap == pytest.approx(0.01) and margins.b.gap == pytest.approx(0.01)
    assert classify(margins) == "near-tie"
    # Plain is the path that ended: the same, seen from the other side.
    margins = replay_margins(_eos_toy(eos_tie_model), PROMPT, spec, plain, 4, width_a=8,
                             width_b=1)
    assert (margins.token_a, margins.token_b) == (-1, 3) and classify(margins) == "near-tie"


@pytest.fixture(scope="module")
def torch_runner():
    from specfleet.engine.runners.torch import TorchRunner
    from specfleet.models.bundled import fetch_bundled
    from specfleet.models.registry import resolve_model

    fetch_bundled()
    return TorchRunner.load(resolve_model("smollm2-135m", "torch").path, "cpu")


@pytest.mark.slow
@pytest.mark.torch
def test_real_model_replay_of_a_forced_flip_is_suspect(torch_runner) -> None:
    from specfleet.engine.loop import generate

    prompt = torch_runner.encode_prompt("Write one sentence about the sea.")
    plain = [int(t) for t in generate(torch_runner, prompt, max_tokens=4).tokens]
    row = 3
    runner_up = top2(logits_at(torch_runner, prompt, plain, row))[1][0]
    forced = plain[:row] + [runner_up]
    data = replay_divergence(torch_runner, prompt, plain, forced, row, width_b=3)
    a, b = data["margins"]["a"], data["margins"]["b"]
    assert a["top2"][0][0] == plain[row] and a["top2"][1][0] == runner_up
    # fp32 on CPU: a width-3 verify row matches the one-token step to rounding
    assert b["top2"][0][0] == plain[row] and b["gap"] == pytest.approx(-a["gap"], abs=1e-3)
    assert data["text_a"] == torch_runner.decode([plain[row]])
    expected = "near-tie" if a["gap"] < NEAR_TIE_LOGIT_MARGIN else "suspect"
    assert data["margins"]["b"]["width"] == 3
    assert classify(margins_from_dict(data["margins"])) == expected
