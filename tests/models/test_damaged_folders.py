"""Model folders damaged in ways a user meets (a tokenizer of another model, a config field of
the wrong type, a name in the folder that is no file, a bundled fetch half removed by hand):
each is one line naming what is wrong, never a traceback, a hang or a garbage reply."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.engine.runners.folders import folder_problem
from specfleet.models.bundled import BUNDLED_FOLDERS, COMPLETE_MARKER, GGUF_FOLDER, fetched
from tests.models.test_user_folders import generate, save_tiny


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("tiny") / "llama", "llama")


def _copy(tiny: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny, tmp_path / "model"))


def _edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.torch
@pytest.mark.mlx
@pytest.mark.parametrize("engine", ["torch", "mlx"])
def test_a_prompt_token_past_the_models_vocabulary_is_refused(tiny, tmp_path, engine):
    # torch failed in its embedding with a traceback; MLX read past the table and replied.
    folder = _copy(tiny, tmp_path)
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["model"]["vocab"]["~"] = 500  # the model has 96 rows
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    result = CliRunner().invoke(app, ["generate", "-m", str(folder), "--engine", engine,
                                      "--device", "cpu", "-p", "a~b", "-n", "4", "--no-chat",
                                      "--no-warm-up"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        "error: the prompt holds token id 500, past this model's vocabulary of 96 ids (its "
        "tokenizer and its weights come from different models); expected a tokenizer that "
        "matches config.json's vocab_size")
    assert result.stdout == ""


@pytest.mark.mlx
def test_a_config_field_of_the_wrong_type_is_one_line_on_mlx(tiny, tmp_path):
    # transformers' strict config check, met while mlx-lm loads the tokenizer: a traceback.
    folder = _copy(tiny, tmp_path)
    _edit_json(folder / "config.json", max_position_embeddings="lots")
    result = generate(folder, "mlx")
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert (f"{folder}: the mlx engine cannot load this folder (Validation error for field "
            "'max_position_embeddings': TypeError: Field 'max_position_embeddings' expected "
            "int, got str (value: 'lots')); expected") in line, line


@pytest.mark.torch
def test_a_key_the_library_misses_is_named_as_one(tiny, tmp_path):
    # The bare KeyError read "cannot load this folder ('added_tokens')".
    folder = _copy(tiny, tmp_path)
    (folder / "tokenizer.json").write_text("{}")
    result = generate(folder, "torch")
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert "cannot load this folder (a file of it lacks the key 'added_tokens')" in line, line


@pytest.mark.timeout(30)
def test_weights_that_are_no_file_are_named_before_anything_reads_them(tiny, tmp_path):
    # A named pipe hung the safetensors check until killed.
    folder = _copy(tiny, tmp_path)
    weights = folder / "model.safetensors"
    weights.unlink()
    os.mkfifo(weights)
    assert folder_problem(folder, "torch") == (
        f"{folder} holds model.safetensors, a named pipe (FIFO), not a file; expected the "
        "model's weights")
    weights.unlink()
    weights.mkdir()
    assert folder_problem(folder, "mlx") == (
        f"{folder} holds model.safetensors, a directory, not a file; expected the model's "
        "weights")


def test_a_config_json_that_is_no_file_is_named_so(tiny, tmp_path):
    # It read "holds no model (expected a folder with config.json)" beside a config.json.
    folder = _copy(tiny, tmp_path)
    (folder / "config.json").unlink()
    (folder / "config.json").mkdir()
    result = generate(folder, "torch")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        f"error: --model: model '{folder}': {folder / 'config.json'} is a directory, not a "
        "file; expected the model's config.json")


def test_a_4bit_bundled_source_for_torch_is_refused_where_the_registry_is_read(tmp_path,
                                                                             monkeypatch):
    # Listed as fetched, validated, then refused at load with "fetch it again" (no remedy).
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  q4t:\n    torch: bundled-q4\n")
    monkeypatch.setenv("SPECFLEET_MODELS", str(path))
    result = CliRunner().invoke(app, ["models", "list"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        f"error: SPECFLEET_MODELS {path}: models.q4t.torch: bundled-q4 is a form only mlx "
        "loads; expected bundled[:NAME] for torch")
    path.write_text("models:\n  q4m:\n    mlx: bundled-q4\n  full:\n    torch: bundled\n")
    assert CliRunner().invoke(app, ["models", "list"]).exit_code == 0


def test_a_fetch_with_a_folder_removed_is_no_fetch(tmp_path, monkeypatch):
    # `models fetch` said "already fetched" from the marker while `generate` said "not
    # fetched yet": a loop with no way out.
    monkeypatch.setenv("SPECFLEET_HOME", str(tmp_path))
    root = tmp_path / "models" / "smollm2-135m"
    for name in (GGUF_FOLDER, *BUNDLED_FOLDERS.values()):
        (root / name).mkdir(parents=True)
    (root / COMPLETE_MARKER).write_text("done\n")
    assert fetched("smollm2-135m")
    (root / BUNDLED_FOLDERS["bundled"]).rmdir()
    assert not fetched("smollm2-135m")
    monkeypatch.setenv("SPECFLEET_MODELS", str(tmp_path / "models.yaml"))
    (tmp_path / "models.yaml").write_text("models:\n  small:\n    torch: bundled\n")
    result = CliRunner().invoke(app, ["generate", "-m", "small", "-p", "hi", "-n", "2"])
    assert result.exit_code == 2, result.output
    assert "model 'small' is not fetched yet: run `specfleet models fetch smollm2-135m`" in \
        result.stderr
