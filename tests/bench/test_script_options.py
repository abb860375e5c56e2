"""Every `bench/` script's command line: each option explained in -h, and a bad value refused
in one line naming the option, exit 2, before anything is loaded or measured."""

from __future__ import annotations

import argparse
import importlib
import sys

import pytest

from bench import cli_args

SCRIPTS = ("cli_startup", "conditions", "cuda_check", "families", "fewrow_layout", "forwards",
           "loop_overhead", "near_tie_tolerance", "occurrence_support", "peers", "policies",
           "policies_oracle", "policy_variants", "prose_ab", "rollback", "scheduler", "serve",
           "store", "warmup")


class Parsed(Exception):
    """Raised instead of parsing: the test has the parser it wanted."""


def script_parser(name: str, monkeypatch) -> argparse.ArgumentParser:
    module = importlib.import_module(f"bench.{name}")
    made: list[argparse.ArgumentParser] = []

    def capture(self, *args, **kwargs):
        made.append(self)
        raise Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    monkeypatch.setattr(sys, "argv", [f"{name}.py"])
    with pytest.raises(Parsed):
        module.main()
    return made[0]


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_option_is_explained(name: str, monkeypatch) -> None:
    # Options such as --repeats, --out, --runs, --rebuild showed no word in -h.
    parser = script_parser(name, monkeypatch)
    assert parser.description
    for action in parser._actions:
        assert action.help, (name, action.dest)


@pytest.mark.parametrize(("name", "argv", "expected"), [
    ("conditions", ["--runs", "0"], "argument --runs: expected a whole number of at least 1"),
    ("cuda_check", ["--out", "x", "--budget-s", "-5"],
     "argument --budget-s: expected a number of seconds above 0, got '-5'"),
    ("families", ["nosuch"], "argument FAMILY: invalid choice: 'nosuch'"),
    ("fewrow_layout", ["--prompts", "story"], "argument --prompts: expected NAME:TOKENS,..."),
    ("loop_overhead", ["--repeats", "-1"], "argument --repeats: expected a whole number"),
    ("cli_startup", ["--repeats", "0"], "argument --repeats: expected a whole number"),
    ("near_tie_tolerance", ["/nonexistent.json", "0,0.1"],
     "argument replies: no file /nonexistent.json"),
    ("occurrence_support", ["--replies", "x.json", "--weights", "1,x"],
     "argument --weights: expected a comma list of numbers >= 0, got '1,x'"),
    ("policies_oracle", ["--db", "a.db", "--db", "b.db", "--matrix", "m"],
     "argument --matrix: expected one per --db (2), got 1"),
    ("policies_oracle", ["--db", "a.db", "--matrix", "m", "--policies", "grded"],
     "argument --policies: expected a comma list of graded, gated, calibrated; got 'grded'"),
    ("policy_variants", ["--set", "t", "--db", "a", "--matrix", "m", "--short", "20,0"],
     "argument --short: expected a whole number of at least 1, got '0'"),
    ("rollback", ["--width", "1"], "argument --width: expected a whole number of at least 2"),
    ("scheduler", ["--max-tokens", "0"], "argument --max-tokens: expected a whole number"),
    ("serve", ["--repeats", "0"], "argument --repeats: expected a whole number of at least 1"),
    ("store", ["--matrices", "1"], "argument --matrices: expected a whole number of at least 2"),
    ("warmup", ["--prompt", "nosuch"], "argument --prompt: invalid choice: 'nosuch'"),
])
def test_a_bad_value_is_one_line_and_exit_2(name, argv, expected, monkeypatch, capsys) -> None:
    # Each ran into a traceback (a ZeroDivisionError, an empty median, a mismatched zip, a
    # missing file), some after loading a model; --policies grded replayed no policy at all.
    module = importlib.import_module(f"bench.{name}")
    monkeypatch.setattr(sys, "argv", [f"{name}.py", *argv])
    with pytest.raises(SystemExit) as exited:
        module.main()
    lines = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"{name}.py: error: {expected}"), lines[0]


def test_a_mistyped_store_is_refused_not_created(tmp_path, monkeypatch, capsys) -> None:
    # policies_oracle.py --db typo.db made an empty store there, then said no such matrix.
    from bench import policies_oracle

    missing = tmp_path / "typo.db"
    monkeypatch.setattr(sys, "argv", ["policies_oracle.py", "--db", str(missing), "--matrix", "m"])
    with pytest.raises(SystemExit) as exited:
        cli_args.run_main(policies_oracle.main)
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith(f"error: --db: no store at {missing}")
    assert not missing.exists()


def test_the_oracle_tables_are_found_from_any_folder(tmp_path, monkeypatch) -> None:
    # From another folder: "--costs docs/benchmark_results/oracle/vm-torch-...: no such file".
    from bench import policies_oracle

    monkeypatch.chdir(tmp_path)
    names = [policies_oracle.table_ratio(spec)[0] for spec in policies_oracle.TABLES]
    assert "vm-torch-smollm2-135m" in names and "vm-mlx-smollm2-135m" in names


def test_the_cuda_check_imports_without_pytest() -> None:
    """A GPU host runs bench/cuda_check.py with only the torch extra installed: nothing it
    imports (the family prompts it borrows from the tests included) may need pytest."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = ("import sys; sys.modules['pytest'] = None; sys.path.insert(0, 'bench'); "
            "import cuda_check, bench.families")
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
