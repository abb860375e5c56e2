"""`specfleet models list` on local folders that are not a whole model: a folder with
config.json but no weights read `yes` and `0 MB`, though every run of it is refused."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from specfleet.cli.main import app


def test_a_folder_without_weights_or_config_says_what_it_lacks(tmp_path: Path,
                                                               monkeypatch) -> None:
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "empty").mkdir()
    (tmp_path / "afile").write_text("not a model\n")  # was said "no such folder"
    (tmp_path / "models.yaml").write_text(
        "models:\n  bare:\n    torch: bare\n  empty:\n    mlx: empty\n  gone:\n    mlx: gone\n"
        "  file:\n    mlx: afile\n")
    monkeypatch.setenv("SPECFLEET_MODELS", str(tmp_path / "models.yaml"))
    result = CliRunner().invoke(app, ["models", "list"])
    assert result.exit_code == 0, result.output
    rows = [line.split(None, 4) for line in result.stdout.splitlines()[1:]]
    assert rows == [
        ["bare", "torch", "no", "-", f"{tmp_path / 'bare'} (holds no weights; expected the "
                                     "model's *.safetensors beside its config.json)"],
        ["empty", "mlx", "no", "-", f"{tmp_path / 'empty'} (no config.json there)"],
        ["gone", "mlx", "no", "-", f"{tmp_path / 'gone'} (no such folder)"],
        ["file", "mlx", "no", "-", f"{tmp_path / 'afile'} (not a folder)"],
    ]
