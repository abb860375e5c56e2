"""`specfleet bench` and `matrix validate` refuse a misplaced peer arm in one line, exit 2,
before any fleet is started (`engine/peers.py`: a peer runs on its own engine only)."""

from __future__ import annotations

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
    assert line == f"error: bench: {EXPECTED}"
