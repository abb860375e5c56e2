"""Medians, speed-ups over plain, noise verdicts, loop flags, parity verdicts, headlines.

Pure Python over plain rows (see `runs.py` for the accepted shapes). Definitions:

* Cell statistics use the `done` runs of a cell that have a rate (0 tok/s is not measured:
  a one-token reply has no decode rate): median, min, max tok/s, n, and the relative
  spread `(max - min) / median` (0 for one run). A spread above `SPREAD_FLAG` (5%) is flagged.
* Speed-up of an arm = median arm tok/s / median plain tok/s on the same target, model and
  prompt (whole call including prefill, as the reference record), over the repeats that
  have a rate (0 tok/s is not measured). Its verdict is the one rule of `interval.py`, over
  the arm's and plain's repeats: "gain" or "loss" when the 90% interval on the speed-up
  lies above or below 1, otherwise "within noise"; with fewer than `MIN_REPEATS` (3)
  repeats on either side "no verdict" (shown `n=1, no verdict`).
* A cell loops when the median `loop_share` of its runs exceeds `LOOP_SHARE_FLAG` (0.2): its
  reply is mostly a repeated cycle, which prompt lookup copies for free. A speed-up whose arm
  or plain cell loops is kept out of the headline and returned apart, never dropped.
* Parity compares every `done` repetition of each arm with plain's first on the same target
  (within the arm run's own matrix), and plain's repetitions with plain's first (greedy
  decoding, or sampling with one seed, replies alike every time): identical token ids, or,
  for the first repetition that differs, the first differing token index (the shorter length
  when one reply is a prefix of the other) and, given both decoded texts, the first differing
  character index. A cell is identical only when every repetition is.
* A speed-up whose arm's replies are not plain's (parity "diverged", a peer arm's aside: its
  differing reply is another library's decoding) measured another reply: kept out of the
  headline and returned apart, as a looping one.
* The headline is, per target and arm, the geometric mean of the speed-ups of the cells that
  neither loop nor diverge from plain.
* Against peers (`engine/peers.py`): per target, our best headline arm (plain counted as 1x)
  against the best peer arm's, both geometric means taken over the cells both measured
  (`versus_peers`): each headline's own cells may differ (a peer that failed on a prompt).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from specfleet.engine.peers import is_peer
from specfleet.stats.interval import RatioInterval, Side, measured, ratio_interval, side
from specfleet.stats.runs import CellKey, CellValues, Counters, Rate, Row, group_by_cell, to_rows

SPREAD_FLAG = 0.05  # relative spread above which a cell's repeats disagree too much to trust
LOOP_SHARE_FLAG = 0.2  # median loop share above which a cell's replies count as looping

Verdict = Literal["gain", "loss", "within noise", "no verdict"]
_VERDICTS: dict[Side, Verdict] = {"above": "gain", "below": "loss",
                                  "within noise": "within noise", "no verdict": "no verdict"}
ParityStatus = Literal["identical", "diverged", "missing"]


@dataclass(frozen=True)
class CellStats:
    """tok/s statistics of one cell over its `done` runs that have a rate (a run at 0 tok/s
    is not measured), `values` in repeat order."""

    key: CellKey
    n: int  # measured repeats: the values' count
    n_failed: int
    values: tuple[float, ...]
    median_tok_per_s: float | None
    min_tok_per_s: float | None
    max_tok_per_s: float | None
    spread: float | None
    spread_flag: bool
    loop_share: float
    looping: bool
    noisy_runs: int
    counters: Counters | None  # of the first done repetition, as the reference record
    throttled_runs: int = 0  # done runs the worker flagged throttled (workers/conditions)
    median_decode_tok_per_s: float | None = None  # beside whichever rate `values` hold
    median_prompt_tok_per_s: float | None = None
    shown: CellValues = field(default_factory=CellValues)  # of the first done repetition


@dataclass(frozen=True)
class SpeedUp:
    """An arm's median over plain's median on one target, model and prompt."""

    key: CellKey
    ratio: float
    arm_median_tok_per_s: float
    plain_median_tok_per_s: float
    interval: RatioInterval | None  # on `ratio`, over both sides' repeats; None: too few
    verdict: Verdict
    n: int  # measured repeats of the smaller side (arm or plain)
    spread_flag: bool  # the arm's or plain's spread exceeds SPREAD_FLAG
    looping: bool  # the arm's or plain's replies loop
    diverged: bool = False  # a repetition of the (non-peer) arm replied otherwise than plain


@dataclass(frozen=True)
class Headline:
    """Geometric-mean speed-up of one arm on one target over its cells that neither loop nor
    diverge from plain (`diverged_from_plain`); those are counted apart."""

    target: str
    arm: str
    geomean_speedup: float | None
    cells: int
    gains: int
    losses: int
    within_noise: int
    looping_excluded: int
    no_verdict: int = 0  # cells with fewer than MIN_REPEATS repeats a side
    diverged_excluded: int = 0  # cells (not looping) whose replies are not plain's
    # (model, prompt, speed-up) of each cell averaged: `versus_peers` pairs arms on these.
    ratios: tuple[tuple[str, str, float], ...] = ()


@dataclass(frozen=True)
class ParityVerdict:
    """A cell's replies compared with a reference reply: an arm's every repetition with plain's
    first on the same target, plain's with its own first, or one target's plain with another's.
    The indices are the first differing repetition's (`repeat`)."""

    key: CellKey
    reference: CellKey
    status: ParityStatus
    token_index: int | None = None
    char_index: int | None = None
    reference_token: int | None = None
    candidate_token: int | None = None
    repeat: int | None = None  # the candidate's repetition that differs first (None: none)
    replies: int = 0  # the cell's replies compared with the reference


@dataclass(frozen=True)
class MatrixSummary:
    """Everything the tables print; looping speed-ups, and those of replies not plain's, are
    apart from the headline ones."""

    cells: tuple[CellStats, ...]
    speedups: tuple[SpeedUp, ...]
    looping: tuple[SpeedUp, ...]
    headline: tuple[Headline, ...]
    parity: tuple[ParityVerdict, ...]
    diverged: tuple[SpeedUp, ...] = ()  # not looping, the arm's replies not plain's


def relative_spread(values: Sequence[float]) -> float:
    """(max - min) / median; 0 for fewer than two values or a zero median."""
    if len(values) < 2:
        return 0.0
    median = statistics.median(values)
    return (max(values) - min(values)) / median if median else 0.0


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _measured_median(values: Iterable[float]) -> float | None:
    return _median([v for v in values if measured([v])])


def _cell(key: CellKey, rows: list[Row], rate: Rate = "whole") -> CellStats:
    done = [r for r in rows if r.done]
    # A done run at 0 tok/s has no rate (a one-token reply under `--rate decode`): it counts
    # toward no median, spread or n, as in a speed-up (`interval.measured`).
    timed = [r for r in done if measured([r.rate(rate)])]
    values = tuple(r.rate(rate) for r in timed)
    spread = relative_spread(values) if values else None
    loop = statistics.median(r.loop_share for r in done) if done else 0.0
    return CellStats(
        key=key, n=len(timed), n_failed=len(rows) - len(done), values=values,
        median_tok_per_s=statistics.median(values) if values else None,
        min_tok_per_s=min(values) if values else None,
        max_tok_per_s=max(values) if values else None,
        spread=spread, spread_flag=spread is not None and spread > SPREAD_FLAG,
        loop_share=loop, looping=loop > LOOP_SHARE_FLAG,
        noisy_runs=sum(r.noisy for r in timed),  # "2 of n" in the noisy line
        counters=done[0].counters if done else None,
        throttled_runs=sum(r.throttled for r in done),
        median_decode_tok_per_s=_measured_median(r.decode_tok_per_s for r in done),
        median_prompt_tok_per_s=_measured_median(r.prompt_tok_per_s for r in done),
        shown=done[0].shown if done else CellValues(),
    )


def cell_stats(runs: Iterable[Any], rate: Rate = "whole") -> list[CellStats]:
    """Statistics of every cell, sorted by (target, model, prompt, arm).

    Args:
        runs: runs in any shape `runs.to_rows` accepts.
        rate: which tok/s the medians, spreads and speed-ups read ("whole" or "decode").

    Returns:
        One `CellStats` per cell; cells whose runs all failed, or have no rate, have n = 0
        and None medians.
    """
    return [_cell(key, rows, rate) for key, rows in group_by_cell(to_rows(runs)).items()]


def noise_verdict(interval: RatioInterval | None) -> Verdict:
    """"gain", "loss", "within noise" or "no verdict" by the one rule (`interval.py`)."""
    return _VERDICTS[side(interval)]


def diverged_from_plain(arm: str, status: str | None) -> bool:
    """Whether a cell's parity `status` says its arm replied otherwise than plain: a speed-up
    of another reply, kept out of the headline. A peer arm's differing reply is another
    library's decoding (information), and plain is the reference itself."""
    return status == "diverged" and arm != "plain" and not is_peer(arm)


def speedups(cells: Iterable[CellStats],
             parity: Iterable[ParityVerdict] = ()) -> list[SpeedUp]:
    """Speed-up over plain of every non-plain cell that has a measured plain partner, over
    the repeats of each side that have a rate (the cells' `values`: 0 tok/s is not measured).

    Args:
        cells: from `cell_stats`.
        parity: from `parity_verdicts`: marks the speed-ups whose replies are not plain's.

    Returns:
        Speed-ups in cell order (looping and diverged ones included, flagged).
    """
    status = {v.key: v.status for v in parity}
    by_key = {c.key: c for c in cells}
    out = []
    for key, cell in by_key.items():
        plain = by_key.get(key.with_arm("plain"))
        # With no repeat measured on a side, no speed-up (not a 0.00x the interval calls a
        # gain, nor a cell the headline counts unaveraged).
        if key.arm == "plain" or plain is None or not cell.n or not plain.n:
            continue
        arm_values, plain_values = cell.values, plain.values
        arm_median, plain_median = statistics.median(arm_values), statistics.median(plain_values)
        interval = ratio_interval(plain_values, arm_values)
        out.append(SpeedUp(
            key=key, ratio=arm_median / plain_median, arm_median_tok_per_s=arm_median,
            plain_median_tok_per_s=plain_median, interval=interval,
            verdict=noise_verdict(interval), n=min(len(arm_values), len(plain_values)),
            spread_flag=cell.spread_flag or plain.spread_flag,
            looping=cell.looping or plain.looping,
            diverged=diverged_from_plain(key.arm, status.get(key)),
        ))
    return out


def geomean(values: Sequence[float]) -> float | None:
    """Geometric mean of positive values; None when there are none."""
    positive = [v for v in values if v > 0]
    if not positive:
        return None
    return math.exp(sum(math.log(v) for v in positive) / len(positive))


def headline(ups: Iterable[SpeedUp]) -> list[Headline]:
    """Per (target, arm): geomean speed-up and verdict counts over the cells that neither loop
    nor diverge from plain.

    Args:
        ups: from `speedups`, looping and diverged ones included (counted, not averaged).

    Returns:
        Headlines sorted by target, then arm.
    """
    groups: dict[tuple[str, str], list[SpeedUp]] = {}
    for up in ups:
        groups.setdefault((up.key.target, up.key.arm), []).append(up)
    out = []
    for (target, arm), group in sorted(groups.items()):
        kept = [u for u in group if not (u.looping or u.diverged)]
        verdicts = [u.verdict for u in kept]
        looping = sum(u.looping for u in group)
        out.append(Headline(
            target=target, arm=arm, geomean_speedup=geomean([u.ratio for u in kept]),
            cells=len(kept), gains=verdicts.count("gain"), losses=verdicts.count("loss"),
            within_noise=verdicts.count("within noise"), looping_excluded=looping,
            no_verdict=verdicts.count("no verdict"),
            diverged_excluded=len(group) - len(kept) - looping,
            ratios=tuple((u.key.model, u.key.prompt, u.ratio) for u in kept),
        ))
    return out


def first_divergence(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    """Index of the first difference; the shorter length when one is a prefix; None if equal."""
    if type(a) is type(b) and a == b:  # one C-level comparison: most replies are alike
        return None
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare_replies(reference: Row, candidate: Row) -> ParityVerdict:
    """Compare one reply with a reference reply by token ids, else by text.

    Args:
        reference: the reference run (plain on the same target, usually).
        candidate: the run compared with it.

    Returns:
        "identical", "diverged" (with indices) or "missing" (neither tokens nor texts).
    """
    token_index = char_index = None
    have_tokens = reference.token_ids is not None and candidate.token_ids is not None
    have_text = reference.output_text is not None and candidate.output_text is not None
    if reference.token_ids is not None and candidate.token_ids is not None:
        token_index = first_divergence(reference.token_ids, candidate.token_ids)
    if (reference.output_text is not None and candidate.output_text is not None
            and (token_index is not None or not have_tokens)):
        char_index = first_divergence(reference.output_text, candidate.output_text)
    if not (have_tokens or have_text):
        return ParityVerdict(candidate.key, reference.key, "missing")
    if token_index is None and char_index is None:
        return ParityVerdict(candidate.key, reference.key, "identical")
    ref_tok, cand_tok = _tokens_at(reference.token_ids, candidate.token_ids, token_index)
    return ParityVerdict(candidate.key, reference.key, "diverged", token_index, char_index,
                         ref_tok, cand_tok)


def _tokens_at(a: Sequence[int] | None, b: Sequence[int] | None, i: int | None):
    if a is None or b is None or i is None:
        return None, None
    return (a[i] if i < len(a) else None), (b[i] if i < len(b) else None)


def _first_done(rows: list[Row]) -> Row | None:
    return next((r for r in rows if r.done), None)


def parity_verdicts(runs: Iterable[Any]) -> list[ParityVerdict]:
    """Every done repetition of each arm against plain's first on the same target, and
    plain's repetitions against plain's first (greedy plain decoding replies alike each time).

    Args:
        runs: runs in any shape `runs.to_rows` accepts.

    Returns:
        One verdict per cell, plain's included: "identical" when every repetition compared
        is, else "diverged" at the first that differs (`repeat`); "missing" when either side
        has no done run, or was sampled without a seed (each run draws anew: nothing to
        compare).
    """
    cells = group_by_cell(to_rows(runs))
    return [_cell_parity(key, rows, cells.get(key.with_arm("plain"), []))
            for key, rows in cells.items()]


def _cell_parity(key: CellKey, rows: Sequence[Row], plains: Sequence[Row]) -> ParityVerdict:
    """One cell's done repetitions (`rows`, in repeat order) against plain's first done one
    (of `plains`, plain's runs on the same target, model and prompt; for plain, `rows`)."""
    # Plain's reply from each run's own matrix: `results --cells` pools matrices whose
    # max_tokens differ, and a reply cut at 16 tokens is no parity check of one at 40.
    firsts: dict[str | None, Row] = {}
    for plain in plains:
        if plain.done:
            firsts.setdefault(plain.matrix_id, plain)
    fallback = _first_done(list(plains))
    first_differing, replies = None, 0
    for row in rows:
        reference = firsts.get(row.matrix_id, fallback)
        if not row.done or reference is None or reference.draws_anew or row.draws_anew:
            continue
        verdict = compare_replies(reference, row)
        if verdict.status == "missing":
            continue
        replies += 1
        if first_differing is None and verdict.status == "diverged":
            first_differing = replace(verdict, repeat=row.repeat)
    if not replies:
        return ParityVerdict(key, key.with_arm("plain"), "missing")
    found = first_differing or ParityVerdict(key, key.with_arm("plain"), "identical")
    return replace(found, replies=replies)


def cross_target_parity(runs: Iterable[Any]) -> list[ParityVerdict]:
    """Plain replies of one model and prompt on every target against the first target's.

    Args:
        runs: runs in any shape `runs.to_rows` accepts.

    Returns:
        One verdict per (model, prompt, target other than the first by label).
    """
    plains: dict[tuple[str, str], list[Row]] = {}
    for key, rows in group_by_cell(to_rows(runs)).items():
        first = _first_done(rows)
        if key.arm == "plain" and first is not None:
            plains.setdefault((key.model, key.prompt), []).append(first)
    out = []
    for group in plains.values():
        out += [compare_replies(*_over_common_length(group[0], other)) for other in group[1:]]
    return out


def _over_common_length(a: Row, b: Row) -> tuple[Row, Row]:
    """Targets may run different token limits (MLX on a CPU runs shorter replies): when the
    shorter reply stopped at its limit, compare both over its length. A reply that stopped
    early on EOS or the loop guard still counts as a divergence where the other went on."""
    if a.token_ids is None or b.token_ids is None:
        return a, b
    shorter = a if len(a.token_ids) <= len(b.token_ids) else b
    if shorter.stop_reason != "max_tokens":
        return a, b
    n = min(len(a.token_ids), len(b.token_ids))
    text_n = len(shorter.output_text) if shorter.output_text is not None else None
    return _truncated(a, n, text_n), _truncated(b, n, text_n)


def _truncated(row: Row, n: int, text_n: int | None) -> Row:
    text = row.output_text if row.output_text is None or text_n is None else row.output_text[:text_n]
    tokens = None if row.token_ids is None else row.token_ids[:n]
    return replace(row, token_ids=tokens, output_text=text)


def summarize(runs: Iterable[Any]) -> MatrixSummary:
    """Everything for the matrix tables in one pass.

    Args:
        runs: runs in any shape `runs.to_rows` accepts.

    Returns:
        Cells, the headline's speed-ups, looping ones and (not looping) those whose replies
        are not plain's (each apart), headlines and parity.
    """
    rows = to_rows(runs)
    cells = cell_stats(rows)
    parity = parity_verdicts(rows)
    ups = speedups(cells, parity)
    return MatrixSummary(
        cells=tuple(cells),
        speedups=tuple(u for u in ups if not (u.looping or u.diverged)),
        looping=tuple(u for u in ups if u.looping),
        headline=tuple(headline(ups)),
        parity=tuple(parity),
        diverged=tuple(u for u in ups if u.diverged and not u.looping),
    )


@dataclass(frozen=True)
class PeerHeadline:
    """Our best arm on a target against the best peer arm there (`engine/peers.py`), both
    arms' geometric-mean speed-ups over our plain taken over the `cells` both measured
    (neither failed nor looping, ours not diverged from plain: each headline's cells), plain
    itself 1x on our side; None where they share none."""

    target: str
    ours: str
    ours_speedup: float | None
    peer: str
    peer_speedup: float | None
    cells: int = 0

    @property
    def ratio(self) -> float | None:
        """How many times faster our best arm is than the best peer (below 1: slower)."""
        if self.ours_speedup is None or self.peer_speedup is None:
            return None
        return self.ours_speedup / self.peer_speedup


def versus_peers(headlines: Iterable[Headline]) -> list[PeerHeadline]:
    """Per target with a peer headline: our best headline arm (or plain) against the best
    peer's, over the cells both measured (a geometric mean over other cells is no comparison).

    Args:
        headlines: from `headline`.

    Returns:
        One `PeerHeadline` per target that has a peer arm's headline, sorted by target.
    """
    ours: dict[str, Headline] = {}
    peers: dict[str, Headline] = {}
    for item in headlines:
        if item.geomean_speedup is not None:
            side = peers if is_peer(item.arm) else ours
            best = side.get(item.target)
            if best is None or _by_speedup(item) > _by_speedup(best):
                side[item.target] = item
    out = []
    for target, peer in sorted(peers.items()):
        theirs = {(model, prompt): r for model, prompt, r in peer.ratios}
        head = ours.get(target)
        if head is None or _by_speedup(head) < (1.0, "plain"):
            # Plain is 1x wherever the peer has a speed-up: it is that speed-up's baseline.
            arm, mine = "plain", dict.fromkeys(theirs, 1.0)
        else:
            arm, mine = head.arm, {(model, prompt): r for model, prompt, r in head.ratios}
        both = [cell for cell in theirs if cell in mine]
        out.append(PeerHeadline(target, arm, geomean([mine[c] for c in both]), peer.arm,
                                geomean([theirs[c] for c in both]), len(both)))
    return out


def _by_speedup(item: Headline) -> tuple[float, str]:
    return item.geomean_speedup or 0.0, item.arm
