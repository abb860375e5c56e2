"""Divergence forensics: replay two greedy paths to the row where they part (docs/engine.md, "Parity and near-ties").

A speculative reply may leave plain greedy decoding where a multi-token verify row rounds a
near-tie the other way. To tell such a flip from a bug, both paths are teacher-forced with
the runner up to the divergence row and the top-2 logits read there: path A as plain decoding
runs it (prefill, then one-token forwards), path B with the last tokens fed as one verify-wide
block, so the kernel that made the flip is the one measured. Plain Python over `Runner`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from specfleet.engine.runners.base import Runner

# Competing-token logit gap below which a divergence counts as a near-tie flip. fp32 kernels
# disagree by ~1e-4, bf16 logits of magnitude 16-32 move in steps of 0.125: 0.25 covers both
# with room, while a real bug (wrong cache trim, wrong token) leaves gaps of whole logits.
NEAR_TIE_LOGIT_MARGIN = 0.25
# On bfloat16 logits the margin is at least this many bf16 steps at the rows' magnitude: from
# 32 on a step is 0.25 or more, so a one-step flip would otherwise read as a suspect.
BF16_STEPS = 2.5
# Width of a default verify block: max_draft 7 proposals + the last emitted token.
DEFAULT_VERIFY_WIDTH = 8

Verdict = Literal["near-tie", "suspect"]


@dataclass(frozen=True)
class PathRow:
    """What one path's replay saw at the divergence row.

    Attributes:
        top2: ((id, logit), (id, logit)), best first (ties to the lowest id).
        margin: top-1 logit minus top-2 logit.
        gap: logit of this path's own token minus logit of the other path's token.
        width: tokens fed in the forward that produced the row (1 = plain one-token step).
        lead: the row's best logit minus the better of the two competing tokens' (0 when one
            of them is the best): above the near-tie margin, the replay reproduced neither
            reply (a model changed since the run, or a bug), whatever their gap.
    """

    top2: tuple[tuple[int, float], tuple[int, float]]
    margin: float
    gap: float
    width: int
    lead: float = 0.0


@dataclass(frozen=True)
class RowMargins:
    """Both paths at the first differing generated token `row`."""

    row: int
    token_a: int
    token_b: int
    a: PathRow
    b: PathRow

    @property
    def min_gap(self) -> float:
        """Smallest absolute gap between the two competing tokens over both paths."""
        return min(abs(self.a.gap), abs(self.b.gap))


def first_divergence(tokens_a: Sequence[int], tokens_b: Sequence[int]) -> int | None:
    """Index of the first differing token; the shorter length if one is a prefix of the
    other; None when both are equal."""
    for i, (x, y) in enumerate(zip(tokens_a, tokens_b, strict=False)):
        if x != y:
            return i
    if len(tokens_a) == len(tokens_b):
        return None
    return min(len(tokens_a), len(tokens_b))


def top2(row: Sequence[float]) -> tuple[tuple[int, float], tuple[int, float]]:
    """The two best (id, logit) pairs of a logits row, ties toward the lowest id."""
    values = np.asarray(row, dtype=np.float64)
    best = int(np.argmax(values))
    rest = values.copy()
    rest[best] = -np.inf
    second = int(np.argmax(rest))
    return (best, float(values[best])), (second, float(values[second]))


def logits_at(
    runner: Runner, prompt_ids: Sequence[int], tokens: Sequence[int], row: int, width: int = 1
) -> list[float]:
    """Teacher-force `tokens[:row]` after the prompt and return the logits predicting
    `tokens[row]`.

    Args:
        runner: a loaded model; its caches are reset first.
        prompt_ids: the prompt as plain decoding prefilled it.
        tokens: the generated tokens of the path.
        row: index of the generated token whose logits are wanted.
        width: the last `width` context tokens go in one forward (capped at `row`); the rest
            one token per forward, as plain decoding does.

    Returns:
        The logits row as floats.
    """
    runner.reset()
    logits = runner.prefill(list(prompt_ids))
    if row == 0:
        return [float(x) for x in runner.read_row(logits, 0)]
    width = max(1, min(width, row))
    for token in tokens[: row - width]:
        step = runner.forward([int(token)])
        # keep lazy backends from stacking an unbounded graph
        runner.submit(runner.argmax(step))
    block = runner.forward([int(t) for t in tokens[row - width : row]])
    return [float(x) for x in runner.read_row(block, width - 1)]


def _path_row(logits: list[float], own: int, other: int, width: int) -> PathRow:
    best = top2(logits)
    own_logit = logits[own] if own < len(logits) else float("-inf")
    other_logit = logits[other] if other < len(logits) else float("-inf")
    return PathRow(best, best[0][1] - best[1][1], own_logit - other_logit, width,
                   best[0][1] - max(own_logit, other_logit))


def replay_margins(
    runner: Runner,
    prompt_ids: Sequence[int],
    tokens_a: Sequence[int],
    tokens_b: Sequence[int],
    row: int,
    width_a: int = 1,
    width_b: int = DEFAULT_VERIFY_WIDTH,
) -> RowMargins:
    """Replay both paths to `row` and read the top-2 logits of each there.

    Args:
        runner: a loaded model of the target that produced both replies.
        prompt_ids: the prompt token ids both runs were prefilled with.
        tokens_a: reference path (plain greedy), replayed with `width_a`-wide forwards.
        tokens_b: the other path (speculative), whose last `width_b` context tokens are fed
            as one verify-like block.
        row: first differing generated token (`first_divergence`); both must reach it.

    Returns:
        `RowMargins`; when one path ended at `row` its token is -1 and, both paths having
        the same limits, it ended on EOS: the gaps set its likeliest EOS id there against
        the other path's token (the row's top two where the runner has no EOS id).
    """
    token_a = int(tokens_a[row]) if row < len(tokens_a) else -1
    token_b = int(tokens_b[row]) if row < len(tokens_b) else -1
    logits_a = logits_at(runner, prompt_ids, tokens_a, row, width_a)
    logits_b = logits_at(runner, prompt_ids, tokens_b, row, width_b)
    eos_ids = runner.eos_ids
    own_a, other_a = _competing(logits_a, token_a, token_b, eos_ids)
    own_b, other_b = _competing(logits_b, token_b, token_a, eos_ids)
    return RowMargins(
        row=row,
        token_a=token_a,
        token_b=token_b,
        a=_path_row(logits_a, own_a, other_a, max(1, min(width_a, row or 1))),
        b=_path_row(logits_b, own_b, other_b, max(1, min(width_b, row or 1))),
    )


def _competing(logits: list[float], own: int, other: int,
               eos_ids: frozenset[int]) -> tuple[int, int]:
    """(this path's token, the other path's) at the row. A path that ended there (-1)
    ended on EOS and stands for its likeliest EOS id: against the row's runner-up, a reply
    cut short with EOS whole logits down would pass as a near-tie."""
    stop = max(sorted(eos_ids), key=lambda t: logits[t] if t < len(logits) else float("-inf"),
               default=None)
    best, runner_up = top2(logits)
    if own < 0:
        own = best[0] if stop is None else stop
    if other < 0:
        other = runner_up[0] if stop is None else stop
    return own, other


def is_bfloat16(value: float) -> bool:
    """Whether `value` is a bfloat16 number: a float32 whose low 16 bits are zero."""
    if not math.isfinite(value) or float(np.float32(value)) != value:
        return False
    return int(np.array(value, dtype=np.float32).view(np.uint32)) & 0xFFFF == 0


def tie_margin(margins: RowMargins, threshold: float = NEAR_TIE_LOGIT_MARGIN) -> float:
    """The near-tie margin at these rows: `threshold`, or where every top-2 logit of both
    paths is a bfloat16 number (a bf16 model's logits), `BF16_STEPS` bf16 steps at the
    largest one's magnitude where that is wider (below a step a bf16 row resolves nothing)."""
    logits = [logit for path in (margins.a, margins.b) for _, logit in path.top2]
    if not all(is_bfloat16(logit) for logit in logits):
        return threshold
    top = max(abs(logit) for logit in logits)
    step = 2.0 ** (math.floor(math.log2(top)) - 7) if top > 0 else 0.0  # 8 significant bits
    return max(threshold, BF16_STEPS * step)


def classify(margins: RowMargins, threshold: float = NEAR_TIE_LOGIT_MARGIN) -> Verdict:
    """`near-tie` when the competing tokens are within the margin (`tie_margin`: `threshold`,
    wider on bfloat16 rows) of each other and of the row's best on both paths, else
    `suspect` (a flip no rounding explains, or a replay whose best token is a third one: it
    reproduced neither reply)."""
    paths, margin = (margins.a, margins.b), tie_margin(margins, threshold)
    close = max(abs(p.gap) for p in paths) < margin and max(p.lead for p in paths) < margin
    return "near-tie" if close else "suspect"


def replay_divergence(
    runner: Runner,
    prompt_ids: Sequence[int],
    tokens_a: Sequence[int],
    tokens_b: Sequence[int],
    row: int,
    width_b: int = DEFAULT_VERIFY_WIDTH,
) -> dict:
    """`replay_margins` plus the two competing tokens decoded, as a plain dict (what a worker
    sends back to the head).

    Args:
        runner: a loaded runner; `decode(ids)` is used when it has one.
        width_b: verify width of path B (the arm's max_draft + 1).

    Returns:
        {"margins": RowMargins as a dict, "text_a": str, "text_b": str}.
    """
    margins = replay_margins(runner, prompt_ids, tokens_a, tokens_b, row, width_b=width_b)
    decode = getattr(runner, "decode", None)

    def text(token: int) -> str:
        return decode([token]) if decode is not None and token >= 0 else ""

    return {"margins": asdict(margins), "text_a": text(margins.token_a),
            "text_b": text(margins.token_b)}


def margins_from_dict(data: dict) -> RowMargins:
    """Rebuild `RowMargins` from `asdict` output (after a trip through Ray or JSON)."""

    def path(p: dict) -> PathRow:
        (i1, l1), (i2, l2) = p["top2"]
        return PathRow(((int(i1), float(l1)), (int(i2), float(l2))), float(p["margin"]),
                       float(p["gap"]), int(p["width"]), float(p.get("lead", 0.0)))

    return RowMargins(int(data["row"]), int(data["token_a"]), int(data["token_b"]),
                      path(data["a"]), path(data["b"]))


@dataclass(frozen=True)
class Replay:
    """What a worker's replay found at a divergence row."""

    margins: RowMargins
    text_a: str  # the plain path's token, decoded ("" when that path ended)
    text_b: str


# (plain run, arm run, row) -> Replay, or None when the target cannot be reached
Replayer = Callable[[object, object, int], Replay | None]
