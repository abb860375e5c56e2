"""Counters, timings and round traces of one generation (spec sections 5, 2.11 and 10).

Also the two repetition checks: the loop guard that stops a reply (docs/engine.md, "Loop guard"; checked after
every emitted token) and `loop_share`, which flags a finished reply that ended in a cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Literal

from specfleet.engine.config import ConfigError
from specfleet.engine.governor import GovernorState
from specfleet.errors import whole_number

# Which tok/s a table reads: the whole call (prefill included, the reference's figure) or the
# generation after the first token (a slow prefill cannot hide how fast a reply lands).
Rate = Literal["whole", "decode"]

RoundKind = Literal["pipelined", "sync", "verify", "drain"]
# Why a reply ended; its own module, not the loop's: the run contract and the peers name it,
# and importing the loop for it loaded numpy into every CLI command.
StopReason = Literal["eos", "max_tokens", "loop_guard", "cancelled"]


@dataclass
class PromptLookupStats:
    """Counters of one `generate` call (docs/engine.md, "Counters").

    Attributes:
        rounds: forwards in the decode loop (pipelined submissions, sync steps, verifies).
        drafted_rounds: verifies with at least one proposal.
        paused_rounds: one-token forwards whose budget was 0 (lookup on only).
        proposed: proposals verified.
        accepted: proposals that landed.
        shadow_confirmations: shadow probes that came true.
        refed_tokens: tokens fed again by rollbacks (models with recurrent layers; 0 where
            every cache trims).
    """

    rounds: int = 0
    drafted_rounds: int = 0
    paused_rounds: int = 0
    proposed: int = 0
    accepted: int = 0
    shadow_confirmations: int = 0
    refed_tokens: int = 0

    @property
    def acceptance_rate(self) -> float:
        """accepted / proposed, 0.0 when nothing was proposed."""
        return self.accepted / self.proposed if self.proposed else 0.0

    def tokens_per_forward(self, generated: int) -> float:
        """Tokens per decode-loop forward; the prefill token is excluded.

        Args:
            generated: tokens the call emitted, the prefill token included.

        Returns:
            max(generated - 1, 0) / rounds, or 0.0 with no rounds.
        """
        return max(generated - 1, 0) / self.rounds if self.rounds else 0.0

    def as_dict(self) -> dict[str, int]:
        """The counters by name, in `COUNTER_FIELDS` order."""
        return asdict(self)

    def summary_line(self, generated: int) -> str:
        """The `[Prompt lookup] ...` line the CLI prints on stderr (fields in spec order, then
        `refed_tokens` when a rollback fed tokens again: the spec's line is unchanged elsewhere)."""
        refed = f" refed_tokens={self.refed_tokens}" if self.refed_tokens else ""
        return (
            f"[Prompt lookup] rounds={self.rounds} drafted_rounds={self.drafted_rounds} "
            f"paused_rounds={self.paused_rounds} proposed={self.proposed} "
            f"accepted={self.accepted} acceptance_rate={self.acceptance_rate:.4f} "
            f"tokens_per_forward={self.tokens_per_forward(generated):.4f} "
            f"shadow_confirmations={self.shadow_confirmations}{refed}"
        )


# The one list of counter names: `RunResult`'s counter fields, the `runs` columns, the store's
# rows and `stats.runs.Counters` are built from it; a new counter is a field above plus a
# store migration.
COUNTER_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(PromptLookupStats))


@dataclass(frozen=True)
class Timings:
    """Wall-clock seconds: prefill ends after the first token's host read."""

    prefill_s: float
    decode_s: float
    total_s: float


def prompt_tok_per_s(prompt_tokens: int, prefill_s: float) -> float:
    """Prefill rate: prompt tokens over prefill seconds (0.0 when not measured)."""
    return prompt_tokens / prefill_s if prefill_s > 0 else 0.0


def decode_tok_per_s(generated_tokens: int, decode_s: float) -> float:
    """Generation rate after the first token (the prefill emits that one):
    `(generated - 1) / decode_s`, 0.0 when not measured. Unlike the whole-call rate it does
    not hide a reply's speed behind a slow prefill."""
    if decode_s <= 0 or generated_tokens < 2:
        return 0.0
    return (generated_tokens - 1) / decode_s


@dataclass(frozen=True)
class RoundTrace:
    """One loop iteration, recorded when `generate(..., trace=True)`.

    Attributes:
        index: iteration number, from 0.
        kind: "pipelined" (a one-token step submitted before its input was read), "sync"
            (synchronous one-token step), "verify" (a block with proposals), "drain" (the
            in-flight token read with nothing new submitted).
        width: forward width submitted this round (0 for "drain").
        budget: the budget this round (after the remaining-1 cap).
        proposed: proposals verified (0 unless "verify").
        accepted: proposals that landed.
        emitted: tokens emitted this round.
        policy: the governor's state after the round (None for plain decoding).
        cache_len: positions cached after the round.
        context_len: prompt + emitted tokens after the round.
        in_flight: whether a pipelined step is in flight after the round.
        refed: tokens the round's rollback fed again (recurrent layers; a forward of that width).
    """

    index: int
    kind: RoundKind
    width: int
    budget: int
    proposed: int
    accepted: int
    emitted: int
    policy: GovernorState | None
    cache_len: int
    context_len: int
    in_flight: bool
    refed: int = 0


LOOP_GUARD_MAX = 100_000  # a period or repeat count past any reply's length


@dataclass(frozen=True)
class LoopGuardConfig:
    """Stop when the last `p * repeats` generated tokens are one period-p pattern repeated.

    Args:
        min_period: shortest period checked.
        max_period: longest period checked.
        repeats: how many whole repetitions fire the guard.
    """

    min_period: int = 1
    max_period: int = 64
    repeats: int = 8

    @classmethod
    def parse(cls, text: str) -> LoopGuardConfig:
        """The guard written `MIN,MAX,REPEATS` (`--loop-guard`, a matrix's `loop_guard`), not
        yet validated. Raises `ConfigError` when it is not three whole numbers."""
        parts = [part.strip() for part in text.split(",")]
        numbers = [whole_number(part, LOOP_GUARD_MAX) for part in parts]
        whole = [n for n in numbers if n is not None]
        if len(whole) != 3 or len(numbers) != 3:
            raise ConfigError(
                f"expected 'min_period,max_period,repeats' (e.g. 1,64,8), got {text!r}")
        for name, number, part in zip(("min_period", "max_period", "repeats"), whole, parts,
                                      strict=True):
            if number > LOOP_GUARD_MAX:  # whole_number reads a longer one as the bound + 1
                shown = part if len(part) <= 20 else f"{part[:17]}..."
                raise ConfigError(f"{name} must be at most {LOOP_GUARD_MAX}, got {shown}")
        return cls(*whole)

    def validate(self) -> LoopGuardConfig:
        """Raise `ConfigError` naming the field; return self when valid."""
        if self.min_period < 1:
            raise ConfigError("loop-guard min_period must be at least 1")
        if self.max_period < self.min_period:
            raise ConfigError(
                f"loop-guard max_period ({self.max_period}) must be >= min_period "
                f"({self.min_period})"
            )
        if self.repeats < 2:
            raise ConfigError("loop-guard repeats must be at least 2")
        if max(self.min_period, self.max_period, self.repeats) > LOOP_GUARD_MAX:
            raise ConfigError(f"loop-guard periods and repeats must be at most "
                              f"{LOOP_GUARD_MAX} (a guard longer than any reply never fires)")
        return self


def loop_guard_fires(
    generated: Sequence[int], min_period: int, max_period: int, repeats: int
) -> bool:
    """Whether the generated tokens (prompt excluded) end in `repeats` copies of one period.

    Args:
        generated: the emitted tokens so far.
        min_period: shortest period p tried.
        max_period: longest period p tried.
        repeats: whole repetitions required.

    Returns:
        True when, for some p in [min_period, max_period], the last p * repeats tokens are
        one period-p pattern repeated `repeats` times.
    """
    length = len(generated)
    last = generated[-1] if length else None
    for period in range(min_period, max_period + 1):
        span = period * repeats
        if span > length:
            break
        # Cheap rejection first: most periods fail on the newest token.
        if generated[length - 1 - period] != last:
            continue
        tail = generated[length - span :]
        if tail[period:] == tail[:-period]:
            return True
    return False


def _trailing_run(tokens: Sequence[int], period: int) -> int:
    """Length of the longest suffix that is periodic with `period`."""
    length = len(tokens)
    i = length - 1
    while i - period >= 0 and tokens[i] == tokens[i - period]:
        i -= 1
    return min(length, (length - 1 - i) + period)


def loop_share(tokens: Sequence[int], max_period: int = 64, min_repeats: int = 3) -> float:
    """Fraction of a reply inside a trailing repeated cycle.

    Args:
        tokens: the generated tokens (prompt excluded).
        max_period: longest cycle tried (periods 1..max_period).
        min_repeats: how many repetitions make a loop (a partial last one counts toward
            the run length, not toward the repetitions).

    Returns:
        Length of the longest trailing run periodic with some period p that holds at least
        `min_repeats` copies of its cycle, divided by len(tokens); 0.0 when there is none.
    """
    length = len(tokens)
    best = 0
    for period in range(1, min(max_period, length) + 1):
        run = _trailing_run(tokens, period)
        if run >= period * min_repeats:
            best = max(best, run)
    return best / length if length else 0.0
