"""Deliberate mutations of the rules specfleet stands on, each of which the tests must kill.

Each mutation is a text replacement applied to a private copy of `specfleet/` and the tests
in a temporary directory (the shared checkout is never touched), then the mutation's tests
run there with `-x`. A mutation is "killed" when the tests fail. Two groups:

- `engine` (the default): the engine core (governors, lookup, loop, calibrated, oracle),
  every mutation against the engine tests; its record is engine-mutations.md.
- `rules`: the rules users decide on outside the engine (the verdict rule, greedy parity,
  the store and its journal, the runners' cache rollback, replay's pricing), each mutation
  against the few test files of its area; its record is rule-mutations.md.

A mutation that survives and changes no behaviour says why in `equivalent`; the record shows
it explained, not killed.

Usage: .venv/bin/python tools/mutations.py [--group engine|rules]
       [--out docs/benchmark_results/engine-mutations.md]
       [--match calibrated]   (only the mutations whose name contains the text)
       [--check]              (only check that every pattern occurs once, listing all that don't)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ENGINE_TESTS = [
    "tests/engine/test_lookup.py",
    "tests/engine/test_governor.py",
    "tests/engine/test_calibrated.py",
    "tests/engine/test_config.py",
    "tests/engine/test_stats.py",
    "tests/engine/test_sampling.py",
    "tests/engine/test_loop.py",
    "tests/engine/test_reference.py",
    "tests/engine/test_warmup.py",
    "tests/engine/runners/test_toy.py",
    "tests/engine/test_oracle.py",
]


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...] = ()  # the tests that must kill it (default: its group's)
    equivalent: str = ""  # why it changes no behaviour, where it survives for that reason


GOV = "specfleet/engine/governor.py"
LOOP = "specfleet/engine/loop.py"
LOOKUP = "specfleet/engine/lookup.py"
CAL = "specfleet/engine/calibrated.py"
ORACLE = "specfleet/engine/oracle.py"

ENGINE_MUTATIONS = [
    Mutation("probation ignored", GOV,
             "if self.probation or self.misses >= MISSES_BEFORE_COOLDOWN:",
             "if self.misses >= MISSES_BEFORE_COOLDOWN:"),
    Mutation("timed gated pause (resumes after 16 rounds)", GOV,
             "        if not self.drafting:\n            return 0\n",
             "        if not self.drafting:\n            self.misses += 1\n"
             "            if self.misses > 16:\n                self.drafting, self.misses = True, 0\n"
             "            return 0\n"),
    Mutation("one-token confirmation", LOOKUP,
             "enumerate(self.proposal[:SHADOW_CONFIRM])", "enumerate(self.proposal[:1])"),
    Mutation("probe start one early", LOOP,
             "ShadowProbe(start=len(context),", "ShadowProbe(start=len(context) - 1,"),
    Mutation("probe start one late", LOOP,
             "ShadowProbe(start=len(context),", "ShadowProbe(start=len(context) + 1,"),
    Mutation("probation lifted by one landed token", GOV,
             "if accepted >= min(GATED_NARROW_DRAFT, self.max_draft):", "if accepted > 0:"),
    Mutation("Python round in the Graded budget", GOV,
             "return math.floor(x + 0.5)", "return round(x)"),
    Mutation("no cache check after a rollback", LOOP,
             "    if expected is not None and runner.cache_len() != expected:",
             "    if False:"),
    Mutation("re-feeds not counted", LOOP,
             "    stats.refed_tokens += refed\n", ""),
    Mutation("calibrated ignores the re-feed price", CAL,
             "        if refeeds:\n            cost += expected_refeed_cost(alive[:k], costs)\n", ""),
    # The trims change only a partly landed draft (0 < accepted < k), as they always did.
    Mutation("trim one too many", LOOP,
             "_roll_back(runner, k - accepted,", "_roll_back(runner, k - accepted + (0 < accepted < k),"),
    Mutation("trim one too few", LOOP,
             "_roll_back(runner, k - accepted,", "_roll_back(runner, k - accepted - (accepted < k),"),
    Mutation("budget not capped by remaining-1", LOOP,
             "max(remaining - 1, 0))", "max(remaining, 0))"),
    Mutation("no shadow lookups", LOOP,
             "if shadow is None and governor.probes_while_paused():", "if False:"),
    Mutation("a full first Gated block", GOV,
             "        self.ema = GATED_START_EMA\n        self.misses = 0\n        self.drafting = True",
             "        self.ema = GATED_FULL_AT\n        self.misses = 0\n        self.drafting = True"),
    Mutation("pipeline on the second empty round", GOV,
             "PLAIN_ROUNDS_BEFORE_PIPELINE = 2", "PLAIN_ROUNDS_BEFORE_PIPELINE = 1"),
    Mutation("paused Gated loop waits before pipelining", LOOP,
             "    return governor.probes_while_paused()\n", "    return False\n"),
    Mutation("a draft found in flight keeps the pipeline", LOOP,
             "if not draft and remaining > 1:\n                in_flight = _submit_step",
             "if remaining > 1:\n                in_flight = _submit_step"),
    # Only the in-flight read emits without its EOS check (one `_emit` serves every path).
    Mutation("EOS emitted from an in-flight read", LOOP,
             "stop = _emit(runner.read_tokens(pending)[0], context, generated, ends)",
             "stop = _emit(runner.read_tokens(pending)[0], context, generated,"
             " _Ends(frozenset(), ends.max_tokens, ends.guard))"),
    # A guard firing on a verify row that matched its proposal is ignored: the block runs on.
    Mutation("loop guard not checked mid-block", LOOP,
             "        stop = _emit(token, context, generated, ends)\n",
             "        stop = _emit(token, context, generated, ends)\n"
             "        if stop == \"loop_guard\" and i < k and token == draft[i]:\n"
             "            stop = None\n"),
    Mutation("Graded cooldown never doubles", GOV,
             "min(2 * self.next_cooldown, MAX_COOLDOWN)", "min(self.next_cooldown, MAX_COOLDOWN)"),
    Mutation("index keeps the earliest occurrence", LOOKUP,
             "self._maps[n][tuple(context[start : end + 1])] = start",
             "self._maps[n].setdefault(tuple(context[start : end + 1]), start)"),
    Mutation("calibrated drafts where no length beats a plain step", CAL,
             "PLAIN_STEP_SAVING = 0.0", "PLAIN_STEP_SAVING = -1e9"),
    Mutation("calibrated takes the best score over a shorter near-tie", CAL,
             "NEAR_TIE = 0.05", "NEAR_TIE = 0.0"),
    Mutation("calibrated reads the cost one width narrow", CAL,
             "cost = width_cost(costs, k + 1)", "cost = width_cost(costs, k)"),
    # E[landed | k] gains S(0) = 1: the bonus row counted again, on top of the saving's 1.
    Mutation("calibrated counts the bonus row as a landed proposal", CAL,
             "best_score, landed = PLAIN_STEP_SAVING, 0.0",
             "best_score, landed = PLAIN_STEP_SAVING, 1.0"),
    Mutation("calibrated counts a whole landed draft as a miss", CAL,
             "rejected = accepted < proposed", "rejected = True"),
    Mutation("calibrated evidence never fades", CAL, "DECAY = 0.8", "DECAY = 1.0"),
    # A confirmed probe no longer counts as landed proposals; what it carries is the run.
    Mutation("calibrated ignores confirmed probes", CAL,
             "self.run = SHADOW_CONFIRM", "self.run = 0"),
    Mutation("calibrated never probes while paused", CAL,
             "    def probes_while_paused(self) -> bool:\n        return self.paused",
             "    def probes_while_paused(self) -> bool:\n        return False"),
    Mutation("calibrated ignores the match depth", CAL,
             "return min(depth.bit_length(), BUCKETS - 1)", "return 0"),
    Mutation("calibrated survival ignores the current run", CAL,
             "for depth in range(run, run + k):", "for depth in range(k):"),
    Mutation("calibrated keeps the match after a rejection", CAL,
             "self.run = 0 if rejected else self.run + accepted", "self.run += accepted"),
    Mutation("calibrated keeps the match after an empty lookup", CAL,
             "            self.run = 0  # the lookup found nothing",
             "            pass  # the lookup found nothing"),
    Mutation("calibrated sizes to the budget, not the proposal", CAL,
             "        return self._saving_draft(len(proposal))",
             "        return self._saving_draft(self.max_draft)"),
    Mutation("calibrated pipelines on the first empty round on every host", CAL,
             "if self.costs and self.costs[0] > FREE_SYNC_STEP:", "if self.costs:"),
    Mutation("calibrated keeps the spec's synchronous rounds where they cost", CAL,
             "            self.empty_rounds_before_pipeline = 0",
             "            self.empty_rounds_before_pipeline = 2"),
    Mutation("the loop ignores the governor's rounds before pipelining", LOOP,
             "plain_streak > governor.empty_rounds_before_pipeline",
             "plain_streak > 2"),
    Mutation("spec policies trim the proposal by one", GOV,
             "        return len(proposal)\n", "        return max(len(proposal) - 1, 0)\n"),
    Mutation("paused rounds counted in plain decoding", LOOP,
             "elif budget == 0 and lookup_on:", "elif budget == 0:"),
    Mutation("oracle verify advances without the bonus row", ORACLE,
             "min(min(landed, k) + 1, left)", "max(min(landed, k), 1)"),
    Mutation("oracle verify advances one past the bonus row", ORACLE,
             "min(min(landed, k) + 1, left)", "min(min(landed, k) + 2, left)"),
    Mutation("oracle ignores the verify cost", ORACLE,
             "cost = width_cost(costs, k + 1)", "cost = 0.0"),
    Mutation("oracle reads the cost one width narrow", ORACLE,
             "cost = width_cost(costs, k + 1)", "cost = width_cost(costs, k)"),
    Mutation("oracle ignores the re-feed", ORACLE,
             "    if refeeds and accepted < k:\n        cost += width_cost(costs, accepted + 1)",
             "    if False:\n        cost += width_cost(costs, accepted + 1)"),
    Mutation("oracle ignores the token limit", ORACLE,
             "max_tokens - position - 1) + 1)", "max_tokens - position) + 1)"),
    Mutation("oracle counts the row at the end as accepted", ORACLE,
             "accepted = min(landed, k, left - 1)", "accepted = min(landed, k)"),
    Mutation("oracle prices a plain step at cost(1)", ORACLE,
             "plain = min(1.0, width_cost(costs, 1))", "plain = width_cost(costs, 1)"),
    Mutation("oracle looks up one token late", ORACLE,
             "        if position:\n            context.append",
             "        if position > 1:\n            context.append"),
    Mutation("oracle forgets the EOS row", ORACLE,
             'targets = [*reply, _EOS] if stop_reason == "eos" and reply else list(reply)',
             "targets = list(reply)"),
]


# -- the rules group: what users decide on outside the engine ---------------------------------
# Each area's tests: the fewest fast files that state its rule (no Ray fleet starts here).
VERDICT_TESTS = ("tests/stats/test_interval.py", "tests/stats/test_changes.py",
                 "tests/stats/test_cells.py", "tests/stats/test_verdict_rules.py")
HISTORY_TESTS = ("tests/stats/test_changes.py", "tests/store/test_queries.py",
                 "tests/cli/test_results_cli.py", "tests/stats/test_verdict_rules.py")
PARITY_CLI_TESTS = tuple(f"tests/cli/test_parity_cli.py::{name}" for name in (
    "test_suspect_divergence_exits_1_with_forensics", "test_clean_matrix_exits_0",
    "test_unreplayed_divergence_fails_unless_allowed", "test_regression_against_baseline_exits_1",
))  # the module's embedded-fleet test left out: it starts Ray
PARITY_TESTS = ("tests/stats/test_cells.py", "tests/report/test_parity.py",
                "tests/engine/test_forensics.py", *PARITY_CLI_TESTS,
                "tests/report/test_parity_rules.py")
STORE_TESTS = ("tests/store/test_store.py", "tests/store/test_journal.py",
               "tests/store/test_leases.py", "tests/store/test_duress_sweep.py")
SCHEMA_TESTS = ("tests/store/test_readonly.py", "tests/store/test_damaged_store_sweep.py",
                *(f"tests/store/test_migrate.py::{name}" for name in (
                    "test_reopening_is_a_no_op", "test_future_revision_is_refused_and_untouched",
                    "test_foreign_tables_without_revision_are_refused",
                    "test_upgrade_from_the_first_revision_keeps_the_data",
                )))  # test_migrate's non-editable install left out: it builds a wheel
TORCH_CACHE_TESTS = ("tests/engine/runners/test_families_torch.py",
                     "tests/engine/runners/test_rollback_rules.py")
MLX_CACHE_TESTS = ("tests/engine/runners/test_families_mlx.py",)
REPLAY_TESTS = ("tests/engine/test_predict.py", "tests/report/test_predictions.py",
                "tests/engine/test_replay_rules.py")

INTERVAL = "specfleet/stats/interval.py"
CELLS = "specfleet/stats/cells.py"
CHANGES = "specfleet/stats/changes.py"
HISTORY = "specfleet/stats/history.py"
PARITY = "specfleet/report/parity.py"
COVERAGE = "specfleet/report/coverage.py"
FORENSICS = "specfleet/engine/forensics.py"
PARITY_CLI = "specfleet/cli/parity.py"
STORE = "specfleet/store/store.py"
JOURNAL = "specfleet/store/journal.py"
LEASES = "specfleet/store/leases.py"
QUERIES = "specfleet/store/queries.py"
OPENED = "specfleet/store/openedfile.py"
MIGRATE = "specfleet/store/migrate.py"
TORCH_ROLLBACK = "specfleet/engine/runners/torch_rollback.py"
MLX_CACHES = "specfleet/engine/runners/mlx_caches.py"
PREDICT = "specfleet/engine/predict.py"

RULE_MUTATIONS = [
    # The verdict rule (stats/interval.py) and where the tables read it (stats/cells.py).
    Mutation("a gain whose interval only touches 1x", INTERVAL,
             "if interval.low > 1.0:", "if interval.low >= 1.0:", VERDICT_TESTS),
    Mutation("a loss whose interval only touches 1x", INTERVAL,
             "if interval.high < 1.0:", "if interval.high <= 1.0:", VERDICT_TESTS),
    Mutation("a gain when the interval's top lies above 1x", INTERVAL,
             "if interval.low > 1.0:", "if interval.high > 1.0:", VERDICT_TESTS),
    Mutation("a verdict from 2 repeats a side", INTERVAL,
             "MIN_REPEATS = 3", "MIN_REPEATS = 2", VERDICT_TESTS),
    Mutation("a verdict where only the larger side has 3 repeats", INTERVAL,
             "if min(len(base), len(other)) < MIN_REPEATS:",
             "if max(len(base), len(other)) < MIN_REPEATS:", VERDICT_TESTS),
    Mutation("the interval always from the extreme ratios", INTERVAL,
             "low=ratios[k - 1], high=ratios[-k]", "low=ratios[0], high=ratios[-1]",
             VERDICT_TESTS),
    Mutation("tails held strictly under 10%", INTERVAL,
             "2 * (tail + counts[k]) <= limit", "2 * (tail + counts[k]) < limit", VERDICT_TESTS),
    Mutation("speed-up interval of plain over the arm", CELLS,
             "interval = ratio_interval(plain.values, cell.values)",
             "interval = ratio_interval(cell.values, plain.values)", VERDICT_TESTS),
    Mutation("LOOP cells in the headline", CELLS,
             "kept = [u for u in group if not u.looping]", "kept = list(group)", VERDICT_TESTS),
    Mutation("a looping plain does not mark its arms' speed-ups", CELLS,
             "looping=cell.looping or plain.looping,", "looping=cell.looping,", VERDICT_TESTS),
    # The change-over-time verdict (stats/changes.py) and history / compare (stats/history.py).
    Mutation("a change inside --factor still counts", CHANGES,
             'changed = side(interval) in ("above", "below") and beyond_factor(ratio, factor)',
             'changed = side(interval) in ("above", "below")', HISTORY_TESTS),
    Mutation("history orders points by matrix id, not submission time", HISTORY,
             "key=lambda k: (when[k[1]], k[1]))", "key=lambda k: k[1])", HISTORY_TESTS),
    Mutation("history fails on an older dip since recovered", HISTORY,
             "for row in newest.values() if", "for row in rows if", HISTORY_TESTS),
    Mutation("history fails on a slow-down whose provenance differs", HISTORY,
             "and row.change.ratio < 1.0 and not row.differs]",
             "and row.change.ratio < 1.0]", HISTORY_TESTS),
    Mutation("compare calls a mixed slow-down a regression", HISTORY,
             'if verdict == "slower" and (allow_mixed or not differs):',
             'if verdict == "slower":', HISTORY_TESTS),
    # Greedy parity: the first differing token or character, and the parity command's exit.
    Mutation("a reply that is a prefix of the other is identical", CELLS,
             "return None if len(a) == len(b) else min(len(a), len(b))", "return None",
             PARITY_TESTS),
    Mutation("the first differing token one late", CELLS,
             "        if x != y:\n            return i\n    return None if len(a)",
             "        if x != y:\n            return i + 1\n    return None if len(a)",
             PARITY_TESTS),
    Mutation("a regression against the baseline passes parity", PARITY,
             'bad = self.count("suspect") + len(self.regressions)',
             'bad = self.count("suspect")', PARITY_TESTS),
    Mutation("an unverified divergence passes parity", PARITY,
             'return bad > 0 or (not allow_unverified and self.count("unverified") > 0)',
             "return bad > 0", PARITY_TESTS),
    Mutation("nothing planned is complete evidence", COVERAGE,
             "return self.planned > 0 and self.compared >= self.planned",
             "return self.compared >= self.planned", PARITY_TESTS),
    Mutation("a near-tie on one path only", FORENSICS,
             'return "near-tie" if max(abs(margins.a.gap), abs(margins.b.gap)) < threshold',
             'return "near-tie" if min(abs(margins.a.gap), abs(margins.b.gap)) < threshold',
             PARITY_TESTS),
    Mutation("parity exits 0 on a failed check", PARITY_CLI,
             "    if report.failed(allow_unverified):\n        raise typer.Exit(1)",
             "    if report.failed(allow_unverified):\n        pass", PARITY_TESTS),
    # The store: one row per run key, the journal written back, resume, the opened file.
    Mutation("an identical second write is a conflict", STORE,
             "                if run.result_hash == digest:\n                    return False\n",
             "", STORE_TESTS),
    Mutation("a done run takes a different result", STORE,
             '            if run.status == "done":\n                if run.result_hash',
             '            if False:\n                if run.result_hash', STORE_TESTS),
    Mutation("a plan may reuse a stored run key", "specfleet/store/values.py",
             "        if hit is not None:\n            owner",
             "        if False:\n            owner",
             STORE_TESTS),
    Mutation("no journal write-back when a store opens", STORE,
             "    store.written_back = Journal(resolved).write_back(store)\n", "",
             STORE_TESTS),
    Mutation("a written-back entry stays in the journal", JOURNAL,
             "            path.unlink(missing_ok=True)\n            written += bool(fresh)",
             "            written += bool(fresh)", STORE_TESTS),
    Mutation("resume re-runs done runs", LEASES,
             'update(Run).where(Run.matrix_id == matrix_id, Run.status != "done",',
             "update(Run).where(Run.matrix_id == matrix_id,", STORE_TESTS),
    Mutation("resume takes the runs a live driver holds", LEASES,
             "Run.lease_until > now)", "Run.lease_until < now)", STORE_TESTS),
    Mutation("a store file replaced under us is written", OPENED,
             "            if (info.st_dev, info.st_ino) == (self.dev, self.ino):\n"
             "                return\n",
             "            return\n", STORE_TESTS),
    Mutation("a store file deleted under us is written", OPENED,
             '        except OSError:\n            what = "deleted"',
             "        except OSError:\n            return", STORE_TESTS),
    # Schema revisions.
    Mutation("a newer store's revision is no FutureSchemaError", MIGRATE,
             "if rev not in known_revisions() and is_newer(rev):", "if False:", SCHEMA_TESTS),
    Mutation("a read of a store behind head", MIGRATE,
             "    if rev != head_revision():\n        raise UserError",
             "    if False:\n        raise UserError", SCHEMA_TESTS),
    # The runners' cache rollback: sliding windows (Gemma 3) and recurrent layers.
    Mutation("torch: a sliding window rolled back as full attention", TORCH_ROLLBACK,
             'DynamicSlidingWindowLayer: "sliding",', 'DynamicSlidingWindowLayer: "full",',
             TORCH_CACHE_TESTS),
    Mutation("torch: a window does not get back what a block displaced", TORCH_ROLLBACK,
             "            layer.crop(-n)\n            _stop_recording(layer, kind)",
             "            _stop_recording(layer, kind)", TORCH_CACHE_TESTS),
    Mutation("torch: a recorded block rolled back whole", TORCH_ROLLBACK,
             "most = self._width - 1 if self._records_recurrent and self._width else self._width",
             "most = self._width", TORCH_CACHE_TESTS),
    Mutation("torch: a re-fed window keeps the block's tensors", TORCH_ROLLBACK,
             "            layer.keys, layer.values, layer.cumulative_length = mark.windows[index]",
             "            layer.cumulative_length = mark.windows[index][2]", TORCH_CACHE_TESTS),
    Mutation("mlx: a whole window block undone by slicing", MLX_CACHES,
             "    if layer.saved is not None and n == width:",
             "    if layer.saved is not None and False:", MLX_CACHE_TESTS),
    Mutation("mlx: a recurrent model drops only the rejected tail", MLX_CACHES,
             "drop = self.width if self.refeeds else n", "drop = n", MLX_CACHE_TESTS),
    # Replay's pricing of a trace (engine/predict.py).
    Mutation("replay prices a synchronous step at cost(1) where steps do not overlap", PREDICT,
             "total += min(1.0, width_cost(costs, 1))", "total += width_cost(costs, 1)",
             REPLAY_TESTS),
    Mutation("replay ignores the re-feed", PREDICT,
             "        if t.refed:\n            total += width_cost(costs, t.refed)", "",
             REPLAY_TESTS),
    Mutation("replay always ends on EOS", PREDICT,
             "runner.eos_ids = frozenset({eos}) if ended_on_eos else frozenset()",
             "runner.eos_ids = frozenset({eos})", REPLAY_TESTS),
]


def _names(tests: tuple[str, ...]) -> str:
    return ", ".join(dict.fromkeys(Path(t.split("::")[0]).name for t in tests))


# The record's paragraph on what survived the first run and which test kills it now.
RULE_NOTES = (
    "**What survived at first.** The first run (2026-12-06 19:03 UTC, before these tests) "
    "killed 35 of the 42; the 7 survivors were no equivalent mutations but rules no test "
    "stated, and a new test kills each now (seen failing against its mutant in this run): "
    "`a looping plain does not mark its arms' speed-ups` (the LOOP test loops arm and plain "
    "together) by `tests/stats/test_verdict_rules.py::"
    "test_a_looping_plain_keeps_its_arms_speedup_out_of_the_headline`; "
    "`history fails on a slow-down whose provenance differs` (the seeded history's newest "
    "slow-down has matching provenance, and test_results_cli derives its expected exit from "
    "the rule itself) by `test_verdict_rules.py::"
    "test_history_fails_on_a_slow_down_only_where_nothing_but_the_code_differs`; "
    "`a regression against the baseline passes parity` (the seeded regressed reply also "
    "diverges from plain now, which fails the check by itself) by "
    "`tests/report/test_parity_rules.py::"
    "test_a_regression_against_the_baseline_fails_the_check_on_its_own`; "
    "`nothing planned is complete evidence` by `test_parity_rules.py::"
    "test_a_check_that_compared_nothing_is_no_pass`; `a near-tie on one path only` (the "
    "seeded replays' gaps are alike on both paths) by `test_parity_rules.py::"
    "test_a_near_tie_is_close_on_both_paths_not_on_one`; `torch: a re-fed window keeps the "
    "block's tensors` (no tiny family has a sliding window beside recurrent layers, so the "
    "re-feed's window restore never ran; LFM3 has both: lookup refuses it as unproven, but "
    "calibrate and the warm-up roll its blocks back by re-feeding, and the mutant's window "
    "keeps its size and count, so the per-layer check passes and only the next row is wrong) "
    "by `tests/engine/runners/test_rollback_rules.py::"
    "test_a_re_fed_window_gets_back_what_it_held_before_the_block`; `replay ignores the "
    "re-feed` (test_predict's priced traces had none) by `tests/engine/test_replay_rules.py::"
    "test_a_re_feed_costs_a_forward_of_its_width`."
)


@dataclass(frozen=True)
class Group:
    """A set of mutations, the tests they run against and where their record goes."""

    name: str
    title: str
    mutations: list[Mutation]
    tests: tuple[str, ...]  # a mutation's tests unless it names its own
    copied: tuple[str, ...]  # what of tests/ the temp copy gets (files or folders)
    out: str
    method: str  # the record's paragraph on which tests run and what else kills what
    notes: str = ""  # the record's last paragraph


ENGINE_TEST_INITS = ("tests/__init__.py", "tests/engine/__init__.py",
                     "tests/engine/runners/__init__.py")
GROUPS = {
    "engine": Group(
        "engine", "Engine mutation testing", ENGINE_MUTATIONS, tuple(ENGINE_TESTS),
        (*ENGINE_TEST_INITS, *ENGINE_TESTS), "docs/benchmark_results/engine-mutations.md",
        "Each mutation is a text replacement in a private copy of `specfleet/`; the engine tests "
        f"({', '.join(Path(t).name for t in ENGINE_TESTS)}) then run there with `-x`. Unmutated "
        "they pass in {baseline_s:.1f} s. The first failing test is the one that killed it; the "
        "seconds column is the (shared machine's) wall time to the kill. Several tests can kill "
        "one mutation; e.g. both probe-start mutations and `no shadow lookups` also fail the "
        "6.38 probe-alignment test run alone."),
    "rules": Group(
        "rules", "Rule mutation testing: what users decide on outside the engine",
        RULE_MUTATIONS, tuple(dict.fromkeys(t for m in RULE_MUTATIONS for t in m.tests)),
        ("tests",), "docs/benchmark_results/rule-mutations.md",
        "Each mutation is a text replacement in a private copy of `specfleet/` (beside a copy of "
        "`tests/`); the tests of its area then run there with `-x`: the verdict rule "
        f"({_names(VERDICT_TESTS)}), history and compare ({_names(HISTORY_TESTS)}), greedy "
        f"parity ({_names(PARITY_TESTS)}), the store ({_names(STORE_TESTS)}), schema revisions "
        f"({_names(SCHEMA_TESTS)}), the runners' cache rollback ({_names(TORCH_CACHE_TESTS)}; "
        f"{_names(MLX_CACHE_TESTS)}), replay's pricing ({_names(REPLAY_TESTS)}). Store tests "
        "run on SQLite and on a throwaway PostgreSQL server. Unmutated they all pass in "
        "{baseline_s:.1f} s. The first failing test is the one that killed it; the seconds "
        "column is the (shared machine's) wall time to the kill, PostgreSQL's start included.",
        RULE_NOTES),
}


def copy_tree(target: Path, group: Group) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "specfleet", target / "specfleet", ignore=ignore)
    shutil.copy(REPO / "pyproject.toml", target / "pyproject.toml")
    for name in group.copied:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, target / name, ignore=ignore)
        else:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / name, target / name)


def run_tests(root: Path, tests: tuple[str, ...]) -> tuple[bool, str, float]:
    """Run `tests` in `root`; return (passed, first failing test, seconds)."""
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("SPECFLEET_FORCE_SYNC", None)
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-rf",
         "--timeout", "300", *tests],
        cwd=root, env=env, capture_output=True, text=True,
    )
    seconds = time.perf_counter() - start
    # A parametrized id may hold spaces: the id ends at -rf's " - " before the message.
    failed = re.search(r"^FAILED (.+?)(?: - |$)", result.stdout, re.MULTILINE)
    first = failed.group(1) if failed else ""
    if result.returncode not in (0, 1):
        first = first or f"pytest exit {result.returncode}: {result.stdout[-300:]}"
    return result.returncode == 0, first, seconds


def check_import_root(root: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(
        [sys.executable, "-c", "import specfleet; print(specfleet.__file__)"],
        cwd=root, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()
    if not out.startswith(str(root)):
        raise SystemExit(f"the temp copy is not the imported specfleet: {out}")


def check_patterns(root: Path, mutations: list[Mutation]) -> None:
    """Exit listing every mutation whose pattern does not occur exactly once under `root`,
    before any test runs (a refactor breaks several at once)."""
    stale = []
    for mutation in mutations:
        found = (root / mutation.path).read_text().count(mutation.old)
        if found != 1:
            stale.append(f"  {mutation.name}: pattern found {found} times in {mutation.path}")
    if stale:
        raise SystemExit(f"{len(stale)} of {len(mutations)} patterns must occur exactly once:\n"
                         + "\n".join(stale))


def apply(root: Path, mutation: Mutation) -> str:
    """Write the mutated file; return the original text."""
    path = root / mutation.path
    original = path.read_text()
    path.write_text(original.replace(mutation.old, mutation.new))
    return original


def commit(group: Group) -> str:
    """HEAD's short sha, marked when the code or the group's tests differ from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout
    sha = git("rev-parse", "--short", "HEAD").strip() or "unknown"
    tests = "tests/engine" if group.name == "engine" else "tests"
    dirty = git("status", "--porcelain", "--", "specfleet", tests).strip()
    return f"{sha} + uncommitted changes" if dirty else sha


Row = tuple[Mutation, bool, str, float]


def _result(mutation: Mutation, killed: bool) -> str:
    if killed:
        return "killed"
    return f"equivalent: {mutation.equivalent}" if mutation.equivalent else "**SURVIVED**"


def table(rows: list[Row]) -> str:
    lines = ["| # | mutation | file | result | first failing test | s |", "|---|---|---|---|---|---|"]
    for i, (mutation, killed, test, seconds) in enumerate(rows, 1):
        lines.append(f"| {i} | {mutation.name} | `{mutation.path}` | {_result(mutation, killed)} "
                     f"| `{test}` | {seconds:.1f} |")
    return "\n".join(lines)


def document(group: Group, report: str, baseline_s: float, rows: list[Row],
             total_s: float, sha: str) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    option = "" if group.name == "engine" else f"--group {group.name} "
    killed = sum(k for _, k, _, _ in rows)
    explained = sum(not k and bool(m.equivalent) for m, k, _, _ in rows)
    count = f"**{killed} of {len(rows)} mutations killed"
    count += f", {explained} equivalent (explained in the table).**" if explained else ".**"
    return (
        f"# {group.title}\n\n"
        f"Run {stamp} on commit {sha} with `.venv/bin/python tools/mutations.py "
        f"{option}--out {group.out}` (2-core shared machine, {total_s / 60:.1f} min in all).\n\n"
        f"{group.method.format(baseline_s=baseline_s)}\n\n"
        f"{count}\n\n{report}\n" + (f"\n{group.notes}\n" if group.notes else "")
    )


def run_group(group: Group, chosen: list[Mutation]) -> tuple[list[Row], float, str]:
    """Every chosen mutation against its tests in one temp copy; (rows, baseline seconds,
    the commit copied: others may commit to the checkout while the tests run)."""
    with tempfile.TemporaryDirectory(prefix="specfleet-mutations-") as tmp:
        root = Path(tmp)
        sha = commit(group)
        copy_tree(root, group)
        check_patterns(root, chosen)
        check_import_root(root)
        baseline = tuple(dict.fromkeys(t for m in chosen for t in (m.tests or group.tests)))
        passed, first, baseline_s = run_tests(root, baseline)
        if not passed:
            raise SystemExit(f"baseline fails ({first}); fix the tests first")
        print(f"baseline: {group.name} tests pass in {baseline_s:.1f} s", flush=True)
        rows = []
        for mutation in chosen:
            original = apply(root, mutation)
            try:
                passed, first, seconds = run_tests(root, mutation.tests or group.tests)
            finally:
                (root / mutation.path).write_text(original)
            rows.append((mutation, not passed, first, seconds))
            print(f"{'killed  ' if not passed else 'SURVIVED'} {mutation.name}  {first}", flush=True)
    return rows, baseline_s, sha


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group", choices=sorted(GROUPS), default="engine",
                        help="which mutations: the engine core (default) or the rules")
    parser.add_argument("--out", type=Path, help="also write the markdown table here")
    parser.add_argument("--match", default="", help="only mutations whose name contains this")
    parser.add_argument("--check", action="store_true",
                        help="only check that every pattern occurs once; run no tests")
    args = parser.parse_args()
    group = GROUPS[args.group]
    chosen = [m for m in group.mutations if args.match in m.name]
    if not chosen:
        raise SystemExit(f"no mutation name contains {args.match!r}")
    if args.check:
        check_patterns(REPO, chosen)
        print(f"all {len(chosen)} patterns occur exactly once")
        return 0
    started = time.perf_counter()
    rows, baseline_s, sha = run_group(group, chosen)
    report = table(rows)
    print(report)
    if args.out:
        args.out.write_text(document(group, report, baseline_s, rows,
                                     time.perf_counter() - started, sha))
    return 0 if all(killed or m.equivalent for m, killed, _, _ in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
