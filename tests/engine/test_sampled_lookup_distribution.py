"""Prompt lookup under sampling keeps the target's own distribution (spec 2.9, sampler-match).

Seeded runs are checked draw for draw elsewhere (`test_loop.py`); here plain decoding and
prompt lookup run on disjoint seed sets, so agreement is a statement about distributions,
not about sharing one random stream: a lookup that accepted drafts more readily than the
model's own probabilities (the bias sampler-match exists to avoid) would fail the test.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np

from specfleet.engine.config import PromptLookupConfig
from specfleet.engine.loop import generate
from specfleet.engine.runners.toy import InductionModel
from specfleet.engine.sampling import SamplerConfig

PROMPT = [0, 1, 2, 3, 4, 5] * 4  # every suffix recurs: lookup drafts from the first round
FIRST_K = 3  # tokens per reply compared: the drafted block's first rows
SEEDS = 300
TEMPERATURE = 2.0  # spreads the induction model's 8/7 logits over both tokens (~0.6/0.36)
LOOSE_P = 0.001  # fixed seeds make every statistic deterministic; a loose level still
POWER_P = 1e-6  # what a real shift of the distribution scores
LOOKUP = PromptLookupConfig(3, 2, 7, True, "graded")


def _replies(seeds: Iterable[int], lookup: PromptLookupConfig | None,
             temperature: float = TEMPERATURE) -> tuple[list[tuple[int, ...]], int]:
    """The first FIRST_K tokens of each seeded reply, and the draft tokens accepted in all."""
    replies, accepted = [], 0
    for seed in seeds:
        result = generate(InductionModel(), PROMPT, max_tokens=FIRST_K, lookup=lookup,
                          sampler=SamplerConfig(temperature=temperature, seed=seed))
        replies.append(tuple(result.tokens))
        accepted += result.stats.accepted
    return replies, accepted


def _homogeneity_p(a: list[tuple[int, ...]], b: list[tuple[int, ...]]) -> float:
    """Chi-square test that two samples of replies share one distribution; replies seen
    fewer than 10 times in both samples together are pooled into one category."""
    counts = Counter(a), Counter(b)
    common = sorted(r for r in counts[0].keys() | counts[1].keys()
                    if counts[0][r] + counts[1][r] >= 10)
    table = np.array([[c[r] for r in common] + [n - sum(c[r] for r in common)]
                      for c, n in zip(counts, (len(a), len(b)), strict=True)])
    from scipy.stats import chi2_contingency  # 1.5 s to import: every xdist worker collects this

    return float(chi2_contingency(table[:, table.sum(axis=0) > 0]).pvalue)


def test_lookup_replies_follow_plain_decodings_distribution():
    plain, _ = _replies(range(SEEDS), None)
    lookup, accepted = _replies(range(10_000, 10_000 + SEEDS), LOOKUP)
    assert accepted > SEEDS // 4  # drafted rows were accepted, not only bonus tokens emitted
    assert len(set(plain)) > 4  # the replies vary: a distribution, not one reply
    assert _homogeneity_p(plain, lookup) > LOOSE_P


def test_the_homogeneity_test_sees_a_shift_of_this_size():
    # Its power: plain at a lower temperature is told apart from plain at TEMPERATURE.
    plain, _ = _replies(range(SEEDS), None)
    cooler, _ = _replies(range(10_000, 10_000 + SEEDS), None, temperature=1.0)
    assert _homogeneity_p(plain, cooler) < POWER_P


def test_lookups_first_token_follows_the_models_softmax():
    lookup, _ = _replies(range(20_000, 20_000 + SEEDS), LOOKUP)
    row = InductionModel().row(PROMPT)
    probs = np.exp(row / TEMPERATURE) / np.exp(row / TEMPERATURE).sum()
    likely = np.argsort(-probs)[:2]  # the winner and runner-up; the rest pooled
    observed = [sum(reply[0] == token for reply in lookup) for token in likely]
    observed.append(SEEDS - sum(observed))
    expected = [*(SEEDS * probs[likely]), SEEDS * (1 - probs[likely].sum())]
    from scipy.stats import chisquare

    assert chisquare(observed, expected).pvalue > LOOSE_P
