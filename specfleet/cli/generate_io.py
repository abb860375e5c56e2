"""What `specfleet generate` reads and prints: the prompt (a file, a packaged prompt or
stdin), the reply streamed as its tokens are decided, and the footer of rates and memory
(`print_result`; with --json the object whole, with --trace each round on stderr).

The footer follows mlx-lm: the whole call as the reference prints it, then the prompt
(prefill) and generation (decode) rates apart, then peak memory.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

import typer

from specfleet import jsontext
from specfleet.errors import UserError
from specfleet.jobs.spec_files import without_final_newline
from specfleet.userfiles import STDIN, given_path, read_stream, read_text, standard_input

_INCOMPLETE = "\ufffd"  # a tokenizer's stand-in for a character whose bytes are not all in yet


def read_prompt(prompt: str | None, prompt_file: str | None,
                stdin: BinaryIO | None = None) -> str:
    """The prompt text from `--prompt` or `--prompt-file` (exactly one, not empty); one read
    from a file or standard input without its final line break, as a matrix reads it.

    Args:
        prompt: `--prompt` text; `-` reads standard input.
        prompt_file: a file, a packaged prompt's bare name (`story`), or `-` for stdin.
        stdin: where `-` reads bytes from (default: standard input).

    Returns:
        The prompt text.
    """
    if prompt is not None and prompt_file is not None:
        raise UserError("--prompt and --prompt-file: give one, not both; expected the text "
                        "with --prompt or a file with --prompt-file")
    flag = "--prompt-file" if prompt_file is not None else "--prompt"
    if prompt == STDIN or prompt_file == STDIN:
        prompt = without_final_newline(
            read_stream(stdin or standard_input(), f"{flag} {STDIN}", "UTF-8 text"))
    elif prompt_file is not None:
        prompt = without_final_newline(_read_prompt_file(prompt_file))
    if prompt is None:
        raise UserError("--prompt: give the prompt text with --prompt/-p or --prompt-file "
                        "(- reads standard input)")
    if not prompt.strip():
        raise UserError(f"{flag}: the prompt is empty; expected some text")
    if "\x00" in prompt:
        raise UserError(f"{flag}: the prompt contains a NUL character; expected plain text")
    return prompt


def _read_prompt_file(prompt_file: str) -> str:
    from specfleet.configs import packaged_names, prompt_path, prompts_dir

    expected = "a text file (- reads standard input)"
    path = prompt_path(given_path(prompt_file, "--prompt-file", expected))
    if not os.path.lexists(path):
        names = ", ".join(packaged_names(prompts_dir()))
        raise UserError(f"--prompt-file: no such file {str(prompt_file)!r} "
                        f"(or a packaged prompt: {names})")
    return read_text(path, f"--prompt-file {prompt_file}", expected=expected)


class ReplyStream:
    """Prints a reply's text as its tokens are decided (the engine's `on_tokens` hook).

    Decodes every token so far and prints what is new; a trailing half-decoded character
    waits for its next token.
    """

    def __init__(self, decode: Callable[[Sequence[int]], str],
                 write: Callable[[str], None] | None = None) -> None:
        self._decode = decode
        self._write = write or _write_stdout
        self.printed = ""

    def __call__(self, tokens: Sequence[int]) -> None:
        text = self._decode(list(tokens)).rstrip(_INCOMPLETE)
        if text.startswith(self.printed) and len(text) > len(self.printed):
            self._write(text[len(self.printed):])
            self.printed = text

    def cut(self) -> None:
        """End the line of a reply cut short (Ctrl-C, a failure): else what stderr says next
        (`interrupted`) lands on the reply's last line in a terminal."""
        if self.printed and not self.printed.endswith("\n"):
            with contextlib.suppress(OSError, ValueError):  # a closed or broken stdout
                self._write("\n")

    def finish(self, text: str) -> None:
        """Print what the final text adds to what was streamed, then the newline."""
        common = _common_prefix(self.printed, text)
        self._write(text[common:] + "\n")
        self.printed = text


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return len(a) if b.startswith(a) else n


def _write_stdout(text: str) -> None:
    typer.echo(text, nl=False)
    sys.stdout.flush()


def rate(tokens: int, seconds: float) -> float:
    """Tokens per second; 0.0 when no time was measured."""
    return tokens / seconds if seconds > 0 else 0.0


def footer_lines(result: dict[str, Any]) -> list[str]:
    """The whole-call line of the reference, then prompt and generation rates, then memory."""
    timings = result["timings"]
    decoded = max(result["generated_tokens"] - 1, 0)  # the first token comes from the prefill
    lines = [
        f"[Generated {result['generated_tokens']} tokens in {timings['total_s']:.3f} s"
        f" = {result['tok_per_s']:.2f} tok/s]",
        f"[Prompt] {result['prompt_tokens']} tokens in {timings['prefill_s']:.3f} s"
        f" = {result['prompt_tok_per_s']:.2f} tok/s",
        f"[Generation] {decoded} tokens in {timings['decode_s']:.3f} s"
        f" = {result['decode_tok_per_s']:.2f} tok/s (after the first token)",
    ]
    if result.get("peak_memory_gb") is not None:
        lines.append(f"[Peak memory] {result['peak_memory_gb']:.3f} GB ({result['memory_kind']})")
    return lines


def trace_line(row: dict[str, Any]) -> str:
    """One round of `--trace` as `key=value` pairs."""
    policy = row.get("policy")
    fields = {key: value for key, value in row.items() if key != "policy"}
    text = " ".join(f"{key}={value}" for key, value in fields.items())
    if policy:  # the governor's state; its own `policy` key names it
        text += " governor=" + ",".join(f"{key}={value}" for key, value in policy.items())
    return f"[Trace] {text}"


def print_result(
    result: dict[str, Any], *, as_json: bool, trace: bool, stream: ReplyStream | None = None
) -> None:
    """Print the reply (the rest of it when it was streamed) and the footer.

    Args:
        result: the `--json` object.
        as_json: print the object whole, nothing else.
        trace: print the round-by-round trace on stderr.
        stream: what was streamed already; None prints the whole reply here.
    """
    if as_json:
        if not trace:
            result = {key: value for key, value in result.items() if key != "trace"}
        typer.echo(jsontext.dumps(result))
        return
    if stream is not None:
        stream.finish(result["text"])
    else:
        typer.echo(result["text"])
    if trace:
        for row in result["trace"]:
            typer.echo(trace_line(row), err=True)
    for line in footer_lines(result):
        typer.echo(line)
    if result["summary_line"] is not None:
        typer.echo(result["summary_line"], err=True)
    if result["stop_reason"] == "loop_guard":
        typer.echo("[Loop guard] the reply repeated itself; stopped", err=True)
