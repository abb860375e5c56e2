"""torch runner specifics: transformers' own greedy as the reference, encoding, refusals."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import torch

from specfleet.engine.runners.torch import (
    MIN_TRANSFORMERS,
    TorchRunner,
    TorchTokens,
    require_transformers,
    resolve_device,
)
from specfleet.errors import UserError
from tests.engine.runners.edited import edited_folder

PROMPT_TEXT = "Name three colours of the rainbow."
ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("version", ["5.24.0", "5.25.0", "5.30.1", "6.0.0.dev0"])
def test_a_transformers_from_the_oldest_that_takes_the_runners_cache_on_is_accepted(version):
    require_transformers(version)


@pytest.mark.parametrize("version", ["5.23.0", "5.0.0", "4.57.6"])
def test_an_older_transformers_is_one_line_naming_the_version_wanted(version):
    # 5.23's models take `past_key_values=`, ignore `cache=` and would leave ours empty.
    with pytest.raises(UserError, match=rf"needs transformers >= 5\.24, found {version}; "):
        require_transformers(version)


def test_the_package_requires_the_transformers_the_runner_checks_for():
    torch_extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["torch"]
    wanted = ".".join(map(str, MIN_TRANSFORMERS))
    assert f"transformers>={wanted}" in torch_extra


@pytest.mark.slow
def test_prefill_and_steps_equal_transformers_own_greedy(torch_runner):
    ids = torch_runner.encode_prompt(PROMPT_TEXT, chat=True)
    reference = torch_runner.model.generate(
        torch.tensor([ids]), max_new_tokens=6, do_sample=False, attention_mask=None
    )[0, len(ids) :].tolist()
    torch_runner.reset()
    tokens = [torch_runner.read_tokens(torch_runner.argmax(torch_runner.prefill(ids)))[0]]
    while len(tokens) < len(reference):
        step = torch_runner.argmax(torch_runner.forward([tokens[-1]]))
        tokens.append(torch_runner.read_tokens(step)[0])
    assert tokens == reference


@pytest.mark.slow
def test_encode_prompt_applies_the_chat_template_and_decode_inverts(torch_runner):
    chat = torch_runner.encode_prompt(PROMPT_TEXT, chat=True)
    raw = torch_runner.encode_prompt(PROMPT_TEXT, chat=False)
    text = torch_runner.tokenizer.decode(chat)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert PROMPT_TEXT in text and len(raw) < len(chat)
    assert torch_runner.decode(raw) == PROMPT_TEXT
    assert torch_runner.decode(chat[-3:] + raw) == "assistant\n" + PROMPT_TEXT  # specials dropped
    with pytest.raises(UserError, match="empty"):
        torch_runner.encode_prompt("", chat=True)


@pytest.mark.slow
def test_cpu_tokens_are_synchronous_handles(torch_runner):
    torch_runner.reset()
    handle = torch_runner.argmax(torch_runner.prefill([1, 2, 3]))
    torch_runner.submit(handle)  # no copy, no event on CPU
    assert isinstance(handle, TorchTokens) and handle.event is None
    assert torch_runner.read_tokens(handle) == [int(handle.ids[0])]
    assert next(torch_runner.model.parameters()).dtype == torch.float32


def test_device_names_are_checked():
    with pytest.raises(UserError, match="--device for torch must be one of"):
        resolve_device("tpu")
    assert resolve_device("cpu") == "cpu"
    expected = "cuda" if torch.cuda.is_available() else None
    if expected is None:
        with pytest.raises(UserError, match="--device cuda"):
            resolve_device("cuda")
        assert resolve_device("auto") in ("cpu", "mps")
    else:
        assert resolve_device("cuda") == resolve_device("auto") == "cuda"


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_pipelined_steps_copy_through_pinned_memory_and_match_sync(bundled_model):
    runner = TorchRunner.load(bundled_model.torch.path, "cuda")
    ids = runner.encode_prompt(PROMPT_TEXT, chat=True)
    runner.reset()
    sync = [runner.read_tokens(runner.argmax(runner.prefill(ids)))[0]]
    for _ in range(7):
        sync.append(runner.read_tokens(runner.argmax(runner.forward([sync[-1]])))[0])
    runner.reset()
    pending = runner.argmax(runner.prefill(ids))
    runner.submit(pending)
    assert pending.event is not None and pending.host.is_pinned()
    piped = []
    for _ in range(7):
        following = runner.argmax(runner.forward(pending))  # queued before the host read
        runner.submit(following)
        piped.append(runner.read_tokens(pending)[0])
        pending = following
    piped.append(runner.read_tokens(pending)[0])
    assert piped == sync


def test_what_transformers_logs_while_the_load_probe_runs_is_said_at_the_first_prefill():
    # A kernel-fallback warning in the probe's forward used to print at load, ahead of a
    # one-line refusal (Bamba's prompt lookup); it belongs to the first real forward.
    import logging

    from specfleet.engine.runners.common import IdsOnlyTokenizer
    from specfleet.engine.runners.tiny_torch import tiny_model
    from specfleet.engine.runners.torch import TorchRunner

    model = tiny_model("llama")
    forward = model.forward

    def warning_forward(*args, **kwargs):
        logging.getLogger("transformers.fallback").warning("falling back to a slow kernel")
        return forward(*args, **kwargs)

    model.forward = warning_forward
    seen: list[str] = []
    catch = logging.Handler()
    catch.emit = lambda record: seen.append(record.getMessage())
    library = logging.getLogger("transformers")
    library.addHandler(catch)
    try:
        runner = TorchRunner(model, IdsOnlyTokenizer(), "cpu")
        assert seen == []
        runner.prefill([1, 2, 3])
        assert seen == ["falling back to a slow kernel"] * 2  # the probe's, then the prefill's
        runner.prefill([1, 2, 3])
        assert len(seen) == 3  # said once
    finally:
        library.removeHandler(catch)


@pytest.mark.parametrize(("layers", "said"), [
    (40, "90 weights the config.json describes are missing from the weights files"),
    (29, "9 weights in the weights files are not in the model the config.json describes"),
])
def test_a_config_that_does_not_match_its_weights_is_refused(bundled_model, tmp_path, capfd,
                                                            layers, said):
    # transformers initialised the missing layers at random (or dropped the extra ones) and
    # the replies were noise; its report was 15 lines of stderr.
    import json

    source = bundled_model.torch.path
    folder = tmp_path / "edited"
    folder.mkdir()
    for item in source.iterdir():
        if item.is_file() and item.name != "config.json":
            (folder / item.name).symlink_to(item)
    config = json.loads((source / "config.json").read_text())
    config["num_hidden_layers"] = layers
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="expected a config.json and weights of the same model"
                       ) as err:
        TorchRunner.load(folder)
    assert said.split(" weights")[0] in str(err.value) and said.split(" ", 1)[1] in str(err.value)
    assert "LOAD REPORT" not in capfd.readouterr().err


@pytest.mark.parametrize(("edit", "said"), [
    ({"num_attention_heads": 0}, "integer modulo by zero"),  # a ZeroDivisionError
    ({"hidden_size": -576}, "negative dimension"),  # a RuntimeError from torch.empty
    ({"dtype": "float7"}, "no attribute 'float7'"),  # an AttributeError
    ({"vocab_size": 49153}, "weights of other shapes than the config.json describes"),
    ({"chat_template.jinja": "{% for %}"}, "its chat template does not render"),
])
def test_a_folder_transformers_cannot_read_is_refused_in_one_line(bundled_model, tmp_path,
                                                                  edit, said):
    # Each was a traceback (the size mismatch's pointing at a report kept off stderr, the
    # broken template's at the first prompt): the folder is the user's, so one line.
    folder = edited_folder(bundled_model.torch.path, tmp_path / "edited", edit)
    with pytest.raises(ValueError) as err:
        TorchRunner.load(folder)
    assert said in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_the_loop_never_empties_torchs_device_cache_and_mps_memory_is_its_allocators(
        monkeypatch):
    """CUDA's `empty_cache` waits for the device: between pipelined steps it is a stall.
    MPS buffers are not in the process's RSS, so its peak is what its allocator holds."""
    from types import SimpleNamespace

    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append("cuda"))
    monkeypatch.setattr(torch.mps, "empty_cache", lambda: emptied.append("mps"))
    for device in ("cuda", "mps"):
        TorchRunner.clear_allocator_cache(SimpleNamespace(_gpu=device == "cuda", device=device))
    assert emptied == []

    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: 3_500_000_000)
    on_mps = SimpleNamespace(_gpu=False, device="mps")
    assert TorchRunner.peak_memory(on_mps) == (3.5, "mps allocated")


def test_an_evicted_torch_model_returns_its_mps_memory_too(monkeypatch):
    from specfleet.workers.loaded import _empty_device_caches

    emptied = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(torch.mps, "empty_cache", lambda: emptied.append("mps"))
    _empty_device_caches("torch")
    assert emptied == ["mps"]


def test_weights_load_straight_onto_the_runners_device(bundled_model, monkeypatch):
    """Not loaded on the CPU and then moved: on a GB10's or a Mac's unified memory that would
    hold the weights twice at once."""
    from transformers import AutoModelForCausalLM

    real, asked = AutoModelForCausalLM.from_pretrained, []

    def recording(*args, **kwargs):
        asked.append(kwargs.get("device_map"))
        return real(*args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", recording)
    runner = TorchRunner.load(bundled_model.torch.path, "cpu")
    assert asked == [torch.device("cpu")]
    assert {p.device for p in runner.model.parameters()} == {torch.device("cpu")}
