"""The round loop on exact toy models (spec 2, 4.4, 6.21-6.29, 6.38, 8)."""

from __future__ import annotations

from dataclasses import replace
from itertools import islice

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specfleet.engine.config import ConfigError, PromptLookupConfig
from specfleet.engine.lookup import find_draft
from specfleet.engine.loop import (
    generate,
    rounds,
    sequential_reference,
    unsupported_reason,
)
from specfleet.engine.runners.base import CacheRollbackError, UnsupportedModelError
from specfleet.engine.runners.toy import (
    ConstantModel,
    InductionModel,
    ModelOwnedStateModel,
    RecurrentInductionModel,
    ScriptModel,
    ToyRunner,
    UntrimmableModel,
    lcg_tokens,
)
from specfleet.engine.sampling import SamplerConfig
from specfleet.engine.stats import PromptLookupStats
from specfleet.settings import FORCE_SYNC

GREEDY = SamplerConfig()
PENALTY = SamplerConfig(repetition_penalty=1.3, repetition_last_n=3)


def cfg(ngram_max, ngram_min, max_draft, policy="graded", adaptive=True):
    return PromptLookupConfig(ngram_max, ngram_min, max_draft, adaptive, policy)


def check_rounds(generation, prompt_len: int, max_tokens: int) -> None:
    """Invariants after every round: cache bookkeeping, budget bounds, counters."""
    stats, trace = generation.stats, generation.trace
    for t in trace:
        assert t.cache_len == t.context_len - (0 if t.in_flight else 1), t
        remaining = max_tokens - (t.context_len - t.emitted - prompt_len)
        assert 0 <= t.budget <= max(remaining - 1, 0), t
        assert t.accepted <= t.proposed <= t.budget, t
        assert t.emitted <= t.accepted + 1, t
        if t.kind == "verify" and t.emitted == t.accepted + 1:
            assert t.context_len - prompt_len <= max_tokens
    assert stats.rounds == sum(t.kind != "drain" for t in trace)
    assert stats.drafted_rounds == sum(t.kind == "verify" for t in trace)
    assert stats.proposed == sum(t.proposed for t in trace)
    assert stats.accepted == sum(t.accepted for t in trace)
    paused = sum(t.kind in ("sync", "pipelined") and t.budget == 0 for t in trace)
    if trace and trace[0].policy is not None:
        assert stats.paused_rounds == paused
    else:
        assert stats.paused_rounds == 0
    emitted = sum(t.emitted for t in trace)
    assert len(generation.tokens) == emitted + (1 if generation.tokens else 0)


# --- 6.21, 6.22: loop guard and max_tokens --------------------------------------------


@pytest.mark.parametrize("policy", ["graded", "gated"])
def test_loop_guard_stops_mid_block_where_plain_decoding_stops(policy):
    """6.21 loop_guard_stops_mid_block_where_plain_decoding_stops."""
    prompt = [1, 2, 3, 3]
    plain = generate(ConstantModel(), prompt, max_tokens=64, loop_guard=(1, 1, 8))
    assert plain.tokens == [3] * 8 and plain.stop_reason == "loop_guard"
    lookup = generate(
        ConstantModel(), prompt, max_tokens=64, lookup=PromptLookupConfig(policy=policy),
        loop_guard=(1, 1, 8), trace=True,
    )
    assert lookup.tokens == [3] * 8 and lookup.stop_reason == "loop_guard"
    assert lookup.stats.accepted > 0
    assert lookup.trace[-1].kind == "verify" and lookup.trace[-1].accepted < lookup.trace[-1].proposed


def test_without_the_loop_guard_lookup_runs_to_max_tokens():
    """6.22 without_the_loop_guard_lookup_runs_to_max_tokens."""
    result = generate(ConstantModel(), [1, 2, 3, 3], max_tokens=64, lookup=PromptLookupConfig())
    assert result.tokens == [3] * 64 and result.stop_reason == "max_tokens"


def test_loop_guard_ignores_the_prompt():
    result = generate(ConstantModel(), [3] * 20, max_tokens=64, loop_guard=(1, 1, 8))
    assert len(result.tokens) == 8


# --- 6.24, 6.25: the rollback parity matrix -------------------------------------------

MATRIX_CONFIGS = [
    cfg(3, 2, 7), cfg(3, 1, 7), cfg(4, 2, 3), cfg(6, 6, 7), cfg(3, 2, 7, adaptive=False),
]


def assert_both_regimes(totals: dict[bool, PromptLookupStats], policy: str) -> None:
    for earliest, stats in totals.items():
        assert stats.accepted > 0 and stats.proposed > stats.accepted, earliest
        if earliest:
            assert stats.paused_rounds > 0
        if policy == "gated":
            assert stats.shadow_confirmations >= 1
        else:
            assert stats.shadow_confirmations == 0


def run_matrix(policy: str, sampler: SamplerConfig) -> None:
    totals = {}
    for earliest in (False, True):
        total = PromptLookupStats()
        for seed in range(1, 7):
            prompt = lcg_tokens(seed, 48, 6)
            reference = sequential_reference(InductionModel(earliest=earliest), prompt, 96, sampler)
            plain = generate(InductionModel(earliest=earliest), prompt, max_tokens=96, sampler=sampler)
            assert plain.tokens == reference, (earliest, seed)
            for config in MATRIX_CONFIGS:
                result = generate(
                    InductionModel(earliest=earliest), prompt, max_tokens=96,
                    lookup=replace(config, policy=policy), sampler=sampler, trace=True,
                )
                assert result.tokens == reference, (earliest, seed, config)
                check_rounds(result, 48, 96)
                for name in ("proposed", "accepted", "paused_rounds", "shadow_confirmations"):
                    setattr(total, name, getattr(total, name) + getattr(result.stats, name))
        totals[earliest] = total
    assert_both_regimes(totals, policy)


@pytest.mark.parametrize("policy", ["graded", "gated"])
def test_rollback_keeps_a_cache_dependent_target_identical_to_plain_decoding(policy):
    """6.24 rollback_keeps_a_cache_dependent_target_identical_to_plain_decoding."""
    run_matrix(policy, GREEDY)


@pytest.mark.parametrize("policy", ["graded", "gated"])
def test_rollback_matches_plain_decoding_under_a_repetition_penalty(policy):
    """6.25 rollback_matches_plain_decoding_under_a_repetition_penalty."""
    run_matrix(policy, PENALTY)


# --- 6.26, 6.27: refused models -------------------------------------------------------


def test_model_owned_sequence_state_is_refused_even_when_other_flags_allow_it():
    """6.26 model_owned_sequence_state_is_refused_even_when_other_flags_allow_it."""
    model = ModelOwnedStateModel()
    assert model.trimmable
    assert "internally" in unsupported_reason(model)
    with pytest.raises(UnsupportedModelError, match="internally"):
        generate(model, [1, 2], max_tokens=4, lookup=PromptLookupConfig())
    assert unsupported_reason(ConstantModel()) is None


def test_generate_refuses_a_model_without_external_caches():
    """6.27 generate_refuses_a_model_without_external_caches."""
    with pytest.raises(UnsupportedModelError, match="trimmable external KV caches"):
        generate(UntrimmableModel(), [1, 2], max_tokens=4, lookup=PromptLookupConfig())
    # Plain decoding never trims, so it still runs.
    assert generate(UntrimmableModel(), [1, 2], max_tokens=4).tokens == [3] * 4


# --- 6.38: the probe-alignment test, pipelined and synchronous -------------------------

PROBE_PROMPT = list(range(100, 120))
PROBE_REPLY = [300, 100, 101, 999, *range(102, 120)]


@pytest.mark.parametrize(
    "sampler, pipelined",
    [(GREEDY, True), (SamplerConfig(repetition_penalty=1.1, repetition_last_n=8), False)],
    ids=["pipelined", "synchronous"],
)
def test_gated_shadow_probe_confirms_exactly_the_resumed_copy(sampler, pipelined):
    """6.38 gated_shadow_probe_confirms_exactly_the_resumed_copy (spec 4.4)."""
    model = ScriptModel(PROBE_PROMPT + PROBE_REPLY)
    result = generate(
        model, PROBE_PROMPT, max_tokens=len(PROBE_REPLY), lookup=cfg(3, 2, 7, "gated"),
        sampler=sampler, trace=True,
    )
    assert result.tokens == PROBE_REPLY
    assert result.stats.shadow_confirmations == 1
    assert result.stats.drafted_rounds >= 3 and result.stats.accepted >= 10
    kinds = [t.kind for t in result.trace]
    assert ("pipelined" in kinds) == pipelined
    # A paused Gated loop pipelines at once (spec 4.2), with no two synchronous rounds.
    assert kinds[3] == ("pipelined" if pipelined else "sync")
    assert kinds[:3] == ["sync", "sync", "verify"]  # 300->100, 100->101, narrow [102,103]
    assert result.trace[2].proposed == 2 and result.trace[2].accepted == 0
    check_rounds(result, len(PROBE_PROMPT), len(PROBE_REPLY))


def test_graded_never_probes_on_the_probe_script():
    model = ScriptModel(PROBE_PROMPT + PROBE_REPLY)
    result = generate(model, PROBE_PROMPT, max_tokens=len(PROBE_REPLY), lookup=cfg(3, 2, 7))
    assert result.tokens == PROBE_REPLY and result.stats.shadow_confirmations == 0


# --- pipelining (spec 2.8, 10) ---------------------------------------------------------


class EosScriptModel(ScriptModel):
    """A script model whose `eos` token ends the reply."""

    def __init__(self, script, eos):
        super().__init__(script)
        self.eos_ids = frozenset({eos})


def test_plain_decoding_pipelines_from_the_first_decode_round():
    """Spec 10: lookup off pipelines at once and counts no paused rounds."""
    model = ConstantModel()
    result = generate(model, [1, 2], max_tokens=6, trace=True)
    assert result.tokens == [3] * 6
    assert [t.kind for t in result.trace] == ["pipelined"] * 5 + ["drain"]
    assert result.stats == PromptLookupStats(rounds=5)
    assert model.forward_widths == [2, 1, 1, 1, 1, 1]
    assert model.host_reads == 6  # one read per token, none wasted
    check_rounds(result, 2, 6)


def test_force_sync_environment_variable_disables_pipelining(monkeypatch):
    monkeypatch.setenv(FORCE_SYNC.name, "")
    result = generate(ConstantModel(), [1, 2], max_tokens=6, trace=True)
    assert [t.kind for t in result.trace] == ["sync"] * 5
    assert result.tokens == [3] * 6


def test_host_row_samplers_never_pipeline():
    for sampler in (PENALTY, SamplerConfig(token_bias={3: 0.5}), SamplerConfig(temperature=0.5)):
        result = generate(ConstantModel(), [1, 2], max_tokens=5, sampler=sampler, trace=True)
        assert {t.kind for t in result.trace} == {"sync"}
    with pytest.raises(ValueError, match="pipeline=True"):
        generate(ConstantModel(), [1, 2], max_tokens=5, sampler=PENALTY, pipeline=True)


def test_lookup_pipelines_on_the_third_empty_round_and_drops_a_draft_found_in_flight():
    """Spec 2.8: start on plain_streak > 2; a proposal found in flight drains, then verifies."""
    prompt = list(range(100, 120))
    reply = [500, 501, 502, 503, 100, 101, *range(102, 115)]
    model = ScriptModel(prompt + reply)
    result = generate(model, prompt, max_tokens=len(reply), lookup=cfg(3, 2, 7), trace=True)
    assert result.tokens == reply
    kinds = [t.kind for t in result.trace]
    assert kinds[:8] == ["sync", "sync", "pipelined", "pipelined", "pipelined", "pipelined",
                         "drain", "verify"]
    # [100, 101] matched while 102 was in flight: nothing wider than 1 ran before the drain.
    assert max(model.forward_widths[1:7]) == 1
    assert result.trace[6].emitted == 1 and result.trace[7].proposed == 7
    check_rounds(result, len(prompt), len(reply))


@pytest.mark.parametrize("policy", ["graded", "gated"])
def test_a_spec_policy_drafts_the_lookup_cut_to_the_budget_exactly(policy):
    """Spec 2.4 (c): every verify proposes find_draft(context)[:budget], no fewer."""
    prompt = lcg_tokens(7, 40, 6)
    config = PromptLookupConfig(policy=policy)
    result = generate(InductionModel(), prompt, max_tokens=64, lookup=config, trace=True)
    emitted, verifies = 1, 0  # the prefill's token
    for t in result.trace:
        if t.kind == "verify":
            context = [*prompt, *result.tokens[:emitted]]
            assert t.proposed == len(find_draft(context, config)[: t.budget])
            verifies += 1
        emitted += t.emitted
    assert verifies >= 3


def test_synchronous_greedy_rounds_read_the_host_once_per_forward():
    """One host read per verify (batched argmax)."""
    model = InductionModel()
    prompt = lcg_tokens(3, 48, 6)
    result = generate(model, prompt, max_tokens=60, lookup=cfg(3, 2, 7), pipeline=False)
    assert result.stats.drafted_rounds > 0
    assert model.host_reads == 1 + result.stats.rounds


# --- budget, EOS, cancel, timings, refusals ---------------------------------------------


def test_budget_is_capped_by_remaining_minus_one():
    """Spec 2.7, 8.6: a block plus its bonus never overshoots; no room counts as paused."""
    prompt = list(range(100, 130))
    reply = [200, *range(100, 130)]
    expected = {
        12: [("verify", 7, 7), ("sync", 0, 0)],
        13: [("verify", 7, 7), ("verify", 1, 1)],
        14: [("verify", 7, 7), ("verify", 2, 2)],
    }
    for max_tokens, last_rounds in expected.items():
        model = ScriptModel(prompt + reply)
        result = generate(model, prompt, max_tokens=max_tokens, lookup=cfg(3, 2, 7), trace=True)
        assert result.tokens == reply[:max_tokens]
        assert [(t.kind, t.budget, t.proposed) for t in result.trace[2:]] == last_rounds
        assert result.stats.paused_rounds == (1 if max_tokens == 12 else 0)
        assert model.cache_len() == len(prompt) + max_tokens - 1
        check_rounds(result, len(prompt), max_tokens)


def test_eos_is_never_emitted_from_prefill_in_flight_or_a_verify_row():
    assert generate(ConstantModel(token=7), [1], max_tokens=5).tokens == []
    assert generate(ConstantModel(token=7), [1], max_tokens=5).stop_reason == "eos"
    prompt = list(range(100, 120))
    model = EosScriptModel(prompt + [300, 100, 101, 102, 103, 7], eos=7)
    result = generate(model, prompt, max_tokens=20, lookup=cfg(3, 2, 7), trace=True)
    assert result.tokens == [300, 100, 101, 102, 103] and result.stop_reason == "eos"
    assert result.trace[-1].kind == "verify"
    plain_model = EosScriptModel([1, 2, 3, 4, 5, 7, 8], eos=7)
    plain = generate(plain_model, [1, 2], max_tokens=20)
    assert plain.tokens == [3, 4, 5] and plain.stop_reason == "eos"
    # The step submitted before the EOS was read is counted (spec 8.15).
    assert plain.stats.rounds == 4 and plain.stats.tokens_per_forward(3) < 1.0


def test_max_tokens_zero_and_one():
    assert generate(ConstantModel(), [1], max_tokens=0).tokens == []
    one = generate(ConstantModel(), [1], max_tokens=1, lookup=PromptLookupConfig())
    assert one.tokens == [3] and one.stats.rounds == 0 and one.stop_reason == "max_tokens"


def test_should_stop_cancels_between_rounds():
    calls = []

    def should_stop():
        calls.append(1)
        return len(calls) > 3

    result = generate(ConstantModel(), [1], max_tokens=50, should_stop=should_stop, pipeline=False)
    assert result.stop_reason == "cancelled" and len(result.tokens) == 4
    calls.clear()  # pipelined: the first round only submits, so one token fewer
    result = generate(ConstantModel(), [1], max_tokens=50, should_stop=should_stop)
    assert result.stop_reason == "cancelled" and len(result.tokens) == 3


def test_rounds_yields_the_prefill_then_the_rounds_generate_traces():
    prompt, config = lcg_tokens(3, 48, 6), cfg(3, 2, 7)
    steps = list(rounds(InductionModel(), prompt, max_tokens=40, lookup=config))
    result = generate(InductionModel(), prompt, max_tokens=40, lookup=config, trace=True)
    shapes = [(s.kind, s.budget, s.proposed, s.accepted, s.emitted) for s in steps]
    assert shapes[0] == ("prefill", 0, 0, 0, 1)
    assert shapes[1:] == [(t.kind, t.budget, t.proposed, t.accepted, t.emitted)
                          for t in result.trace]
    assert [s.stop_reason for s in steps] == [None] * (len(steps) - 1) + ["max_tokens"]
    assert steps[-1].tokens == result.tokens and steps[-1].stats == result.stats


def test_rounds_checks_at_the_call_runs_on_demand_and_ends_where_the_consumer_stops():
    with pytest.raises(ValueError, match="empty"):
        rounds(ConstantModel(), [], max_tokens=4)
    model = ConstantModel()
    steps = rounds(model, [1], max_tokens=50, pipeline=False)
    assert model.forward_widths == []  # nothing runs before the first step is asked for
    *_, third = islice(steps, 3)
    assert third.tokens == [3, 3, 3] and third.stop_reason is None
    assert model.forward_widths == [1, 1, 1]
    [only] = rounds(ConstantModel(token=7, eos=7), [1], max_tokens=5)
    assert only.kind == "prefill" and only.tokens == [] and only.stop_reason == "eos"


def test_timings_split_prefill_and_decode():
    timings = generate(InductionModel(), lcg_tokens(1, 48, 6), max_tokens=40).timings
    assert timings.prefill_s > 0 and timings.decode_s > 0
    assert timings.total_s == pytest.approx(timings.prefill_s + timings.decode_s)


def test_requests_are_validated():
    with pytest.raises(ValueError, match="empty"):
        generate(ConstantModel(), [], max_tokens=4)
    with pytest.raises(ConfigError, match="max-draft"):
        generate(ConstantModel(), [1], max_tokens=4, lookup=cfg(3, 2, 0))
    with pytest.raises(ConfigError, match="loop-guard"):
        generate(ConstantModel(), [1], max_tokens=4, loop_guard=(0, 1, 8))
    with pytest.raises(ConfigError, match="temp"):
        generate(ConstantModel(), [1], max_tokens=4, sampler=SamplerConfig(temperature=-1))
    with pytest.raises(ValueError, match="max_tokens"):
        generate(ConstantModel(), [1], max_tokens=-1)


@pytest.mark.parametrize("policy", ["graded", "gated"])
def test_seeded_sampling_equals_the_sequential_reference_draw_for_draw(policy):
    """Sampler-match: one draw per reached row, so a seeded reply equals the reference."""
    sampler = SamplerConfig(temperature=0.9, top_p=0.95, seed=5)
    for seed in (1, 2, 3):
        prompt = lcg_tokens(seed, 48, 6)
        reference = sequential_reference(InductionModel(), prompt, 80, sampler)
        result = generate(
            InductionModel(), prompt, max_tokens=80, lookup=cfg(3, 2, 7, policy), sampler=sampler
        )
        assert result.tokens == reference
        assert result.stats.accepted > 0


def test_summary_line_after_a_generation():
    result = generate(ConstantModel(), [1, 2, 3, 3], max_tokens=64, lookup=PromptLookupConfig())
    line = result.stats.summary_line(len(result.tokens))
    assert line.startswith("[Prompt lookup] rounds=") and "tokens_per_forward=" in line
    assert np.isclose(result.stats.tokens_per_forward(64), 63 / result.stats.rounds)


# --- properties ------------------------------------------------------------------------

class TableModel(ToyRunner):
    """Next token from a random table over the last two cached tokens (winner 8, next 7)."""

    def __init__(self, table: list[int], vocab: int) -> None:
        super().__init__(vocab)
        self.table = table

    def row(self, cache):
        previous = cache[-2] if len(cache) > 1 else 0
        winner = self.table[previous * self.vocab_size + cache[-1]]
        row = np.zeros(self.vocab_size)
        row[winner] = 8.0
        row[(winner + 1) % self.vocab_size] = 7.0
        return row


@st.composite
def toy_models(draw):
    kind = draw(st.sampled_from(["latest", "earliest", "table", "script"]))
    if kind in ("latest", "earliest"):
        return lambda: InductionModel(earliest=kind == "earliest")
    vocab = draw(st.integers(3, 6))
    if kind == "table":
        table = draw(st.lists(st.integers(0, vocab - 1), min_size=vocab**2, max_size=vocab**2))
        return lambda: TableModel(table, vocab)
    script = draw(st.lists(st.integers(0, vocab - 1), min_size=130, max_size=130))
    return lambda: ScriptModel(script, vocab=vocab)


lookup_configs = st.builds(
    lambda ngram_min, extra, max_draft, adaptive, policy: PromptLookupConfig(
        ngram_min + extra, ngram_min, max_draft, adaptive, policy
    ),
    st.integers(1, 3), st.integers(0, 3), st.integers(1, 8), st.booleans(),
    st.sampled_from(["graded", "gated"]),
)
samplers = st.sampled_from([
    GREEDY, PENALTY, SamplerConfig(repetition_penalty=0.8, repetition_last_n=5),
    SamplerConfig(token_bias={1: 0.5}), SamplerConfig(temperature=0.8, seed=3),
    SamplerConfig(temperature=1.2, top_k=3, top_p=0.9, seed=4),
])


@settings(max_examples=500, deadline=None, derandomize=True)
@given(
    make_model=toy_models(),
    prompt=st.lists(st.integers(0, 2), min_size=1, max_size=40),
    max_tokens=st.integers(0, 70),
    lookup=st.none() | lookup_configs,
    sampler=samplers,
    pipeline=st.sampled_from([None, False]),
    loop_guard=st.sampled_from([None, (1, 3, 4)]),
)
def test_loop_equals_the_sequential_reference_and_keeps_its_invariants(
    make_model, prompt, max_tokens, lookup, sampler, pipeline, loop_guard
):
    """Property: any toy model, config, policy, sampler -> the reference reply, and the
    per-round invariants (cache bookkeeping, budget bounds, counters) hold."""
    reference = sequential_reference(make_model(), prompt, max_tokens, sampler, loop_guard)
    model = make_model()
    result = generate(
        model, prompt, max_tokens=max_tokens, lookup=lookup, sampler=sampler,
        pipeline=pipeline, loop_guard=loop_guard, trace=True,
    )
    assert result.tokens == reference
    check_rounds(result, len(prompt), max_tokens)
    assert len(model.forward_widths) == 1 + result.stats.rounds
    if lookup is None:
        assert result.stats.drafted_rounds == 0 and result.stats.paused_rounds == 0


# --- rollback seam: recurrent state restored and re-fed -------------------------------


@pytest.mark.parametrize("policy", ["graded", "gated", "calibrated", "fixed"])
def test_a_recurrent_model_rolls_back_by_refeeding_and_equals_plain_decoding(policy):
    """A model whose state cannot drop a tail (a hybrid's linear attention): every rejected
    draft restores the checkpoint and re-feeds the kept tokens; greedy ids equal plain's."""
    adaptive = policy != "fixed"
    config = PromptLookupConfig(
        3, 2, 7, adaptive, "graded" if policy == "fixed" else policy,
        costs=(1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7) if policy == "calibrated" else (),
    )
    refed = 0
    for earliest, seed in [(e, seed) for e in (False, True) for seed in range(1, 7)]:
        prompt = lcg_tokens(seed, 48, 6)
        plain = generate(RecurrentInductionModel(earliest=earliest), prompt, max_tokens=96)
        assert plain.tokens == sequential_reference(
            InductionModel(earliest=earliest), prompt, 96, GREEDY)
        result = generate(RecurrentInductionModel(earliest=earliest), prompt, max_tokens=96,
                          lookup=config, trace=True)
        assert result.tokens == plain.tokens, (earliest, seed)
        check_rounds(result, 48, 96)
        assert result.stats.refed_tokens == sum(t.refed for t in result.trace)
        assert all(t.refed == t.accepted + 1 for t in result.trace
                   if t.kind == "verify" and t.accepted < t.proposed and t.refed)
        refed += result.stats.refed_tokens
    # calibrated prices each re-feed and on this table drafts only what lands.
    assert refed > 0 or policy == "calibrated"


class _SkippedRestore(RecurrentInductionModel):
    """A rollback that forgets the recurrent layer: trims the cache, keeps the state."""

    def rollback(self, n: int) -> int:
        if n:
            del self.cache[-n:]
            self.last_width -= n
        return 0


class _SkippedTrim(InductionModel):
    """A rollback that trims nothing (an MLX rotating cache past its window did this)."""

    def rollback(self, n: int) -> int:
        return 0


@pytest.mark.parametrize("runner", [_SkippedRestore, _SkippedTrim], ids=lambda r: r.__name__)
def test_a_rollback_that_leaves_rejected_rows_fails_the_run_in_one_line(runner):
    """Never silently wrong: a runner whose rollback leaves a layer holding rejected rows is
    caught at that round, not left to corrupt the reply."""
    prompt = lcg_tokens(3, 48, 6)
    if runner is _SkippedTrim:
        with pytest.raises(CacheRollbackError, match="hold .* positions, expected"):
            generate(runner(), prompt, max_tokens=96, lookup=cfg(3, 2, 7))
        return
    result = generate(runner(), prompt, max_tokens=96, lookup=cfg(3, 2, 7))
    # The toy's own state check is skipped by the mutant; the reply then differs from plain,
    # which is exactly what the runners' per-layer checks exist to prevent.
    assert result.tokens != generate(InductionModel(), prompt, max_tokens=96).tokens


def test_calibrated_prices_a_refeed_into_its_draft_length():
    from specfleet.engine.calibrated import best_draft

    costs = (1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.35)
    assert best_draft(0.5, costs, 7, refeeds=False) > best_draft(0.5, costs, 7, refeeds=True)
    assert best_draft(0.99, costs, 7, refeeds=True) == 7  # nearly sure: re-feeds are rare
