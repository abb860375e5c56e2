"""The messages between the head and a worker: one planned run and its result.

These pydantic models are the contract shared by the planner (`jobs/plan.py`), the worker
(`workers/host.py`), the scheduler and the store (`store/`). Units are in the names.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, create_model

from specfleet.engine.config import LookupOptions, PolicyChoice
from specfleet.engine.governor import Policy
from specfleet.engine.kinds import Device, Engine
from specfleet.engine.peers import Peer
from specfleet.engine.stats import COUNTER_FIELDS, LOOP_GUARD_MAX, StopReason

# Our arms: plain decoding, a policy choice (auto or a named policy), or fixed (non-adaptive).
OwnArm = Literal["plain", PolicyChoice, "fixed"]
OWN_ARMS: tuple[OwnArm, ...] = get_args(OwnArm)
# What a matrix can name: our arms, or a peer engine's own generation (`engine/peers.py`).
Arm = Literal[OwnArm, Peer]
ARMS: tuple[Arm, ...] = get_args(Arm)
ResolvedPolicy = Literal["plain", Policy, "fixed", Peer]  # what an arm ran as on its device
RunStatus = Literal["pending", "running", "done", "failed", "interrupted"]


@dataclass(frozen=True)
class CellValue:
    """Marks a `RunResult` field that a matrix's cells show as it is, their first done
    repetition's value: `name: Annotated[int | None, CELL_VALUE] = None`. Declared once here,
    it reaches the statistics row, the cell, the cell view and their JSON/CSV records by name
    (`stats.runs.CELL_VALUE_FIELDS`); a table shows it as `cell.shown.name`."""


CELL_VALUE = CellValue()


class Target(BaseModel):
    """Where a run executes: a host, an engine on it and the engine's device."""

    model_config = ConfigDict(frozen=True)

    host: str
    engine: Engine
    device: Device

    @property
    def label(self) -> str:
        return f"{self.host}/{self.engine}/{self.device}"


class LoopGuard(BaseModel):
    """Stop when the last `period * repeats` tokens repeat one period in [min, max] (docs/engine.md, "Loop guard")."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    min_period: int = Field(1, ge=1, le=LOOP_GUARD_MAX)
    max_period: int = Field(64, ge=1, le=LOOP_GUARD_MAX)
    repeats: int = Field(8, ge=2, le=LOOP_GUARD_MAX)


class RunSpec(BaseModel):
    """One timed generation the head asks a worker to perform."""

    model_config = ConfigDict(frozen=True)

    run_key: str
    matrix_id: str | None = None
    target: Target
    model: str
    prompt_name: str
    prompt_text: str
    chat: bool = True
    arm: Arm
    lookup: LookupOptions = LookupOptions()
    repeat: int = 0
    max_tokens: int
    temperature: float = 0.0
    seed: int | None = None
    loop_guard: LoopGuard | None = None
    # The calibrated arm's stored width-cost table (ratios of widths 1..n) found by the head,
    # and "host_fingerprint:weights_hash" it was measured under; the worker checks the key.
    costs: tuple[float, ...] | None = None
    costs_key: str | None = None


class _RunOutput(BaseModel):
    """A result's fields before its counters: what the run produced and how fast."""

    run_key: str
    status: Literal["done", "failed", "interrupted"]
    error: str | None = None
    target: Target
    resolved_policy: ResolvedPolicy | None = None
    output_text: str = ""
    token_ids: list[int] = []
    prompt_token_ids: list[int] = []  # the encoded prompt, so a greedy run can be replayed
    prompt_tokens: int = 0
    generated_tokens: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    total_s: float = 0.0
    tok_per_s: float = 0.0  # whole call, prefill included (the reference's headline figure)
    warmup_s: float = 0.0
    stop_reason: StopReason | None = None


# The loop's counters, one per `engine.stats.COUNTER_FIELDS` name, in their place after
# `stop_reason`; None for a peer arm, which counts none of them.
_counter_fields: dict[str, Any] = {name: (int | None, 0) for name in COUNTER_FIELDS}
_RunCounted = create_model("_RunCounted", __base__=_RunOutput, **_counter_fields)


class RunResult(_RunCounted):
    """Everything a worker measured for one run; written to `runs` as is."""

    loop_share: float = 0.0  # fraction of generated tokens inside a trailing repeated cycle
    load_before: tuple[float, float, float] | None = None
    load_after: tuple[float, float, float] | None = None
    noisy: bool = False
    # Host conditions read just before and just after the timed window (`workers/conditions`):
    # {"before": HostConditions.to_dict(), "after": ...}; throttled when either breaks a rule.
    conditions: dict = {}
    throttled: bool = False
    throttle_reason: str | None = None
    weights_hash: str | None = None
    prompt_hash: str | None = None
    engine_config: dict = {}
    versions: dict = {}
    host_fingerprint: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    # A width-cost table the worker had to measure for this run (the head stores it).
    calibration: dict | None = None
