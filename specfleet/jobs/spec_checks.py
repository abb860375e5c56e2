"""Checks across fields of a matrix that types alone cannot express.

Each check raises one `UserError` line `file: field.path: what is expected`; they run in the
order of the file's fields so the first mistake a reader would meet is the one reported.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from specfleet.engine.config import (
    POLICY_OPTIONS,
    ConfigError,
    PromptLookupConfig,
    candidate_policies,
)
from specfleet.engine.kinds import Engine
from specfleet.engine.peers import PeerKind, peer_kind
from specfleet.errors import UserError
from specfleet.jobs.spec import ARM_OPTIONS, ArmSpec, MatrixSpec, TargetSelector
from specfleet.userfiles import kind_of, read_text

PROMPT_SUFFIXES: tuple[str, ...] = (".txt", ".md", "")


def check_matrix(spec: MatrixSpec, label: str, prompt_dir: Path,
                 beside: Path | None = None) -> None:
    """Raise `UserError` for the first cross-field mistake in `spec`.

    Args:
        spec: a type-checked matrix.
        label: the file name used in messages.
        prompt_dir: the directory named prompts are read from.
        beside: the matrix's own folder when `prompt_dir` is the packaged one by default: a
            folder, pipe or device there named like a prompt is refused, not passed over.
    """
    _check_models(spec, label)
    _check_prompts(spec, label, prompt_dir, beside)
    _check_arms(spec, label)
    _check_max_tokens(spec, label)
    _check_loop_guard(spec, label)
    _check_targets(spec.targets, f"{label}: targets")
    _check_prompt_suffix(spec, label)


def find_prompt_file(prompt_dir: Path, name: str) -> Path | None:
    """`<name>.txt`, `<name>.md` or `<name>` in `prompt_dir`, the first that exists (of any
    kind: a folder of that name is refused by its reader, not passed over)."""
    for suffix in PROMPT_SUFFIXES:
        candidate = prompt_dir / f"{name}{suffix}"
        if os.path.lexists(candidate):
            return candidate
    return None


def _check_models(spec: MatrixSpec, label: str) -> None:
    for i, model in enumerate(spec.models):
        if not model.strip():
            raise UserError(f"{label}: models[{i}]: must not be blank")
    _refuse_twice(spec.models, f"{label}: models", "model")


def _refuse_twice(values: list[str], where: str, noun: str) -> None:
    """Each value once: a second is a typo for another (`where`: `file: models`)."""
    seen: set[str] = set()
    for i, value in enumerate(values):
        if value in seen:
            raise UserError(f"{where}[{i}]: duplicate {noun} '{value}' (list each once)")
        seen.add(value)


def _check_prompts(spec: MatrixSpec, label: str, prompt_dir: Path,
                   beside: Path | None) -> None:
    seen: set[str] = set()
    for i, prompt in enumerate(spec.prompts):
        if prompt.name in seen:
            raise UserError(f"{label}: prompts[{i}].name: duplicate prompt '{prompt.name}'")
        seen.add(prompt.name)
        _check_prompt_targets(spec, prompt.targets, f"{label}: prompts[{i}].targets")
        if prompt.text is not None:
            if not prompt.text.strip():
                raise UserError(f"{label}: prompts[{i}].text: must not be empty")
            continue
        if beside is not None:
            _refuse_odd_namesake(beside, prompt.name, f"{label}: prompts[{i}]")
        found = find_prompt_file(prompt_dir, prompt.name)
        if found is None:
            raise UserError(f"{label}: prompts[{i}]: {_missing_prompt(prompt_dir, prompt.name)}")
        _check_prompt_file(found, f"{label}: prompts[{i}]")


def _check_prompt_targets(spec: MatrixSpec, own: TargetSelector | None, where: str) -> None:
    """A prompt's own selector must leave some target the matrix selects: one that shares no
    engine (or device, host, kind) with the matrix's would plan no run of it, silently."""
    if own is None:
        return
    _check_targets(own, where)
    for (field, mine), (_, matrix) in zip(own.lists(), spec.targets.lists(), strict=True):
        if mine and matrix and not set(mine) & set(matrix):
            raise UserError(f"{where}: {field} [{', '.join(mine)}] share none with the matrix's "
                            f"{field} [{', '.join(matrix)}], so the prompt would never run; "
                            f"expected {field} among the matrix's")


def _check_targets(selector: TargetSelector, where: str) -> None:
    for field, values in selector.lists():
        _refuse_twice(values, f"{where}.{field}", field.removesuffix("s"))


def _refuse_odd_namesake(folder: Path, name: str, where: str) -> None:
    """A folder (or pipe, device) beside the matrix named like a packaged prompt: the user
    most likely meant it, so say what it is instead of reading the packaged prompt."""
    namesake = find_prompt_file(folder, name)
    if namesake is not None and not namesake.is_file():
        read_text(namesake, f"{where}: {namesake}", expected="a prompt text file")


def _check_prompt_file(path: Path, where: str) -> None:
    """The file must be UTF-8 text without NUL (a binary file would fail every run later)."""
    text = read_text(path, f"{where}: {path}", expected="a prompt text file")
    if not text.strip():
        raise UserError(f"{where}: {path} is empty")


def _missing_prompt(prompt_dir: Path, name: str) -> str:
    if not prompt_dir.is_dir():
        what = (f"is {kind_of(os.stat(prompt_dir).st_mode)}, not a folder"
                if os.path.exists(prompt_dir) else "does not exist")
        return (f"no prompt '{name}': prompt directory {prompt_dir} {what} "
                "(set prompt_dir, or give {name, text} inline)")
    known = sorted({p.stem for p in prompt_dir.iterdir() if p.is_file()})
    listing = ", ".join(known) if known else "none"
    return f"no prompt file '{name}.txt' in {prompt_dir} (available: {listing})"


def _check_arms(spec: MatrixSpec, label: str) -> None:
    seen: set[str] = set()
    for i, arm in enumerate(spec.arms):
        if arm.arm in seen:
            raise UserError(f"{label}: arms[{i}]: duplicate arm '{arm.arm}' (each arm once)")
        seen.add(arm.arm)
        kind = peer_kind(arm.arm)
        if kind is None:
            _check_arm_options(arm, f"{label}: arms[{i}]")
        else:
            _check_peer_arm(spec, arm, kind, f"{label}: arms[{i}]")
    lookup_arms = seen - {"plain"}
    if spec.speedups and lookup_arms and "plain" not in seen:
        raise UserError(f"{label}: arms: add the plain arm: speed-ups are measured over plain "
                        "(or set speedups: false)")


def _check_arm_options(arm: ArmSpec, where: str) -> None:
    given = arm.given_options()
    if arm.arm == "plain" and given:
        raise UserError(f"{where}.{next(iter(given))}: the plain arm takes no prompt-lookup "
                        "options")
    # Checked under each policy the arm may run (a policy's own options are its alone); the
    # width-cost table is a placeholder, found per host when the run starts.
    try:
        for policy in candidate_policies(arm.arm):
            PromptLookupConfig.of(arm.lookup_options(), policy, (1.0, 1.0)).validate()
    except ConfigError as err:
        raise UserError(f"{where}.{_option_named(err, given)}: {err}") from None


def _check_peer_arm(spec: MatrixSpec, arm: ArmSpec, kind: PeerKind, where: str) -> None:
    """A peer arm: its options, greedy decoding, and an engine among the matrix's targets (a
    matrix that spans engines skips it, with the reason, on targets of the other engine)."""
    given = arm.given_options()
    if given and not kind.drafts:
        raise UserError(f"{where}.{next(iter(given))}: the {arm.arm} arm takes no options")
    for name in ("ngram_min", *POLICY_OPTIONS):
        if name in given:
            raise UserError(f"{where}.{name}: {arm.arm} looks up n-grams of ngram_max down to "
                            "1, as its library does; set ngram_max and max_draft only")
    try:
        PromptLookupConfig.of(arm.lookup_options()).validate()
    except ConfigError as err:
        raise UserError(f"{where}.{err.field or 'options'}: {err}") from None
    if spec.temperature != 0.0:
        raise UserError(f"{where}: {arm.arm} decodes greedily (a peer is compared with plain "
                        f"greedy decoding); set temperature: 0, got {spec.temperature}")
    engines = spec.targets.engines
    if engines and not set(kind.engines) & set(engines):
        raise UserError(f"{where}: {arm.arm} runs on {kind.runs_on} targets only, and "
                        f"targets.engines is [{', '.join(engines)}]; add {kind.runs_on} or "
                        "drop the arm")


def _option_named(err: ConfigError, given: dict[str, Any]) -> str:
    if err.field == "ngram_max" and "ngram_max" not in given and "ngram_min" in given:
        return "ngram_min"  # the user set only ngram_min; the default ngram_max is not at fault
    return err.field if err.field in ARM_OPTIONS else "options"


def _check_max_tokens(spec: MatrixSpec, label: str) -> None:
    engines: list[Engine | None] = list(spec.targets.engines) or [None]
    for engine in engines:
        limit = spec.max_tokens.for_engine(engine) if engine else spec.max_tokens.default
        if limit is None:
            needed = f"'default' or '{engine}'" if engine else "'default'"
            raise UserError(f"{label}: max_tokens: give {needed} (a limit for every engine the "
                            "matrix may run on)")


def _check_loop_guard(spec: MatrixSpec, label: str) -> None:
    guard = spec.loop_guard
    if guard is not None and guard.max_period < guard.min_period:
        raise UserError(f"{label}: loop_guard.max_period: must be >= min_period "
                        f"({guard.min_period}), got {guard.max_period}")


def _check_prompt_suffix(spec: MatrixSpec, label: str) -> None:
    for model in spec.prompt_suffix:
        if model not in spec.models:
            raise UserError(f"{label}: prompt_suffix.{model}: not one of models "
                            f"({', '.join(spec.models)})")
