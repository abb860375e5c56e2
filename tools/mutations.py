"""Deliberate mutations of the engine core, each of which the engine tests must kill.

Each mutation is a text replacement applied to a private copy of `specfleet/` and the
engine tests in a temporary directory (the shared checkout is never touched), then the
engine tests run there with `-x`. A mutation is "killed" when the tests fail.

Usage: .venv/bin/python tools/mutations.py [--out docs/benchmark_results/engine-mutations.md]
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


GOV = "specfleet/engine/governor.py"
LOOP = "specfleet/engine/loop.py"
LOOKUP = "specfleet/engine/lookup.py"
CAL = "specfleet/engine/calibrated.py"
ORACLE = "specfleet/engine/oracle.py"

MUTATIONS = [
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


def copy_tree(target: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "specfleet", target / "specfleet", ignore=ignore)
    shutil.copy(REPO / "pyproject.toml", target / "pyproject.toml")
    for init in ("tests/__init__.py", "tests/engine/__init__.py", "tests/engine/runners/__init__.py"):
        (target / init).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / init, target / init)
    for test in ENGINE_TESTS:
        shutil.copy(REPO / test, target / test)


def run_tests(root: Path) -> tuple[bool, str, float]:
    """Run the engine tests in `root`; return (passed, first failing test, seconds)."""
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("SPECFLEET_FORCE_SYNC", None)
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-rf",
         "--timeout", "300", *ENGINE_TESTS],
        cwd=root, env=env, capture_output=True, text=True,
    )
    seconds = time.perf_counter() - start
    failed = re.search(r"^FAILED (\S+)", result.stdout, re.MULTILINE)
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


def commit() -> str:
    """HEAD's short sha, marked when the engine or its tests differ from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout
    sha = git("rev-parse", "--short", "HEAD").strip() or "unknown"
    dirty = git("status", "--porcelain", "--", "specfleet", "tests/engine").strip()
    return f"{sha} + uncommitted changes" if dirty else sha


def table(rows: list[tuple[Mutation, bool, str, float]]) -> str:
    lines = ["| # | mutation | file | result | first failing test | s |", "|---|---|---|---|---|---|"]
    for i, (mutation, killed, test, seconds) in enumerate(rows, 1):
        verdict = "killed" if killed else "**SURVIVED**"
        lines.append(
            f"| {i} | {mutation.name} | `{mutation.path}` | {verdict} | `{test}` | {seconds:.1f} |"
        )
    return "\n".join(lines)


def document(report: str, baseline_s: float, total: int, killed: int, total_s: float) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return (
        "# Engine mutation testing\n\n"
        f"Run {stamp} on commit {commit()} with `.venv/bin/python tools/mutations.py --out "
        f"docs/benchmark_results/engine-mutations.md` (2-core shared machine, {total_s / 60:.1f} "
        "min in all).\n\n"
        "Each mutation is a text replacement in a private copy of `specfleet/`; the engine tests "
        f"({', '.join(Path(t).name for t in ENGINE_TESTS)}) then run there with `-x`. Unmutated "
        f"they pass in {baseline_s:.1f} s. The first failing test is the one that killed it; the "
        "seconds column is the (shared machine's) wall time to the kill. Several tests can kill "
        "one mutation; e.g. both probe-start mutations and `no shadow lookups` also fail the "
        "6.38 probe-alignment test run alone.\n\n"
        f"**{killed} of {total} mutations killed.**\n\n{report}\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the markdown table here")
    parser.add_argument("--match", default="", help="only mutations whose name contains this")
    parser.add_argument("--check", action="store_true",
                        help="only check that every pattern occurs once; run no tests")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if args.match in m.name]
    if not chosen:
        raise SystemExit(f"no mutation name contains {args.match!r}")
    if args.check:
        check_patterns(REPO, chosen)
        print(f"all {len(chosen)} patterns occur exactly once")
        return 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="specfleet-mutations-") as tmp:
        root = Path(tmp)
        copy_tree(root)
        check_patterns(root, chosen)
        check_import_root(root)
        passed, first, seconds = run_tests(root)
        if not passed:
            raise SystemExit(f"baseline fails ({first}); fix the tests first")
        baseline_s = seconds
        print(f"baseline: engine tests pass in {seconds:.1f} s", flush=True)
        rows = []
        for mutation in chosen:
            original = apply(root, mutation)
            try:
                passed, first, seconds = run_tests(root)
            finally:
                (root / mutation.path).write_text(original)
            rows.append((mutation, not passed, first, seconds))
            print(f"{'killed  ' if not passed else 'SURVIVED'} {mutation.name}  {first}", flush=True)
    report = table(rows)
    print(report)
    if args.out:
        killed = sum(k for _, k, _, _ in rows)
        args.out.write_text(document(report, baseline_s, len(rows), killed,
                                     time.perf_counter() - started))
    return 0 if all(killed for _, killed, _, _ in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
