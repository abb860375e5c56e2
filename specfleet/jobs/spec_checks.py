"""Checks across fields of a matrix that types alone cannot express.

Each check yields one line `file: field.path: what is expected` per mistake, and every check
runs, so one pass finds every independent mistake; a check of a field or list item whose type
was wrong is left out (it would report a consequence of that mistake, not another one), and
only for that field or item: the other items of a list are checked in their places.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from specfleet.engine.config import (
    POLICY_OPTIONS,
    ConfigError,
    PromptLookupConfig,
    candidate_policies,
)
from specfleet.engine.kinds import ENGINE_DEVICES, ENGINES, MODEL_ENGINES, Engine, choices_text
from specfleet.engine.peers import PeerKind, peer_kind
from specfleet.errors import UserError, describe_value
from specfleet.jobs.spec import (
    ARM_OPTIONS,
    NAME_PATTERN,
    ArmSpec,
    MatrixSpec,
    TargetSelector,
    TokenLimit,
)
from specfleet.userfiles import MAX_MODEL_LEN, kind_of, read_text

PROMPT_SUFFIXES: tuple[str, ...] = (".txt", ".md", "")
MAX_LISTED = 20  # prompt names a "no prompt file" line lists at most

Loc = tuple[str | int, ...]  # a place in the file: ("targets", "hosts", 3)
T = TypeVar("T")


@dataclass(frozen=True)
class LeftOut:
    """What of a matrix file failed its type and is not in the spec the checks read: whole
    fields (stood in for) and single items of lists (the other items are kept, in order)."""

    fields: frozenset[str] = frozenset()
    items: frozenset[Loc] = frozenset()  # ("prompts", 1), ("prompts", 0, "targets", "hosts", 2)

    def numbered(self, loc: Loc, kept: Iterable[T]) -> Iterator[tuple[int, T]]:
        """The kept items of the list at `loc`, each with its position in the file."""
        positions = (i for i in itertools.count() if (*loc, i) not in self.items)
        return ((next(positions), item) for item in kept)

    def touches(self, loc: Loc) -> bool:
        """Whether anything at or inside `loc` was left out (a check of the whole list, such
        as "plain is among the arms", would then judge a list the user did not write)."""
        return str(loc[0]) in self.fields or any(item[:len(loc)] == loc for item in self.items)


def matrix_problems(spec: MatrixSpec, label: str, prompt_dir: Path,
                    beside: Path | None = None, left_out: LeftOut = LeftOut()) -> list[str]:
    """Every cross-field mistake in `spec`, one line each.

    Args:
        spec: a type-checked matrix (its mistyped fields stood in for, its mistyped list
            items left out).
        label: the file name used in messages.
        prompt_dir: the directory named prompts are read from.
        beside: the matrix's own folder when `prompt_dir` is the packaged one by default: a
            folder, pipe or device there named like a prompt is refused, not passed over.
        left_out: what failed its type: the checks that read it are left out, and only those.

    Returns:
        The mistakes, check by check; none for a good matrix.
    """
    # Each check with the fields it cannot do without; each skips what else it reads itself.
    checks: list[tuple[tuple[str, ...], Callable[[], Iterator[str]]]] = [
        (("models",), lambda: _check_models(spec, label, left_out)),
        (("prompts", "prompt_dir"),
         lambda: _check_prompts(spec, label, prompt_dir, beside, left_out)),
        (("arms",), lambda: _check_arms(spec, label, left_out)),
        (("max_tokens",), lambda: _check_max_tokens(spec, label, left_out)),
        (("prompts",), lambda: _check_prompt_limits(spec, label, left_out)),
        (("loop_guard",), lambda: _check_loop_guard(spec, label)),
        (("seed", "temperature"), lambda: _check_seed(spec, label)),
        (("targets",), lambda: _check_targets(spec.targets, f"{label}: targets", ("targets",),
                                              left_out)),
        (("prompt_suffix",), lambda: _check_prompt_suffix(spec, label, left_out)),
    ]
    return [line for fields, check in checks if left_out.fields.isdisjoint(fields)
            for line in check()]


def find_prompt_file(prompt_dir: Path, name: str) -> Path | None:
    """`<name>.txt`, `<name>.md` or `<name>` in `prompt_dir`, the first that exists (of any
    kind: a folder of that name is refused by its reader, not passed over)."""
    for suffix in PROMPT_SUFFIXES:
        candidate = prompt_dir / f"{name}{suffix}"
        if os.path.lexists(candidate):
            return candidate
    return None


def _check_models(spec: MatrixSpec, label: str, left_out: LeftOut) -> Iterator[str]:
    models = list(left_out.numbered(("models",), spec.models))
    for i, model in models:
        if not model.strip():
            yield f"{label}: models[{i}]: must not be blank"
        elif len(model) > MAX_MODEL_LEN:  # a relative folder, read from the file's folder
            yield (f"{label}: models[{i}]: must be at most {MAX_MODEL_LEN} characters as an "
                   f"absolute path, got {describe_value(model)} ({len(model)} characters)")
    yield from _twice(models, f"{label}: models", "model")


def _twice(values: Iterable[tuple[int, str]], where: str, noun: str) -> Iterator[str]:
    """Each value once: a second is a typo for another (`where`: `file: models`; each value
    with its position in the file)."""
    seen: set[str] = set()
    for i, value in values:
        if value in seen:
            yield f"{where}[{i}]: duplicate {noun} '{value}' (list each once)"
        seen.add(value)


def _check_prompts(spec: MatrixSpec, label: str, prompt_dir: Path,
                   beside: Path | None, left_out: LeftOut) -> Iterator[str]:
    seen: set[str] = set()
    for i, prompt in left_out.numbered(("prompts",), spec.prompts):
        where = f"{label}: prompts[{i}]"
        if prompt.name in seen:
            yield f"{where}.name: duplicate prompt '{prompt.name}'"
            continue
        seen.add(prompt.name)
        yield from _check_prompt_targets(spec, prompt.targets, f"{where}.targets",
                                         ("prompts", i, "targets"), left_out)
        if prompt.text is not None:
            if not prompt.text.strip():
                yield f"{where}.text: must not be empty"
            continue
        yield from _said(_check_named_prompt, prompt.name, prompt_dir, beside, where)


def _said(check: Callable[..., None], *args: Any) -> Iterator[str]:
    """The one line of a check that raises (a file reader), as a check that yields it."""
    try:
        check(*args)
    except UserError as err:
        yield str(err)


def _check_named_prompt(name: str, prompt_dir: Path, beside: Path | None, where: str) -> None:
    if beside is not None:
        _refuse_odd_namesake(beside, name, where)
    found = find_prompt_file(prompt_dir, name)
    if found is None:
        raise UserError(f"{where}: {_missing_prompt(prompt_dir, name)}")
    # `story.txt` and `story.md` both: the run would read the first, the user may mean either.
    named = (prompt_dir / f"{name}{suffix}" for suffix in PROMPT_SUFFIXES)
    twins = [path.name for path in named if path != found and os.path.lexists(path)]
    if twins:
        raise UserError(f"{where}: {found} and {twins[0]} beside it both name prompt "
                        f"'{name}'; expected one file of that name")
    _check_prompt_file(found, where)


def _check_prompt_targets(spec: MatrixSpec, own: TargetSelector | None, where: str,
                          loc: Loc, left_out: LeftOut) -> Iterator[str]:
    """A prompt's own selector must leave some target the matrix selects: one that shares no
    engine (or device, host, kind) with the matrix's would plan no run of it, silently."""
    if own is None:
        return
    yield from _check_targets(own, where, loc, left_out)
    for (field, mine), (_, matrix) in zip(own.lists(), spec.targets.lists(), strict=True):
        if left_out.touches((*loc, field)) or left_out.touches(("targets", field)):
            continue  # the item left out may be the one they would share
        if mine and matrix and not set(mine) & set(matrix):
            yield (f"{where}: {field} [{', '.join(mine)}] share none with the matrix's "
                   f"{field} [{', '.join(matrix)}], so the prompt would never run; "
                   f"expected {field} among the matrix's")
        elif field == "engines" and mine and not matrix and not set(mine) & set(MODEL_ENGINES):
            # A matrix naming no engine runs the model engines only: toy only when named.
            yield (f"{where}: engines [{', '.join(mine)}]: the matrix names no engine, so it "
                   f"runs on {' and '.join(MODEL_ENGINES)} only, and the prompt would never "
                   f"run; expected one of those, or [{', '.join(mine)}] in the matrix's "
                   "targets.engines")
    yield from _check_prompt_pairs(spec.targets, own, where, loc, left_out)


def _check_prompt_pairs(matrix: TargetSelector, own: TargetSelector, where: str, loc: Loc,
                        left_out: LeftOut) -> Iterator[str]:
    """A prompt's engines and devices with the matrix's (each list of the two selectors that
    names any: what both name) must pair: `matrix.engines [torch]` and the prompt's
    `devices [metal]` select no target, though each selector alone does."""
    lists = [(*loc, "engines"), (*loc, "devices"), ("targets", "engines"), ("targets", "devices")]
    if any(left_out.touches(place) for place in lists):
        return
    engines = _common(own.engines, matrix.engines)
    devices = _common(own.devices, matrix.devices)
    if not (engines and devices) or _pair(engines, devices):
        return  # none shared is said field by field above
    if _pair(own.engines or ENGINES, own.devices) and _pair(matrix.engines or ENGINES,
                                                             matrix.devices):
        yield (f"{where}: with the matrix's targets, {_no_target(engines, devices)}, so the "
               "prompt would never run; expected a device one of its engines runs on")


def _common(mine: list[T], matrix: list[T]) -> list[T]:
    """What a prompt's list and the matrix's both select (an empty list selects all)."""
    return [value for value in mine if not matrix or value in matrix] if mine else matrix


def _check_targets(selector: TargetSelector, where: str, loc: Loc,
                   left_out: LeftOut) -> Iterator[str]:
    for field, values in selector.lists():
        yield from _twice(left_out.numbered((*loc, field), values), f"{where}.{field}",
                          field.removesuffix("s"))
    if not left_out.touches((*loc, "engines")) and not left_out.touches((*loc, "devices")):
        yield from _check_pairs(selector.engines, selector.devices, where)


def _pair(engines: Iterable[Engine], devices: Sequence[str]) -> bool:
    """Whether an engine of `engines` runs on a device of `devices` (none listed: any)."""
    return any(not devices or set(ENGINE_DEVICES[engine]) & set(devices) for engine in engines)


def _no_target(engines: Sequence[Engine], devices: Sequence[str]) -> str:
    runs = "; ".join(f"{engine} runs on {choices_text(ENGINE_DEVICES[engine])}"
                     for engine in dict.fromkeys(engines))
    return (f"no target matches (engines in [{', '.join(engines)}]; devices in "
            f"[{', '.join(devices)}]): {runs}")


def _check_pairs(engines: Sequence[Engine], devices: Sequence[str], where: str) -> Iterator[str]:
    """A selector that lists engines and devices: each engine must run on a device listed and
    each device serve an engine listed, as a target is an engine on a device it runs on;
    `matrix run` would say "no target matches" only once the fleet started."""
    if not (engines and devices):
        return
    if not _pair(engines, devices):
        yield (f"{where}: {_no_target(engines, devices)}; expected a device one of the "
               "engines runs on")
        return
    for i, engine in enumerate(engines):
        if not _pair([engine], devices):
            yield (f"{where}.engines[{i}]: {engine} runs on "
                   f"{choices_text(ENGINE_DEVICES[engine])}, none of devices [{', '.join(devices)}], "
                   f"so it would never run; expected one of its devices listed, or drop {engine}")
    for i, device in enumerate(devices):
        if not _pair(engines, [device]):
            yield (f"{where}.devices[{i}]: no engine of [{', '.join(engines)}] runs on "
                   f"{device}, so it would never be used; expected a device one of them runs "
                   f"on, or drop {device}")


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
        what = "is blank (whitespace only)" if text else "is empty"
        raise UserError(f"{where}: {path}: {what}; expected the prompt's text")


def _missing_prompt(prompt_dir: Path, name: str) -> str:
    if not os.path.isdir(prompt_dir):  # False, not an error, for a name too long to look up
        what = (f"is {kind_of(os.stat(prompt_dir).st_mode)}, not a folder"
                if os.path.exists(prompt_dir) else "does not exist")
        return (f"no prompt '{name}': prompt directory {prompt_dir} {what} "
                "(set prompt_dir, or give {name, text} inline)")
    try:
        known = sorted(_prompt_names(prompt_dir))
    except OSError as err:  # a folder of mode 000
        return (f"no prompt '{name}': cannot list prompt directory {prompt_dir} "
                f"({err.strerror}); expected a folder you may read")
    listing = ", ".join(known[:MAX_LISTED]) if known else "none"
    more = f", ... ({len(known) - MAX_LISTED} more)" if len(known) > MAX_LISTED else ""
    return f"no prompt file '{name}.txt' in {prompt_dir} (available: {listing}{more})"


def _prompt_names(prompt_dir: Path) -> set[str]:
    """The names a matrix may give to read a file of `prompt_dir` (`find_prompt_file`):
    `a` for a.txt or a.md, `a.conf` for a.conf, and only names a prompt may have."""
    names = set()
    for path in prompt_dir.iterdir():
        name = path.stem if path.suffix in PROMPT_SUFFIXES else path.name
        if path.is_file() and re.fullmatch(NAME_PATTERN, name):
            names.add(name)
    return names


def _check_arms(spec: MatrixSpec, label: str, left_out: LeftOut) -> Iterator[str]:
    seen: set[str] = set()
    for i, arm in left_out.numbered(("arms",), spec.arms):
        if arm.arm in seen:
            yield f"{label}: arms[{i}]: duplicate arm '{arm.arm}' (each arm once)"
            continue
        seen.add(arm.arm)
        kind = peer_kind(arm.arm)
        if kind is None:
            yield from _check_arm_options(arm, f"{label}: arms[{i}]")
        else:
            yield from _check_peer_arm(spec, arm, kind, f"{label}: arms[{i}]", left_out)
    if left_out.touches(("arms",)) or left_out.touches(("speedups",)):
        return  # an arm left out may be the plain one
    lookup_arms = seen - {"plain"}
    if spec.speedups and lookup_arms and "plain" not in seen:
        yield (f"{label}: arms: add the plain arm: speed-ups are measured over plain "
               "(or set speedups: false)")


def _check_arm_options(arm: ArmSpec, where: str) -> Iterator[str]:
    given = arm.given_options()
    if arm.arm == "plain" and given:
        yield f"{where}.{next(iter(given))}: the plain arm takes no prompt-lookup options"
        return
    # Checked under each policy the arm may run (a policy's own options are its alone); the
    # width-cost table is a placeholder, found per host when the run starts.
    try:
        for policy in candidate_policies(arm.arm):
            PromptLookupConfig.of(arm.lookup_options(), policy, (1.0, 1.0)).validate()
    except ConfigError as err:
        yield f"{where}.{_option_named(err, given)}: {err}"


def _check_peer_arm(spec: MatrixSpec, arm: ArmSpec, kind: PeerKind, where: str,
                    left_out: LeftOut) -> Iterator[str]:
    """A peer arm: its options, greedy decoding, and an engine among the matrix's targets (a
    matrix that spans engines skips it, with the reason, on targets of the other engine)."""
    yield from _check_peer_options(arm, kind, where)
    if spec.temperature != 0.0 and not left_out.touches(("temperature",)):
        yield (f"{where}: {arm.arm} decodes greedily (a peer is compared with plain "
               f"greedy decoding); set temperature: 0, got {spec.temperature}")
    if left_out.touches(("targets", "engines")):
        return  # the engine left out may be the peer's
    engines = spec.targets.engines
    if engines and not set(kind.engines) & set(engines):
        yield (f"{where}: {arm.arm} runs on {kind.runs_on} targets only, and "
               f"targets.engines is [{', '.join(engines)}]; add {kind.runs_on} or "
               "drop the arm")


def _check_peer_options(arm: ArmSpec, kind: PeerKind, where: str) -> Iterator[str]:
    given = arm.given_options()
    if given and not kind.drafts:
        yield f"{where}.{next(iter(given))}: the {arm.arm} arm takes no options"
        return
    for name in ("ngram_min", *POLICY_OPTIONS):
        if name in given:
            yield (f"{where}.{name}: {arm.arm} looks up n-grams of ngram_max down to "
                   "1, as its library does; set ngram_max and max_draft only")
            return
    try:
        PromptLookupConfig.of(arm.lookup_options()).validate()
    except ConfigError as err:
        yield f"{where}.{err.field or 'options'}: {err}"


def _option_named(err: ConfigError, given: dict[str, Any]) -> str:
    if err.field == "ngram_max" and "ngram_max" not in given and "ngram_min" in given:
        return "ngram_min"  # the user set only ngram_min; the default ngram_max is not at fault
    return err.field if err.field in ARM_OPTIONS else "options"


def _check_max_tokens(spec: MatrixSpec, label: str, left_out: LeftOut) -> Iterator[str]:
    # Each engine named needs a limit; with one left out, none named may mean only that one
    # (and a limit for an engine not named may be for it).
    unknown = left_out.touches(("targets", "engines"))
    every: list[Engine | None] = [] if unknown else [None]
    engines: list[Engine | None] = list(spec.targets.engines) or every
    where = f"{label}: max_tokens"
    lines = [_give_limit(where, [engine] if engine else [], "matrix") for engine in engines
             if (spec.max_tokens.for_engine(engine) if engine else spec.max_tokens.default)
             is None]
    runs = _engines_run(spec)
    never = "" if unknown else _never_run(spec.max_tokens, runs, "matrix")
    if never:
        lines = lines or [_give_limit(where, runs, "matrix")]
        lines[-1] += never
    yield from lines


def _check_prompt_limits(spec: MatrixSpec, label: str, left_out: LeftOut) -> Iterator[str]:
    """A prompt's own `max_tokens` for an engine it never runs on would be passed over: the
    matrix's rule, for the engines the prompt runs on."""
    if left_out.touches(("targets", "engines")):
        return  # the engine left out may be the limit's
    for i, prompt in left_out.numbered(("prompts",), spec.prompts):
        own = prompt.targets.engines if prompt.targets else []
        if prompt.max_tokens is None or left_out.touches(("prompts", i, "targets", "engines")):
            continue
        whom = "prompt" if own else "matrix"
        runs = [engine for engine in _engines_run(spec) if not own or engine in own]
        never = _never_run(prompt.max_tokens, runs, whom)
        if runs and never:  # no engine shared: `_check_prompt_targets` says so
            yield _give_limit(f"{label}: prompts[{i}].max_tokens", runs, whom) + never


def _engines_run(spec: MatrixSpec) -> list[Engine]:
    """The engines a matrix may run on: those named, else every model engine (a toy target
    exists only where a matrix names toy)."""
    return list(spec.targets.engines) or list(MODEL_ENGINES)


def _give_limit(where: str, engines: list[Engine], whom: str) -> str:
    needed = choices_text(("'default'", *(f"'{engine}'" for engine in engines)))
    return f"{where}: give {needed} (a limit for every engine the {whom} may run on)"


def _never_run(limit: TokenLimit, runs: list[Engine], whom: str) -> str:
    """`; the matrix never runs on mlx` for each engine `limit` names outside `runs`."""
    never = tuple(engine for engine in ENGINES
                  if getattr(limit, engine) is not None and engine not in runs)
    return f"; the {whom} never runs on {choices_text(never)}" if never else ""


def _check_loop_guard(spec: MatrixSpec, label: str) -> Iterator[str]:
    guard = spec.loop_guard
    if guard is not None and guard.max_period < guard.min_period:
        yield (f"{label}: loop_guard.max_period: must be >= min_period "
               f"({guard.min_period}), got {guard.max_period}")


def _check_seed(spec: MatrixSpec, label: str) -> Iterator[str]:
    if spec.seed is not None and spec.temperature == 0.0:  # as `generate --seed` says it
        yield (f"{label}: seed: given with temperature 0 (greedy: nothing is drawn at "
               "random); expected a temperature above 0 to sample with it (or no seed)")


def _check_prompt_suffix(spec: MatrixSpec, label: str, left_out: LeftOut) -> Iterator[str]:
    if left_out.touches(("models",)):
        return  # a suffix may be for the model left out
    for model in spec.prompt_suffix:
        if model not in spec.models:
            yield (f"{label}: prompt_suffix.{model}: not one of models "
                   f"({', '.join(spec.models)})")
