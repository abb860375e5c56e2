"""Model aliases: the registry file, resolution to a folder, and the folder's size and weights
hash."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from specfleet.errors import UserError
from specfleet.models.bundled import BUNDLED
from specfleet.models.registry import (
    HASH_FILE,
    bundled_source,
    list_models,
    load_registry,
    resolve_model,
    weights_hash,
)

SMOLLM2 = BUNDLED["smollm2-135m"]


@pytest.fixture
def registry(tmp_path, monkeypatch) -> Path:
    """A models.yaml of our own in a temp dir, plus an empty SPECFLEET_HOME."""
    folder = tmp_path / "local-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"abc")
    path = tmp_path / "models.yaml"
    path.write_text(
        "models:\n"
        "  tiny:\n    torch: local-model\n    mlx: local-model\n"
        "  bundled-one:\n    torch: bundled\n"
        "  gemma:\n    torch: bundled:gemma3-270m\n"
        "  hub-only:\n    mlx: hf:specfleet-test/not-cached-anywhere\n"
    )
    monkeypatch.setenv("SPECFLEET_MODELS", str(path))
    monkeypatch.setenv("SPECFLEET_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return path


def test_bundled_sources_name_a_model_and_folder(registry):
    assert bundled_source("bundled") == (SMOLLM2, "hf")
    assert bundled_source("bundled-q4") == (SMOLLM2, "mlx-q4")
    assert bundled_source("bundled:gemma3-270m") == (BUNDLED["gemma3-270m"], "hf")
    assert bundled_source("hf:bundled/x") is None and bundled_source("bundled-model") is None
    for bad in ("bundled:nope", "bundled-q4:gemma3-270m"):
        with pytest.raises(UserError) as err:
            bundled_source(bad)
        message = str(err.value)
        assert message.startswith(f"{registry}: source {bad!r} names no bundled model")
        assert "bundled:gemma3-270m" in message and "\n" not in message


def test_alias_and_folder_resolve_with_size_and_cached_hash(registry):
    folder = registry.parent / "local-model"
    model = resolve_model("tiny", "torch")
    assert (model.alias, model.engine, model.path, model.fetched) == ("tiny", "torch", folder, True)
    assert model.size_bytes == len(b"{}") + len(b"abc")
    digest = hashlib.sha256(b"model.safetensors" + b"abc").hexdigest()
    assert model.weights_hash == digest
    cached = json.loads((folder / HASH_FILE).read_text())
    assert cached["sha256"] == digest
    by_path = resolve_model(str(folder), "mlx")
    assert by_path.path == folder and by_path.weights_hash == digest


def test_a_relative_folder_is_read_from_the_current_folder(registry, tmp_path, monkeypatch):
    # It was joined to models.yaml's folder: `-m ./realmodel` named the packaged configs.
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "m").mkdir(parents=True)
    (elsewhere / "m" / "config.json").write_text("{}")
    (elsewhere / "m" / "model.safetensors").write_bytes(b"xyz")
    monkeypatch.chdir(elsewhere)
    model = resolve_model("./m", "torch")
    assert (model.alias, model.path, model.fetched) == ("./m", elsewhere / "m", True)


@pytest.mark.parametrize("cache", ["[]", '"x"', "7", "{not json"])
def test_a_damaged_hash_cache_is_hashed_again(registry, cache):
    folder = registry.parent / "local-model"
    first = weights_hash(folder)
    (folder / HASH_FILE).write_text(cache)
    assert weights_hash(folder) == first


def test_weights_hash_follows_a_replaced_file(registry):
    folder = registry.parent / "local-model"
    first = weights_hash(folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(b"abcd")
    os.utime(weights, ns=(1, 1))  # a different stamp even on coarse clocks
    assert weights_hash(folder) != first


def test_unknown_alias_names_it_and_the_registry(registry):
    with pytest.raises(UserError) as err:
        resolve_model("no-such-model", "torch")
    message = str(err.value)
    assert "'no-such-model'" in message and str(registry) in message and "tiny" in message
    assert "\n" not in message


def test_missing_sources_say_what_to_do(registry):
    with pytest.raises(UserError, match="specfleet models fetch smollm2-135m"):
        resolve_model("bundled-one", "torch")
    with pytest.raises(UserError, match="specfleet models fetch gemma3-270m`$"):
        resolve_model("gemma", "torch")
    with pytest.raises(UserError, match=r"not in the local Hugging Face cache \(fill it with "
                                        r"`hf download "):  # a command that exists today
        resolve_model("hub-only", "mlx")
    with pytest.raises(UserError, match="has no torch source"):
        resolve_model("hub-only", "torch")
    with pytest.raises(UserError, match="--engine must be one of"):
        resolve_model("tiny", "onnx")
    assert resolve_model("hub-only", "mlx", must_exist=False).fetched is False


def test_list_models_covers_every_alias_and_engine(registry):
    rows = [(m.alias, m.engine, m.fetched) for m in list_models()]
    assert rows == [
        ("tiny", "mlx", True),
        ("tiny", "torch", True),
        ("bundled-one", "torch", False),
        ("gemma", "torch", False),
        ("hub-only", "mlx", False),
    ]


def test_bad_registry_file_is_one_line(registry):
    registry.write_text("models:\n  broken:\n    description: no engines\n")
    with pytest.raises(UserError, match=r"models\.broken needs an 'mlx:' or 'torch:' source"):
        list_models()


def test_shipped_registry_names_the_reference_models(monkeypatch):
    monkeypatch.delenv("SPECFLEET_MODELS", raising=False)
    table = load_registry()
    assert table["smollm2-135m"]["torch"] == "bundled"
    assert table["gemma3-270m"]["torch"] == table["gemma3-270m"]["mlx"] == "bundled:gemma3-270m"
    assert table["qwen3-8b-4bit"]["mlx"] == "hf:mlx-community/Qwen3-8B-4bit"
    assert table["llama-3.1-8b-instruct-4bit"]["mlx"].endswith("Meta-Llama-3.1-8B-Instruct-4bit")


def test_a_file_given_as_the_model_is_named_a_file(registry, tmp_path):
    """A GGUF passed as -m read 'neither an alias ... nor an existing model folder'."""
    gguf = tmp_path / "local-model" / "m.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(UserError) as err:
        resolve_model(str(gguf), "torch")
    assert str(err.value) == (f"model {str(gguf)!r} is a file, not a model folder; expected an "
                              "alias (`specfleet models list`) or the folder holding the "
                              "model's config.json")


def test_a_link_to_no_folder_given_as_the_model_is_named_a_link(registry, tmp_path):
    """A dangling link read 'neither an alias ... nor an existing model folder'."""
    link = tmp_path / "model"
    link.symlink_to(tmp_path / "moved-away")
    with pytest.raises(UserError) as err:
        resolve_model(str(link), "torch")
    assert str(err.value) == (f"model {str(link)!r} is a link that leads to no folder (to "
                              f"{tmp_path / 'moved-away'}); expected the folder holding the "
                              "model's config.json, or an alias (`specfleet models list`)")
