"""`matrix validate` refuses what a run would pass over in silence or find only once the
fleet started (`jobs/spec_checks.py`): a prompt's `max_tokens` for an engine it never runs on,
an empty prompt file said with what is expected, and engines and devices that never pair."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_matrix_validate import error_lines, invoke, write

TOY = """\
name: t
models: ["script:1ms"]
targets: {engines: [toy]}
max_tokens: 4
prompts: [{name: p, text: a}]
arms: [plain]
"""


def refused(tmp_path: Path, text: str) -> str:
    """The one `error:` line `matrix validate` says of the file `text`, without its label."""
    path = write(tmp_path, text)
    lines = error_lines(invoke("matrix", "validate", path))
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: {path}: "), lines
    return lines[0].removeprefix(f"error: {path}: ")


def accepted(tmp_path: Path, text: str) -> str:
    result = invoke("matrix", "validate", write(tmp_path, text))
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert "error" not in result.stderr and "Traceback" not in result.stderr
    return result.stdout


def test_a_prompts_limit_for_an_engine_never_run_is_the_matrixs_rule(tmp_path: Path) -> None:
    # Said ok before: both limits passed over, the prompt ran at the matrix's 4 tokens.
    text = TOY.replace("text: a}", "text: a, max_tokens: {mlx: 5, torch: 9}}")
    assert refused(tmp_path, text) == (
        "prompts[0].max_tokens: give 'default' or 'toy' (a limit for every engine the matrix "
        "may run on); the matrix never runs on mlx or torch")
    # The matrix's own limit says it in the same words.
    assert refused(tmp_path, TOY.replace("max_tokens: 4", "max_tokens: {mlx: 5}")) == (
        "max_tokens: give 'default' or 'toy' (a limit for every engine the matrix may run on)"
        "; the matrix never runs on mlx")


def test_a_prompts_limit_beyond_its_own_engines_is_refused(tmp_path: Path) -> None:
    text = TOY.replace("[toy]", "[torch, mlx]").replace('"script:1ms"', "smollm2-135m").replace(
        "text: a}", "text: a, targets: {engines: [torch]}, max_tokens: {mlx: 5}}")
    assert refused(tmp_path, text) == (
        "prompts[0].max_tokens: give 'default' or 'torch' (a limit for every engine the prompt "
        "may run on); the prompt never runs on mlx")


def test_a_prompts_limit_for_an_engine_it_runs_on_is_kept(tmp_path: Path) -> None:
    accepted(tmp_path, TOY.replace("text: a}", "text: a, max_tokens: {toy: 5}}"))
    # Per engine, the rest from the matrix's limit: a prompt need not name every engine.
    accepted(tmp_path, TOY.replace("[toy]", "[torch, mlx]").replace(
        '"script:1ms"', "smollm2-135m").replace("text: a}", "text: a, max_tokens: {mlx: 5}}"))


@pytest.mark.parametrize(("content", "said"), [
    ("", "is empty"), (" \n\n", "is blank (whitespace only)")])
def test_an_empty_prompt_file_says_what_is_expected(tmp_path: Path, content: str,
                                                    said: str) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "empty.txt").write_text(content)
    (tmp_path / "m").mkdir()
    text = TOY.replace("{name: p, text: a}", "empty")
    assert refused(tmp_path / "m", text) == (
        f"prompts[0]: {tmp_path}/prompts/empty.txt: {said}; expected the prompt's text")


@pytest.mark.parametrize(("targets", "said"), [
    ("{engines: [toy], devices: [metal]}",
     "targets: no target matches (engines in [toy]; devices in [metal]): toy runs on cpu; "
     "expected a device one of the engines runs on"),
    ("{engines: [torch], devices: [metal]}",
     "targets: no target matches (engines in [torch]; devices in [metal]): torch runs on "
     "cpu, cuda or mps; expected a device one of the engines runs on"),
    ("{engines: [mlx], devices: [mps]}",
     "targets: no target matches (engines in [mlx]; devices in [mps]): mlx runs on cpu, "
     "metal or cuda; expected a device one of the engines runs on"),
    ("{engines: [torch, mlx], devices: [metal]}",
     "targets.engines[0]: torch runs on cpu, cuda or mps, none of devices [metal], so it "
     "would never run; expected one of its devices listed, or drop torch"),
    ("{engines: [torch], devices: [cuda, metal]}",
     "targets.devices[1]: no engine of [torch] runs on metal, so it would never be used; "
     "expected a device one of them runs on, or drop metal"),
])
def test_engines_and_devices_that_never_pair_are_refused(tmp_path: Path, targets: str,
                                                         said: str) -> None:
    # `matrix run` said "no target matches" only after starting the embedded fleet (~20 s).
    text = TOY.replace("{engines: [toy]}", targets).replace('"script:1ms"', "smollm2-135m")
    if "toy" in targets:
        text = text.replace("smollm2-135m", '"script:1ms"')
    assert refused(tmp_path, text) == said


def test_a_prompts_devices_with_the_matrixs_engines_never_pair(tmp_path: Path) -> None:
    text = TOY.replace("text: a}", "text: a, targets: {devices: [metal]}}")
    assert refused(tmp_path, text) == (
        "prompts[0].targets: with the matrix's targets, no target matches (engines in [toy]; "
        "devices in [metal]): toy runs on cpu, so the prompt would never run; expected a "
        "device one of its engines runs on")


@pytest.mark.parametrize("targets", [
    "{engines: [toy], devices: [cpu]}",
    # A device this CPU box lacks: validate checks the file, the fleet has the devices.
    "{engines: [torch], devices: [cuda]}",
    "{engines: [torch, mlx], devices: [cuda, metal, mps]}",
    "{devices: [metal]}",
])
def test_engines_and_devices_that_pair_pass(tmp_path: Path, targets: str) -> None:
    text = TOY.replace("{engines: [toy]}", targets)
    if "toy" not in targets:
        text = text.replace('"script:1ms"', "smollm2-135m")
    assert "ok:" in accepted(tmp_path, text)


def test_a_prompt_for_toy_in_a_matrix_naming_no_engine_is_refused(tmp_path: Path) -> None:
    # A matrix naming no engine runs mlx and torch only: the toy prompt planned no run, ok.
    text = ("name: t\nmodels: [smollm2-135m]\nmax_tokens: 4\narms: [plain]\n"
            "prompts: [{name: p, text: a, targets: {engines: [toy]}}]\n")
    assert refused(tmp_path, text) == (
        "prompts[0].targets: engines [toy]: the matrix names no engine, so it runs on mlx and "
        "torch only, and the prompt would never run; expected one of those, or [toy] in the "
        "matrix's targets.engines")
    accepted(tmp_path, text.replace("[toy]", "[torch]"))
