"""`job generate`'s sampling and template flags, as `generate` takes them: a batch could only
run greedy, in the chat template, though its stored job and a matrix file both hold
`temperature`, `seed` and `chat`; and `--max-tokens` showed no default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app

SPECFLEET = str(Path(sys.executable).with_name("specfleet"))


def _refused(tmp_path: Path, *args: str) -> str:
    batch = tmp_path / "b.jsonl"
    batch.write_text('{"prompt": "hi"}\n')
    db = tmp_path / "s.db"
    out = CliRunner().invoke(app, ["job", "generate", "--prompts", str(batch), "--target",
                                   "a/toy", "--embedded", "--db", f"sqlite:///{db}", *args])
    assert out.exit_code == 2 and out.stdout == "", (out.exit_code, out.output)
    assert not db.exists()
    (said,) = out.stderr.splitlines()
    return said


def test_help_names_the_sampling_flags_and_the_max_tokens_default() -> None:
    shown = CliRunner().invoke(app, ["job", "generate", "-h"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.stdout.split())
    assert "--max-tokens <int> Per prompt, unless the line says (default 256)." in text, text
    assert "--temp <float> Temperature; 0 is greedy. [default: 0.0]" in text
    assert "--seed <int range> Sampler seed." in text and "--chat / --no-chat" in text


def test_a_seed_without_a_temperature_is_refused_before_the_fleet(tmp_path: Path) -> None:
    assert _refused(tmp_path, "--seed", "3") == (
        "error: --seed given with --temp 0 (greedy: nothing is drawn at random); expected "
        "--temp above 0 to sample with it (or no --seed)")


def test_a_temperature_out_of_range_names_its_flag(tmp_path: Path) -> None:
    assert _refused(tmp_path, "--temp", "11") == (
        "error: --temp: must be at most 10.0, got 11.0")
    assert _refused(tmp_path, "--temp", "nan").startswith("error: --temp: "), "nan"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_flags_reach_every_stored_run(tmp_path: Path) -> None:
    batch = tmp_path / "b.jsonl"
    batch.write_text('{"name": "a", "prompt": "abcdefgh", "max_tokens": 3}\n')
    url = f"sqlite:///{tmp_path / 's.db'}"
    env = {**os.environ, "SPECFLEET_HOST": "h1", "SPECFLEET_HOME": str(tmp_path / "home")}
    ran = subprocess.run(
        [SPECFLEET, "job", "generate", "--prompts", str(batch), "--target", "h1/toy",
         "--model", "script", "--no-chat", "--temp", "0.5", "--seed", "7", "--embedded",
         "--no-progress", "--db", url],
        capture_output=True, text=True, env=env, timeout=200)
    assert ran.returncode == 0, ran.stderr
    job_id = ran.stderr.splitlines()[-1].split()[2]
    read = subprocess.run([SPECFLEET, "results", "--job", job_id, "-o", "json", "--db", url],
                          capture_output=True, text=True, env=env, timeout=60)
    (run,) = json.loads(read.stdout)
    assert (run["chat"], run["temperature"], run["seed"]) == (False, 0.5, 7), run
