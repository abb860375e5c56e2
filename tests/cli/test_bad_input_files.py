"""Files and environment a user hands specfleet: a mistake is one line before any work (a
relative SPECFLEET_MODELS, a model source no file name can hold, an empty key, JSON giving a
key twice, a pretty-printed batch line), valid JSON reads whatever its whitespace, and a
relative model folder is read where its runs will read it. In-process: no fleet, no model.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.errors import UserError
from specfleet.jobs.batch import load_generate_job
from specfleet.jobs.spec import MatrixSpec
from specfleet.jobs.spec_files import load_matrix_spec
from specfleet.report.predictions import load_cost_file

MATRIX = """\
name: m
models: [mine]
prompts: [{name: p, text: "hello hello"}]
arms: [plain]
targets: {engines: [torch]}
"""


def one_error_line(args: list[str], env: dict[str, str] | None = None) -> str:
    """The one `error:` line a refused command prints (exit 2, no traceback)."""
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 2, (result.exit_code, result.exception, result.stderr)
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        repr(result.exception)
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and "Traceback" not in result.stderr, result.stderr
    return line


def test_a_relative_models_file_is_refused_before_a_fleet_reads_it(tmp_path, monkeypatch) -> None:
    # Validated "ok" here, then every run failed in the fleet: a worker stands in its own
    # folder, where `rel/models.yaml` names nothing.
    (tmp_path / "rel").mkdir()
    (tmp_path / "rel" / "models.yaml").write_text(f"models:\n  mine:\n    torch: {tmp_path}\n")
    (tmp_path / "m.yaml").write_text(MATRIX)
    monkeypatch.chdir(tmp_path)
    line = one_error_line(["matrix", "validate", "m.yaml"],
                          env={"SPECFLEET_MODELS": "rel/models.yaml"})
    assert "SPECFLEET_MODELS: 'rel/models.yaml' is a relative path" in line, line
    assert "expected a path starting with / or ~" in line, line


def test_a_model_source_holding_a_lone_surrogate_is_one_line(tmp_path: Path) -> None:
    # YAML reads "\ud800" as half a surrogate pair, which os.stat cannot encode: a
    # UnicodeEncodeError traceback from `matrix validate`, `models list` and `generate`.
    models = tmp_path / "models.yaml"
    models.write_text('models:\n  mine:\n    torch: "/x\\ud800"\n')
    (tmp_path / "m.yaml").write_text(MATRIX)
    env = {"SPECFLEET_MODELS": str(models)}
    for args in (["matrix", "validate", str(tmp_path / "m.yaml")], ["models", "list"]):
        line = one_error_line(args, env)
        assert "'/x\\ud800/config.json' holds U+D800, half of a UTF-16 surrogate pair" in line
        assert "expected a path of UTF-8 text" in line, line


def test_a_model_folder_with_a_slash_is_read_from_the_matrix_files_folder(
        tmp_path: Path, monkeypatch) -> None:
    # `models/smol` was resolved from the current folder: validated "ok" there, then every
    # run failed in a worker, which stands in its own folder.
    (tmp_path / "matrices").mkdir()
    path = tmp_path / "matrices" / "m.yaml"
    path.write_text(MATRIX.replace("[mine]", "[models/smol, hf:org/name, mine]") +
                    "prompt_suffix: {models/smol: ' /no_think'}\n")
    monkeypatch.chdir(tmp_path)
    spec = load_matrix_spec(path)
    folder = str((tmp_path / "matrices" / "models" / "smol").resolve())
    assert spec.models == [folder, "hf:org/name", "mine"]
    assert spec.prompt_suffix == {folder: " /no_think"}


def test_an_empty_key_is_named_in_the_line(tmp_path: Path) -> None:
    # `"": 1` read as "file: unknown field (...)", naming no key; in a prompt "prompts[0].:".
    path = tmp_path / "m.yaml"
    path.write_text(MATRIX.replace("hello hello\"}", 'hello hello", "": 2}') + '"": 1\n')
    result = CliRunner().invoke(app, ["matrix", "validate", str(path)])
    assert result.exit_code == 2, (result.exception, result.stderr)
    lines = result.stderr.splitlines()
    assert f"error: {path}: prompts[0].'': unknown field (expected one of: name, text, " \
        "max_tokens, targets)" in lines, lines
    fields = ", ".join(MatrixSpec.model_fields)
    assert f"error: {path}: '': unknown field (expected one of: {fields})" in lines, lines


def test_a_jobs_relative_model_folder_is_read_from_the_current_folder(
        tmp_path: Path, monkeypatch) -> None:
    # `job generate --model ./smol` resolved here, then failed in the worker: a failed job.
    batch = tmp_path / "b.jsonl"
    batch.write_text('{"prompt": "hi"}\n')
    monkeypatch.chdir(tmp_path)
    for given, model in (("./smol", tmp_path / "smol"), (".", tmp_path),
                         ("models/smol", tmp_path / "models" / "smol")):
        job = load_generate_job(batch, model=given, target="h/torch")
        assert job.model == str(model.resolve()), given
    assert load_generate_job(batch, model="smollm2-135m", target="h/torch").model == \
        "smollm2-135m"


JSON_MATRIX = ('{\n\t"name": "j",\n\t"models": ["script:1ms"],\n\t"prompts": [{"name": "p", '
               '"text": "hi"}],\n\t"arms": ["plain", "graded"],\n\t"targets": {"engines": '
               '["toy"]}\n}\n')


def test_json_indented_with_tabs_reads_as_json(tmp_path: Path) -> None:
    # Valid JSON (`jq --tab`, `calibrate --json` reindented) was "YAML syntax error: found
    # character '\t' that cannot start any token".
    path = tmp_path / "m.json"
    path.write_text(JSON_MATRIX)
    result = CliRunner().invoke(app, ["matrix", "validate", str(path)])
    assert result.exit_code == 0, result.stderr
    assert load_matrix_spec(path).models == ["script:1ms"]
    costs = tmp_path / "t.json"
    costs.write_text('{\n\t"name": "t",\n\t"ratio": [1.0, 1.5]\n}\n')
    assert load_cost_file(costs).ratio == (1.0, 1.5)


def test_json_giving_a_key_twice_or_nan_is_one_line(tmp_path: Path) -> None:
    # Tab-indented JSON with a mistake was read as YAML, which named the tab, not the mistake.
    path = tmp_path / "m.json"
    for text, said in ((JSON_MATRIX.replace('"j",', '"j",\n\t"name": "k",'),
                        "duplicate key 'name'; expected each key once"),
                       (JSON_MATRIX.replace('"hi"', '"hi", "max_tokens": NaN'),
                        "NaN is no JSON number; expected a finite number")):
        path.write_text(text)
        line = one_error_line(["matrix", "validate", str(path)])
        assert line.startswith(f"error: {path}: ") and said in line, line


def test_a_pretty_printed_object_in_a_batch_says_one_object_a_line(tmp_path: Path) -> None:
    # Said only "line 1: not JSON (Expecting property name ... at column 2)": no expectation.
    batch = tmp_path / "b.jsonl"
    batch.write_text('{\n  "prompt": "hi"\n}\n')
    with pytest.raises(UserError) as err:
        load_generate_job(batch, model="m", target="h/torch")
    assert str(err.value) == (
        f"{batch}: line 1: not JSON (Expecting property name enclosed in double quotes at "
        'column 2); expected one JSON object a line, like {"prompt": "..."}')


def test_a_bare_folder_name_that_is_no_alias_is_refused_before_a_fleet(
        tmp_path: Path, monkeypatch) -> None:
    # `models: [smolcopy]`, a folder where the command ran: resolved here, then every run
    # failed in workers standing in another folder (a matrix of failures stored).
    from specfleet.cluster.modelcheck import refuse_model

    (tmp_path / "smolcopy").mkdir()
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "m.yaml"
    path.write_text("name: bare\nmodels: [smolcopy]\nprompts: [{name: p, text: hi}]\n"
                    "arms: [plain]\n")
    result = CliRunner().invoke(app, ["matrix", "validate", str(path)])
    assert result.exit_code == 2, result.output
    assert (f"error: {path}: models[0]: 'smolcopy' is no alias but a folder here; expected "
            "./smolcopy (a folder counts from the matrix file's) or an alias") in result.stderr
    with pytest.raises(UserError, match=r"^--model: 'smolcopy' is no alias but a folder "
                                        r"here; expected ./smolcopy \(a folder counts from "
                                        r"the current one\)"):
        refuse_model("smolcopy", "torch", "--model")
    (tmp_path / "smollm2-135m").mkdir()  # an alias stays an alias
    path.write_text(path.read_text().replace("smolcopy", "smollm2-135m"))
    assert "no alias" not in CliRunner().invoke(app, ["matrix", "validate", str(path)]).stderr
