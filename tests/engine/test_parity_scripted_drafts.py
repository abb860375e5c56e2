"""Greedy parity through the real round loop on every tiny family, with scripted drafts.

A random-weight model rarely repeats itself, so the n-gram index alone seldom drafts a long
run that lands, a rejection right after the prefill or EOS inside a block. Here the index is
replaced by a scripted drafter that reads plain greedy decoding's own reply: its proposals are
right for as many tokens as the script says, then wrong. Whatever a drafter proposes, the
reply must equal plain greedy decoding's token for token, so each family is driven through:
a rejection right after the prefill and a second one at once, a block wider than the sliding
window (8) that lands all but its last two proposals, empty rounds (pipelined where asked),
a draft found while a step is in flight, a block that lands one proposal and rolls back
twenty, and a last block that lands whole up to `max_tokens`; and a reply whose EOS falls
inside a verify block. Both engines, pipelined and synchronous; the trace proves each event
happened.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from specfleet.engine import loop
from specfleet.engine.config import PromptLookupConfig
from specfleet.engine.loop import Generation, generate
from specfleet.engine.runners.toy import lcg_tokens

VOCAB = 96  # both engines' tiny models
WINDOW = 8  # both engines' tiny sliding windows
MAX_TOKENS = 45
TRUTH_TOKENS = 52
FIXED_32 = PromptLookupConfig(adaptive=False, max_draft=32)
ALL_RIGHT = 10_000
Script = Callable[[int], tuple[int, int]]  # tokens generated -> (right, wrong) proposals


def hunt_script(generated: int) -> tuple[int, int]:
    """Proposals by how many tokens the reply holds: right ones first, then wrong ones."""
    if generated < 3:
        return 0, 4  # rejected right after the prefill, and again
    if generated < 15:
        return 14 - generated, 2  # from 3: 11 land in a block of width 14 > WINDOW
    if generated < 19:
        return 0, 0  # empty rounds: two synchronous, then pipelined where allowed
    if generated < 24:
        return 1, 30  # found in flight (dropped), then 1 lands and ~20 roll back
    if generated < 27:
        return 0, 0
    return ALL_RIGHT, 0  # lands whole up to max_tokens


def all_right(generated: int) -> tuple[int, int]:
    return ALL_RIGHT, 0


class ScriptedIndex:
    """Stands in for `NgramIndex` in the loop: proposes `truth` after the context's reply
    (the prompt's `prompt_len` tokens skipped), right for the script's count, then wrong."""

    truth: Sequence[int] = ()
    prompt_len = 0
    script: Script = hunt_script

    def __init__(self, ngram_min: int, ngram_max: int) -> None:
        pass

    def extend(self, context: Sequence[int]) -> None:
        pass

    def find(self, context: Sequence[int], max_draft: int, cyclic: bool = False) -> list[int]:
        return self.match(context, max_draft, cyclic)[0]

    def match(self, context: Sequence[int], max_draft: int,
              cyclic: bool = False) -> tuple[list[int], int]:
        generated = len(context) - self.prompt_len
        right, wrong = type(self).script(generated)
        future = list(self.truth[generated:])
        proposal = future[:right]
        for i in range(wrong):  # the first wrong one differs from the reply's own token
            slot = len(proposal)
            own = future[slot] if slot < len(future) else 0
            proposal.append((own + 1 + i) % VOCAB)
        return proposal[:max_draft], (2 if proposal else 0)


class WithEos:
    """A runner whose EOS set is `eos_ids` (the tiny models have none)."""

    def __init__(self, runner: Any, eos_ids: frozenset[int]) -> None:
        self._runner = runner
        self.eos_ids = eos_ids

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner, name)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _scripted(monkeypatch, runner, prompt: list[int], truth: list[int], script: Script,
              pipeline: bool, max_tokens: int = MAX_TOKENS) -> Generation:
    drafter = type("Drafter", (ScriptedIndex,), {
        "truth": truth, "prompt_len": len(prompt), "script": staticmethod(script)})
    with monkeypatch.context() as patch:
        patch.setattr(loop, "NgramIndex", drafter)
        return generate(runner, prompt, max_tokens=max_tokens, lookup=FIXED_32,
                        pipeline=pipeline, trace=True)


def _fresh_token_at(truth: list[int], first: int, last: int) -> int | None:
    """The first index in first..last whose token the reply has not emitted before."""
    return next((k for k in range(first, last + 1) if truth[k] not in truth[:k]), None)


def _assert_hunt(monkeypatch, name: str, runner) -> None:
    prompt = lcg_tokens(5, 12, VOCAB)
    truth = generate(runner, prompt, max_tokens=TRUTH_TOKENS, pipeline=False).tokens
    assert len(truth) == TRUTH_TOKENS
    for pipeline in (False, True):
        got = _scripted(monkeypatch, runner, prompt, truth, hunt_script, pipeline)
        case = f"{name} pipeline={pipeline}"
        assert got.tokens == truth[:MAX_TOKENS], f"{case}: diverged from plain greedy"
        assert got.stop_reason == "max_tokens", case
        verify = [t for t in got.trace if t.kind == "verify"]
        first, second = got.trace[0], got.trace[1]
        assert first.kind == second.kind == "verify" and first.accepted == second.accepted == 0, case
        assert any(t.width > WINDOW and 0 < t.accepted < t.proposed for t in verify), case
        assert any(t.accepted == 1 and t.proposed > 2 * WINDOW for t in verify), case
        last = got.trace[-1]
        assert last.kind == "verify" and last.accepted == last.proposed > WINDOW, case
        kinds = {t.kind for t in got.trace}
        assert ("pipelined" in kinds) == pipeline and ("drain" in kinds) == pipeline, case
    _assert_eos_inside_a_block(monkeypatch, name, runner)


def _assert_eos_inside_a_block(monkeypatch, name: str, runner) -> None:
    """EOS set to a reply token no earlier one repeats: plain stops there; a block drafted
    from the first round on reaches it at one of its rows."""
    for seed in (5, 6, 7, 8):
        prompt = lcg_tokens(seed, 12, VOCAB)
        truth = generate(runner, prompt, max_tokens=TRUTH_TOKENS, pipeline=False).tokens
        at = _fresh_token_at(truth, 3, 25)
        if at is not None:
            break
    else:
        pytest.fail(f"{name}: no reply of seeds 5-8 emits a new token at 3-25 to end on")
    eos = WithEos(runner, frozenset({truth[at]}))
    plain = generate(eos, prompt, max_tokens=MAX_TOKENS, pipeline=False)
    assert plain.tokens == truth[:at] and plain.stop_reason == "eos"
    # Every round drafts, so none pipelines: one run covers both settings.
    got = _scripted(monkeypatch, eos, prompt, truth, all_right, pipeline=True)
    case = f"{name} eos at {at}"
    assert got.tokens == plain.tokens and got.stop_reason == "eos", case
    last = got.trace[-1]
    assert last.kind == "verify" and last.emitted <= last.proposed, case  # before the bonus


# -- torch ---------------------------------------------------------------------------------
def _torch_families() -> list[str]:
    from specfleet.engine.runners.tiny_torch import TINY_FAMILIES

    return list(TINY_FAMILIES)


@pytest.mark.parametrize("name", _torch_families())
def test_torch_scripted_drafts_reply_as_plain_greedy(monkeypatch, name):
    from specfleet.engine.runners.tiny_torch import tiny_runner

    runner = tiny_runner(name)
    if runner.lookup_refusal is not None:  # recorded-only types before transformers 5.25
        pytest.skip(runner.lookup_refusal)
    _assert_hunt(monkeypatch, name, runner)


# -- mlx -----------------------------------------------------------------------------------
def _mlx_families() -> list[str]:
    try:
        from specfleet.engine.runners.tiny_mlx import TINY_FAMILIES
    except ImportError:  # the mlx engine is not installed
        return []
    return list(TINY_FAMILIES)


@pytest.mark.mlx
@pytest.mark.parametrize("name", _mlx_families())
def test_mlx_scripted_drafts_reply_as_plain_greedy(monkeypatch, name):
    from specfleet.engine.runners.tiny_mlx import tiny_runner

    runner = tiny_runner(name)
    assert runner.lookup_refusal is None
    _assert_hunt(monkeypatch, name, runner)
