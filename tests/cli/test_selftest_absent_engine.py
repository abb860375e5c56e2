"""`specfleet selftest --engine`: an engine asked for that this machine lacks is refused in
one line, never skipped while the engines it has pass."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app


@pytest.fixture
def mlx_only(monkeypatch) -> list[str]:
    """A machine with MLX on its CPU and no torch; every self-test passes, recorded."""
    from specfleet.workers import selftest

    tested: list[str] = []

    def once(engine, device, policy, break_rollback=False):
        tested.append(engine)
        return selftest.SelfTest(f"{engine}/{device}", True, 0.0)

    monkeypatch.setattr(selftest, "self_test_once", once)
    targets = [SimpleNamespace(engine="mlx", device="cpu")]
    monkeypatch.setattr("specfleet.workers.hardware.detect_host",
                        lambda full=False: SimpleNamespace(targets=lambda: targets))
    return tested


def test_an_engine_not_installed_is_refused_not_skipped(mlx_only):
    # It tested MLX alone and exited 0: "ok" for a torch that was never tested.
    result = CliRunner().invoke(app, ["selftest", "--engine", "mlx,torch"])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        "error: --engine torch: not installed here (this machine offers mlx); expected "
        "specfleet[torch] installed, or only the engines it offers"]
    assert mlx_only == []


def test_the_engines_installed_are_tested_as_before(mlx_only):
    result = CliRunner().invoke(app, ["selftest", "--engine", "mlx"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("mlx/cpu: ok in 0.0 s") and mlx_only == ["mlx"]
