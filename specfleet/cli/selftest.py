"""`specfleet selftest`: the check a worker runs when it starts, by hand, on this machine.

Tiny seeded models of every cache family (full attention, sliding window, hybrid linear
attention, state space) decode a copy-heavy prompt plainly and under prompt lookup on each
engine and device this machine offers; the ids must be identical and every rollback must
leave the caches holding exactly the kept tokens. Exit 1 when a target fails.
"""

from __future__ import annotations

from typing import Annotated

import typer

from specfleet.cli.options import refuse_twice, split_list
from specfleet.engine.kinds import MODEL_ENGINES, choices_text


def selftest_command(
    engine: Annotated[list[str] | None, typer.Option(
        "--engine", help=f"Only these engines ({choices_text(MODEL_ENGINES)}); comma-separated "
        "or repeated.")] = None,
    break_rollback: Annotated[bool, typer.Option(
        "--break-rollback", help="Fault injection: every tiny runner drops its rollbacks "
        "(shows what a broken engine looks like; the test must fail).")] = False,
) -> None:
    """Prove each engine and device of this machine on tiny models of every cache family."""
    from specfleet.engine.config import resolve_policy
    from specfleet.errors import UserError
    from specfleet.workers.hardware import detect_host
    from specfleet.workers.selftest import self_test_once

    engine = split_list("--engine", engine)  # `--engine torch,mlx`, as `bench -e` takes it
    for name in engine:
        if name not in MODEL_ENGINES:
            raise UserError(f"--engine {name!r}: expected {choices_text(MODEL_ENGINES)}, "
                            "comma-separated or repeated")
    refuse_twice("--engine", engine, "engine")  # `mlx,mlx` tested once, as `bench -e` refuses
    info = detect_host(full=True)
    offered = {t.engine for t in info.targets()}
    # An engine asked for and absent here was skipped, and the others' "ok" read as its pass.
    absent = [name for name in engine if name not in offered]
    if absent and offered:
        raise UserError(f"--engine {absent[0]}: not installed here (this machine offers "
                        f"{', '.join(sorted(offered))}); expected specfleet[{absent[0]}] "
                        "installed, or only the engines it offers")
    targets = [t for t in info.targets() if not engine or t.engine in engine]
    if not targets:
        raise UserError("no engine to test here: install specfleet[mlx] or specfleet[torch]"
                        + (f" (asked for {', '.join(engine)})" if engine else ""))
    failed = 0
    for target in targets:
        test = self_test_once(target.engine, target.device, resolve_policy("auto", target.device),
                              break_rollback=break_rollback)
        verdict = "ok" if test.passed else "FAILED"
        typer.echo(f"{test.target}: {verdict} in {test.seconds:.1f} s")
        column = max((len(o.family) for o in test.families), default=0) + 1
        for outcome in test.families:
            refed = f" (refed {outcome.refed_tokens} tokens)" if outcome.refed_tokens else ""
            typer.echo(f"  {outcome.family:<{column}} {outcome.detail}{refed}")
        if not test.passed:
            failed += 1
            typer.echo(f"  reason: {test.reason}")
    if failed:
        typer.echo(f"{failed} of {len(targets)} targets failed: a worker here would send them "
                   "no runs", err=True)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add `selftest` to the top-level command."""
    app.command("selftest")(selftest_command)
