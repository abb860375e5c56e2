"""This user's folders: the platform's defaults, the variables over them, the runtime dir's
refusals, and no other module asking the platform itself."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specfleet.dirs import runtime_dir, specfleet_home, user_cache_dir, user_data_dir
from specfleet.errors import UserError
from specfleet.settings import HOME, RUNTIME_DIR

ROOT = Path(__file__).resolve().parents[1]


def test_the_platform_dirs_follow_xdg(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv(HOME.name, raising=False)
    assert user_cache_dir() == tmp_path / "cache" / "specfleet" == specfleet_home()
    assert user_data_dir() == tmp_path / "data" / "specfleet"


def test_specfleet_home_is_the_variable_and_refuses_a_file(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(HOME.name, str(tmp_path / "home"))
    assert specfleet_home() == tmp_path / "home"
    (tmp_path / "home").write_text("")
    with pytest.raises(UserError, match=f"^{HOME.name}: .* is a file, not a folder"):
        specfleet_home()


def test_the_runtime_dir_is_private_and_links_are_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(RUNTIME_DIR.name, str(tmp_path / "rt"))
    assert runtime_dir().stat().st_mode & 0o777 == 0o700
    link = tmp_path / "linked"
    os.symlink(tmp_path / "rt", link)
    monkeypatch.setenv(RUNTIME_DIR.name, str(link))
    with pytest.raises(UserError, match="not a private directory"):
        runtime_dir()


def test_only_dirs_asks_the_platform() -> None:
    askers = [str(path.relative_to(ROOT)) for folder in ("specfleet", "bench", "tools")
              for path in sorted((ROOT / folder).rglob("*.py"))
              if "platformdirs" in path.read_text()]
    assert askers == ["specfleet/dirs.py"]


@pytest.mark.parametrize("mode", [0o1777, 0o755, 0o500])
def test_a_runtime_dir_the_variable_names_keeps_its_mode(tmp_path, monkeypatch, mode) -> None:
    # It was chmod-ed 0700: SPECFLEET_RUNTIME_DIR=/tmp, as root, took /tmp's sticky bit and
    # everyone else's access away.
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    monkeypatch.setenv(RUNTIME_DIR.name, str(shared))
    with pytest.raises(UserError) as err:
        runtime_dir()
    assert str(err.value) == (
        f"{RUNTIME_DIR.name}: {shared} has mode {mode:04o}; expected a folder of your own with "
        "mode 0700 (it holds locks and kept results), or a path not there yet")
    assert shared.stat().st_mode & 0o7777 == mode
    shared.chmod(0o2700)  # a private folder of ours is taken as it is (setgid, as made under
    assert runtime_dir() == shared  # a setgid folder)
    assert shared.stat().st_mode & 0o7777 == 0o2700


def test_a_runtime_dir_the_variable_names_is_never_to_be_removed(tmp_path, monkeypatch) -> None:
    # "... or someone else's); remove it or set SPECFLEET_RUNTIME_DIR" of the user's own path.
    (tmp_path / "afile").write_text("keep me")
    monkeypatch.setenv(RUNTIME_DIR.name, str(tmp_path / "afile"))
    with pytest.raises(UserError) as err:
        runtime_dir()
    assert str(err.value) == (
        f"{RUNTIME_DIR.name}: {tmp_path / 'afile'} is not a private directory of this user (a "
        "link, a file or someone else's); expected a folder of your own, or a path not there yet")
