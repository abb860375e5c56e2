"""The prompt sources and the streamed reply of `specfleet generate` (no model)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from specfleet.cli.generate_io import ReplyStream, read_prompt
from specfleet.configs import packaged_names, prompts_dir
from specfleet.engine.config import PromptLookupConfig
from specfleet.engine.loop import generate
from specfleet.engine.runners.toy import InductionModel
from specfleet.errors import UserError
from specfleet.jobs.spec_files import read_prompt_text


def test_prompt_from_stdin_file_or_packaged_name(tmp_path: Path, monkeypatch) -> None:
    # Read from a file or a pipe, the final line break is dropped, as a matrix drops it:
    # `generate --prompt-file edit_fn` ran 241 tokens where `bench -p edit_fn` ran 240.
    assert read_prompt("-", None, io.BytesIO(b"from stdin\n")) == "from stdin"
    assert read_prompt(None, "-", io.BytesIO(b"piped\r\n")) == "piped"
    assert read_prompt("as typed\n", None) == "as typed\n"
    monkeypatch.chdir(tmp_path)
    for name in packaged_names(prompts_dir()):
        assert read_prompt(None, name) == read_prompt_text(prompts_dir() / f"{name}.txt")
    assert read_prompt(None, "story") == (prompts_dir() / "story.txt").read_text().rstrip("\n")
    (tmp_path / "story").write_text("mine")  # a file in the working folder wins
    assert read_prompt(None, "story") == "mine"
    with pytest.raises(UserError, match=r"^--prompt-file: the prompt is empty"):
        read_prompt(None, "-", io.BytesIO(b"  \n"))


def test_a_dangling_link_named_like_a_packaged_prompt_is_the_users(tmp_path: Path,
                                                                     monkeypatch) -> None:
    # It read the packaged story in place of the user's link that leads nowhere.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "story").symlink_to(tmp_path / "nowhere.txt")
    with pytest.raises(UserError, match=r"^--prompt-file story: is a dangling link; expected"):
        read_prompt(None, "story")


def test_a_closed_standard_input_is_one_line(monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", None)  # as Python starts with fd 0 closed (`<&-`)
    with pytest.raises(UserError, match=r"^--prompt -: standard input is closed; expected UTF-8"):
        read_prompt("-", None)


def test_the_stream_prints_each_new_piece_once_and_waits_for_whole_characters() -> None:
    pieces: list[str] = []
    texts = {1: "Hel", 2: "Hello", 3: "Hello \ufffd", 4: "Hello é"}
    stream = ReplyStream(lambda ids: texts[len(ids)], pieces.append)
    for n in (1, 2, 2, 3, 4):
        stream(list(range(n)))
    stream.finish("Hello é!")
    assert pieces == ["Hel", "lo", " ", "é", "!\n"]


def test_the_engine_hands_the_stream_every_round() -> None:
    seen: list[list[int]] = []
    prompt = [1, 2, 3, 4, 1, 2, 3]
    result = generate(InductionModel(), prompt, max_tokens=10,
                      lookup=PromptLookupConfig(max_draft=3),
                      on_tokens=lambda tokens: seen.append(list(tokens)))
    assert len(seen) > 2 and seen[-1] == result.tokens
    assert all(later[:len(earlier)] == earlier for earlier, later in zip(seen, seen[1:], strict=False))


def test_a_trace_line_names_the_governor_state_once():
    # It printed `policy=policy=gated,...`: the state's own `policy` key under a `policy=`.
    from specfleet.cli.generate_io import trace_line

    line = trace_line({"round": 3, "kind": "verify", "policy": {"policy": "gated", "ema": 1.5}})
    assert line == "[Trace] round=3 kind=verify governor=policy=gated,ema=1.5"
