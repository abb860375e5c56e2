"""Fixtures of the web view's tests: a seeded store (SQLite file) and a test client over it."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from specfleet.serve import create_app
from specfleet.store.readonly import open_read_only
from tests.serve.seed import LOOPBACK_URL, seed_store


@pytest.fixture(scope="module")
def seeded_url(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('serve') / 'seeded.db'}"
    seed_store(url)
    return url


def client_of(url: str):
    """A test client of the web view over the store at `url`, opened read-only as serve does."""
    store = open_read_only(url)
    with TestClient(create_app(store), base_url=LOOPBACK_URL) as test_client:
        yield test_client
    store.close()


@pytest.fixture(scope="module")
def client(seeded_url):
    yield from client_of(seeded_url)
