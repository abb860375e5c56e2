"""Plain rows for the summaries: one stored run, whatever shape it arrived in.

`to_rows` accepts dicts (store query rows, JSON) or objects with attributes (`RunResult`
joined with its `RunSpec`, ORM rows). Fields read, each by name:
`target` (a `Target`, a mapping or a `host/engine/device` label) or `host`/`engine`/`device`;
`model`; `prompt_name` (or `prompt`); `arm`; `repeat` (default: order of appearance in its
cell); `tok_per_s`; `status` (default `done`); `loop_share`; `noisy`; `token_ids`;
`output_text`; `throttled`; counters either as a `counters` mapping or as top-level fields
(`COUNTER_FIELDS`: the engine's counters, then `generated_tokens`; a loop counter given as
None stays None: a peer arm's run counts none of them); the values a cell shows as they are
(`CELL_VALUE_FIELDS`: the `RunResult` fields marked `jobs.run.CELL_VALUE`, None when absent).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, make_dataclass, replace
from typing import Any, NamedTuple

from specfleet.engine.stats import COUNTER_FIELDS as ENGINE_COUNTERS
from specfleet.engine.stats import PromptLookupStats, Rate, decode_tok_per_s, prompt_tok_per_s
from specfleet.jobs.run import CellValue, RunResult

COUNTER_FIELDS: tuple[str, ...] = (*ENGINE_COUNTERS, "generated_tokens")

# The run's values a cell shows as they are: the `RunResult` fields marked `CELL_VALUE`, in
# their order there (each declared once, on the contract; `CellValues` carries them).
_CELL_VALUES = {name: info for name, info in RunResult.model_fields.items()
                if any(isinstance(mark, CellValue) for mark in info.metadata)}
CELL_VALUE_FIELDS: tuple[str, ...] = tuple(_CELL_VALUES)

# The stored run's fields (store `RunRow` names) that name its cell, that its tok/s values
# need, and that `to_row` reads: a caller fetching many runs selects only these.
CELL_FIELDS: tuple[str, ...] = ("host", "engine", "device", "model", "prompt_name", "arm")
VALUE_FIELDS: tuple[str, ...] = (*CELL_FIELDS, "repeat", "status", "tok_per_s")
ROW_FIELDS: tuple[str, ...] = (
    *VALUE_FIELDS, "loop_share", "noisy", "token_ids", "output_text", *COUNTER_FIELDS,
    "stop_reason", "throttled", "decode_s", "prompt_tokens", "prefill_s", *CELL_VALUE_FIELDS,
    "matrix_id", "temperature", "seed",
)


class CellKey(NamedTuple):
    """One cell of a matrix: a target label, a model, a prompt and an arm (a tuple, so a
    `(target, model, prompt, arm)` tuple finds it in a dict keyed by cells)."""

    target: str
    model: str
    prompt: str
    arm: str

    def with_arm(self, arm: str) -> CellKey:
        return self._replace(arm=arm)


# A stored run's loop counters: one per `engine.stats.COUNTER_FIELDS` name, None when the run
# counted none of them (a peer arm's, `engine/peers.py`).
_LoopCounters: Any = make_dataclass(
    "_LoopCounters", [(name, int | None, 0) for name in ENGINE_COUNTERS], frozen=True
)


@dataclass(frozen=True)
class Counters(_LoopCounters):
    """A stored run's counters: the engine's `PromptLookupStats`, frozen, plus the tokens the
    run generated (the ratios' denominator); the fields follow `COUNTER_FIELDS`. A peer arm's
    run counts no rounds or drafts: those and the ratios are None."""

    generated_tokens: int = 0

    @property
    def counted(self) -> bool:
        """False for a peer arm's run: the loop counters do not apply to it."""
        return self.rounds is not None

    @property
    def acceptance_rate(self) -> float | None:
        stats = self._engine_stats()
        return stats.acceptance_rate if stats else None

    @property
    def tokens_per_forward(self) -> float | None:
        stats = self._engine_stats()
        return stats.tokens_per_forward(self.generated_tokens) if stats else None

    def _engine_stats(self) -> PromptLookupStats | None:
        """The engine's own counters, so the ratios have one definition (docs/engine.md,
        "Counters"); None when they were not counted."""
        if not self.counted:
            return None
        return PromptLookupStats(**{name: getattr(self, name) or 0 for name in ENGINE_COUNTERS})


_CellValuesBase: Any = make_dataclass(
    "_CellValuesBase", [(name, info.annotation, None) for name, info in _CELL_VALUES.items()],
    frozen=True,
)


@dataclass(frozen=True)
class CellValues(_CellValuesBase):
    """A run's values its cell shows as they are, one per `CELL_VALUE_FIELDS` name; None where
    the run did not carry one (stored before its column). A cell holds its first done
    repetition's."""


@dataclass(frozen=True)
class Row:
    """One run, normalized."""

    key: CellKey
    repeat: int
    tok_per_s: float
    status: str
    loop_share: float
    noisy: bool
    token_ids: tuple[int, ...] | None
    output_text: str | None
    counters: Counters
    stop_reason: str | None = None
    throttled: bool = False  # the host was throttled before or after the run
    decode_tok_per_s: float = 0.0  # generation after the first token (engine.stats)
    prompt_tok_per_s: float = 0.0  # prefill
    shown: CellValues = field(default_factory=CellValues)
    matrix_id: str | None = None  # its matrix: a cell pooled across matrices pairs within one
    draws_anew: bool = False  # sampled without a seed: its reply is no parity evidence

    @property
    def done(self) -> bool:
        return self.status == "done"

    def rate(self, which: Rate) -> float:
        """The whole-call rate (the reference's headline) or the decode-only one."""
        return self.tok_per_s if which == "whole" else self.decode_tok_per_s


_MAPPING_TYPES: dict[type, bool] = {}  # a cache: one ABC check per type, not per field


def _is_mapping(cls: type) -> bool:
    # An ABC isinstance check per field was most of a 2,000-run page's time.
    known = _MAPPING_TYPES.get(cls)
    if known is None:
        known = _MAPPING_TYPES[cls] = issubclass(cls, Mapping)
    return known


def _getter(obj: Any) -> Callable[..., Any]:
    """`get(name, default)` over a mapping's keys or an object's attributes, picked once per
    run (a C-level call per field: this is per field of every run of a page)."""
    if _is_mapping(type(obj)):
        return obj.get
    return functools.partial(getattr, obj)


def _get(obj: Any, name: str, default: Any = None) -> Any:
    return _getter(obj)(name, default)


def target_label(obj: Any) -> str:
    """`host/engine/device` of a row's `target` (object, mapping or label) or its fields."""
    return _label(obj, _getter(obj))


def _label(obj: Any, get: Callable[..., Any]) -> str:
    target = get("target", None)
    if isinstance(target, str):
        return target
    if target is None:
        target = obj
    else:
        get = _getter(target)
    label = getattr(target, "label", None)
    if isinstance(label, str):
        return label
    return f"{get('host', '?')}/{get('engine', '?')}/{get('device', '?')}"


def _counters(obj: Any, get: Callable[..., Any]) -> Counters:
    source = get("counters", None)
    if source:
        get = _getter(source)
    if get("rounds", 0) is None:  # never counted (a peer arm's run): None, not 0
        loop = dict.fromkeys(ENGINE_COUNTERS)
        return Counters(**loop, generated_tokens=int(get("generated_tokens", 0) or 0))
    return Counters(*[int(get(name, 0) or 0) for name in COUNTER_FIELDS])


def draws_anew(temperature: float | None, seed: int | None) -> bool:
    """Whether a run sampled without a seed: each such run draws its reply anew, so its
    reply is no parity evidence."""
    return float(temperature or 0.0) > 0 and seed is None


def to_row(obj: Any) -> Row:
    """Normalize one run (mapping or object); `repeat` is -1 when the run does not say."""
    get = _getter(obj)
    key = CellKey(_label(obj, get), str(get("model", None)),
                  str(get("prompt_name", get("prompt", None))), str(get("arm", None)))
    tokens = get("token_ids", None)
    text = get("output_text", None)
    repeat = get("repeat", None)
    return Row(
        key=key, repeat=-1 if repeat is None else int(repeat),
        tok_per_s=float(get("tok_per_s", 0.0) or 0.0),
        status=str(get("status", "done") or "done"),
        loop_share=float(get("loop_share", 0.0) or 0.0),
        noisy=bool(get("noisy", False)),
        token_ids=None if tokens is None else tuple(map(int, tokens)),
        output_text=None if text is None else str(text),
        counters=_counters(obj, get),
        stop_reason=get("stop_reason", None),
        throttled=bool(get("throttled", False)),
        decode_tok_per_s=decode_tok_per_s(int(get("generated_tokens", 0) or 0),
                                          float(get("decode_s", 0.0) or 0.0)),
        prompt_tok_per_s=prompt_tok_per_s(int(get("prompt_tokens", 0) or 0),
                                          float(get("prefill_s", 0.0) or 0.0)),
        shown=CellValues(*[get(name, None) for name in CELL_VALUE_FIELDS]),
        matrix_id=get("matrix_id", None),
        draws_anew=draws_anew(get("temperature", 0.0), get("seed", None)),
    )


def to_rows(runs: Iterable[Any]) -> list[Row]:
    """Normalize runs; a run without `repeat` gets its order of appearance in its cell."""
    rows = [run if isinstance(run, Row) else to_row(run) for run in runs]
    seen: dict[CellKey, int] = {}
    out = []
    for row in rows:
        index = seen.get(row.key, 0)
        seen[row.key] = index + 1
        out.append(row if row.repeat >= 0 else replace(row, repeat=index))
    return out


def group_by_cell(rows: Iterable[Row]) -> dict[CellKey, list[Row]]:
    """Rows by cell, cells sorted by key, rows within a cell by repeat."""
    cells: dict[CellKey, list[Row]] = {}
    for row in rows:
        cells.setdefault(row.key, []).append(row)
    return {key: sorted(cells[key], key=lambda r: r.repeat) for key in sorted(cells)}
