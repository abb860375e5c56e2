"""What the `Store` mixins (`queries.py`, `series.py`, `leases.py`) use of the `Store` they
are mixed into: its engine, its URL for messages, and its transaction helpers.

Their methods take `self: StoreCore`, so mypy checks each call against this and checks that
`Store` provides it wherever one of them is called on a `Store`.
"""

from __future__ import annotations

import contextlib
from typing import Protocol

from sqlalchemy import Connection, Engine
from sqlalchemy.orm import Session


class StoreCore(Protocol):
    """The part of `Store` its mixins call."""

    engine: Engine

    @property
    def display_url(self) -> str:
        """The store's URL with any password hidden, for messages."""
        ...

    def _read(self) -> contextlib.AbstractContextManager[Session]:
        """A session for reads."""
        ...

    def _write(self) -> contextlib.AbstractContextManager[Session]:
        """A session in one write transaction, committed on leaving."""
        ...

    def _connect(self) -> contextlib.AbstractContextManager[Connection]:
        """A connection for light reads."""
        ...
