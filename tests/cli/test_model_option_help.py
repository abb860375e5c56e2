"""`--model` in `-h`: `job generate` and `job calibrate` said "Model alias." though a model
folder runs there as it does in `generate -m` (an alias or a local model folder)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app


@pytest.mark.parametrize("command", [["generate"], ["job", "generate"], ["job", "calibrate"]])
def test_every_model_option_names_a_folder_beside_an_alias(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.stdout.splitlines() if "--model" in line]
    assert "Alias or" in line and "model folder" in line, line
