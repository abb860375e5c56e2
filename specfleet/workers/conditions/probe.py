"""A worker's use of its host's conditions: readings around each run, the throttle gate of
the quiet check (`--require-quiet` waits while the host is throttled), the state shown by
`fleet status`, and the memory check before a model loads.
"""

from __future__ import annotations

from dataclasses import replace

from specfleet.workers.conditions.judge import check_memory, judge
from specfleet.workers.conditions.model import HostConditions, summary
from specfleet.workers.conditions.sample import conditions_root, sample_conditions
from specfleet.workers.quiet import QuietCheck


def run_fields(before: HostConditions, after: HostConditions) -> dict:
    """The `RunResult` fields of a run read `before` and `after` its timed window."""
    verdict = judge(before, after)
    return {"conditions": {"before": before.to_dict(), "after": after.to_dict()},
            "throttled": verdict.throttled, "throttle_reason": verdict.reason or None}


class NotEnoughMemory(RuntimeError):
    """A model was not loaded: it needs more memory than the host has free."""


class ConditionsProbe:
    """Reads one host's conditions for its worker.

    Args:
        host: the host's fleet name (named in refusals).
        root: where the Linux sources read (default: $SPECFLEET_CONDITIONS_ROOT, else /).
    """

    def __init__(self, host: str, root: str | None = None) -> None:
        self._host = host
        self._root = conditions_root(root)

    def sample(self) -> HostConditions:
        """One reading now."""
        return sample_conditions(self._root)

    def now(self) -> dict:
        """The state now, for `fleet status`: the reading, its one-line summary, throttled or
        not, and why."""
        reading = self.sample()
        verdict = judge(reading)
        return {"reading": reading.to_dict(), "summary": summary(reading),
                "throttled": verdict.throttled, "reason": verdict.reason}

    def gate(self, check: QuietCheck) -> QuietCheck:
        """The quiet check, made "not quiet" while the host is throttled (reason shown)."""
        verdict = judge(self.sample())
        if not verdict.throttled:
            return check
        reason = "; ".join(r for r in (check.reason, f"host throttled: {verdict.reason}") if r)
        return replace(check, quiet=False, reason=reason)

    def refuse_if_too_big(self, model: str, size_bytes: int, device: str) -> None:
        """Raise `NotEnoughMemory` (one line: host, needed, free) when the model won't fit."""
        check = check_memory(size_bytes, self.sample(), device)
        if not check.fits:
            raise NotEnoughMemory(
                f"host {self._host}: not loading {model}: needs {check.needed_gb:.1f} GB "
                f"({size_bytes / 2**30:.1f} GB model + margin), {check.free_gb:.1f} GB "
                f"{check.source} free"
            )
