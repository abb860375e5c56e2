"""`matrix validate`'s model checks: what each host is asked, how its answers read, and the
checks this machine makes alone without a fleet (a model missing here: a warning, an error
with --local). The checks on a real fleet: tests/cli/test_matrix_cli.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.cluster.modelcheck import check_here, host_asks, host_lines
from specfleet.jobs.run import Target
from specfleet.jobs.spec import MatrixSpec
from specfleet.workers.loaded import ModelCheck, check_model
from tests.weights import EMPTY_SAFETENSORS


def model_folder(root: Path, context: int) -> Path:
    """A folder that resolves as a model (its config.json says its context length) and
    holds what a load reads (stand-ins: nothing here loads it)."""
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"max_position_embeddings": context}))
    (root / "model.safetensors").write_bytes(EMPTY_SAFETENSORS)
    (root / "tokenizer.json").write_text("{}")
    return root


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    """This machine without a fleet: its own home (no joined fleet) and a registry with an
    alias `far` whose folder is not on this machine."""
    monkeypatch.setenv("SPECFLEET_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPECFLEET_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    registry = tmp_path / "models.yaml"
    registry.write_text(yaml.safe_dump({"models": {"far": {"torch": str(tmp_path / "gone")}}}))
    monkeypatch.setenv("SPECFLEET_MODELS", str(registry))
    return tmp_path


def spec(models: list[str], engines: list[str] | None = None, **more) -> MatrixSpec:
    data = {"name": "m", "models": models, "prompts": [{"name": "p", "text": "hi"}],
            "arms": ["plain"], "max_tokens": 12, **more}
    if engines is not None:
        data["targets"] = {"engines": engines}
    return MatrixSpec.model_validate(data)


def test_a_model_missing_here_is_told_apart_from_a_mistake(here) -> None:
    folder = model_folder(here / "small", context=8)
    assert check_model("far", "torch", 12).missing
    unknown = check_model("nope", "torch", 12)
    assert unknown.problem.startswith("model 'nope' is neither an alias") and not unknown.missing
    assert check_model(str(folder), "torch", 7) == ModelCheck()
    assert check_model(str(folder), "torch", 8).problem == (
        "max_tokens 8 leaves no room for the prompt in the model's context of 8 tokens")
    assert check_model("script:1ms", "toy", 12) == ModelCheck()
    assert "a toy model is" in check_model("turbo", "toy", 12).problem


def test_check_here_files_missing_models_apart_and_says_a_shared_problem_once(here) -> None:
    report = check_here(spec(["far", "nope"]), "m.yaml")
    assert report.errors[0] == "m.yaml: models[0]: mlx: model 'far' has no mlx source " \
        "(available: torch)"
    assert report.missing == [f"m.yaml: models[0]: torch: model 'far': {here}/gone holds no "
                              "model (expected a folder with config.json)"]
    assert len(report.errors) == 2 and report.errors[1].startswith(
        "m.yaml: models[1]: model 'nope' is neither an alias")  # once, not per engine
    torch_only = check_here(spec(["far"], engines=["torch"]), "m.yaml")
    assert (torch_only.errors, len(torch_only.missing)) == ([], 1)


def test_an_alias_without_a_source_for_an_open_engine_is_a_cell_to_skip(here) -> None:
    folder = model_folder(here / "small", context=64)
    (here / "models.yaml").write_text(yaml.safe_dump({"models": {"q4": {"mlx": str(folder)}}}))
    report = check_here(spec(["q4"]), "m.yaml")
    assert (report.errors, report.missing, report.no_source) == ([], [], [("q4", "torch")])
    asked = check_here(spec(["q4"], engines=["torch"]), "m.yaml")  # asked for: a mistake
    assert asked.errors == ["m.yaml: models[0]: torch: model 'q4' has no torch source "
                            "(available: mlx)"] and asked.no_source == []


def test_a_peer_arm_whose_library_is_missing_here_is_an_error(here, monkeypatch) -> None:
    import importlib.metadata

    real = importlib.metadata.version

    def version(name: str) -> str:
        if name == "llama-cpp-python":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    folder = model_folder(here / "small", context=64)
    (folder / "small.gguf").write_bytes(b"")  # the GGUF the arm runs: only the library lacks
    report = check_here(spec([str(folder)], engines=["torch"], arms=["plain", "llama.cpp"]),
                        "m.yaml")
    assert report.errors == ["m.yaml: arms[1]: llama.cpp needs llama-cpp-python, which this "
                             "machine lacks; expected it installed: pip install -e "
                             "'.[llamacpp]' in a checkout (it builds llama.cpp from source with "
                             "the host's compiler; the README's llama.cpp paragraph gives "
                             "CMAKE_ARGS per backend)"]


def test_a_llama_cpp_arm_beside_a_model_without_a_gguf_is_an_error(here) -> None:
    # `matrix validate` said ok, then every llama.cpp run failed after the fleet started.
    folder = model_folder(here / "small", context=64)
    matrix = spec([str(folder)], engines=["torch"], arms=["plain", "llama.cpp-lookup"])
    expected = (f"m.yaml: arms[1]: llama.cpp-lookup runs the GGUF a model comes from, and "
                f"models[0] ({folder}) has none; expected a bundled model or a folder holding "
                "one .gguf")
    assert expected in check_here(matrix, "m.yaml").errors
    (folder / "small.gguf").write_bytes(b"")
    assert expected not in check_here(matrix, "m.yaml").errors


def test_each_host_is_asked_for_the_cells_its_runs_need() -> None:
    matrix = spec(["a", "b"], prompts=[{"name": "p", "text": "hi", "max_tokens": 40},
                                       {"name": "q", "text": "yo", "targets": {"hosts": ["h2"]},
                                        "max_tokens": 90}])
    targets = [Target(host="h1", engine="torch", device="cpu"),
               Target(host="h2", engine="mlx", device="cpu")]
    asks = host_asks(matrix, targets, {})
    assert asks == {"h1": [("a", "torch", 40), ("b", "torch", 40)],
                    "h2": [("a", "mlx", 90), ("b", "mlx", 90)]}
    checks = {"h1": [ModelCheck(), ModelCheck()],
              "h2": [ModelCheck(), ModelCheck("model 'b': gone", missing=True)]}
    assert host_lines(matrix, "m.yaml", asks, checks) == [
        "m.yaml: models[1]: host h2, mlx: model 'b': gone"]


def test_a_problem_every_host_and_engine_shares_is_said_once() -> None:
    # An unknown alias read "models[0]: host head1, mlx: ..." and again "... host head1, torch".
    matrix = spec(["nope", "b"])
    asks = {"h1": [("nope", "mlx", 12), ("nope", "torch", 12), ("b", "torch", 12)],
            "h2": [("nope", "torch", 12), ("b", "torch", 12)]}
    unknown = ModelCheck("model 'nope' is neither an alias")
    checks = {"h1": [unknown, unknown, ModelCheck("no room")],
              "h2": [unknown, ModelCheck("no room")]}
    assert host_lines(matrix, "m.yaml", asks, checks) == [
        "m.yaml: models[0]: model 'nope' is neither an alias",
        "m.yaml: models[1]: no room"]
    checks["h2"] = [ModelCheck(), ModelCheck()]  # where only some hosts find it, they are named
    assert host_lines(matrix, "m.yaml", asks, checks) == [
        "m.yaml: models[0]: host h1 (mlx, torch): model 'nope' is neither an alias",
        "m.yaml: models[1]: host h1, torch: no room"]


def test_without_a_fleet_a_model_missing_here_warns_and_local_refuses(here) -> None:
    path = here / "m.yaml"
    path.write_text(yaml.safe_dump(spec(["far"], engines=["torch"]).model_dump(
        mode="json", exclude_none=True)))
    warned = CliRunner().invoke(app, ["matrix", "validate", str(path)])
    line = (f"{path}: models[0]: torch: model 'far': {here}/gone holds no model (expected a "
            "folder with config.json)")
    assert warned.exit_code == 0, warned.stderr
    assert warned.stderr == f"warning: {line}\n"
    assert warned.stdout.endswith("; models and their context lengths checked on this machine "
                                  "only (no fleet joined); 1 not here (warnings above; --local "
                                  "makes that an error)\n")
    refused = CliRunner().invoke(app, ["matrix", "validate", str(path), "--local"])
    assert (refused.exit_code, refused.stderr, refused.stdout) == (2, f"error: {line}\n", "")


@pytest.mark.parametrize(("engine", "library"), [("torch", "transformers"), ("mlx", "mlx-lm")])
def test_a_folder_no_engine_could_load_is_refused_before_any_run(here, engine, library) -> None:
    # Each run of it failed after the fleet started, and the matrix of failures was stored.
    folder = model_folder(here / "m", context=64)
    assert check_model(str(folder), engine, 12) == ModelCheck()
    (folder / "config.json").write_text('{"model_type": "wibble"}')
    assert check_model(str(folder), engine, 12).problem == (
        f"{folder}: model_type 'wibble' is an architecture the {engine} engine does not know; "
        f"expected one its library ({library}) implements")
    (folder / "config.json").write_text('{"model_type": "llama"}')
    assert check_model(str(folder), engine, 12) == ModelCheck()
    (folder / "tokenizer.json").unlink()
    assert check_model(str(folder), engine, 12).problem == (
        f"{folder} holds no tokenizer; expected tokenizer.json (or tokenizer.model) beside its "
        "config.json")
    (folder / "model.safetensors").unlink()
    assert check_model(str(folder), engine, 12).problem.startswith(f"{folder} holds no weights")
    report = check_here(spec([str(folder)], engines=[engine]), "m.yaml")
    assert report.errors == [f"m.yaml: models[0]: {engine}: {folder} holds no weights; "
                             "expected the model's *.safetensors beside its config.json"]


def test_a_prompt_past_the_context_is_refused_before_any_run(here) -> None:
    # Each run of it failed once the fleet started, and the matrix of failures was stored.
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder = model_folder(here / "m", context=64)
    tokenizer = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))

    def matrix(max_tokens: int) -> MatrixSpec:
        return MatrixSpec.model_validate({
            "name": "m", "models": [str(folder)], "arms": ["plain"], "max_tokens": max_tokens,
            "prompts": [{"name": "short", "text": "a a"}, {"name": "long", "text": "a " * 60}],
            "targets": {"engines": ["torch", "mlx"]}})

    assert check_here(matrix(4), "m.yaml").errors == []  # 60 + 4 fits in 64
    assert check_here(matrix(5), "m.yaml").errors == [
        f"m.yaml: prompts[1]: 60 tokens before any chat template and max_tokens 5 pass the "
        f"context of {folder} (64 tokens, torch and mlx); expected a shorter prompt or a "
        "smaller max_tokens"]
