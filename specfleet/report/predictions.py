"""`specfleet replay`: each policy's counters and speed-up over plain, predicted from the
stored greedy replies of a matrix (or one run) under a width-cost table.

Per cell (host, engine, device, model, prompt) the plain run's reply is the greedy output
every policy emits; `engine.predict.replay` drives the real loop over it for each policy and
prices the trace with the cost table. The prefill is counted in pipelined steps measured on
the cell's own plain run (prefill_s / (decode_s / rounds)) and assumed to carry over to the
host of the table. A replay repeats the stored run's loop: a model whose rollback re-feeds
kept tokens is replayed re-feeding them (priced, and weighed by the calibrated policy), and
the loop pipelines plain steps as the table's host does (a stored calibration's host; a
YAML table by its engine and device, `steps_overlap_host`; else as the run did). Every
stored lookup run is also replayed under its own config and its counters are compared with
the stored ones (they must be equal). With the oracle, each cell
also gets the cheapest schedule over the policies' n-gram index (`engine.oracle`) and each
policy its efficiency, oracle cost over its own. `predictions_tables.py` renders them.
"""

from __future__ import annotations

import math
import os
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path

from specfleet.engine.config import PromptLookupConfig, default_max_draft, policy_revision
from specfleet.engine.governor import Policy
from specfleet.engine.kinds import DEVICES, ENGINES, steps_overlap_host
from specfleet.engine.oracle import OracleSchedule, oracle
from specfleet.engine.predict import ReplayDiffers, predicted_speedup, replay
from specfleet.engine.stats import COUNTER_FIELDS
from specfleet.engine.widthcosts import WidthCosts
from specfleet.errors import UserError, describe_value
from specfleet.settings import host_name_problem
from specfleet.userfiles import name_problem
from specfleet.yamlfiles import read_yaml

# The counters a replay reproduces (all of them).
COUNTER_NAMES = tuple(COUNTER_FIELDS)


@dataclass(frozen=True)
class CostTable:
    """A width-cost table: cost of widths 1..n in pipelined steps, and where it came from."""

    name: str
    ratio: tuple[float, ...]
    host: str | None = None  # where it was measured; a run's own measurement compares only there
    # Whether the loop pipelines on that host (`steps_overlap_host`); None: not said.
    pipelines: bool | None = None
    # The engine, device and model it was measured with, where it says (None: not said).
    engine: str | None = None
    device: str | None = None
    model: str | None = None

    def measured_where(self, cell: tuple) -> bool:
        """The table was measured where this cell's runs ran (its host, and its engine,
        device and model where it says them): only then are those runs a check of it."""
        host, *ran = cell[:4]
        said = (self.engine, self.device, self.model)
        return self.host == host and all(s is None or s == r for s, r in zip(said, ran, strict=True))


@dataclass(frozen=True)
class Bound:
    """The oracle on one cell: the cheapest schedule over one n-gram index.

    Attributes:
        lookup: the index (ngram_min, ngram_max) and the widest draft it may verify.
        schedule: the oracle's schedule and cost in pipelined steps.
        ceiling: the whole-call speed-up over plain that schedule would give.
    """

    lookup: PromptLookupConfig
    schedule: OracleSchedule
    ceiling: float


@dataclass(frozen=True)
class Prediction:
    """One policy on one cell: replayed counters, cost, predicted and measured speed-up,
    and the cell's oracle bound when asked for."""

    cell: tuple[str, str, str, str, str]
    policy: str
    counters: dict[str, int]
    steps: float
    plain_steps: float
    predicted: float
    measured: float | None
    bound: Bound | None = None

    @property
    def error(self) -> float | None:
        """(predicted - measured) / measured, None without a measured arm."""
        if not self.measured:
            return None
        return (self.predicted - self.measured) / self.measured

    @property
    def efficiency(self) -> float | None:
        """Oracle cost over this policy's cost (<= 1.0), None without the oracle."""
        return self.bound.schedule.efficiency(self.steps) if self.bound else None


COSTS_EXPECTED = "a YAML width-cost table (name, ratio: [cost of width 1, 2, ...])"
# What `--costs` reads as a file's name, in any case (JSON: what `calibrate --json` writes).
COST_FILE_SUFFIXES = (".yaml", ".yml", ".json")
# What `calibrate` and the packaged tables write; `ratio` alone is required.
COST_FILE_FIELDS = ("name", "host", "engine", "device", "pipelined_ms", "ratio")
# The rest of what `calibrate --json` writes (how the table was measured): read, not used.
CALIBRATE_JSON_FIELDS = ("model", *(f.name for f in fields(WidthCosts)))
# A verify of the widest block (65 tokens) costs at most ~65 one-token steps on any host;
# past this bound a cost is no measurement, and its sums print 300 digits or overflow to inf.
MAX_COST_STEPS = 1000.0
# A verify forwards at least one token: under a tenth of a one-token step is no measurement
# (seconds typed for steps), and a plain reply then prices at "0.0 / 0.0" steps.
MIN_COST_STEPS = 0.1
# The shortest prefix of a run key (32 hex digits) replay reads as the whole key.
MIN_RUN_KEY_PREFIX = 8
# Past any tokenizer's vocabulary (the largest hold ~262k ids): a larger stored id is a hand
# edit, and the replay's model would build rows that wide.
MAX_TOKEN_ID = 2**22
GUARD_KEYS = ("min_period", "max_period", "repeats")


def load_cost_file(path: Path, given: str | None = None) -> CostTable:
    """A YAML table (`name`, `ratio: [cost of width 1, 2, ...]`); one-line errors, naming
    the file as `given` (what the user typed: `./apple-m4pro`, not `apple-m4pro`)."""
    shown = given or str(path)
    data = read_yaml(path, f"--costs {shown}", expected=COSTS_EXPECTED)
    if data is None:
        raise UserError(f"--costs {shown}: the file is empty; expected {COSTS_EXPECTED}")
    if not isinstance(data, dict):
        raise UserError(f"--costs {shown}: expected a mapping of fields at the top level "
                        f"(name, ratio: [...]), got {describe_value(data)}")
    unknown = [str(k) for k in data if k not in COST_FILE_FIELDS + CALIBRATE_JSON_FIELDS]
    if unknown:
        raise UserError(f"--costs {shown}: unknown field {unknown[0]!r}; expected "
                        f"{', '.join(COST_FILE_FIELDS[:-1])} or {COST_FILE_FIELDS[-1]} (or "
                        "what `calibrate --json` writes beside them)")
    costs = _ratio(shown, data.get("ratio"))
    for field in ("name", "host", "engine", "device"):  # the name is shown in the title
        if field in data and not isinstance(data[field], str):
            raise UserError(f"--costs {shown}: field {field!r} must be text, got "
                            f"{describe_value(data[field])}")
    if "name" in data and (problem := name_problem(data["name"])):  # shown in the title
        raise UserError(f"--costs {shown}: field 'name': {problem}; expected the table's title "
                        "in printable characters (or no name: the file's own)")
    if "host" in data and (problem := host_name_problem(data["host"])):  # matched to runs'
        raise UserError(f"--costs {shown}: field 'host': {problem}")
    for field, known in (("engine", ENGINES), ("device", DEVICES)):
        if field in data and data[field] not in known:  # a table of no engine we know
            raise UserError(f"--costs {shown}: field {field!r} is {data[field]!r}; expected one "
                            f"of {', '.join(known)}")
    step = data.get("pipelined_ms")  # not used here, but a table that says -1 ms is not one
    if step is not None and _positive(step) is None:
        raise UserError(f"--costs {shown}: field 'pipelined_ms' must be a positive number of "
                        f"milliseconds, got {describe_value(step)}")
    pipelines = (steps_overlap_host(data["engine"], data["device"])
                 if "engine" in data and "device" in data else None)
    model = data.get("model") if isinstance(data.get("model"), str) else None
    return CostTable(str(data.get("name") or path.stem), costs, data.get("host"), pipelines,
                     data.get("engine"), data.get("device"), model)


def _ratio(shown: str, ratio: object) -> tuple[float, ...]:
    """The table's `ratio` field as costs, each within MIN_COST_STEPS..MAX_COST_STEPS."""
    costs = [c if c is None or c <= MAX_COST_STEPS else None
             for c in map(_positive, ratio)] if isinstance(ratio, list) else []
    if len(costs) < 2 or None in costs:
        if not isinstance(ratio, list):
            bad = f", got {describe_value(ratio)}"
        elif len(costs) < 2:
            bad = f", got {len(costs)}"
        else:
            bad = f"; ratio[{costs.index(None)}] is {describe_value(ratio[costs.index(None)])}"
        raise UserError(f"--costs {shown}: field 'ratio' must be a list of at least two positive "
                        f"costs (widths 1, 2, ... in pipelined steps, each at most "
                        f"{MAX_COST_STEPS:g}){bad}")
    checked = tuple(c for c in costs if c is not None)
    tiny = next((i for i, c in enumerate(checked) if c < MIN_COST_STEPS), None)
    if tiny is not None:
        raise UserError(f"--costs {shown}: ratio[{tiny}] is {checked[tiny]:g}, under "
                        f"{MIN_COST_STEPS:g} of a pipelined step; expected each width's cost in "
                        "pipelined one-token steps (width 1 about 1), not in seconds")
    return checked


def _positive(value: object) -> float | None:
    """A YAML number as a positive finite float, else None (text, true, 0, nan, an integer
    too large for a float)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if 0 < number < math.inf else None


def packaged_cost(name: str) -> Path | None:
    """The packaged table of that bare name (`gb10-qwen3-1.7b`, `apple-m4pro`, ...)."""
    from specfleet.configs import costs_dir

    path = costs_dir() / f"{name}.yaml"
    # os.path: False for a name past a file name's bytes (Path.is_file raised ENAMETOOLONG).
    return path if "/" not in name and os.path.isfile(path) else None


def packaged_cost_names() -> list[str]:
    """The packaged tables' bare names, sorted (what `--costs NAME` takes)."""
    from specfleet.configs import costs_dir

    return sorted(path.stem for path in costs_dir().glob("*.yaml"))


def cost_source(spec: str):
    """A function cell -> CostTable for `--costs`: a YAML file, a packaged table, or a host
    whose newest stored calibration of the cell's engine, device and model is used; "" (no
    `--costs`) is each cell's own host."""
    path = Path(spec)
    # A host name has no slash and no .yaml: such a value is a file, missing or not (its
    # reader names a missing file, a folder or a pipe in one line).
    if "/" in spec or path.suffix.lower() in COST_FILE_SUFFIXES:
        table = load_cost_file(path, spec)
        return lambda store, cell: table
    packaged = packaged_cost(spec)
    if packaged is not None:
        table = load_cost_file(packaged)
        return lambda store, cell: table

    def stored(store, cell) -> CostTable:
        ran_on, engine, device, model, _ = cell
        host = spec or ran_on
        rows = store.latest_calibration(engine, device, model, host=host)
        if not rows or any(r.ratio is None for r in rows):
            raise _no_table(spec, host, f"{model} on {engine}/{device}")
        return CostTable(f"{host} {rows[0].measured_at:%Y-%m-%d %H:%M} n={rows[0].n}",
                         tuple(r.ratio for r in rows), host, steps_overlap_host(engine, device),
                         engine, device, model)

    return stored


def _no_table(spec: str, host: str, what: str) -> UserError:
    """Why `--costs SPEC` (or no `--costs`) found no table for `what` (a model on a target)."""
    if spec and os.path.isfile(spec):  # "no YAML file" would deny the file beside it
        return UserError(f"--costs {spec}: a name without '/', .yaml, .yml or .json is read as a host "
                         "or a packaged table, and no such one has a table; expected "
                         f"./{spec} to read the file of that name")
    said = (f"--costs {spec}: no YAML file, packaged table or stored calibration of host "
            f"{host!r}" if spec else
            f"--costs not given: the runs' own host {host!r} has no stored calibration")
    return UserError(f"{said} for {what} (store one with "
                     "`specfleet calibrate --store` or `job calibrate`, or give --costs a "
                     f"packaged table: {', '.join(packaged_cost_names())})")


def stored_runs(store, ident: str) -> list:
    """The done greedy runs of a matrix, a generation job or one run key (with the plain
    runs of its cell in its matrix or job: a prediction is a speed-up over plain)."""
    kind = _stored_kind(store, ident)
    if kind is None:
        ident = whole_run_key(store, ident)
        runs = store.runs(run_key=ident)
        if runs and runs[0].arm != "plain":
            (run,) = runs
            runs += store.runs(matrix=run.matrix_id, job=run.job_id, host=run.host,
                               engine=run.engine, device=run.device, model=run.model,
                               prompt=run.prompt_name, arm="plain")
    else:
        runs = store.runs(**{"matrix" if kind == "matrix" else "job": ident})
    if not runs:
        if kind is not None:  # it is stored: "no matrix ..." would send the user looking
            raise UserError(f"RUN_OR_MATRIX {ident}: the {kind} holds no runs; expected one "
                            "with done greedy runs")
        raise UserError(f"RUN_OR_MATRIX: no matrix, generation job or run {ident!r} in "
                        f"{store.display_url}; expected {store.stored_id_hint(ident)}")
    greedy = [r for r in runs if r.status == "done" and not r.temperature]
    if not greedy:  # not "stored before replay existed": there is nothing done to replay
        held = ", ".join(f"{n} {status}" + (" at temperature > 0" if status == "done" else "")
                         for status, n in sorted(Counter(r.status for r in runs).items()))
        raise UserError(f"RUN_OR_MATRIX {ident}: no done greedy run to replay (its runs: "
                        f"{held}); expected done runs at temperature 0")
    if not any(r.prompt_token_ids for r in greedy):
        raise UserError(f"RUN_OR_MATRIX {ident}: no done greedy run keeps its prompt token ids "
                        "(runs stored before specfleet replay existed); run it again")
    kept = [r for r in greedy if r.prompt_token_ids and r.token_ids]
    for run in kept:
        if problem := _replay_values_problem(run):
            raise store.damaged(problem)
    return kept


def _replay_values_problem(run) -> str | None:
    """What in a run's stored reply or loop guard is not as specfleet stores them (a hand
    edit: a traceback deep inside the replay, or a model as wide as the largest id)."""
    for column in ("prompt_token_ids", "token_ids"):
        ids = getattr(run, column)
        bad = next((t for t in ids if type(t) is not int or not 0 <= t < MAX_TOKEN_ID), None) \
            if isinstance(ids, list) else ids
        if bad is not None:
            return f"runs.{column} of run {run.run_key!r} holds {bad!r:.40}, not a token id"
    guard = run.loop_guard
    if guard and not (isinstance(guard, dict) and sorted(guard) == sorted(GUARD_KEYS)
                      and all(type(v) is int and v > 0 for v in guard.values())):
        return (f"runs.loop_guard of run {run.run_key!r} holds {guard!r:.60}, not counts "
                f"{', '.join(GUARD_KEYS)}")
    return None


def whole_run_key(store, ident: str) -> str:
    """The run key `ident` begins, when it begins exactly one (`matrix status` shows 12
    characters of a key); `ident` itself when it is whole or begins none."""
    if len(ident) < MIN_RUN_KEY_PREFIX or store.runs(run_key=ident, columns=["run_key"]):
        return ident
    keys = store.run_keys_beginning(ident, most=3)
    if len(keys) > 1:
        named = ", ".join(keys[:2]) + (", ..." if len(keys) > 2 else "")
        raise UserError(f"RUN_OR_MATRIX {ident}: it begins several run keys ({named}); "
                        "expected more of the key")
    return keys[0] if keys else ident


def _stored_kind(store, ident: str) -> str | None:
    """`matrix` or `generation job` when `ident` names one, else None (maybe a run key)."""
    from specfleet.store import UnknownMatrix

    for kind, get in (("matrix", store.get_matrix), ("generation job", store.get_generation_job)):
        try:
            get(ident)
        except UnknownMatrix:
            continue
        return kind
    return None


def _cell(run) -> tuple[str, str, str, str, str]:
    return (run.host, run.engine, run.device, run.model, run.prompt_name)


def _guard(run) -> tuple[int, int, int] | None:
    g = run.loop_guard
    return (g["min_period"], g["max_period"], g["repeats"]) if g else None  # GUARD_KEYS


def _replay(run, reply_run, lookup: PromptLookupConfig | None, costs: Sequence[float],
            pipeline: bool | None = None):
    """`run`'s loop over `reply_run`'s reply: re-feeding as its model did, pipelining as
    `pipeline` says (None: as the run did; runs stored before it was kept pipelined)."""
    config = run.engine_config or {}
    try:
        return replay(run.prompt_token_ids, reply_run.token_ids,
                      stop_reason=reply_run.stop_reason, max_tokens=run.max_tokens,
                      lookup=lookup, costs=costs, loop_guard=_guard(run), refeeds=_refeeds(run),
                      pipeline=config.get("pipelines", True) if pipeline is None else pipeline)
    except ReplayDiffers:  # its stored columns disagree: a hand edit, or another store's run
        raise UserError(
            f"run {reply_run.run_key}: its stored reply ({len(reply_run.token_ids)} tokens, "
            f"stop reason {reply_run.stop_reason}) is not what greedy decoding under its "
            f"stored settings (max_tokens {run.max_tokens}) emits; expected the store as "
            "specfleet wrote it (restore it from a backup)") from None


def _refeeds(run) -> bool:
    return (run.engine_config or {}).get("rollback_kind") == "refeed"


def stored_lookup(run) -> PromptLookupConfig | None:
    """The exact lookup config a stored run used (its engine_config), None for plain."""
    lookup = (run.engine_config or {}).get("lookup")
    if not lookup:
        return None
    unknown = sorted(set(lookup) - {f.name for f in fields(PromptLookupConfig)})
    if unknown:  # a newer specfleet's setting: replaying without it would be another run
        raise UserError(f"run {run.run_key} drafted with a setting this specfleet does not know "
                        f"({', '.join(unknown)}); expected runs of this specfleet or an older "
                        "one: upgrade specfleet to replay it")
    return PromptLookupConfig(**{**lookup, "costs": tuple(lookup.get("costs") or ())})


def check_counters(runs: Sequence) -> tuple[list[str], int]:
    """Replay every stored lookup run on its own reply: one line per counter that differs,
    and how many runs an earlier revision of their policy made (not compared: today's rule
    drafts differently by design). Every run's `generated_tokens` must also be its stored
    reply's length (plain and peers included)."""
    mismatches, earlier = [], 0
    for run in runs:
        # tok/s, decode tok/s and tokens per forward all divide by it: it must be the reply's.
        ids, count = getattr(run, "token_ids", None), getattr(run, "generated_tokens", None)
        if ids is not None and count is not None and count != len(ids):
            mismatches.append(f"{run.run_key}: generated_tokens stored {count}, its stored "
                              f"reply holds {len(ids)} tokens")
        lookup = stored_lookup(run)
        if lookup is None:
            continue
        if (run.engine_config or {}).get("policy_revision", 1) != policy_revision(lookup):
            earlier += 1
            continue
        done = _replay(run, run, lookup, (1.0, 1.0)).generation
        stats = done.stats
        for name in COUNTER_NAMES:
            replayed, stored = getattr(stats, name), getattr(run, name)
            if replayed != stored and not (name == "refed_tokens"
                                           and stored == replayed + _final_refeed(done)):
                mismatches.append(f"{run.run_key}: {name} replayed {replayed}, stored {stored}")
    return mismatches, earlier


def _final_refeed(generation) -> int:
    """What a run stored before the loop stopped re-feeding a reply that had ended counted in
    that round: its accepted + 1 tokens when its last verify missed (0 otherwise)."""
    if not generation.trace:
        return 0
    last = generation.trace[-1]
    return last.accepted + 1 if last.kind == "verify" and last.accepted < last.proposed else 0


def _policy_runs(arms: dict[str, list], policy: str) -> list:
    """The runs that ran `policy`: its own arm's, else an `auto` arm's that resolved to it
    (`bench --arms plain,auto` measured graded, or gated on CUDA)."""
    return arms.get(policy) or [r for r in arms.get("auto", []) if r.resolved_policy == policy]


def _policy_config(policy: Policy, arms: dict[str, list], costs: Sequence[float]):
    """The policy's config: a stored arm's own options when the matrix ran it."""
    for run in _policy_runs(arms, policy):
        lookup = stored_lookup(run)
        if lookup is not None:
            return replace(lookup, adaptive=True, policy=policy, costs=tuple(costs))
    return PromptLookupConfig(max_draft=default_max_draft(policy), policy=policy,
                              costs=tuple(costs))


def _prefill_steps(plain_runs: Sequence) -> float:
    steps = [r.prefill_s / (r.decode_s / r.rounds) for r in plain_runs
             if r.rounds and r.decode_s and r.prefill_s is not None]
    return statistics.median(steps) if steps else 0.0


def _measured(arms: dict[str, list], policy: str) -> float | None:
    plain = [r.tok_per_s for r in arms.get("plain", []) if r.tok_per_s]
    mine = [r.tok_per_s for r in _policy_runs(arms, policy) if r.tok_per_s]
    if not plain or not mine:
        return None
    return statistics.median(mine) / statistics.median(plain)


def _bounds(run, configs: dict[Policy, PromptLookupConfig], costs: Sequence[float],
            plain_steps: float, prefill: float) -> dict[Policy, Bound]:
    """Each policy's oracle bound: one per n-gram index the policies share, as wide as the
    widest of their drafts (any of their schedules is then one the oracle weighed)."""
    widest: dict[tuple[int, int], int] = {}
    for c in configs.values():
        key = (c.ngram_min, c.ngram_max)
        widest[key] = max(widest.get(key, 0), c.max_draft)
    bounds = {}
    for (ngram_min, ngram_max), max_draft in widest.items():
        lookup = PromptLookupConfig(ngram_max, ngram_min, max_draft)
        schedule = oracle(run.prompt_token_ids, run.token_ids, stop_reason=run.stop_reason,
                          max_tokens=run.max_tokens, lookup=lookup, costs=costs,
                          refeeds=_refeeds(run))
        bounds[(ngram_min, ngram_max)] = Bound(
            lookup, schedule, predicted_speedup(plain_steps, schedule.cost_steps, prefill))
    return {p: bounds[(c.ngram_min, c.ngram_max)] for p, c in configs.items()}


def predict(store, runs: Sequence, policies: Sequence[Policy], costs_for,
            with_oracle: bool = False) -> list[Prediction]:
    """One `Prediction` per cell with a plain run and per policy (with the cell's oracle
    bound when `with_oracle`)."""
    cells: dict[tuple, dict[str, list]] = {}
    for run in runs:
        cells.setdefault(_cell(run), {}).setdefault(run.arm, []).append(run)
    out = []
    for cell, arms in cells.items():
        if "plain" not in arms:
            continue
        base = min(arms["plain"], key=lambda r: r.repeat)
        table = costs_for(store, cell)
        plain_steps = _replay(base, base, None, table.ratio, table.pipelines).cost_steps
        prefill = _prefill_steps(arms["plain"])
        configs = {p: _policy_config(p, arms, table.ratio) for p in policies}
        bounds = _bounds(base, configs, table.ratio, plain_steps, prefill) if with_oracle else {}
        for policy in policies:
            done = _replay(base, base, configs[policy], table.ratio, table.pipelines)
            stats = done.generation.stats
            out.append(Prediction(
                cell, policy, {n: getattr(stats, n) for n in COUNTER_NAMES}, done.cost_steps,
                plain_steps, predicted_speedup(plain_steps, done.cost_steps, prefill),
                # Another host's (or target's) table predicts there: these runs are no check.
                _measured(arms, policy) if table.measured_where(cell) else None,
                bounds.get(policy),
            ))
    return out
