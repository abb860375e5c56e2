"""The places specfleet writes on its own (the default store's folder, the Ray token, the
runtime folder and its machine locks, the embedded Ray's folder, a toy run log) when they
cannot be written: $HOME a file, a read-only mount, a full disk, a host name Ray refuses.
Each is one line naming the place and the way out, never a traceback, and a token never
left half-written."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.cluster import raytoken
from specfleet.cluster.startfailures import check_ray_dir_room
from specfleet.dirs import runtime_dir
from specfleet.errors import UserError
from specfleet.settings import check_worker_settings
from specfleet.workers.hardware import default_host_name
from specfleet.workers.machinelock import MachineLock
from tests.store.disks import fill, mounted


@contextlib.contextmanager
def read_only(folder: Path, prepare=lambda root: None) -> Iterator[Path]:
    """A small tmpfs on `folder`, `prepare`d, then made read-only."""
    with mounted(folder, "tmpfs") as root:
        prepare(root)
        subprocess.run(["mount", "-o", "remount,ro", str(root)], check=True)
        yield root


def test_the_default_stores_folder_that_cannot_be_made_is_one_line(tmp_path, monkeypatch):
    # $HOME a file: a 50-line NotADirectoryError from every writing command.
    home = tmp_path / "home"
    home.write_text("")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SPECFLEET_DB", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    result = CliRunner().invoke(app, ["db", "upgrade"])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"error: --db not given: the default store's folder {home}/.local/share/specfleet cannot "
        "be made (Not a directory); expected --db or SPECFLEET_DB naming a store you can write"]


def test_a_store_in_a_missing_folder_is_not_said_to_be_made_by_db_upgrade(tmp_path):
    # "`specfleet db upgrade` ... creates one", which refuses a missing folder.
    result = CliRunner().invoke(app, ["results", "--db", str(tmp_path / "no" / "s.db")])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"error: --db: directory {tmp_path / 'no'} does not exist; expected a store in an "
        "existing folder (make it first)"]


def test_a_ray_token_that_cannot_be_made_is_one_line_and_leaves_no_file(tmp_path, monkeypatch):
    # A NotADirectoryError traceback; on a full disk an empty token file that refused every
    # later start ("is empty") until removed by hand.
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "afile" / "tok"))
    with pytest.raises(UserError, match=r"^RAY_AUTH_TOKEN_PATH .*/afile/tok: .*/afile is a "
                                        r"file, not a folder; expected a folder$"):
        raytoken.ensure_token(create=True)
    with mounted(tmp_path / "full", "tmpfs") as disk:
        fill(disk)
        monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(disk / "tok"))
        with pytest.raises(UserError, match=r"tok: cannot be created \(No space left on "
                                            r"device\); expected a folder you can write"):
            raytoken.ensure_token(create=True)
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # no token, no temp file


def test_a_runtime_folder_that_cannot_be_written_is_refused_before_any_work(tmp_path,
                                                                           monkeypatch):
    # Only its owner and mode were checked: `generate` loaded the model, then failed on
    # its machine lock with a traceback; an embedded fleet failed inside Ray.
    def private_folder(root: Path) -> None:
        (root / "rt").mkdir(mode=0o700)

    with read_only(tmp_path / "ro", private_folder) as root:
        monkeypatch.setenv("SPECFLEET_RUNTIME_DIR", str(root / "rt"))
        with pytest.raises(UserError, match=r"^SPECFLEET_RUNTIME_DIR: .*/rt cannot be written "
                                            r"\(a read-only file system\?\); expected a folder "
                                            r"this user can write$"):
            runtime_dir()
    monkeypatch.setenv("SPECFLEET_RUNTIME_DIR", str(tmp_path / "no" / "rt"))
    with pytest.raises(UserError, match=r"^SPECFLEET_RUNTIME_DIR .*/no/rt: cannot be created "
                                        r"\(No such file or directory\); expected a path whose "
                                        r"folder exists$"):
        runtime_dir()


def test_a_machine_lock_with_something_in_its_place_is_one_line(tmp_path):
    # IsADirectoryError / ELOOP tracebacks, stored as every toy run's raw error.
    (tmp_path / "machine.lock").mkdir()
    lock = MachineLock(tmp_path / "machine.lock", holder="test")
    with pytest.raises(UserError, match=r"^the machine lock .*: cannot be opened \(Is a "
                                        r"directory\); expected a file specfleet makes there"):
        lock.acquire()


def test_an_embedded_ray_folder_without_room_is_refused_before_ray_starts(tmp_path):
    # Ray waited 31 s for a port file it could not write, then a RuntimeError traceback.
    with mounted(tmp_path / "full", "tmpfs") as disk:
        fill(disk)
        with pytest.raises(UserError, match=r"^the embedded fleet's Ray folder .*/full/ray: "
                                            r"0\.0 MB free; expected at least 64 MB there"):
            check_ray_dir_room(str(disk / "ray"))
    check_ray_dir_room(str(tmp_path / "ray"))  # /tmp has room


def test_a_host_name_ray_refuses_asks_for_specfleet_host(monkeypatch):
    # Unset SPECFLEET_HOST on a machine named `x-`: Ray's label ValueError, a traceback.
    monkeypatch.delenv("SPECFLEET_HOST", raising=False)
    monkeypatch.setattr(socket, "gethostname", lambda: "x-")
    with pytest.raises(UserError, match=r"^this machine's host name 'x-' cannot name a fleet "
                                        r"host .*; expected SPECFLEET_HOST set to a host name"):
        default_host_name()
    monkeypatch.setattr(socket, "gethostname", lambda: "Box-1.example.org")
    assert default_host_name() == "box-1"
    monkeypatch.setenv("SPECFLEET_HOST", "named")
    monkeypatch.setattr(socket, "gethostname", lambda: "x-")
    assert default_host_name() == "named"


def test_a_toy_run_log_on_a_read_only_mount_is_refused_up_front(tmp_path, monkeypatch):
    # Every toy run failed and was stored failed with the raw OSError.
    with read_only(tmp_path / "ro") as root:
        monkeypatch.setenv("SPECFLEET_TOY_RUN_LOG", str(root / "log"))
        with pytest.raises(UserError, match=r"^SPECFLEET_TOY_RUN_LOG: .*/log cannot be written "
                                            r"\(a read-only file system\?\); expected a file"):
            check_worker_settings()
    monkeypatch.setenv("SPECFLEET_TOY_RUN_LOG", str(tmp_path / "log"))
    check_worker_settings()
    assert not os.path.exists(tmp_path / "log")  # checked, not written


def test_a_setting_at_fault_is_not_said_as_the_matrix_files_fault(tmp_path, monkeypatch):
    # `m.yaml: models[0]: torch: SPECFLEET_MODELS ...`: the file was blameless.
    matrix = tmp_path / "m.yaml"
    matrix.write_text("name: m\nmodels: [smollm2-135m]\nprompts: [{name: p, text: hello}]\n"
                      "arms: [plain]\ntargets: {engines: [torch]}\n")
    monkeypatch.setenv("SPECFLEET_MODELS", str(tmp_path / "nope.yaml"))
    result = CliRunner().invoke(app, ["matrix", "validate", str(matrix)])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"error: SPECFLEET_MODELS {tmp_path / 'nope.yaml'}: no such file; expected a YAML "
        "mapping 'models:' of alias -> sources (as the packaged models.yaml)"]


def test_the_default_journal_folder_that_cannot_be_made_names_its_variable(tmp_path,
                                                                          monkeypatch):
    from specfleet.store.journal import check_journal_root

    (tmp_path / "home").write_text("")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPECFLEET_JOURNAL_DIR", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    with pytest.raises(UserError, match=r"^the journal folder \(SPECFLEET_JOURNAL_DIR moves "
                                        r"it\): .*/home is a file, not a folder"):
        check_journal_root()
