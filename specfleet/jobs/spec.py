"""What users submit: a benchmark matrix (YAML), a parity matrix, a batch of prompts.

A matrix file reads like the reference harness's cases:

    name: demo
    models: [smollm2-135m]
    prompts: [edit_fn, {name: story, max_tokens: 800}, {name: hi, text: "Say hi."}]
    arms: [plain, graded, {arm: gated, max_draft: 4}]
    repeats: 5
    max_tokens: {default: 400, mlx: 64}
    targets: {engines: [torch, mlx]}

The field types and bounds are here; the checks across fields are `spec_checks.py`, and
reading a file into a checked spec is `spec_files.py`.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Annotated, Any, Self, get_type_hints

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    create_model,
)

from specfleet.engine.config import POLICY_OPTIONS, ConfigError, LookupOptions, options_for
from specfleet.engine.kinds import Device, Engine
from specfleet.engine.peers import (
    PEER_LOOKUP_NGRAM_MAX,
    PEER_LOOKUP_NGRAM_MIN,
    PEER_LOOKUP_TOKENS,
    PEERS,
    is_peer,
    peer_kind,
)
from specfleet.engine.stats import LoopGuardConfig
from specfleet.errors import UserError, describe_value
from specfleet.jobs.run import ARMS, OWN_ARMS, Arm, LoopGuard, OwnArm, Target
from specfleet.settings import host_name_problem
from specfleet.userfiles import MAX_MODEL_LEN, MAX_NAME_LEN

MAX_TOKENS_LIMIT = 131072
MAX_REPEATS = 100
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
# Seeds fit the store's 32-bit integer column and every engine's generator.
SEED_RANGE = (0, 2**31 - 1)
TEMPERATURE_RANGE = (0.0, 10.0)
SeedField = Annotated[int | None, Field(ge=SEED_RANGE[0], le=SEED_RANGE[1])]


class _Strict(BaseModel):
    # Strict: YAML already has types; "3" for an integer is a mistake worth naming.
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


def _mapping_else(value: Any, scalar: str, mapping: str) -> Any:
    """A field written as a scalar or a mapping, whose scalar form was turned into a mapping
    already: a value of neither form is refused naming both (pydantic says only "expected a
    mapping" of a field mostly written as the scalar)."""
    if isinstance(value, dict):
        return value
    raise ValueError(f"expected {scalar} or a mapping {mapping}, got {describe_value(value)}")


def _int_to_limit(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        if not 1 <= value <= MAX_TOKENS_LIMIT:
            raise ValueError(f"must be between 1 and {MAX_TOKENS_LIMIT}, got {value}")
        return {"default": value}
    return _mapping_else(value, "an integer", f"of {', '.join(TokenLimit.model_fields)}")


_Limit = Annotated[int | None, Field(ge=1, le=MAX_TOKENS_LIMIT)]


class TokenLimit(_Strict):
    """`max_tokens`: one integer, or a mapping with `default` and/or per-engine values."""

    default: _Limit = None
    mlx: _Limit = None
    torch: _Limit = None
    toy: _Limit = None

    def for_engine(self, engine: str) -> int | None:
        """The limit for `engine`: its own value, else `default`, else None."""
        own = getattr(self, engine, None)
        return own if own is not None else self.default


TokenLimitField = Annotated[
    TokenLimit, BeforeValidator(_int_to_limit, json_schema_input_type=int | TokenLimit)
]


def _host_name(value: Any) -> Any:
    if isinstance(value, str) and (problem := host_name_problem(value)):
        raise ValueError(problem)
    return value


HostNameField = Annotated[str, AfterValidator(_host_name)]
# Each worker says its kind (`workers.hardware.host_kind`): OS, then mlx, cpu or cuda.
KIND_PATTERN = re.compile(r"[a-z0-9_.]+(-[a-z0-9_.]+)+")


def _host_kind(value: Any) -> Any:
    if isinstance(value, str) and not KIND_PATTERN.fullmatch(value):  # no host has that kind
        raise ValueError("expected a host kind such as mac-mlx, gb10-cuda or linux-cpu "
                         f"(lower-case words joined by '-'), got {value!r}")
    return value


def _folder_path(value: Any) -> Any:
    if isinstance(value, str) and not value.strip():  # '' is the matrix's own folder
        raise ValueError(f"{value!r} is blank; expected a folder path relative to this file")
    return value


class TargetSelector(_Strict):
    """Which targets a matrix (or one prompt) runs on; an empty list means all."""

    kinds: list[Annotated[str, AfterValidator(_host_kind)]] = []
    hosts: list[HostNameField] = []
    engines: list[Engine] = []
    devices: list[Device] = []

    def matches(self, target: Target, kind: str | None = None) -> bool:
        """True when `target` (of host kind `kind`) passes every non-empty list.

        Args:
            target: the (host, engine, device) to test.
            kind: the host's kind label (e.g. `mac-mlx`); None never matches a kinds list.

        Returns:
            Whether the target is selected.
        """
        return (
            (not self.kinds or kind in self.kinds)
            and (not self.hosts or target.host in self.hosts)
            and (not self.engines or target.engine in self.engines)
            and (not self.devices or target.device in self.devices)
        )

    def describe(self) -> str:
        parts = [f"{field} in [{', '.join(values)}]" for field, values in self.lists() if values]
        return "; ".join(parts) if parts else "all targets"

    def lists(self) -> list[tuple[str, list[str]]]:
        """Each selector field's name and values, in a fixed order."""
        return [("kinds", self.kinds), ("hosts", self.hosts), ("engines", list(self.engines)),
                ("devices", list(self.devices))]


def _name_to_prompt(value: Any) -> Any:
    if isinstance(value, str):
        return {"name": value}
    return _mapping_else(value, "a prompt name", "with name and text")


class PromptEntry(_Strict):
    """A prompt: a file name in the prompt directory, or inline text."""

    name: str = Field(pattern=NAME_PATTERN, max_length=MAX_NAME_LEN)
    text: str | None = None
    max_tokens: TokenLimitField | None = None
    targets: TargetSelector | None = None


def _name_to_arm(value: Any) -> Any:
    if isinstance(value, str):
        return {"arm": value}
    return _mapping_else(value, "an arm name", "with arm: NAME and its options")


# The options an arm may set, in a matrix file's order; its name says whether it adapts.
# After the common ones, each policy's own (`policies.POLICY_OPTIONS`).
ARM_OPTIONS: tuple[str, ...] = ("ngram_min", "ngram_max", "max_draft", *POLICY_OPTIONS)
# Each option typed as `LookupOptions` or its policy declares it, None when left out.
_option_types = get_type_hints(LookupOptions)
_arm_option_fields: dict[str, Any] = {
    name: (_option_types[name] | None, None) if name in _option_types
    else (int | None, Field(None, description=POLICY_OPTIONS[name].help))
    for name in ARM_OPTIONS
}


class _ArmName(_Strict):
    arm: Arm


_ArmWithOptions = create_model("_ArmWithOptions", __base__=_ArmName, **_arm_option_fields)


class ArmSpec(_ArmWithOptions):
    def given_options(self) -> dict[str, Any]:
        """The `ARM_OPTIONS` this arm sets, by name; the ones left out take their defaults."""
        # Without `arm` the dump holds only the option fields (extra keys are refused).
        return {k: v for k, v in self.model_dump(exclude={"arm"}).items() if v is not None}

    def lookup_options(self) -> LookupOptions:
        """The prompt-lookup knobs this arm runs with (docs/engine.md "Lookup" defaults where
        not given; the calibrated arm drafts up to 32 unless told otherwise; hf-lookup's are
        transformers' own: up to 10 tokens after a 2- or 1-gram)."""
        given = self.given_options()
        if is_peer(self.arm):
            return _peer_lookup(self.arm, given)
        return options_for(self.arm, {**given, "adaptive": self.arm != "fixed"})


def _quoted(names: Any) -> str:
    return ", ".join(f"`{name}`" for name in names)


# The schema's description of an arm; from the arm Literals, so a new policy is listed.
ArmSpec.__doc__ = (
    f"An arm: {_quoted(a for a in OWN_ARMS if a != 'fixed')} or `fixed` (non-adaptive),\n"
    f"or a peer engine's own generation ({_quoted(PEERS)}), with options."
)


def _peer_lookup(arm: str, given: dict[str, Any]) -> LookupOptions:
    kind = peer_kind(arm)
    if kind is None or not kind.drafts:
        return LookupOptions()  # no drafting: stored like plain's
    return LookupOptions(ngram_min=PEER_LOOKUP_NGRAM_MIN,
                         ngram_max=given.get("ngram_max", PEER_LOOKUP_NGRAM_MAX),
                         max_draft=given.get("max_draft", PEER_LOOKUP_TOKENS), adaptive=False)


def _parse_loop_guard(value: Any) -> Any:
    if not isinstance(value, str):
        return _mapping_else(value, "'MIN,MAX,REPEATS'",
                             f"of {', '.join(LoopGuard.model_fields)}")
    try:
        guard = LoopGuardConfig.parse(value)
    except ConfigError as err:
        raise ValueError(str(err)) from None
    return asdict(guard)  # the field's own bounds and spec_checks validate it


class LoopGuardSpec(LoopGuard):
    __doc__ = LoopGuard.__doc__
    # Strict as every matrix field ("4" or 4.0 for a count is a mistake worth naming); a
    # run carries it as the `LoopGuard` it is.
    model_config = ConfigDict(strict=True, title="LoopGuard")


LoopGuardField = Annotated[
    LoopGuardSpec, BeforeValidator(_parse_loop_guard, json_schema_input_type=str | LoopGuardSpec)
]


class MatrixSpec(_Strict):
    """A benchmark matrix: models x prompts x arms x repeats on every selected target."""

    name: str = Field(pattern=NAME_PATTERN, max_length=MAX_NAME_LEN,
                      description="Matrix name (letters, digits, _-.).")
    models: list[Annotated[str, Field(min_length=1, max_length=MAX_MODEL_LEN)]] = Field(
        min_length=1, description="Model aliases (`specfleet models list`) or model folders.")
    prompts: list[Annotated[PromptEntry, BeforeValidator(
        _name_to_prompt, json_schema_input_type=str | PromptEntry)]] = Field(
        min_length=1, description="Prompt file names (in prompt_dir) or {name, text}.")
    arms: list[Annotated[ArmSpec, BeforeValidator(
        _name_to_arm, json_schema_input_type=Arm | ArmSpec)]] = Field(
        min_length=1, description=f"{', '.join(ARMS)}; or {{arm, options}}.")
    repeats: int = Field(5, ge=1, le=MAX_REPEATS, description="Repetitions of every cell (5: the fewest whose verdicts hold whatever the two sides' spreads, docs/trust.md).")
    max_tokens: TokenLimitField = Field(
        TokenLimit(default=256), description="New-token limit: N or {default, mlx, torch}.")
    temperature: float = Field(0.0, ge=TEMPERATURE_RANGE[0], le=TEMPERATURE_RANGE[1],
                               allow_inf_nan=False, description="0 = greedy.")
    seed: SeedField = Field(None, description="Sampling seed 0..2^31-1 (same every repeat; "
                            "with temperature > 0).")
    chat: bool = Field(True, description="Wrap prompts in the model's chat template.")
    loop_guard: LoopGuardField | None = Field(
        None, description="Stop looping replies: 'min,max,repeats' or a mapping (docs/engine.md, 'Loop guard').")
    require_quiet: bool = Field(False, description="Wait for a quiet host before each run.")
    speedups: bool = Field(True, description="Report speed-ups over plain (needs plain).")
    targets: TargetSelector = Field(
        TargetSelector(), description="Target selector; an empty list selects all.")
    prompt_suffix: dict[str, str] = Field(
        {}, description="Text appended to every prompt per model, e.g. ' /no_think'.")
    prompt_dir: Annotated[str, AfterValidator(_folder_path)] | None = Field(
        None, description="Prompt folder relative to this file; default ../prompts.")

    # Where the matrix was read from (its file), for messages; not stored with the matrix.
    _source: str | None = PrivateAttr(None)

    def from_source(self, source: str) -> Self:
        """This spec, its messages naming `source` (the file it was read from)."""
        copy = self.model_copy()
        copy._source = source
        return copy

    @property
    def label(self) -> str:
        """What a message about this matrix names: its file, else `matrix 'NAME'`."""
        return self._source or f"matrix '{self.name}'"

    def arm_names(self) -> list[str]:
        return [a.arm for a in self.arms]

    def max_tokens_for(self, prompt: PromptEntry, engine: str) -> int:
        """The token limit of `prompt` on `engine`: the prompt's own, else the global one."""
        own = prompt.max_tokens.for_engine(engine) if prompt.max_tokens else None
        if own is not None:
            return own
        limit = self.max_tokens.for_engine(engine)
        if limit is None:
            raise UserError(f"{self.label}: max_tokens: no limit for engine '{engine}'")
        return limit

    def most_runs_per_target(self) -> int:
        """Models x prompts x arms x repeats: the runs of a target that every prompt and arm
        runs on (`plan.runs_by_engine` says which do)."""
        return len(self.models) * len(self.prompts) * len(self.arms) * self.repeats


class ParitySpec(MatrixSpec):
    """A greedy one-repeat matrix for parity checks; `overridden` says what was forced."""

    repeats: int = Field(1, ge=1, le=1)
    temperature: float = Field(0.0, ge=0.0, le=0.0)
    overridden: list[str] = []


def _some_text(value: str) -> str:
    if value and not value.strip():  # '' is pydantic's own "must not be empty"
        raise ValueError("is blank; expected some text")
    return value


class GeneratePrompt(_Strict):
    """One line of a generation batch (JSONL): `{"name"?, "prompt", "max_tokens"?}`."""

    name: str | None = Field(None, pattern=NAME_PATTERN, max_length=MAX_NAME_LEN)
    prompt: Annotated[str, AfterValidator(_some_text)] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS_LIMIT)


class TargetRef(_Strict):
    """A target named by the user: HOST/ENGINE or HOST/ENGINE/DEVICE."""

    host: HostNameField
    engine: Engine
    device: Device | None = None

    def matches(self, target: Target) -> bool:
        return (target.host, target.engine) == (self.host, self.engine) and (
            self.device is None or self.device == target.device)


class GenerateJobSpec(_Strict):
    """A batch of prompts run once each on one target with one policy, outputs stored."""

    model: str = Field(min_length=1, max_length=MAX_MODEL_LEN)
    target: TargetRef
    prompts: list[GeneratePrompt] = Field(min_length=1)
    policy: OwnArm = "auto"
    lookup: LookupOptions = LookupOptions()
    max_tokens: int = Field(256, ge=1, le=MAX_TOKENS_LIMIT)
    temperature: float = Field(0.0, ge=TEMPERATURE_RANGE[0], le=TEMPERATURE_RANGE[1],
                               allow_inf_nan=False)
    seed: SeedField = None
    chat: bool = True
    loop_guard: LoopGuard | None = None


def matrix_json_schema() -> dict[str, Any]:
    """The JSON schema of a matrix file (for `specfleet matrix schema` and editors)."""
    schema = MatrixSpec.model_json_schema(mode="validation")
    schema["title"] = "specfleet matrix"
    return schema
