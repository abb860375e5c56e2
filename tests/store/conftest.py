"""An open store per test, once on SQLite and once on PostgreSQL (`store_url`); small disks
to fill (root only)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from specfleet.store import Store, open_store
from tests.store.disks import mounted


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with open_store(store_url) as opened:
        yield opened


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A 1 MiB tmpfs."""
    with mounted(tmp_path / "small", "tmpfs") as folder:
        yield folder


@pytest.fixture
def small_block_disk(tmp_path) -> Iterator[Path]:
    """A 4 MiB ext4 with 1 KiB blocks."""
    with mounted(tmp_path / "ext4", "ext4") as folder:
        yield folder
