"""`fleet up` / `fleet join` with a name whose default Ray temp dir (`/tmp/ray-specfleet-NAME`)
is too long for Ray's sockets: one line naming the name and the way out, before anything
starts. A 43-character name (valid: up to 63) ran `ray start`, which failed with Ray's own
"validate_socket_filename failed: AF_UNIX path length cannot exceed 107 bytes: ..."."""

from __future__ import annotations

import os
import tempfile

import pytest
from typer.testing import CliRunner

from specfleet.cli.fleet import MAX_TEMP_DIR_BYTES
from specfleet.cli.main import app

LONG = "h" + "x" * 42


@pytest.mark.parametrize("command", [["up", "--port", "26390"], ["join", "127.0.0.1:26390"]])
def test_a_name_too_long_for_the_default_temp_dir_is_refused_before_anything_starts(
        command, monkeypatch):
    monkeypatch.setenv("TMPDIR", "/tmp")
    monkeypatch.setattr("specfleet.cluster.membership.fleet_up",
                        lambda *a, **k: pytest.fail("fleet up ran"))
    monkeypatch.setattr("specfleet.cluster.membership.fleet_join",
                        lambda *a, **k: pytest.fail("fleet join ran"))
    result = CliRunner().invoke(app, ["fleet", *command, "--name", LONG])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        f"error: host name '{LONG}': its Ray temp dir /tmp/ray-specfleet-{LONG} is 62 "
        f"characters; expected at most {MAX_TEMP_DIR_BYTES} bytes (Ray's socket paths inside it are "
        "limited to 107 bytes): a shorter --name, or --temp-dir a shorter folder\n")


def test_the_same_name_with_a_short_temp_dir_goes_on(monkeypatch):
    reached: list[str] = []

    def fleet_join(head, name, **_):
        reached.append(name)
        raise SystemExit(0)

    monkeypatch.setattr("specfleet.cluster.membership.fleet_join", fleet_join)
    short = tempfile.mkdtemp(prefix="sf-", dir="/tmp")  # pytest's tmp_path is itself too long
    try:
        CliRunner().invoke(app, ["fleet", "join", "127.0.0.1:26390", "--name", LONG,
                                 "--temp-dir", short])
    finally:
        os.rmdir(short)
    assert reached == [LONG]
