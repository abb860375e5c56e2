"""A malformed line of a `job generate --prompts` file (JSONL) through the real CLI: a few
problems are all named in its one line; a long list names the first and says where the rest
are. Refused before any fleet or store."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from specfleet.cli.main import app


def refused(tmp_path: Path, line: str) -> str:
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "fine"}\n' + line + "\n")
    db = tmp_path / "s.db"
    result = CliRunner().invoke(app, ["job", "generate", "--prompts", str(path), "--target",
                                      "a/toy", "--embedded", "--db", f"sqlite:///{db}"])
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr and not db.exists()
    (said,) = result.stderr.splitlines()
    return said.removeprefix(f"error: {path}: line 2: ")


def test_a_line_with_two_problems_names_both(tmp_path: Path) -> None:
    assert refused(tmp_path, '{"text": "hi"}') == (
        "prompt: required field is missing; also text: unknown field (expected one of: name, "
        "prompt, max_tokens)")


def test_a_line_with_three_problems_names_all_three(tmp_path: Path) -> None:
    assert refused(tmp_path, '{"name": "a b", "prompt": "", "max_tokens": 0}') == (
        "name: use letters, digits, '_', '-' and '.' only, starting with a letter or digit, "
        "got 'a b'; also prompt: must not be empty; also max_tokens: must be at least 1, got 0")


def test_a_long_list_names_three_and_says_where_the_rest_are(tmp_path: Path) -> None:
    said = refused(tmp_path, '{"prompt": "", "max_tokens": 0, "a": 1, "b": 2, "c": 3}')
    assert said.startswith("prompt: must not be empty; also max_tokens: must be at least 1, "
                           "got 0; also a: unknown field ("), said
    assert said.endswith(" (+2 more; at b, c)"), said
