"""What the store refuses: conflicts, unknown ids, and a store not as specfleet left it."""

from __future__ import annotations

from specfleet.errors import UserError


class StoreError(Exception):
    """A write the store refuses (a bug in the caller, not a user mistake)."""


class StoreConflict(StoreError):
    """A second, different write to something already settled (a `done` run, a run key)."""


class UnknownRun(StoreError):
    """No run with this run key."""


class UnknownMatrix(UserError):
    """No matrix (or generation job) with this id."""


class StoreUnreachable(UserError):
    """The store cannot be reached right now (server down, network, disk I/O): worth a retry."""


class StoreDamaged(UserError):
    """The store is not what specfleet left (not a database, tables not of its revision):
    restored from a backup, not retried."""


def damaged_value(source: str, url: str, what: str) -> StoreDamaged:
    """The one line for a stored value specfleet did not write: `what` names it and why."""
    return StoreDamaged(f"{source} {url}: a stored value cannot be read ({what}); expected "
                        "the store as specfleet wrote it (restore it from a backup)")


class UnreadableValue(ValueError):
    """A stored value of another type than its column's (a hand edit: SQLite keeps whatever
    is written), found as rows are read; the store says it as `StoreDamaged`, naming the
    store."""

    @classmethod
    def not_a_number(cls, column: str, run_key: str, value: object) -> UnreadableValue:
        return cls(f"runs.{column} of run {run_key!r} holds {type(value).__name__} "
                   f"{value!r:.40}, not a number")
