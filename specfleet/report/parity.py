"""Greedy parity of a matrix: every arm against plain on the same target, plain's repetitions
against each other, plain across targets, and (optionally) against a baseline matrix.

Every done repetition of an arm is compared with plain's first; the first that differs is
the arm's divergence (its repetition said), and only that pair is replayed.
A divergence is replayed on the target (`Replayer`) to read the top-2 logits of both paths
at the first differing token, then classified `near-tie` (the competing tokens are within
`NEAR_TIE_LOGIT_MARGIN` logits, wider on bfloat16 rows, of each other and of the row's best on both paths: a verify row rounded a near-tie the other way,
docs/engine.md "Parity and near-ties") or `suspect` (anything else). A divergence that could not be replayed is
`unverified`. Plain's repetitions are compared with plain's first: greedy decoding replies
alike every time, so a plain whose repetitions differ (`PlainDiffers`: not deterministic on
that target, no reply to hold the arms to) fails the check, never replayed.
A peer arm (`engine/peers.py`: another library's decoding) that differs from our plain is
`peer differs`: reported where it differs, never replayed, never a failure or a regression.
A planned pair without a done run on one side (failed, interrupted, never run) is
`Uncompared`, with why: no evidence, it fails the check; so is a pair sampled without a seed
(each run draws anew). A pair sampled with a seed is compared draw for draw (lookup draws as
plain does): a divergence there is `suspect`, never replayed greedily.
Against a baseline, every pair must be found there (arm and plain done): a pair the baseline
lacks (another target name, a cell it never ran) is no evidence, and fails the check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from specfleet.engine.forensics import NEAR_TIE_LOGIT_MARGIN, Replay, Replayer, classify
from specfleet.engine.peers import is_peer
from specfleet.report.build import done_runs, load_matrix, plan_order
from specfleet.report.coverage import Coverage, cell_keys, parity_coverage
from specfleet.stats.cells import compare_replies, cross_target_parity
from specfleet.stats.runs import CellKey, draws_anew, to_row
from specfleet.stats.view import PLAIN, MatrixView, group_runs

Verdict = str  # "identical" | "near-tie" | "suspect" | "unverified" | PEER_DIFFERS
PEER_DIFFERS = "peer differs"
# Characters of the reply shown before and from the first differing character: enough to
# find the spot in a CI log without printing whole replies.
EXCERPT_BEFORE_CHARS = 24
EXCERPT_FROM_CHARS = 12


@dataclass(frozen=True)
class ArmParity:
    """One arm's every repetition against plain's first on one target, model and prompt; the
    verdict, indices and replay are of the first repetition that differs (`repeat`)."""

    target: str
    model: str
    prompt: str
    arm: str
    verdict: Verdict
    token: int | None = None
    char: int | None = None
    replay: Replay | None = None
    excerpt: str | None = None  # both replies' text at the first differing character
    repeat: int | None = None  # the arm's repetition that differs first (None: none does)
    replies: int = 0  # the arm's replies compared with plain's first


@dataclass(frozen=True)
class PlainDiffers:
    """Plain's repetitions on one target, model and prompt that differ from its first: greedy
    plain decoding is not deterministic there (a failure: no reply to hold the arms to)."""

    target: str
    model: str
    prompt: str
    repeat: int  # the first repetition that differs from plain's first
    token: int | None
    char: int | None
    excerpt: str | None = None


@dataclass(frozen=True)
class Uncompared:
    """A planned arm-vs-plain pair with no done run on a side; `why` names the side and its
    run's status (`plain interrupted`, `graded failed: ERROR`)."""

    target: str
    model: str
    prompt: str
    arm: str
    why: str


@dataclass(frozen=True)
class CrossTarget:
    """Plain replies of one model and prompt on two targets."""

    model: str
    prompt: str
    target_a: str
    target_b: str
    agree: bool
    token: int | None = None
    char: int | None = None


@dataclass(frozen=True)
class Regression:
    """A reply identical to plain in the baseline matrix that differs now."""

    target: str
    model: str
    prompt: str
    arm: str
    baseline_id: str
    token: int | None
    char: int | None


@dataclass(frozen=True)
class ParityReport:
    matrix_id: str
    threshold: float
    arms: tuple[ArmParity, ...]
    cross: tuple[CrossTarget, ...]
    regressions: tuple[Regression, ...] = ()
    baseline_id: str | None = None
    coverage: Coverage | None = None  # arm-vs-plain pairs compared of those planned
    uncompared: tuple[Uncompared, ...] = ()  # the planned pairs not compared, with why
    replays_tried: bool = True  # False: divergences were not sent to a replayer (--no-replay)
    baseline_coverage: Coverage | None = None  # of those pairs, found in the baseline
    baseline_missing: tuple[CellKey, ...] = ()  # pairs the baseline lacks
    baseline_targets: tuple[str, ...] = ()  # targets with done runs in the baseline
    plain_differs: tuple[PlainDiffers, ...] = ()  # plain cells whose repetitions differ
    plain_replies: int = 0  # plain's replies compared (with its own first)

    def count(self, verdict: Verdict) -> int:
        return sum(a.verdict == verdict for a in self.arms)

    @property
    def replies(self) -> int:
        """Every reply compared: each arm's repetitions and plain's."""
        return sum(a.replies for a in self.arms) + self.plain_replies

    def failed(self, allow_unverified: bool = False) -> bool:
        """True when CI should fail: a suspect divergence, a regression, a plain whose
        repetitions differ, a planned pair left uncompared (failed or missing arm or plain
        run) or missing from the baseline, or (unless allowed) a divergence nobody could
        replay."""
        bad = self.count("suspect") + len(self.regressions) + len(self.plain_differs)
        if any(c is not None and not c.complete
               for c in (self.coverage, self.baseline_coverage)):
            return True
        return bad > 0 or (not allow_unverified and self.count("unverified") > 0)


def divergence_excerpt(plain_text: str | None, arm_text: str | None, char: int | None,
                       arm: str) -> str | None:
    """`after '…TEXT': plain 'A' vs ARM 'B'`: the text both replies share before the first
    differing character, then each one's from there (`''`: that reply ended there)."""
    if char is None or plain_text is None or arm_text is None:
        return None
    start = max(0, char - EXCERPT_BEFORE_CHARS)
    before = ("…" if start else "") + plain_text[start:char]
    plain_from, arm_from = (t[char:char + EXCERPT_FROM_CHARS] for t in (plain_text, arm_text))
    return f"after {before!r}: plain {plain_from!r} vs {arm} {arm_from!r}"


def unseeded_sampling(*runs) -> str | None:
    """Why runs sampled without a seed cannot be compared (each draws anew), or None."""
    for run in runs:
        if draws_anew(run.temperature, run.seed):
            return (f"sampled at temperature {run.temperature:g} without a seed: each run draws "
                    "anew (`specfleet parity run FILE` checks greedy parity)")
    return None


def first_differing(reference, runs: Sequence) -> tuple[Any, int | None, int | None] | None:
    """The first of `runs` (in repeat order) whose reply differs from `reference`'s, with the
    first differing token and character (None each where unknown); None when all agree."""
    ref = to_row(reference)  # normalized once: every repetition is held to it
    for run in runs:
        verdict = compare_replies(ref, to_row(run))
        if verdict.status != "identical":  # neither tokens nor text ("missing"): no match
            return run, verdict.token_index, verdict.char_index
    return None


def _classify(key: CellKey, plain, run, token, char, replayer, threshold) -> ArmParity:
    """The first pair that differs (`run` against `plain` at `token`, `char`), classified."""
    excerpt = divergence_excerpt(plain.output_text, run.output_text, char, key.arm)
    if is_peer(key.arm):  # another library's decoding: information, not our failure
        return ArmParity(*key, PEER_DIFFERS, token, char, excerpt=excerpt)
    if (run.temperature or 0) > 0:  # seeded: lookup draws as plain does, draw for draw
        return ArmParity(*key, "suspect", token, char, excerpt=excerpt)  # no greedy replay
    replay = replayer(plain, run, token) if replayer and token is not None else None
    if replay is None:
        return ArmParity(*key, "unverified", token, char, excerpt=excerpt)
    return ArmParity(*key, classify(replay.margins, threshold), token, char, replay, excerpt)


def arm_parity(groups: dict[CellKey, list], replayer: Replayer | None,
               threshold: float) -> list[ArmParity]:
    """Each arm's every done repetition against plain's first on the same target (`groups`:
    done runs by cell, in repeat order); the first that differs is classified (one replay a
    cell), its repetition said."""
    out = []
    for key, runs in groups.items():
        plain = groups.get(key.with_arm(PLAIN))
        if key.arm == PLAIN or not plain or unseeded_sampling(plain[0], *runs):
            continue
        found = first_differing(plain[0], runs)
        item = (ArmParity(*key, "identical") if found is None
                else replace(_classify(key, plain[0], *found, replayer, threshold),
                             repeat=found[0].repeat))
        out.append(replace(item, replies=len(runs)))
    return out


def plain_repeats(groups: dict[CellKey, list]) -> tuple[list[PlainDiffers], int]:
    """Each plain cell's repetitions against its first (`groups` as `arm_parity`'s): those
    that differ, and how many plain replies were compared (sampled without a seed: none)."""
    differ, replies = [], 0
    for key, runs in groups.items():
        if key.arm != PLAIN or unseeded_sampling(*runs):
            continue
        replies += len(runs)
        found = first_differing(runs[0], runs[1:])
        if found is not None:
            run, token, char = found
            excerpt = divergence_excerpt(runs[0].output_text, run.output_text, char,
                                         f"plain repeat {run.repeat}")
            differ.append(PlainDiffers(*key[:3], run.repeat, token, char, excerpt))
    return differ, replies


def _side_gap(runs: list, side: str) -> str | None:
    """Why `side` (an arm or plain) of a pair has no done run to compare (None: it has one)."""
    if any(r.status == "done" for r in runs):
        return None
    if not runs:
        return f"no {side} run"
    first = min(runs, key=lambda r: r.repeat)
    error = error_line(first)
    return f"{side} {first.status}" + (f": {error}" if error else "")


def error_line(run) -> str | None:
    """The first line of a run's stored error (a traceback's last frames stay in the store)."""
    return next(iter((run.error or "").strip().splitlines()), None)


def uncompared_pairs(all_runs: list, compared: set[CellKey]) -> list[Uncompared]:
    """Each planned arm-vs-plain pair (every run, whatever its status, in plan order) not in
    `compared`, with why."""
    groups = group_runs(sorted(all_runs, key=lambda r: r.plan_order))
    out = []
    for key, runs in groups.items():
        if key.arm == PLAIN or key in compared:
            continue
        plain = groups.get(key.with_arm(PLAIN), [])
        gaps = [_side_gap(runs, key.arm), _side_gap(plain, PLAIN)]
        if not any(gaps):  # both done, yet not compared
            gaps.append(unseeded_sampling(*runs, *plain))
        out.append(Uncompared(*key, "; ".join(g for g in gaps if g)))
    return out


def why_not_compared(store, view: MatrixView) -> tuple[str, ...]:
    """Why each arm cell of a stored matrix's `view` (its done runs) has no parity verdict,
    as `uncompared_pairs` words it (`matrix show`'s parity line says it, as `parity` does)."""
    left = {CellKey(c.target, c.model, c.prompt, c.arm) for c in view.cells
            if c.arm != PLAIN and c.parity is None}
    if not left:
        return ()
    all_runs = store.runs(matrix=view.matrix_id)
    compared = set(group_runs(all_runs)) - left
    return tuple(u.why for u in uncompared_pairs(all_runs, compared)
                 if CellKey(u.target, u.model, u.prompt, u.arm) in left)


def cross_target(runs: list) -> list[CrossTarget]:
    """Plain replies of the same model and prompt on every target against the first one's."""
    return [
        CrossTarget(v.key.model, v.key.prompt, v.reference.target, v.key.target,
                    v.status == "identical", v.token_index, v.char_index)
        for v in cross_target_parity(runs) if v.status != "missing"
    ]


def regressions(groups: dict[CellKey, list], baseline: dict[CellKey, list],
                baseline_id: str) -> list[Regression]:
    """Arms identical to plain in `baseline` whose reply now differs from plain."""
    out = []
    for key, runs in groups.items():
        plain, then_runs, then_plain = (
            groups.get(key.with_arm(PLAIN)), baseline.get(key), baseline.get(key.with_arm(PLAIN)),
        )
        if key.arm == PLAIN or is_peer(key.arm) or not (plain and then_runs and then_plain):
            continue
        if unseeded_sampling(runs[0], plain[0], then_runs[0], then_plain[0]):
            continue  # no reply to hold it to: not compared (said by the coverage)
        # Every repetition, as `arm_parity`: identical there is each one identical.
        if first_differing(then_plain[0], then_runs) is not None:
            continue
        if (found := first_differing(plain[0], runs)) is not None:
            out.append(Regression(*key, baseline_id, *found[1:]))
    return out


def baseline_coverage(all_runs: list,
                      baseline: dict[CellKey, list]) -> tuple[Coverage, list[CellKey]]:
    """The matrix's arm-against-plain pairs found in the baseline (arm and plain both done
    there, and not sampled without a seed: such a pair drew anew, no reply to hold this one
    to), and those it lacks. A peer arm is never a regression: not counted."""
    planned = sorted(CellKey(*key) for key in cell_keys(all_runs)
                     if key[3] != PLAIN and not is_peer(key[3]))

    def found(key: CellKey) -> bool:
        then_runs, then_plain = baseline.get(key), baseline.get(key.with_arm(PLAIN))
        return bool(then_runs and then_plain
                    and not unseeded_sampling(then_runs[0], then_plain[0]))

    missing = [key for key in planned if not found(key)]
    return Coverage(len(planned) - len(missing), len(planned), "pairs"), missing


def check_parity(
    store,
    matrix_id: str,
    replayer: Replayer | None = None,
    baseline_id: str | None = None,
    threshold: float = NEAR_TIE_LOGIT_MARGIN,
) -> ParityReport:
    """Parity verdicts of a stored matrix.

    Args:
        store: an open `Store`.
        matrix_id: the matrix to check (unknown id: `UserError`).
        replayer: replays a divergence on its target; None marks divergences `unverified`.
        baseline_id: a matrix whose identical replies must stay identical; each pair of
            this matrix not found there is counted in `baseline_coverage` (a failure).
        threshold: competing-token logit gap below which a divergence is a near-tie.

    Returns:
        The `ParityReport`.
    """
    load_matrix(store, matrix_id)
    all_runs = store.runs(matrix=matrix_id)  # read once: a big matrix's texts decode slowly
    runs = sorted((r for r in all_runs if r.status == "done"), key=lambda r: r.plan_order)
    groups = group_runs(runs)
    order = plan_order(all_runs)  # as the tables list the arms, a failed first repeat aside
    arms = tuple(sorted(arm_parity(groups, replayer, threshold), key=lambda a: order.cell_rank(
        CellKey(a.target, a.model, a.prompt, a.arm))))
    plain_differs, plain_replies = plain_repeats(groups)
    report = ParityReport(
        matrix_id=matrix_id,
        threshold=threshold,
        arms=arms,
        cross=tuple(cross_target(runs)),
        coverage=parity_coverage(all_runs, len(arms)),
        uncompared=tuple(uncompared_pairs(
            all_runs, {CellKey(a.target, a.model, a.prompt, a.arm) for a in arms})),
        replays_tried=replayer is not None,
        plain_differs=tuple(plain_differs),
        plain_replies=plain_replies,
    )
    if baseline_id is None:
        return report
    load_matrix(store, baseline_id)
    baseline = group_runs(done_runs(store, baseline_id))
    found, missing = baseline_coverage(all_runs, baseline)
    return replace(
        report, baseline_id=baseline_id, baseline_coverage=found, baseline_missing=tuple(missing),
        regressions=tuple(regressions(groups, baseline, baseline_id)),
        baseline_targets=tuple(sorted({key.target for key in baseline})),
    )
