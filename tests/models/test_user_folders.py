"""Model folders a user brings (saved by transformers 5, or another engine's quantized form),
run with `generate --model FOLDER` on both engines: the config keys mlx-lm is handed, and the
one-line refusals of a folder an engine cannot use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.engine.runners.folders import folder_problem, lift_rope_keys, mlx_config_overrides
from tests.weights import EMPTY_SAFETENSORS

PROMPT = "the quick brown fox jumps over the lazy dog. " * 3


def save_tiny(folder: Path, model_type: str, **config) -> Path:
    """A random-weight model of `model_type` as transformers 5 saves it, with a tokenizer of
    one token per printable ASCII character (`</s>` its EOS)."""
    import torch
    from tokenizers import Tokenizer, decoders, models
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{chr(c): c - 29 for c in range(32, 125)}}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.decoder = decoders.Fuse()
    settings = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 64,
                "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
                "num_hidden_layers": 2, "initializer_range": 0.5, "tie_word_embeddings": False,
                "eos_token_id": 2, **config}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **settings))
    model.save_pretrained(folder)
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(folder)
    return folder


def generate(folder: Path, engine: str, *flags: str):
    return CliRunner().invoke(app, ["generate", "-m", str(folder), "--engine", engine,
                                    "--device", "cpu", "-p", PROMPT, "-n", "24", "--json",
                                    "--no-warm-up", *flags])


def config_of(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def test_a_scaled_rope_and_a_partial_rotary_factor_are_lifted():
    llama3 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0}
    lifted = lift_rope_keys({"rope_parameters": llama3})
    assert lifted["rope_theta"] == 500000.0 and lifted["rope_scaling"] == llama3
    partial = lift_rope_keys({"rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 0.25,
                                                  "rope_type": "default"}})
    assert partial["partial_rotary_factor"] == 0.25 and "rope_scaling" not in partial


def test_the_hybrids_full_attention_interval_and_lfm2_block_width_are_lifted():
    hybrid = {"layer_types": ["linear_attention"] * 3 + ["full_attention"]}
    assert lift_rope_keys(hybrid)["full_attention_interval"] == 4
    uneven = {"layer_types": ["linear_attention", "full_attention", "full_attention"]}
    assert "full_attention_interval" not in lift_rope_keys(uneven)  # mlx-lm reads its own
    assert lift_rope_keys({"model_type": "lfm2", "hidden_size": 1024})["block_dim"] == 1024


def test_overrides_are_only_what_config_json_lacks(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(
        {"rope_theta": 5.0, "rope_parameters": {"rope_theta": 100000.0,
                                                "partial_rotary_factor": 0.5}}))
    assert mlx_config_overrides(tmp_path) == {"partial_rotary_factor": 0.5}
    (tmp_path / "config.json").write_text("[]")  # the registry refuses it in one line
    assert mlx_config_overrides(tmp_path) == {}


@pytest.mark.mlx
def test_mlx_runs_a_transformers_5_folder_with_its_own_rope_base(tmp_path):
    # transformers 5 writes rope_theta only inside rope_parameters; mlx-lm took its default
    # 10000 for this model's 100000 and replied otherwise than torch, without a word.
    folder = save_tiny(tmp_path / "llama", "llama", rope_theta=100000.0)
    assert "rope_theta" not in config_of(folder)
    replies = {engine: generate(folder, engine) for engine in ("torch", "mlx")}
    for result in replies.values():
        assert result.exit_code == 0, result.output
    torch_ids, mlx_ids = (json.loads(replies[e].stdout)["token_ids"] for e in ("torch", "mlx"))
    assert mlx_ids == torch_ids


@pytest.mark.mlx
def test_mlx_runs_a_transformers_5_gemma3_folder_of_two_layers(tmp_path):
    # Without sliding_window_pattern mlx-lm took 6 and indexed the 6th cache of two layers:
    # an IndexError traceback from inside mlx-lm at the first forward.
    folder = save_tiny(tmp_path / "gemma", "gemma3_text", sliding_window=8,
                       layer_types=["sliding_attention", "full_attention"])
    plain = generate(folder, "mlx")
    assert plain.exit_code == 0, plain.output
    by_lookup = generate(folder, "mlx", "--prompt-lookup")
    assert by_lookup.exit_code == 0, by_lookup.output
    assert json.loads(by_lookup.stdout)["text"] == json.loads(plain.stdout)["text"]


@pytest.mark.torch
def test_generate_names_a_folder_without_a_tokenizer(tmp_path):
    # transformers' own refusal: "Couldn't instantiate the backend tokenizer from one of: ".
    folder = save_tiny(tmp_path / "llama", "llama")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()
    result = generate(folder, "torch")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (f"error: --model {folder}: {folder} holds no tokenizer; "
                                     "expected tokenizer.json (or tokenizer.model) beside its "
                                     "config.json")


@pytest.mark.torch
def test_generate_names_an_architecture_the_engine_does_not_know(tmp_path):
    folder = save_tiny(tmp_path / "llama", "llama")
    (folder / "config.json").write_text(json.dumps({**config_of(folder),
                                                    "model_type": "frobnicator"}))
    result = generate(folder, "torch")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        f"error: --model {folder}: {folder}: model_type 'frobnicator' is an architecture the "
        "torch engine does not know; expected one its library (transformers) implements")


def test_an_mlx_quantized_folder_given_to_torch_is_named_so(tmp_path):
    # torch's refusal read "weights of other shapes than the config.json describes".
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "llama", "quantization": {"group_size": 32, "bits": 4}}))
    (tmp_path / "model.safetensors").write_bytes(EMPTY_SAFETENSORS)
    (tmp_path / "tokenizer.json").write_text("{}")
    assert folder_problem(tmp_path, "torch") == (
        f"{tmp_path} holds MLX-quantized weights (4-bit), which only the mlx engine loads; "
        "expected float (or transformers-quantized) weights for torch")
    assert folder_problem(tmp_path, "mlx") is None
