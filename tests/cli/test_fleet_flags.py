"""`fleet up` / `fleet join` flags refused in one line before Ray starts or a head is reached."""

from __future__ import annotations

from types import SimpleNamespace

from typer.testing import CliRunner

from specfleet.cli.main import app


def test_an_engine_this_host_lacks_says_what_is_expected(monkeypatch):
    # It said what was missing, not what --engines may hold here.
    monkeypatch.setattr("specfleet.workers.hardware.detect_host",
                        lambda: SimpleNamespace(engines=["torch"]))
    result = CliRunner().invoke(app, ["fleet", "join", "127.0.0.1:1", "--name", "box2",
                                      "--engines", "torch,mlx"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == ("error: --engines: this host has no mlx; expected a comma-separated "
                             "subset of the engines it has: torch\n")


def test_a_temp_dir_too_long_for_ray_says_what_is_expected():
    long = "/tmp/" + "d" * 200
    result = CliRunner().invoke(app, ["fleet", "join", "127.0.0.1:1", "--name", "box2",
                                      "--temp-dir", long])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"error: --temp-dir {long!r}: 205 characters; expected at "
                                    "most ")
    assert result.stderr.count("\n") == 1
