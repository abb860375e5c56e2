"""A fetched bundled model whose files were damaged since (a disk filled mid-copy, a file cut
short): `generate` says how to fetch it again, as `models fetch` skips a finished fetch."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.models.bundled import BUNDLED_FOLDERS, COMPLETE_MARKER, GGUF_FOLDER, bundled_dir


@pytest.mark.torch
def test_generate_on_a_damaged_bundled_model_says_to_fetch_it_again(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECFLEET_HOME", str(tmp_path))
    monkeypatch.delenv("SPECFLEET_MODELS", raising=False)  # the packaged aliases
    root = bundled_dir(tmp_path, "smollm2-135m")
    folder = root / "hf"
    for name in (GGUF_FOLDER, *BUNDLED_FOLDERS.values()):  # a whole fetch's folders
        (root / name).mkdir(parents=True)
    (root / COMPLETE_MARKER).write_text("done\n")
    (folder / "config.json").write_text(json.dumps(
        {"model_type": "llama", "vocab_size": 16, "hidden_size": 8, "intermediate_size": 16,
         "num_hidden_layers": 1, "num_attention_heads": 1}))
    (folder / "tokenizer.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\xff" * 64)  # a header cut short
    result = CliRunner().invoke(app, ["generate", "-m", "smollm2-135m", "--engine", "torch",
                                      "--device", "cpu", "-p", "hi", "-n", "2"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: --model smollm2-135m: {folder}: the torch engine cannot "
                           "load this folder ("), line
    assert line.endswith("; fetch it again with `specfleet models fetch smollm2-135m --force`")
