"""An open store per test, once on SQLite and once on PostgreSQL (`store_url`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from specfleet.store import Store, open_store


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with open_store(store_url) as opened:
        yield opened
