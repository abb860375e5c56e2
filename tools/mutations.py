"""Deliberate mutations of the engine core, each of which the engine tests must kill.

Each mutation is a text replacement applied to a private copy of `specfleet/` and the
engine tests in a temporary directory (the shared checkout is never touched), then the
engine tests run there with `-x`. A mutation is "killed" when the tests fail.

Usage: .venv/bin/python tools/mutations.py [--out docs/benchmark_results/engine-mutations.md]
       [--match calibrated]   (only the mutations whose name contains the text)
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
             "ShadowProbe(start=len(s.context),", "ShadowProbe(start=len(s.context) - 1,"),
    Mutation("probe start one late", LOOP,
             "ShadowProbe(start=len(s.context),", "ShadowProbe(start=len(s.context) + 1,"),
    Mutation("probation lifted by one landed token", GOV,
             "if accepted >= min(GATED_NARROW_DRAFT, self.max_draft):", "if accepted > 0:"),
    Mutation("Python round in the Graded budget", GOV,
             "return math.floor(x + 0.5)", "return round(x)"),
    Mutation("no cache check after a rollback", LOOP,
             "    if s.stop_reason is None and s.runner.cache_len() != expected:",
             "    if False:"),
    Mutation("re-feeds not counted", LOOP,
             "    s.stats.refed_tokens += refed\n", ""),
    Mutation("calibrated ignores the re-feed price", "specfleet/engine/calibrated.py",
             "        if refeeds:\n            cost += expected_refeed_cost(p, costs, k)\n", ""),
    Mutation("trim one too many", LOOP,
             "refed = s.runner.rollback(k - accepted)", "refed = s.runner.rollback(min(k - accepted + 1, k))"),
    Mutation("trim one too few", LOOP,
             "refed = s.runner.rollback(k - accepted)", "refed = s.runner.rollback(max(k - accepted - 1, 0))"),
    Mutation("budget not capped by remaining-1", LOOP,
             "max(remaining - 1, 0))", "max(remaining, 0))"),
    Mutation("no shadow lookups", LOOP,
             "if s.shadow is None and governor.probes_while_paused():", "if False:"),
    Mutation("a full first Gated block", GOV,
             "        self.ema = GATED_START_EMA\n        self.misses = 0\n        self.drafting = True",
             "        self.ema = GATED_FULL_AT\n        self.misses = 0\n        self.drafting = True"),
    Mutation("pipeline on the second empty round", LOOP,
             "PLAIN_ROUNDS_BEFORE_PIPELINE = 2", "PLAIN_ROUNDS_BEFORE_PIPELINE = 1"),
    Mutation("paused Gated loop waits before pipelining", LOOP,
             "return s.governor is not None and s.governor.probes_while_paused()", "return False"),
    Mutation("a draft found in flight keeps the pipeline", LOOP,
             "if not draft and remaining > 1:\n        _submit_step", "if remaining > 1:\n        _submit_step"),
    Mutation("EOS emitted from an in-flight read", LOOP,
             "    if token in s.runner.eos_ids:\n        s.stop_reason", "    if False:\n        s.stop_reason"),
    Mutation("loop guard not checked mid-block", LOOP,
             "elif s.guard is not None and loop_guard_fires", "elif s.guard is None and loop_guard_fires"),
    Mutation("Graded cooldown never doubles", GOV,
             "min(2 * self.next_cooldown, MAX_COOLDOWN)", "min(self.next_cooldown, MAX_COOLDOWN)"),
    Mutation("index keeps the earliest occurrence", LOOKUP,
             "self._maps[n][tuple(context[start : end + 1])] = start",
             "self._maps[n].setdefault(tuple(context[start : end + 1]), start)"),
    Mutation("calibrated drafts where no length beats a plain step", CAL,
             "best_k, best_rate = 0, PLAIN_STEP_RATE", "best_k, best_rate = 0, 0.0"),
    Mutation("calibrated reads the cost one width narrow", CAL,
             "cost = width_cost(costs, k + 1)", "cost = width_cost(costs, k)"),
    Mutation("calibrated counts the bonus row as a landed proposal", CAL,
             "p**i for i in range(1, k + 1)", "p**i for i in range(0, k + 1)"),
    Mutation("calibrated counts a whole landed draft as a miss", CAL,
             "1.0 if accepted < proposed else 0.0", "1.0"),
    Mutation("calibrated evidence never fades", CAL, "DECAY = 0.8", "DECAY = 1.0"),
    Mutation("calibrated ignores confirmed probes", CAL,
             "        if self.paused:\n            self._count(", "        if False:\n            self._count("),
    Mutation("calibrated never probes while paused", CAL,
             "    def probes_while_paused(self) -> bool:\n        return self.paused",
             "    def probes_while_paused(self) -> bool:\n        return False"),
    Mutation("paused rounds counted in plain decoding", LOOP,
             "if budget == 0 and s.governor is not None:", "if budget == 0:"),
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


def apply(root: Path, mutation: Mutation) -> str:
    """Write the mutated file; return the original text."""
    path = root / mutation.path
    original = path.read_text()
    if original.count(mutation.old) != 1:
        raise SystemExit(f"{mutation.name}: pattern must occur once in {mutation.path}")
    path.write_text(original.replace(mutation.old, mutation.new))
    return original


def table(rows: list[tuple[Mutation, bool, str, float]]) -> str:
    lines = ["| # | mutation | file | result | first failing test | s |", "|---|---|---|---|---|---|"]
    for i, (mutation, killed, test, seconds) in enumerate(rows, 1):
        verdict = "killed" if killed else "**SURVIVED**"
        lines.append(
            f"| {i} | {mutation.name} | `{mutation.path}` | {verdict} | `{test}` | {seconds:.1f} |"
        )
    return "\n".join(lines)


def document(report: str, baseline_s: float, total: int, killed: int) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return (
        "# Engine mutation testing\n\n"
        f"Run {stamp} with `.venv/bin/python tools/mutations.py --out "
        "docs/benchmark_results/engine-mutations.md` (2-core shared machine).\n\n"
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
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if args.match in m.name]
    with tempfile.TemporaryDirectory(prefix="specfleet-mutations-") as tmp:
        root = Path(tmp)
        copy_tree(root)
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
        args.out.write_text(document(report, baseline_s, len(rows), sum(k for _, k, _, _ in rows)))
    return 0 if all(killed for _, killed, _, _ in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
