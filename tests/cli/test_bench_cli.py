"""`specfleet bench` and `matrix validate` refuse a misplaced peer arm in one line, exit 2,
before any fleet is started (`engine/peers.py`: a peer runs on its own engine only)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app

MISPLACED = """\
name: misplaced
models: [smollm2-135m]
prompts: [story]
arms: [plain, hf-lookup]
targets: {engines: [mlx]}
"""
EXPECTED = ("arms[1]: hf-lookup runs on torch targets only, and targets.engines is [mlx]; "
            "add torch or drop the arm")


def one_line_error(args: list[str]) -> str:
    result = CliRunner().invoke(app, args)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_matrix_validate_names_the_misplaced_peer_arm(tmp_path) -> None:
    path = tmp_path / "misplaced.yaml"
    path.write_text(MISPLACED)
    assert one_line_error(["matrix", "validate", str(path)]) == f"error: {path}: {EXPECTED}"


def test_bench_refuses_a_peer_on_an_engine_it_does_not_fit() -> None:
    line = one_line_error(["bench", "--arms", "plain,hf-lookup", "--engine", "mlx",
                           "--db", "sqlite:///:memory:"])
    assert line == ("error: bench: --arms hf-lookup: hf-lookup runs on torch targets only, and "
                    "--engine is [mlx]; add torch or drop the arm")


def test_bench_names_prompt_files_validly_and_uniquely(tmp_path, monkeypatch) -> None:
    # Each was refused: "prompts[0].name: use letters, ...", "duplicate prompt 'p'".
    from specfleet.cli.bench import bench_spec_data
    from specfleet.configs import prompts_dir
    from specfleet.jobs.spec_files import parse_matrix_spec

    monkeypatch.chdir(tmp_path)
    for name in ("my prompt.txt", "ünï.txt", ".hidden", "d1/p.txt", "d2/p.txt", "story.txt"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(f"text of {name}\n")
    given = ["./my prompt.txt", "./ünï.txt", "./.hidden", "d1/p.txt", "d2/p.txt", "story",
             "./story.txt", "d1/../d1/p.txt"]
    data = bench_spec_data(["script:1ms"], given, ["plain"], 1, 8, ["toy"])
    spec = parse_matrix_spec({**data, "prompts": data["prompts"][:-1]}, "bench", tmp_path,
                             prompts_dir())
    assert [p.name for p in spec.prompts] == ["my_prompt", "uni", "hidden", "p", "d2_p", "story",
                                              f"{tmp_path.name}_story"]
    assert spec.prompts[4].text == "text of d2/p.txt"
    assert data["prompts"][-1]["name"] == "p"  # the same file twice is one prompt: refused


@pytest.mark.parametrize(("args", "expected"), [
    (["-r", "0"], "--repeats: must be at least 1, got 0"),
    (["-n", "0"], "--max-tokens: must be between 1 and 131072, got 0"),
    (["-e", "cuda"], "--engine cuda: expected one of 'mlx', 'torch' or 'toy', got 'cuda'"),
    (["-a", "graded"], "--arms: add plain: bench measures speed-ups over it "
                       "(e.g. --arms plain,graded)"),
    (["-a", "plain,mlx-lm", "-e", "torch"], "--arms mlx-lm: mlx-lm runs on mlx targets only, "
                                            "and --engine is [torch]; add mlx or drop the arm"),
    (["-p", "story,-story"], "--prompt -story: use letters, digits, '_', '-' and '.' only, "
                             "starting with a letter or digit, got '-story'"),
    (["-p", "story,story"], "--prompt story: duplicate prompt 'story'"),
    # The second and third items read the same in flag terms: said once, not twice.
    (["-m", "a,a,a"], "--model a: duplicate model 'a' (list each once)"),
    (["-m", "m" * 300], "--model " + "m" * 300 + ": must be at most 256 characters, got "
                        "'mmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmm... (300 characters)"),
])
def test_bench_names_its_flags_not_matrix_fields(args: list[str], expected: str) -> None:
    # Each named the matrix field: "repeats:", "targets.engines[0]:", "set speedups: false".
    line = one_line_error(["bench", *args, "--db", "sqlite:///:memory:"])
    assert line == f"error: bench: {expected}"


def test_bench_reads_a_prompt_named_with_a_suffix_as_a_file(tmp_path, monkeypatch) -> None:
    # It was a packaged name: "prompts[0]: no prompt file 'notes.md.txt' in ...".
    monkeypatch.chdir(tmp_path)
    line = one_line_error(["bench", "-p", "notes.md", "--db", "sqlite:///:memory:"])
    assert line == "error: --prompt notes.md: no such file; expected a prompt text file"


def test_bench_says_what_a_prompt_named_here_is_when_no_prompt_is_packaged(tmp_path,
                                                                          monkeypatch) -> None:
    # A folder or a link loop here was "no prompt file 'adir.txt' in .../configs/prompts".
    import os

    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    os.symlink("loop", tmp_path / "loop")
    assert one_line_error(["bench", "-p", "adir", "--db", "sqlite:///:memory:"]) == (
        "error: --prompt adir: is a directory; expected a prompt text file")
    assert one_line_error(["bench", "-p", "loop", "--db", "sqlite:///:memory:"]).startswith(
        "error: --prompt loop: ")
    (tmp_path / "story").mkdir()  # a packaged prompt's name still means the packaged prompt
    assert "story" not in one_line_error(["bench", "-p", "story", "-a", "grded", "--db",
                                          "sqlite:///:memory:"])


def test_bench_names_every_mistake_in_its_flags_terms() -> None:
    # Only the first was in flag terms ("also arms[1].arm: ..."), and a fourth was only
    # counted ("(+1 more)"), with no file to validate for the rest.
    line = one_line_error(["bench", "-p", "story,-a,-b", "-a", "plain,grded", "-r", "500",
                           "--db", "sqlite:///:memory:"])
    assert line.startswith("error: bench: --prompt -a: use letters")
    assert "; also --prompt -b: use letters" in line
    assert "; also --arms grded: expected one of 'plain'" in line
    assert line.endswith("; also --repeats: must be at most 100, got 500")


def test_help_shows_what_an_omitted_list_flag_stands_for() -> None:
    # -h showed no default for --model, --prompt and --arms, though each has one.
    from specfleet.cli.bench import DEFAULT_ARMS, DEFAULT_MODELS, DEFAULT_PROMPTS

    shown = " ".join(CliRunner().invoke(app, ["bench", "-h"], terminal_width=200).stdout.split())
    for flag, default in (("--model", DEFAULT_MODELS), ("--prompt", DEFAULT_PROMPTS),
                          ("--arms", DEFAULT_ARMS)):
        start = shown.index(f"{flag} <{flag[2:]},...>")
        assert f"[default: {','.join(default)}]" in shown[start:shown.index(" -", start + 10)]
    assert DEFAULT_MODELS == ("smollm2-135m",) and DEFAULT_ARMS == ("plain", "auto")
    assert DEFAULT_PROMPTS == ("edit_fn", "story")


def test_selftest_engine_takes_a_comma_list_as_bench_does(monkeypatch) -> None:
    """`selftest --engine torch,mlx` (bench's `-e` form) read as one unknown engine."""
    from specfleet.workers import selftest

    tested: list[str] = []

    def once(engine, device, policy, break_rollback=False):
        tested.append(engine)
        return selftest.SelfTest(f"{engine}/{device}", True, 0.0)

    monkeypatch.setattr(selftest, "self_test_once", once)
    targets = [SimpleNamespace(engine=e, device="cpu") for e in ("mlx", "torch")]
    monkeypatch.setattr("specfleet.workers.hardware.detect_host",
                        lambda full=False: SimpleNamespace(targets=lambda: targets))
    result = CliRunner().invoke(app, ["selftest", "--engine", "torch, mlx"])
    assert result.exit_code == 0, result.output
    assert sorted(tested) == ["mlx", "torch"]
    assert one_line_error(["selftest", "--engine", "torch,gpu"]) == (
        "error: --engine 'gpu': expected mlx or torch, comma-separated or repeated")


def test_a_broken_models_file_is_the_settings_mistake_not_the_models(tmp_path, monkeypatch):
    """It read `bench: --model smollm2-135m: torch: SPECFLEET_MODELS ...`: the model was fine."""
    models = tmp_path / "m.yaml"
    models.write_bytes(b"\xff\xfe models")
    monkeypatch.setenv("SPECFLEET_MODELS", str(models))
    line = one_line_error(["bench", "-m", "smollm2-135m", "-p", "story", "-e", "torch",
                           "--embedded", "--db", str(tmp_path / "s.db")])
    assert line.startswith(f"error: SPECFLEET_MODELS {models}: not UTF-8 text"), line
    assert not (tmp_path / "s.db").exists()


def test_a_prompt_file_whose_name_holds_a_comma_is_one_item(tmp_path) -> None:
    # `-p my,file.txt` was read as `my` and `file.txt`: "--prompt file.txt: no such file".
    import os

    from specfleet.cli.options import split_list

    named = tmp_path / "my,file.txt"
    named.write_text("hello\n")
    assert split_list("--prompt", [str(named), "a,b"], os.path.exists) == [str(named), "a", "b"]
    assert split_list("--prompt", [str(tmp_path / "no,such")], os.path.exists) == [
        str(tmp_path / "no"), "such"]
    # bench takes it whole: the next mistake said is the arm's, not "no such file".
    result = CliRunner().invoke(app, ["bench", "-m", "script:1ms", "-e", "toy", "--embedded",
                                      "-p", str(named), "-a", "nosuch"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: bench: --arms nosuch: expected one of"), result.stderr
