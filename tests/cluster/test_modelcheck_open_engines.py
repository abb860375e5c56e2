"""A matrix that leaves `targets.engines` open, checked on this machine (`matrix validate`
without a fleet, `matrix run` and `bench` on the embedded fleet): an engine that lacks a model
leaves it to the others, one that has it and cannot load it is an error, as a fleet's hosts
say it, not a matrix of runs failed there."""

from __future__ import annotations

import json

from specfleet.cluster.modelcheck import check_here
from specfleet.engine.runners import folders
from specfleet.jobs.spec import MatrixSpec
from tests.weights import EMPTY_SAFETENSORS


def test_a_folder_one_open_engine_cannot_load_is_an_error(tmp_path, monkeypatch) -> None:
    # Each torch run of it failed once the fleet had started: "The model's quantization
    # config from the arguments has no `quant_method` attribute".
    monkeypatch.setenv("SPECFLEET_HOME", str(tmp_path / "home"))
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "llama", "quantization": {"group_size": 32, "bits": 4}}))
    (tmp_path / "model.safetensors").write_bytes(EMPTY_SAFETENSORS)
    (tmp_path / "tokenizer.json").write_text("{}")
    matrix = {"name": "m", "models": [str(tmp_path)], "prompts": [{"name": "p", "text": "hi"}],
              "arms": ["plain"], "max_tokens": 12}
    report = check_here(MatrixSpec.model_validate(matrix), "m.yaml")
    assert report.errors == [
        f"m.yaml: models[0]: torch: {tmp_path} holds MLX-quantized weights (4-bit), which only "
        "the mlx engine loads; expected float (or transformers-quantized) weights for torch; "
        "or run it on mlx alone (targets.engines)"]
    on_mlx = MatrixSpec.model_validate({**matrix, "targets": {"engines": ["mlx"]}})
    assert check_here(on_mlx, "m.yaml").errors == []
    # Where torch is not installed, no run of it goes there: MLX alone runs it.
    monkeypatch.setattr(folders, "library_installed", lambda engine: engine != "torch")
    assert check_here(MatrixSpec.model_validate(matrix), "m.yaml").errors == []
