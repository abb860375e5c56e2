"""Where a matrix's models are, for `matrix validate`: asked of each host a planned run would
go to, or of this machine alone when there is no fleet.

In a fleet, the plan decides which (host, engine, model) cells exist; each host's worker
resolves its own cells as its runs will (`HostWorker.check_models`), so a model missing only
on the machine that validates is no problem, and one missing on a host is named with it.
Without a fleet only this machine can answer: a model whose files are not here is reported
apart (`ModelReport.missing`), for the caller to warn about or refuse (`--local`).
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specfleet.engine.kinds import MODEL_ENGINES, Engine
from specfleet.errors import UserError
from specfleet.jobs.plan import plan_runs, prompt_texts
from specfleet.jobs.run import Target
from specfleet.jobs.spec import MatrixSpec
from specfleet.settings import names_a_setting
from specfleet.workers.loaded import ModelCheck, check_model, sure_overruns

CHECK_TIMEOUT_S = 60.0  # for every host together: resolving reads folders, never weights

Ask = tuple[str, str, int]  # (model, engine, longest max_tokens of its runs there)


@dataclass(frozen=True)
class ModelReport:
    """What the model checks found, one line each.

    Attributes:
        errors: models that cannot run where the matrix sends them.
        missing: models whose files are not on this machine (no fleet was asked).
        unanswered: hosts that could not be asked, with why.
        hosts: the hosts that answered (empty: checked on this machine).
        no_source: (model, engine) cells whose alias names no source for that engine, in a
            matrix that left engines open: its runs there are left out, not failed.
    """

    errors: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unanswered: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    no_source: list[tuple[str, str]] = field(default_factory=list)


def check_here(spec: MatrixSpec, label: str) -> ModelReport:
    """Each model on each engine it may run on, resolved on this machine.

    Without `targets.engines`, a model that runs on one real engine is fine where the other
    lacks it (no source, not fetched here, not installed here); one that an engine installed
    here has and cannot load (an MLX-quantized folder for torch) is an error, as a fleet's
    hosts say it: each of its runs there would fail. A problem shared by every engine is said
    once.
    """
    from specfleet.engine.runners.folders import library_installed

    report = ModelReport()
    report.errors.extend(_bare_folder_names(spec, label))
    report.errors.extend(_missing_peer_libraries(spec, label))
    report.errors.extend(_models_without_gguf(spec, label))
    for i, model in enumerate(spec.models):
        engines: list[Engine] = list(spec.targets.engines) or list(MODEL_ENGINES)
        checks = {e: check_model(model, e, _longest(spec, e)) for e in engines}
        failing = {e: c for e, c in checks.items() if c.problem}
        runs_on = [e for e in engines if e not in failing]
        if not failing or (not spec.targets.engines and runs_on and all(
                c.missing or c.no_source or not library_installed(e) for e, c in failing.items())):
            report.no_source.extend((model, e) for e, c in failing.items() if c.no_source)
            continue
        shared = len(failing) > 1 and len({c.problem for c in failing.values()}) == 1
        for engine, check in (list(failing.items())[:1] if shared else failing.items()):
            where = f"models[{i}]" if shared else f"models[{i}]: {engine}"
            alone = f"; or run it on {' and '.join(runs_on)} alone (targets.engines)" \
                if runs_on and not spec.targets.engines else ""
            # A setting's problem (SPECFLEET_MODELS, SPECFLEET_HOME) is no fault of the file.
            problem = check.problem or ""  # every check in `failing` has one
            said = problem if names_a_setting(problem) else f"{label}: {where}: {problem}{alone}"
            _file(report, check, said)
    if not report.errors and not report.missing:
        report.errors.extend(prompt_overruns(spec, label))
    return report


def _bare_folder_names(spec: MatrixSpec, label: str) -> list[str]:
    """`bare_folder_problem` of each model of a matrix (`./NAME` counts from its file's
    folder)."""
    return [f"{label}: models[{i}]: {problem}" for i, model in enumerate(spec.models)
            if (problem := bare_folder_problem(model, "the matrix file's"))]


def bare_folder_problem(model: str, counts_from: str) -> str | None:
    """Why a model written as a bare name that is no alias but a folder where this command
    runs (`smolcopy`) cannot go to a fleet: found here, but a worker stands in another folder,
    where every run of it failed (the failures stored); None for anything else."""

    from specfleet.models.registry import load_registry

    if "/" in model or ":" in model or model.startswith("~") or not os.path.isdir(model) \
            or model in load_registry():
        return None
    return (f"{model!r} is no alias but a folder here; expected ./{model} (a folder counts "
            f"from {counts_from}) or an alias (`specfleet models list`)")


def prompt_overruns(spec: MatrixSpec, label: str) -> list[str]:
    """A prompt whose own tokens and its max_tokens pass a model's context on this machine:
    every run of it would fail once the fleet started, and the matrix of failures stay
    stored. Counted with the model's tokenizer.json before any chat template (a floor), so
    only a sure overrun is refused; the run counts again exactly."""
    try:
        texts = prompt_texts(spec)
    except UserError:
        return []  # a missing prompt file is the spec checks' to say
    over: dict[tuple[int, int, int, int, int], list[str]] = defaultdict(list)
    for i, model in enumerate(spec.models):
        for engine in list(spec.targets.engines) or list(MODEL_ENGINES):
            wanted = [(texts[p.name], spec.max_tokens_for(p, engine)) for p in spec.prompts]
            for j, tokens, limit, context in sure_overruns(model, engine, wanted):
                over[(j, i, tokens, limit, context)].append(engine)
    return [f"{label}: prompts[{j}]: {tokens} tokens before any chat template and max_tokens "
            f"{limit} pass the context of {spec.models[i]} ({context} tokens, "
            f"{' and '.join(engines)}); expected a shorter prompt or a smaller max_tokens"
            for (j, i, tokens, limit, context), engines in over.items()]


def _missing_peer_libraries(spec: MatrixSpec, label: str) -> list[str]:
    """A peer arm whose library this machine lacks: every run of it would fail, one by one,
    after the fleet started (llama-cpp-python is an optional extra)."""
    from importlib.metadata import PackageNotFoundError, version

    from specfleet.engine.peers import peer_kind
    from specfleet.engine.runners.llamacpp_peers import INSTALL_HINT

    lines = []
    for i, arm in enumerate(spec.arms):
        kind = peer_kind(arm.arm)
        if kind is None:
            continue
        try:
            version(kind.library)
        except PackageNotFoundError:
            hint = INSTALL_HINT if kind.gguf else f"pip install {kind.library}"
            lines.append(f"{label}: arms[{i}]: {arm.arm} needs {kind.library}, which this "
                         f"machine lacks; expected it installed: {hint}")
    return lines


def _models_without_gguf(spec: MatrixSpec, label: str) -> list[str]:
    """A llama.cpp arm beside a model on this machine that has no GGUF to run: each of its
    runs failed after the fleet started (a model not here is said on its own)."""
    from specfleet.engine.peers import peer_kind
    from specfleet.models.registry import resolve_model

    lines = []
    for i, arm in enumerate(spec.arms):
        kind = peer_kind(arm.arm)
        if kind is None or not kind.gguf:
            continue
        for j, model in enumerate(spec.models):
            found = []
            for engine in spec.targets.engines or kind.engines:
                try:
                    found.append(resolve_model(model, engine, must_exist=False, measure=False))
                except UserError:  # no such model, no source for this engine: said elsewhere
                    continue
            here = [m for m in found if m.fetched]
            if here and all(m.gguf_file() is None for m in here):
                lines.append(f"{label}: arms[{i}]: {arm.arm} runs the GGUF a model comes from, "
                             f"and models[{j}] ({model}) has none; expected a bundled model or "
                             "a folder holding one .gguf")
    return lines


def _longest(spec: MatrixSpec, engine: str) -> int:
    return max(spec.max_tokens_for(p, engine) for p in spec.prompts)


def _file(report: ModelReport, check: ModelCheck, line: str) -> None:
    (report.missing if check.missing else report.errors).append(line)


def host_asks(spec: MatrixSpec, targets: list[Target],
              kinds: Mapping[str, str]) -> dict[str, list[Ask]]:
    """What to ask each host: the (model, engine) cells the plan gives it, each with the
    longest max_tokens of its runs there.

    Raises:
        UserError: no target of the fleet matches the matrix.
    """
    longest: dict[str, dict[tuple[str, str], int]] = defaultdict(dict)
    for run in plan_runs(spec, targets, "validate", host_kinds=kinds):
        cells = longest[run.target.host]
        key = (run.model, run.target.engine)
        cells[key] = max(cells.get(key, 0), run.max_tokens)
    return {host: [(m, e, n) for (m, e), n in cells.items()]
            for host, cells in sorted(longest.items())}


def host_lines(spec: MatrixSpec, label: str, asks: Mapping[str, list[Ask]],
               checks: Mapping[str, list[ModelCheck]]) -> list[str]:
    """One line per model and problem: said once, without a host, when every host and engine
    asked about the model found it (an alias no host knows), else naming where."""
    index = {model: i for i, model in enumerate(spec.models)}
    asked: dict[str, list[tuple[str, str]]] = defaultdict(list)
    found: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for host, items in asks.items():
        if host not in checks:
            continue  # unanswered: said apart
        for (model, engine, _), check in zip(items, checks[host], strict=True):
            asked[model].append((host, engine))
            if check.problem:
                found[(model, check.problem)].append((host, engine))
    return [f"{label}: models[{index[model]}]: {_where(where, asked[model])}{problem}"
            for (model, problem), where in sorted(found.items(), key=lambda kv: index[kv[0][0]])]


def _where(where: list[tuple[str, str]], asked: list[tuple[str, str]]) -> str:
    """`host h1, torch: `; `host h1 (mlx, torch), host h2 (torch): `; nothing when it is
    every (host, engine) asked about the model."""
    if len(where) == 1:
        return f"host {where[0][0]}, {where[0][1]}: "
    if where == asked:
        return ""
    engines: dict[str, list[str]] = defaultdict(list)
    for host, engine in where:
        engines[host].append(engine)
    return ", ".join(f"host {host} ({', '.join(names)})" for host, names in engines.items()) + ": "


def check_on_hosts(spec: MatrixSpec, label: str, view: Any,
                   timeout_s: float = CHECK_TIMEOUT_S) -> ModelReport:
    """Ask each host of the fleet whether it can run the models the plan sends it.

    Args:
        spec: the checked matrix.
        label: the file as named in messages.
        view: the `cluster.reach.FleetView` (targets, kinds, worker handles).
        timeout_s: how long all hosts together may take to answer.

    Returns:
        The `ModelReport`: every problem names its host; a host that does not answer is
        in `unanswered`.
    """
    import ray

    try:
        asks = host_asks(spec, view.targets, view.kinds)
    except UserError as err:
        return ModelReport(errors=[str(err)])
    report = ModelReport()
    refs = {}
    for host, items in asks.items():
        try:
            refs[host] = view.workers[host].check_models.remote(items)
        except AttributeError:  # a worker of an older specfleet has no such call
            report.unanswered.append(f"host {host}: its worker cannot check models (an older "
                                     "specfleet); update it with the fleet")
    deadline = time.monotonic() + timeout_s
    checks: dict[str, list[ModelCheck]] = {}
    for host, ref in refs.items():
        try:
            checks[host] = ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
        except Exception as err:  # noqa: BLE001 - a host that cannot answer is named, not fatal
            report.unanswered.append(f"host {host}: no answer ({_first_line(err)})")
            continue
        report.hosts.append(host)
    report.errors.extend(host_lines(spec, label, asks, checks))
    return report


def refuse_model(model: str, engine: str, flag: str, view: Any = None,
                 host: str | None = None, timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """One line, before anything is stored, for a model that cannot run on `engine`:
    resolved on this machine (no `view`: the embedded fleet, before Ray starts), else asked of
    `host`'s worker. A host that does not answer is let through: its run will say.

    Raises:
        UserError: naming `flag` and why, e.g. an alias nobody knows.
    """
    if engine != "toy" and (problem := bare_folder_problem(model, "the current one")):
        raise UserError(f"{flag}: {problem}")
    if engine == "toy" or view is None:
        check = check_model(model, engine, 1)
    else:
        import ray

        try:
            (check,) = ray.get(view.workers[host].check_models.remote([(model, engine, 1)]),
                               timeout=timeout_s)
        except Exception:  # noqa: BLE001 - unanswered: the run itself fails in one line
            return
    if check.problem:
        where = f"host {host}, {engine}" if view is not None else engine
        raise UserError(f"{flag}: {where}: {check.problem}")


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else type(err).__name__
