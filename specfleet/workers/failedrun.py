"""A run that ended without a reply: failed (its error in one line) or cancelled while it
waited for the machine. Its provenance is what the worker knows without a model."""

from __future__ import annotations

from datetime import UTC, datetime

from specfleet.errors import UserError
from specfleet.jobs.run import RunResult, RunSpec
from specfleet.workers.hardware import HostInfo
from specfleet.workers.loadseries import load_average
from specfleet.workers.runsetup import prompt_hash


def failed_result(spec: RunSpec, err: BaseException, started_at: datetime,
                  info: HostInfo) -> RunResult:
    """`spec`'s result with status "failed" and `err` as its one-line error."""
    # A user's mistake reads as its own line; a bug keeps its exception's name.
    named = str(err) if isinstance(err, UserError) else f"{type(err).__name__}: {err}"
    message = named.strip().splitlines()[0][:500]
    return RunResult(
        run_key=spec.run_key,
        status="failed",
        error=message,
        target=spec.target,
        prompt_hash=prompt_hash(spec.prompt_text),
        versions=dict(info.versions),
        host_fingerprint=info.fingerprint,
        load_after=load_average(),
        started_at=started_at,
        finished_at=datetime.now(UTC),
    )


def cancelled_result(spec: RunSpec, info: HostInfo) -> RunResult:
    """`spec`'s result when it was cancelled while waiting for the machine: interrupted."""
    now = datetime.now(UTC)
    result = failed_result(spec, RuntimeError("cancelled while waiting for the machine"), now,
                           info)
    return result.model_copy(update={"status": "interrupted", "stop_reason": "cancelled"})
