"""The n-gram drafter (spec section 1) and the shadow probe (spec section 4.1)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specfleet.engine.config import PromptLookupConfig
from specfleet.engine.governor import SHADOW_CONFIRM


def find_draft(context: Sequence[int], config: PromptLookupConfig) -> list[int]:
    """Reference scan: the tokens after the latest earlier occurrence of the longest suffix.

    Longest suffix first, most recent occurrence first; a candidate must be followed by at
    least one token, and the proposal never runs past the end of the context.
    """
    length = len(context)
    if config.max_draft == 0 or config.ngram_min == 0:
        return []
    top = min(config.ngram_max, max(length - 1, 0))
    for n in range(top, config.ngram_min - 1, -1):
        pattern = list(context[length - n :])
        for start in range(length - n - 1, -1, -1):
            if list(context[start : start + n]) == pattern:
                end = min(start + n + config.max_draft, length)
                return list(context[start + n : end])
    return []


class NgramIndex:
    """Incremental n-gram index equal to `find_draft` at every context length.

    One dict per length in `ngram_min..ngram_max`: n-gram -> start of its latest occurrence
    that already has a follower. `extend` must see contexts that extend the previous one.
    """

    def __init__(self, ngram_min: int, ngram_max: int) -> None:
        self.ngram_min = ngram_min
        self.ngram_max = ngram_max
        self._maps: dict[int, dict[tuple[int, ...], int]] = {
            n: {} for n in range(ngram_min, ngram_max + 1)
        }
        self.indexed_len = 0

    def extend(self, context: Sequence[int]) -> None:
        """Index every n-gram that gained a follower since the last call."""
        length = len(context)
        for end in range(max(self.indexed_len - 1, 0), length - 1):
            for n in range(self.ngram_min, self.ngram_max + 1):
                if end + 1 < n:
                    break
                start = end - n + 1
                self._maps[n][tuple(context[start : end + 1])] = start
        self.indexed_len = max(self.indexed_len, length)

    def find(self, context: Sequence[int], max_draft: int, cyclic: bool = False) -> list[int]:
        """Look up the context's suffix, longest first; at most `max_draft` tokens."""
        return self.match(context, max_draft, cyclic)[0]

    def match(self, context: Sequence[int], max_draft: int,
              cyclic: bool = False) -> tuple[list[int], int]:
        """`find`'s proposal and the length of the suffix that matched (0: none did).

        With `cyclic`, a proposal cut short by the context's end of a context that ends in
        two turns of it is repeated up to `max_draft` (`cycle_out`); the spec's drafter never
        is (spec 1.3)."""
        length = len(context)
        top = min(self.ngram_max, max(length - 1, 0))
        for n in range(top, self.ngram_min - 1, -1):
            start = self._maps[n].get(tuple(context[length - n :]))
            if start is not None:
                proposal = list(context[start + n : min(start + n + max_draft, length)])
                return (cycle_out(context, proposal, max_draft) if cyclic else proposal), n
        return [], 0


def cycle_out(context: Sequence[int], proposal: Sequence[int], max_draft: int) -> list[int]:
    """`proposal` continued as a cycle, up to `max_draft`, where the context's end cut it
    short and the context ends in two turns of it; else as it is.

    A proposal cut short is the context's last p tokens (the suffix matched p tokens before
    itself). One recurrence is common in any text; the same p tokens twice in a row just
    before the end are a reply caught in a loop, which greedy decoding of a small model often
    is, and were it to go on, the tokens after the proposal would be the proposal again. An
    earliest-match lookup such as transformers' reads that continuation from an old turn.
    """
    period, length = len(proposal), len(context)
    if not 0 < period < max_draft or length < 2 * period:
        return list(proposal)
    if list(context[length - 2 * period : length - period]) != list(proposal):
        return list(proposal)
    turns = -(-max_draft // period)
    return (list(proposal) * turns)[:max_draft]


@dataclass(frozen=True)
class ShadowProbe:
    """A paused Gated loop's unverified claim: `proposal[i]` lands at `context[start + i]`."""

    start: int
    proposal: tuple[int, ...]

    def settle(self, context: Sequence[int]) -> bool | None:
        """None while undecided, False at the first mismatch, True once two tokens came true."""
        for i, claimed in enumerate(self.proposal[:SHADOW_CONFIRM]):
            position = self.start + i
            if position >= len(context):
                return None
            if context[position] != claimed:
                return False
        return True
