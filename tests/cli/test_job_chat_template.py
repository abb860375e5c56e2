"""`job generate --chat` on a model without a chat template: refused in one line before the
fleet starts, as `generate --chat` is (its runs encoded the prompts as plain text, stored as
`chat: true`)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.workers.hardware import default_host_name
from tests.models.test_user_folders import save_tiny


@pytest.mark.torch
def test_job_generate_chat_needs_the_models_chat_template(tmp_path):
    folder = save_tiny(tmp_path / "llama", "llama")  # its tokenizer has no chat template
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "say hi"}) + "\n")
    args = ["job", "generate", "--prompts", str(prompts), "--model", str(folder), "--target",
            f"{default_host_name()}/torch", "--embedded", "--max-tokens", "4",
            "--db", str(tmp_path / "s.db")]
    result = CliRunner().invoke(app, [*args, "--chat"])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        "error: --chat needs the chat template (this model has none); expected no --chat (the "
        "prompts as plain text)"]
    assert not (tmp_path / "s.db").exists()  # nothing stored, no fleet started
