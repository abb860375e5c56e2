"""The bench scripts' command lines (`bench/cli_args.py`, `bench/policies.py`,
`bench/peers.py`): every option explained in --help, a bad value refused in one line naming
the option, exit 2, and a model specfleet does not know or Ctrl-C one line, no traceback."""

from __future__ import annotations

import argparse

import pytest

from bench import cli_args, forwards, peers, policies, prose_ab


def refusal(parse, argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exited:
        parse(argv)
    lines = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(("argv", "expected"), [
    (["--repeats", "-1"], "argument --repeats: expected a whole number of at least 1, got '-1'"),
    (["--tokens", "0"], "argument --tokens: expected a whole number of at least 1, got '0'"),
    (["--engines", "torch,cuda"], "argument --engines: expected a comma list of torch, mlx, "
                                  "mlx-q4; got 'cuda'"),
    (["--prompts", "story,nosuch"], "argument --prompts: expected a comma list of "),
    (["--cal-max-width", "1"], "argument --cal-max-width: expected a whole number of at least "
                               "2, got '1'"),
    (["--cal-rounds", "1001"], "argument --cal-rounds: expected a whole number from 1 to 1000"),
])
def test_policies_refuses_a_bad_value_in_one_line(argv, expected, capsys) -> None:
    # Each ran: a negative repeat count timed nothing after a minute's calibration, the others
    # ended in a child's traceback and the parent's CalledProcessError.
    line = refusal(policies.parse_args, argv, capsys)
    assert line.split(": ", 1)[1].startswith(f"error: {expected}"), line


@pytest.mark.parametrize(("argv", "expected"), [
    (["--repeats", "0"], "argument --repeats: expected a whole number of at least 1, got '0'"),
    (["--mlx-tokens", "-4"], "argument --mlx-tokens: expected a whole number of at least 1"),
    (["--engines", "cuda"], "argument --engines: expected a comma list of torch, mlx; got 'cuda'"),
    (["--prompts", "story,nosuch"], "argument --prompts: no prompt file nosuch.txt in "),
    (["--mlx-prompts", "nosuch"], "argument --mlx-prompts: no prompt file nosuch.txt in "),
])
def test_peers_refuses_a_bad_value_in_one_line(argv, expected, capsys) -> None:
    line = refusal(peers.parse_args, argv, capsys)
    assert line.split(": ", 1)[1].startswith(f"error: {expected}"), line


@pytest.mark.parametrize(("argv", "expected"), [
    (["--arms", "calibrated,auto"], "argument --arms: expected a comma list of graded, gated, "
                                    "calibrated; got 'auto'"),
    (["--pairs", "0"], "argument --pairs: expected a whole number of at least 1, got '0'"),
    (["--prompts", "nosuch"], "argument --prompts: expected a comma list of "),
])
def test_prose_ab_refuses_a_bad_value_in_one_line(argv, expected, capsys) -> None:
    # `--arms auto` failed after a minute's calibration; `--pairs 0` divided by zero.
    line = refusal(prose_ab.parse_args, argv, capsys)
    assert line.split(": ", 1)[1].startswith(f"error: {expected}"), line


@pytest.mark.parametrize(("argv", "expected"), [
    (["--costs", "1"], "argument --costs: expected a comma list of at least two positive "
                       "numbers, got '1'"),
    (["--costs", "1,x"], "argument --costs: expected a comma list of at least two positive"),
    (["--tokens", "-3"], "argument --tokens: expected a whole number of at least 1"),
])
def test_forwards_refuses_a_bad_value_before_loading_the_model(argv, expected, capsys) -> None:
    # `--costs 1,x` was a ValueError traceback once the model had loaded.
    line = refusal(forwards.main, argv, capsys)
    assert line.split(": ", 1)[1].startswith(f"error: {expected}"), line


@pytest.mark.parametrize("parse", [policies.parse_args, peers.parse_args, prose_ab.parse_args])
def test_every_option_is_explained(parse, monkeypatch) -> None:
    # policies.py showed --prompts, --repeats and --out with no word, and its description
    # stopped mid-sentence ("... calibrated (and transformers'").
    made: list[argparse.ArgumentParser] = []
    monkeypatch.setattr(cli_args.BenchParser, "parse_args",
                        lambda self, argv=None: made.append(self) or argparse.Namespace(
                            quick=False, prompts=None, mlx_prompts=None, model="m", engines="torch",
                            prompts_dir=peers.PROMPTS_DIR))
    parse([])
    parser = made[0]
    for action in parser._actions:
        if action.help != argparse.SUPPRESS:
            assert action.help, action.option_strings
    assert parser.description.endswith(".")


def test_peers_quick_help_says_what_quick_sets(capsys) -> None:
    # -h said "24 tokens" where --quick set 12 (24 was story's, twice as long).
    args = peers.parse_args(["--quick", "--repeats", "5"])
    assert (args.prompts, args.repeats) == ("edit_fn,story", 1)
    with pytest.raises(SystemExit):
        peers.parse_args(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert f"1 repeat, {args.tokens} new tokens (story {2 * args.tokens}), MLX " \
           f"{args.mlx_tokens} ({2 * args.mlx_tokens})" in shown


def test_an_unknown_model_is_one_line_naming_the_option(capsys) -> None:
    # It was a traceback ending in `specfleet.errors.UserError: model 'nosuch' is ...`.
    with pytest.raises(SystemExit) as exited:
        cli_args.run_main(lambda: len(peers.model_folder("nosuch", "torch")))
    lines = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2
    assert len(lines) == 1 and lines[0].startswith("error: --model: model 'nosuch' is neither"), lines


def test_ctrl_c_is_one_line_and_exit_130(capsys) -> None:
    def interrupted() -> int:
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as exited:
        cli_args.run_main(interrupted)
    assert exited.value.code == 130
    assert capsys.readouterr().err == "interrupted\n"
