"""Valid-looking `job generate --prompts` batches refused before any fleet or store: the one
line says what would make them run."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.workers.hardware import default_host_name
from tests.weights import EMPTY_SAFETENSORS

# A tokenizer.json of whole words (`tokenizers` reads it; "hi" is one token).
WORD_TOKENIZER = ('{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [], '
                  '"normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, '
                  '"post_processor": null, "decoder": null, "model": {"type": "WordLevel", '
                  '"vocab": {"hi": 0, "[UNK]": 1}, "unk_token": "[UNK]"}}')


def _refused(tmp_path: Path, batch: str, *args: str) -> str:
    path = tmp_path / "b.jsonl"
    path.write_text(batch, encoding="utf-8")
    db = tmp_path / "s.db"
    result = CliRunner().invoke(app, ["job", "generate", "--prompts", str(path), *args,
                                      "--embedded", "--db", f"sqlite:///{db}"])
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr and not db.exists()
    (said,) = result.stderr.splitlines()
    return said.removeprefix(f"error: {path}: ")


def test_a_name_of_non_ascii_letters_is_told_which_letters(tmp_path: Path) -> None:
    # It said "use letters, ...": 'ü' and '名' are letters, yet refused.
    said = _refused(tmp_path, '{"name": "größe-名前", "prompt": "hi"}\n', "--target", "a/toy")
    assert said == ("line 1: name: use ASCII letters (A-Z, a-z), digits, '_', '-' and '.' "
                    "only, starting with a letter or digit, got 'größe-名前'")


def test_a_prompt_filling_the_context_alone_is_not_told_to_lower_max_tokens(
        tmp_path: Path) -> None:
    # It said "expected a shorter prompt or a smaller max_tokens": no max_tokens would do.
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama", "max_position_embeddings": 4}')
    (model / "w.safetensors").write_bytes(EMPTY_SAFETENSORS)
    (model / "tokenizer.json").write_text(WORD_TOKENIZER)
    args = ("--target", f"{default_host_name()}/torch", "--model", str(model))
    said = _refused(tmp_path, '{"prompt": "hi hi hi hi"}\n', *args, "--max-tokens", "1")
    assert said == (f"prompt 'line-1': 4 tokens before any chat template and max_tokens 1 "
                    f"(--max-tokens) pass the context of {model} (4 tokens); expected a "
                    "prompt under 4 tokens")
    # One token short of the context: a smaller max_tokens is still a way out.
    said = _refused(tmp_path, '{"prompt": "hi hi hi", "max_tokens": 2}\n', *args)
    assert said.endswith("expected a shorter prompt or a smaller max_tokens"), said
