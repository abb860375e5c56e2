"""`specfleet parity` through the real Typer app: verdicts, forensics replayed by a real
HostWorker on the toy engine, exit codes for CI."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from tests.report.conftest import AFTER_ID, DEMO_ID, MIXED_ID, db_path, worker  # noqa: F401

runner = CliRunner()


def invoke(db_path, *args: str):  # noqa: F811
    return runner.invoke(app, ["parity", *args, "--db", str(db_path)])


def test_suspect_divergence_exits_1_with_forensics(db_path) -> None:  # noqa: F811
    result = invoke(db_path, DEMO_ID)
    assert result.exit_code == 1, result.output
    assert "1 suspect" in result.output and "token 5 (char 5)" in result.output
    assert "plain ' ' vs graded 'Z'; gap +10.0000 on plain's path" in result.output
    assert "diverge at token 3 (char 3)" in result.output  # plain across targets


def test_clean_matrix_exits_0(db_path) -> None:  # noqa: F811
    result = invoke(db_path, MIXED_ID)
    assert result.exit_code == 0, result.output
    assert ("Parity of mixed-000003 (every repetition, 6 replies compared): 1 identical, 0 "
            "near-tie, 0 suspect") in result.output


def test_unreplayed_divergence_fails_unless_allowed(db_path) -> None:  # noqa: F811
    result = invoke(db_path, DEMO_ID, "--no-replay")
    assert result.exit_code == 1 and "1 unverified" in result.output
    allowed = invoke(db_path, DEMO_ID, "--no-replay", "--allow-unverified", "--format", "json")
    assert allowed.exit_code == 0, allowed.output
    body = json.loads(allowed.stdout)
    assert [a["verdict"] for a in body["arms"]].count("unverified") == 1


def test_regression_against_baseline_exits_1(db_path) -> None:  # noqa: F811
    result = invoke(db_path, AFTER_ID, "--baseline", DEMO_ID, "--format", "markdown")
    assert result.exit_code == 1
    assert "### Regressions against baseline demo-000001" in result.output
    assert "| h1/toy/cpu | script | copy | gated | token 5 (char 5) |" in result.output


@pytest.mark.parametrize("args, needle", [
    (["nope-123456"], "nope-123456"),
    ([DEMO_ID, "--baseline", "nope-123456"], "nope-123456"),
    (["run"], "FILE"),
    ([DEMO_ID, "extra"], "extra"),
    ([DEMO_ID, "--near-tie", "-1"], "--near-tie"),
    ([DEMO_ID, "--format", "xml"], "--format"),
])
def test_bad_input_is_one_line_and_exit_2(db_path, args, needle) -> None:  # noqa: F811
    result = invoke(db_path, *args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]


TOY_PARITY = """\
name: toy-parity
models: [script]
prompts:
  - {name: copy, text: "hello world hello world"}
arms: [plain, graded, gated]
repeats: 3
max_tokens: 16
targets: {engines: [toy]}
"""


@pytest.mark.slow
def test_parity_run_on_the_embedded_fleet(tmp_path) -> None:
    spec = tmp_path / "toy.yaml"
    spec.write_text(TOY_PARITY)
    db = tmp_path / "p.db"
    result = runner.invoke(app, ["parity", "run", str(spec), "--no-progress", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "parity: repeats 3 -> 1" in result.stderr
    assert "2 identical, 0 near-tie, 0 suspect, 0 unverified" in result.stdout
    shown = runner.invoke(app, ["results", "--db", str(db), "--format", "json"])
    assert {r["arm"] for r in json.loads(shown.stdout)} == {"plain", "graded", "gated"}


def test_parity_run_bad_file_is_one_line(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(TOY_PARITY.replace("arms: [plain, graded, gated]", "arms: [graded]"))
    for path in (bad, tmp_path / "missing.yaml"):
        result = runner.invoke(app, ["parity", "run", str(path), "--db", str(tmp_path / "x.db")])
        assert result.exit_code == 2, result.output
        assert len(result.stderr.strip().splitlines()) == 1
