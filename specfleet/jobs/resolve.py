"""What `matrix validate` says of a good file: its size, and where its models were resolved.

Every mistake in the file is found by `spec_files.check_matrix_file`; where the models are
(fetched, within their context) is asked of the hosts that would run them, or of this machine
without a fleet: `cluster/modelcheck.py`.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from specfleet.jobs.plan import by_target_within_engine, runs_by_engine
from specfleet.jobs.spec import MatrixSpec


def describe(spec: MatrixSpec, file: str | Path, models: str,
             no_source: Collection[tuple[str, str]] = ()) -> str:
    """The one-line summary `matrix validate` prints for a good file; `models` says where
    its models were resolved, `no_source` which (model, engine) cells its alias leaves out.

    Returns:
        e.g. `demo: ok: 1 model x 2 prompts x 3 arms x 3 repeats: 18 runs per torch target,
        6 per mlx target (engines in [torch, mlx]); every model resolved`.
    """
    counts = (f"{counted(len(spec.models), 'model')} x {counted(len(spec.prompts), 'prompt')} x "
              f"{counted(len(spec.arms), 'arm')} x {counted(spec.repeats, 'repeat')}")
    return (f"{file}: ok: {counts}{_per_target(spec, no_source)} "
            f"({spec.targets.describe()}); {models}")


def _per_target(spec: MatrixSpec, no_source: Collection[tuple[str, str]]) -> str:
    """` = 18 runs per target` when every target gets the whole product, else what each
    engine's targets get (`: 18 runs per torch target, 6 per mlx target`)."""
    by_engine = runs_by_engine(spec, no_source)
    upto = "up to " if by_target_within_engine(spec) else ""
    if len(set(by_engine.values())) == 1:
        runs = next(iter(by_engine.values()))
        equals = " =" if runs == spec.most_runs_per_target() else ":"
        return f"{equals} {upto}{counted(runs, 'run')} per target"
    (first, runs), *rest = by_engine.items()
    each = [f"{counted(runs, 'run')} per {first} target",
            *(f"{n} per {engine} target" for engine, n in rest)]
    return f": {upto}{', '.join(each)}"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`1 run`, `6 runs`, `1 more problem`, `2 losses` (with `plural`): a count with its noun
    in the right number."""
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"
