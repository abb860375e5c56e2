"""A host proves its engines before it takes runs: tiny models of every cache family, plain
greedy against prompt lookup, identical token ids, with every rollback checked.

Metal and CUDA cannot run where specfleet is developed; they first run on a user's machine.
So every worker, when it starts, builds the tiny seeded random-weight models of each cache
family (`self_test_runner` of `engine/runners/tiny_<engine>.py`: full attention, sliding
window, hybrid linear attention, state space) on each device it offers, decodes a copy-heavy prompt past their sliding window
plainly and under prompt lookup (the host's default policy and a fixed width, which rejects
often), and compares the ids. A runner's own rollback check (`CacheRollbackError`) or any
other failure fails the target. The scheduler sends no run to a target that failed
(`HostInfo.targets` leaves it out) and `fleet status`, the store's hosts table and the web view
say why. Each (engine, device) is tested once per process (seconds, not minutes).
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from specfleet.engine.config import PromptLookupConfig
from specfleet.engine.forensics import first_divergence
from specfleet.engine.loop import generate
from specfleet.engine.runners.toy import lcg_tokens

PROMPT_SEGMENT = 8  # random tokens, then copied twice with one edit each: lookup drafts
MAX_EVERY_TOKEN_VOCAB = 512  # the tiny models' vocabularies (96) fit in the prompt whole
REPLY_TOKENS = 20  # prompt + reply pass the tiny models' sliding window (8) several times
SEED = 7


@dataclass(frozen=True)
class FamilyOutcome:
    """One tiny model's result: ok, or one line saying what differed or failed."""

    family: str
    ok: bool
    detail: str
    refed_tokens: int = 0


@dataclass(frozen=True)
class SelfTest:
    """One target's self-test.

    Attributes:
        target: "engine/device".
        passed: every family identical under every tested policy.
        seconds: wall time, model building included.
        families: each family's outcome.
        reason: one line naming the first failure ("" when passed).
    """

    target: str
    passed: bool
    seconds: float
    families: list[FamilyOutcome] = field(default_factory=list)
    reason: str = ""

    def to_dict(self) -> dict:
        """Plain JSON-able dict (stored with the host, sent over Ray)."""
        return asdict(self)


def copy_prompt(vocab: int) -> list[int]:
    """A seeded prompt whose continuation copies it: a segment, then two edited copies."""
    segment = lcg_tokens(SEED, PROMPT_SEGMENT, vocab)
    first, second = list(segment), list(segment)
    first[PROMPT_SEGMENT // 2] = (first[PROMPT_SEGMENT // 2] + 1) % vocab
    second[PROMPT_SEGMENT // 3] = (second[PROMPT_SEGMENT // 3] + 3) % vocab
    return [*segment, *first, *second[: PROMPT_SEGMENT - 2]]


def every_token_prompt(vocab: int) -> list[int]:
    """Every token id once in a seeded order, then `copy_prompt`: whatever a random-weight
    model replies has a one-token match to draft from, so every family drafts and rejects
    (on the copy prompt alone Mamba, Falcon-Mamba, Jamba and Qwen3.5 on torch replied with
    tokens it never held: no draft, so no rollback, was ever checked)."""
    every = lcg_permutation(SEED, vocab) if vocab <= MAX_EVERY_TOKEN_VOCAB else []
    return [*every, *copy_prompt(vocab)]


def lcg_permutation(seed: int, n: int) -> list[int]:
    """0..n-1 in an order set by `seed` (sorted by seeded keys: no global random state)."""
    keys = lcg_tokens(seed, n, 1 << 30)
    return sorted(range(n), key=lambda i: (keys[i], i))


def lookup_configs(default_policy: str) -> dict[str, PromptLookupConfig]:
    """The host's default policy and a fixed width (drafts every round, so it rejects).

    One-token n-grams: random-weight replies rarely repeat a two-token n-gram of the prompt,
    and a self-test that never drafts proves nothing about rollback."""
    return {
        default_policy: PromptLookupConfig(ngram_min=1, policy=default_policy),  # type: ignore[arg-type]
        "fixed-4": PromptLookupConfig(ngram_min=1, max_draft=4, adaptive=False),
    }


def check_family(family: str, runner: Any, configs: dict[str, PromptLookupConfig]) -> FamilyOutcome:
    """Plain greedy against each lookup config on one runner: identical ids or one line. A
    family the runner refuses prompt lookup on here (torch's Mamba families under
    transformers 5.24) passes on plain decoding alone, and says so."""
    vocab = int(runner.vocab_size)
    refed = 0
    # The short copy prompt first; the long one only where no draft was rejected on it.
    for prompt in (copy_prompt(vocab), every_token_prompt(vocab)):
        plain = generate(runner, prompt, max_tokens=REPLY_TOKENS).tokens
        if getattr(runner, "lookup_refusal", None) is not None:
            return FamilyOutcome(family, True, "plain only: prompt lookup is refused on it here")
        rejected = 0
        for name, config in configs.items():
            result = generate(runner, prompt, max_tokens=REPLY_TOKENS, lookup=config)
            refed += result.stats.refed_tokens
            rejected += result.stats.proposed - result.stats.accepted
            if result.tokens != plain:
                at = first_divergence(plain, result.tokens)
                return FamilyOutcome(family, False, f"{name}: ids differ from plain at token "
                                     f"{at}", refed)
        if rejected:
            return FamilyOutcome(family, True, "identical", refed)
    # Identical ids with no rollback taken prove nothing about rollback.
    return FamilyOutcome(family, False, "no draft was rejected, so its rollback is unproven",
                         refed)


def run_self_test(
    engine: str, device: str, default_policy: str,
    build: Callable[[str, str], Any] | None = None,
    families: tuple[str, ...] | None = None,
) -> SelfTest:
    """Self-test one target on every tiny family its engine ships.

    Args:
        engine: "mlx" or "torch".
        device: the device to test ("cpu", "cuda", "metal", "mps").
        default_policy: the target's default drafting policy (tested beside a fixed width).
        build: (family, device) -> runner; default `tiny_runner` of the engine's tiny module.
        families: the families to test; default every one the tiny module lists.

    Returns:
        The `SelfTest`; never raises for a failing runner (the failure is its reason).
    """
    start = time.perf_counter()
    target = f"{engine}/{device}"
    try:
        if build is None or families is None:
            tiny = importlib.import_module(f"specfleet.engine.runners.tiny_{engine}")
        names = families if families is not None else tuple(tiny.TINY_FAMILIES)
        make = build or (lambda family, dev: tiny.self_test_runner(family, device=dev))
        configs = lookup_configs(default_policy)
        outcomes = []
        for family in names:
            try:
                outcomes.append(check_family(family, make(family, device), configs))
            except Exception as err:  # noqa: BLE001 - any failure fails this family, said in one line
                outcomes.append(FamilyOutcome(family, False, _one_line(err)))
    except Exception as err:  # noqa: BLE001 - an engine that cannot even build its tiny models
        return SelfTest(target, False, time.perf_counter() - start, [], _one_line(err))
    failed = [o for o in outcomes if not o.ok]
    reason = f"{failed[0].family}: {failed[0].detail}" if failed else ""
    return SelfTest(target, not failed, time.perf_counter() - start, outcomes, reason)


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:200]}" if text else type(err).__name__


class DroppedRollback:
    """A deliberately broken runner for fault injection: its rollback does nothing.

    Wraps a real runner; everything else is delegated. Used by tests (and `selftest
    --break-rollback`) to prove a broken engine is kept out of a matrix.
    """

    def __init__(self, runner: Any) -> None:
        self._runner = runner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner, name)

    def rollback(self, n: int) -> int:
        return 0


_results: dict[tuple[str, str, bool], SelfTest] = {}  # once per process per target


def self_test_once(engine: str, device: str, default_policy: str,
                   break_rollback: bool = False) -> SelfTest:
    """`run_self_test` once per process for a target (a worker restarts its actor, not its
    engines); `break_rollback` wraps every tiny runner in `DroppedRollback`."""
    key = (engine, device, break_rollback)
    # Tiny random models: transformers' note that a hybrid layer runs its reference kernels
    # (no causal_conv1d or flash-linear-attention for this device) says nothing about the
    # check, from `selftest` or any worker's start (`parity` without a fleet printed nine).
    logging.getLogger("transformers.integrations.hub_kernels").setLevel(logging.ERROR)
    if key not in _results:
        build = None
        if break_rollback:
            tiny = importlib.import_module(f"specfleet.engine.runners.tiny_{engine}")
            build = lambda family, dev: DroppedRollback(tiny.self_test_runner(family, dev))  # noqa: E731
        _results[key] = run_self_test(engine, device, default_policy, build)
    return _results[key]
