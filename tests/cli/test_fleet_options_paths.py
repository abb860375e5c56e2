"""`fleet up` / `fleet join --temp-dir` as Ray takes it: a relative path or one under `~` is
passed on absolute (`ray start` refused both after it had begun: "temp_dir must be absolute
path or None"), and its length counts bytes (a 44-character path of multi-byte characters
passed, then failed in Ray on its 107-byte socket paths)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app


@pytest.fixture
def short() -> Iterator[str]:
    """A folder with a short path (pytest's tmp_path is itself too long for Ray's sockets)."""
    folder = tempfile.mkdtemp(prefix="sfo-", dir="/tmp")
    try:
        yield folder
    finally:
        shutil.rmtree(folder)  # as $HOME it gets a .cache


@pytest.fixture
def joined(monkeypatch) -> list[str | None]:
    """The temp dir `fleet join` hands the node (instead of starting it)."""
    temp_dirs: list[str | None] = []

    def fleet_join(head, name, *, options, **_):
        temp_dirs.append(options.temp_dir)
        raise SystemExit(0)

    monkeypatch.setattr("specfleet.cluster.membership.fleet_join", fleet_join)
    return temp_dirs


def _join(*args: str):
    return CliRunner().invoke(app, ["fleet", "join", "127.0.0.1:1", "--name", "hb", *args])


def test_a_relative_temp_dir_is_taken_from_the_current_folder(short, joined, monkeypatch):
    monkeypatch.chdir(short)
    assert _join("--temp-dir", "rt").exit_code == 0
    assert joined == [f"{short}/rt"]


def test_a_temp_dir_under_home_is_expanded(short, joined, monkeypatch):
    monkeypatch.setenv("HOME", short)
    assert _join("--temp-dir", "~/rt").exit_code == 0
    assert joined == [f"{short}/rt"]


def test_a_temp_dir_of_multi_byte_characters_counts_bytes(joined):
    path = "/tmp/" + "é" * 39  # 44 characters, 83 bytes
    result = _join("--temp-dir", path)
    assert (result.exit_code, result.stdout, joined) == (2, "", [])
    assert result.stderr == (
        f"error: --temp-dir '{path}': 44 characters, 83 bytes; expected at most 44 bytes "
        "(Ray's socket paths inside it are limited to 107 bytes)\n")


def test_a_relative_temp_dir_is_counted_as_the_absolute_path_it_names(short, joined,
                                                                       monkeypatch):
    monkeypatch.chdir(short)
    name = "d" * (44 - len(short))  # one byte too many once absolute
    result = _join("--temp-dir", name)
    assert (result.exit_code, joined) == (2, [])
    assert result.stderr == (
        f"error: --temp-dir '{name}' ({short}/{name}): 45 characters; expected at most 44 "
        "bytes (Ray's socket paths inside it are limited to 107 bytes)\n")
