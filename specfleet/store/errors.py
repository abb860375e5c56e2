"""What the store refuses: conflicts and unknown ids."""

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
