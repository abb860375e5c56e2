"""MLX runner specifics: mlx-lm's own generation as the reference, the 4-bit form, devices.

Short prompts and replies: MLX's CPU backend runs ~10 tok/s prefill, ~6 tok/s decode here.
"""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core", reason="the mlx engine is not installed")

from mlx_lm.generate import generate_step  # noqa: E402

from specfleet.engine.runners.mlx import MlxRunner, resolve_device  # noqa: E402
from specfleet.errors import UserError  # noqa: E402
from tests.engine.runners.edited import edited_folder  # noqa: E402

PROMPT_TEXT = "Name three colours of the rainbow."


def _greedy(runner, ids: list[int], n: int) -> list[int]:
    runner.reset()
    tokens = [runner.read_tokens(runner.argmax(runner.prefill(ids)))[0]]
    while len(tokens) < n:
        tokens.append(runner.read_tokens(runner.argmax(runner.forward([tokens[-1]])))[0])
    return tokens


@pytest.mark.slow
def test_prefill_and_steps_equal_mlx_lm_generate_step(mlx_runner, monkeypatch):
    ids = mlx_runner.encode_prompt(PROMPT_TEXT, chat=False)
    reference = [
        int(token)
        # A small chunk size makes mlx-lm prefill in several chunks; the runner must match.
        for token, _ in generate_step(
            mx.array(ids), mlx_runner.model, max_tokens=4, prefill_step_size=3
        )
    ]
    monkeypatch.setattr("specfleet.engine.runners.mlx.PREFILL_STEP_SIZE", 3)
    assert _greedy(mlx_runner, ids, 4) == reference
    assert mlx_runner.cache_len() == len(ids) + 3


@pytest.mark.slow
def test_encode_prompt_applies_the_chat_template_and_decode_inverts(mlx_runner, torch_runner):
    chat = mlx_runner.encode_prompt(PROMPT_TEXT, chat=True)
    assert chat == torch_runner.encode_prompt(PROMPT_TEXT, chat=True)  # one tokenizer, two engines
    raw = mlx_runner.encode_prompt(PROMPT_TEXT, chat=False)
    assert mlx_runner.decode(raw) == PROMPT_TEXT
    assert mlx_runner.decode(chat).endswith("assistant\n")


@pytest.mark.slow
def test_the_exact_4bit_form_agrees_with_float32(bundled_model, mlx_runner):
    q4 = MlxRunner.load(bundled_model.mlx_q4.path, "cpu")
    ids = q4.encode_prompt("The capital of France is", chat=False)
    # ENVIRONMENT.md: 200 greedy tokens identical across torch fp32, MLX fp32 and MLX 4-bit.
    assert _greedy(q4, ids, 4) == _greedy(mlx_runner, ids, 4)


def test_a_state_space_model_is_driven_by_refeed_rollback():
    from mlx_lm.models import mamba

    args = mamba.ModelArgs(
        model_type="mamba", vocab_size=32, hidden_size=16, intermediate_size=32, state_size=4,
        num_hidden_layers=1, conv_kernel=2, use_bias=False, use_conv_bias=True,
        time_step_rank=2, tie_word_embeddings=True,
    )
    runner = MlxRunner(mamba.Model(args), tokenizer=None, device="cpu")
    assert runner.rollback_kind == "refeed" and runner.eos_ids == frozenset()
    runner.prefill([1, 2, 3])
    runner.forward([4, 5, 6])
    assert runner.rollback(2) == 1 and runner.cache_len() == 4


def test_device_names_are_checked():
    with pytest.raises(UserError, match="--device for mlx must be one of"):
        resolve_device("mps")
    assert resolve_device("cpu") == "cpu"
    if not mx.metal.is_available():
        with pytest.raises(UserError, match="--device metal"):
            resolve_device("metal")


@pytest.mark.parametrize(("edit", "said"), [
    ({"num_attention_heads": 0}, "division by zero"),  # a ZeroDivisionError
    ({"vocab_size": 10**12}, "outside the supported range"),  # an OverflowError
    ({"chat_template.jinja": "{% for %}"}, "its chat template does not render"),
])
def test_a_folder_mlx_lm_cannot_read_is_refused_in_one_line(bundled_model, tmp_path, edit,
                                                            said):
    # Each was a traceback (the broken template's at the first prompt).
    folder = edited_folder(bundled_model.mlx.path, tmp_path / "edited", edit)
    with pytest.raises(ValueError) as err:
        MlxRunner.load(folder, "cpu")
    assert said in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_runner_on_metal_wires_the_recommended_working_set_as_mlx_lm_does(
        bundled_model, monkeypatch):
    """mlx-lm wires weights up to the device's recommended working set while it generates;
    our arms on the same model must run alike. The CPU recommends no size: nothing is set."""
    wired = []
    monkeypatch.setattr(mx, "set_wired_limit", lambda size: wired.append(size) or 0)
    MlxRunner.load(bundled_model.mlx.path, "cpu")
    assert wired == []
    metal = {**mx.device_info(), "max_recommended_working_set_size": 5 << 30}
    monkeypatch.setattr(mx, "device_info", lambda: metal)  # what a Mac's GPU reports
    MlxRunner.load(bundled_model.mlx.path, "cpu")
    assert wired == [5 << 30]
