"""What a model folder needs before an engine loads it, checked without loading."""

from __future__ import annotations

import json

import pytest

from specfleet.engine.runners.folders import (
    folder_problem,
    json_files_problem,
    knows_model_type,
    safetensors_problem,
)

EMPTY_SAFETENSORS = (2).to_bytes(8, "little") + b"{}"  # a header of no tensors


def folder(tmp_path, *files: str, model_type: str | None = "llama"):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    for name in files:  # a JSON file holds an object (`json_files_problem` reads it)
        (tmp_path / name).write_bytes(b"{}" if name.endswith(".json") else
                                      EMPTY_SAFETENSORS if name.endswith(".safetensors") else b"")
    return tmp_path


@pytest.mark.parametrize("tokenizer", ["tokenizer.json", "tokenizer.model", "spiece.model",
                                       "vocab.txt", "tokenizer_config.json", "x.tiktoken"])
def test_any_tokenizer_file_a_library_loads_from_will_do(tmp_path, tokenizer) -> None:
    assert folder_problem(folder(tmp_path, "model.safetensors", tokenizer), "torch") is None


@pytest.mark.parametrize(("content", "said"), [
    (b"[]", "tokenizer.json: expected a JSON object, got a list"),
    (b"null", "tokenizer.json: expected a JSON object, got nothing (null)"),
    (b"{", "tokenizer.json: not JSON (Expecting property name enclosed in double quotes at line "
           "1 column 2); expected a JSON object"),
    (b'{"a": "\xff"}', "tokenizer.json: not UTF-8 text (byte 7); expected a JSON object"),
    (b"[" * 100_000 + b"]" * 100_000, "tokenizer.json: nested too deeply"),
])
def test_a_json_file_the_loaders_read_as_an_object_is_named(tmp_path, content, said) -> None:
    # A list or null there was a TypeError traceback from inside transformers or mlx-lm.
    tmp = folder(tmp_path, "model.safetensors", "tokenizer.json")
    assert json_files_problem(tmp) is None
    (tmp / "tokenizer.json").write_bytes(content)
    assert folder_problem(tmp, "torch") == json_files_problem(tmp)
    assert json_files_problem(tmp).startswith(f"{tmp}/{said}"), json_files_problem(tmp)


def test_what_is_missing_is_named(tmp_path) -> None:
    bare = folder(tmp_path, model_type=None)
    assert folder_problem(bare, "torch") == (
        f"{bare} holds no weights; expected the model's *.safetensors beside its config.json")
    (bare / "model-00001-of-00002.safetensors").write_bytes(b"")  # sharded weights count
    assert "holds no tokenizer" in folder_problem(bare, "mlx")
    assert folder_problem(bare, "toy") is None  # not a folder engine: nothing to check


def test_an_architecture_is_known_by_the_engines_own_library() -> None:
    assert knows_model_type("torch", "llama") and knows_model_type("mlx", "llama")
    assert knows_model_type("mlx", "mistral")  # mlx-lm maps it onto its llama module
    assert not knows_model_type("torch", "wibble") and not knows_model_type("mlx", "wibble")
    assert not knows_model_type("mlx", "xlm-roberta")  # no module name has a hyphen


@pytest.mark.parametrize(("content", "said"), [
    (b"", "its first 8 bytes give a header of 0 bytes in a file of 0"),
    (bytes(range(200)), "its first 8 bytes give a header of 506097522914230528 bytes in a "
                        "file of 200"),  # random bytes: 'header too large' in every run
    ((5).to_bytes(8, "little") + b"[1,2]", "its header of 5 bytes is no JSON object"),
])
def test_weights_that_are_no_safetensors_file_are_named(tmp_path, content, said) -> None:
    # Found only by the load: a stored matrix of failed runs from `bench` and `matrix run`.
    tmp = folder(tmp_path, "model.safetensors", "tokenizer.json")
    assert safetensors_problem(tmp) is None
    (tmp / "model-00002-of-00002.safetensors").write_bytes(content)
    assert folder_problem(tmp, "torch") == folder_problem(tmp, "mlx") == (
        f"{tmp}/model-00002-of-00002.safetensors is no safetensors file ({said}); expected the "
        "model's weights as safetensors writes them")
